// MoE routing and grouped expert execution; the summation order is fixed (shared, then slots).
#include "model_moe.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/engine_rules.h"
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
    rules::route_from_logits(logits, w.router_bias.data(), hash_layer ? w.tid2eid.data() : nullptr, token,
                             c.n_experts, c.top_k, c.routed_scale, ids, wts, scratch);
}

// The whole MoE of a step in three dispatches. Columns are laid out shared expert first (ntok
// columns), then each routed expert's gathered columns in expert index order:
//   1. every expert's w13 on its columns, one batch    gu [cols, 2 d_ff]
//   2. clamped SwiGLU + quantization of all columns    hq [cols, d_ff / 32]
//   3. every expert's w2 on its columns, one batch     y  [cols, d]
// Each product and each column's SwiGLU are computed exactly as one expert at a time would, so
// the bits do not depend on the grouping; the combine keeps the fixed order (shared, then slots).
void moe_step(const ModelConfig& c, const LayerWeights& w, const Matmul& mm, const BlockQ8_0* xq,
              int ntok, const int32_t* ids, const float* wts, float* out, const MoeScratch& s,
              StepStats& stats, ReadAhead next) {
    const int d = c.d_model, K = c.top_k, f = c.d_ff;
    const size_t nb = size_t(d / QK8_0), fb = size_t(f / QK8_0);
    MatTask* up = s.up;
    MatTask* down = s.down;
    int* col_of = s.col_of;
    int ntask = 0, ncols = 0;
    auto add = [&](const QMatrix& w13, const QMatrix& w2, const BlockQ8_0* x, int nc) {
        up[ntask] = MatTask{w13.view(), x, nc, s.gu + size_t(ncols) * 2 * f, MatKernel::kMMVQ};
        down[ntask] = MatTask{w2.view(), s.hq + size_t(ncols) * fb, nc, s.y + size_t(ncols) * d, MatKernel::kMMVQ};
        ++ntask;
        ncols += nc;
    };
    add(w.shared_w13, w.shared_w2, xq, ntok);  // shared expert: every column
    {
        OpTimer timer(stats, kOpPerToken);
        for (int e = 0; e < c.n_experts; ++e) {  // routed experts in index order, own columns only
            BlockQ8_0* xg = s.xg + size_t(ncols - ntok) * nb;
            int nc = 0;
            for (int t = 0; t < ntok; ++t)
                for (int k = 0; k < K; ++k)
                    if (ids[t * K + k] == e) {
                        std::memcpy(xg + size_t(nc) * nb, xq + size_t(t) * nb, nb * sizeof(BlockQ8_0));
                        col_of[t * K + k] = ncols + nc;
                        ++nc;
                    }
            if (nc > 0) add(w.exp_w13[e], w.exp_w2[e], xg, nc);
        }
    }
    mm.batch(up, ntask, read_ahead_of(down[0].w));  // the down batch starts with up[0]'s expert
    {
        OpTimer timer(stats, kOpPerToken);
        par_swiglu_quantize(mm.pool, s.gu, s.h, s.hq, ncols, f, c.swiglu_limit);
    }
    mm.batch(down, ntask, next);
    OpTimer timer(stats, kOpPerToken);
    for (int t = 0; t < ntok; ++t) {
        float* o = out + size_t(t) * d;
        std::memcpy(o, s.y + size_t(t) * d, sizeof(float) * d);  // the shared expert's column t
        for (int k = 0; k < K; ++k) {
            const float wk = wts[t * K + k];
            const float* y = s.y + size_t(col_of[t * K + k]) * d;
            for (int i = 0; i < d; ++i) o[i] += wk * y[i];
        }
    }
}

}  // namespace dq
