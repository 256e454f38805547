// MoE routing and grouped expert execution; the summation order is fixed (shared, then slots).
#include "model_moe.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "model_ops.h"
#include "model_parallel.h"

namespace dq {

void route_token(const ModelConfig& c, const LayerWeights& w, bool hash_layer, const float* xn,
                 int token, int32_t* ids, float* wts, float* scratch) {
    const int E = c.n_experts, d = c.d_model;
    std::vector<float> logits(E);
    for (int e = 0; e < E; ++e) logits[e] = dot_f32(&w.router[size_t(e) * d], xn, d);
    route_from_logits(c, w, hash_layer, logits.data(), token, ids, wts, scratch);
}

void route_from_logits(const ModelConfig& c, const LayerWeights& w, bool hash_layer, const float* logits,
                       int token, int32_t* ids, float* wts, float* scratch) {
    const int E = c.n_experts, K = c.top_k;
    float* score = scratch;
    float* sel = scratch + E;
    for (int e = 0; e < E; ++e) {
        score[e] = sqrt_softplus(logits[e]);
        sel[e] = score[e] + w.router_bias[e];
    }
    if (hash_layer) {
        for (int k = 0; k < K; ++k) ids[k] = w.tid2eid[size_t(token) * K + k];
    } else {
        for (int k = 0; k < K; ++k) {  // repeated argmax; lowest index wins ties
            int best = -1;
            for (int e = 0; e < E; ++e) {
                if (sel[e] == -INFINITY) continue;
                if (best < 0 || sel[e] > sel[best]) best = e;
            }
            ids[k] = best;
            sel[best] = -INFINITY;
        }
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += score[ids[k]];
    for (int k = 0; k < K; ++k) wts[k] = score[ids[k]] / sum * c.routed_scale;
}

namespace {
// FFN of one expert on ncols gathered columns: xg [ncols, d/32] -> y [ncols, d].
void expert_ffn(const ModelConfig& c, const QMatrix& w13, const QMatrix& w2, const Matmul& mm,
                const BlockQ8_0* xg, int ncols, const MoeScratch& s, StepStats& stats) {
    const int f = c.d_ff;
    mm(w13, xg, ncols, s.gu);
    {
        OpTimer timer(stats, kOpPerToken);
        par_swiglu_quantize(mm.pool, s.gu, s.h, s.hq, ncols, f, c.swiglu_limit);
    }
    mm(w2, s.hq, ncols, s.y);
}
}  // namespace

void moe_step(const ModelConfig& c, const LayerWeights& w, const Matmul& mm, const BlockQ8_0* xq,
              int ntok, const int32_t* ids, const float* wts, float* out, const MoeScratch& s,
              StepStats& stats) {
    const int d = c.d_model, K = c.top_k;
    const size_t nb = size_t(d / QK8_0);
    // Shared expert: every column.
    expert_ffn(c, w.shared_w13, w.shared_w2, mm, xq, ntok, s, stats);
    std::memcpy(out, s.y, sizeof(float) * size_t(ntok) * d);
    // Routed experts in index order, each on only the columns routed to it.
    int col_tok[kMaxStep], col_slot[kMaxStep];
    for (int e = 0; e < c.n_experts; ++e) {
        int nc = 0;
        for (int t = 0; t < ntok; ++t)
            for (int k = 0; k < K; ++k)
                if (ids[t * K + k] == e) {
                    col_tok[nc] = t;
                    col_slot[nc] = k;
                    ++nc;
                }
        if (nc == 0) continue;
        {
            OpTimer timer(stats, kOpPerToken);
            for (int j = 0; j < nc; ++j)
                std::memcpy(s.xg + size_t(j) * nb, xq + size_t(col_tok[j]) * nb, nb * sizeof(BlockQ8_0));
        }
        expert_ffn(c, w.exp_w13[e], w.exp_w2[e], mm, s.xg, nc, s, stats);
        for (int j = 0; j < nc; ++j)
            std::memcpy(s.ey + (size_t(col_tok[j]) * K + col_slot[j]) * d, s.y + size_t(j) * d,
                        sizeof(float) * d);
    }
    OpTimer timer(stats, kOpPerToken);
    for (int t = 0; t < ntok; ++t) {
        float* o = out + size_t(t) * d;
        for (int k = 0; k < K; ++k) {
            const float wk = wts[t * K + k];
            const float* y = s.ey + (size_t(t) * K + k) * d;
            for (int i = 0; i < d; ++i) o[i] += wk * y[i];
        }
    }
}

}  // namespace dq
