// Rules shared by the CPU engine and the CUDA engine, written once as __host__ __device__ code:
// MoE routing (scores, top-k, weights) and its per-expert grouping, the hyper-connection mixing
// weights (sigmoids + Sinkhorn), and the prefill argument checks. Each device compiles the same
// source, so the CPU and the GPU apply one definition of each rule (their libm exp and their
// reduction trees elsewhere still differ, so CPU and GPU results are close, not bitwise equal).
// Plain scalar float code: no contraction (-ffp-contract=off on the CPU, --fmad=false on CUDA).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model_config.h"

#if defined(__CUDACC__)
#define DQ_HD __host__ __device__ __forceinline__
#else
#define DQ_HD inline
#endif

namespace dq { namespace rules {

DQ_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// sqrt(softplus(x)), stable for large |x|.
DQ_HD float sqrt_softplus(float x) { return sqrtf(x > 20.0f ? x : log1pf(expf(x))); }

struct NoSync {
    DQ_HD void operator()() const {}
};

// Routing of one token from its router logits [E]. Hash layers (tid2eid non-null) take experts
// tid2eid[token * K + k]; learned layers take the top-k of sel = score + bias in the order (sel
// descending, index ascending: the lowest index wins ties; a NaN or -inf sel is never taken),
// score = sqrt(softplus(logit)). Weights: the chosen scores renormalized over the k slots, times
// routed_scale (the bias never enters). Needs K selectable experts (finite sel).
// scratch: [2 * E]; ids / wts: [K]. Lanes lane = 0 .. nlanes - 1 take experts e = lane, lane +
// nlanes, ...: each computes its experts' scores, then (after sync()) each expert's rank, the
// count of experts ahead of it in that order, and writes ids[rank] when rank < K; after a second
// sync() lane 0 alone writes the weights. Integer ranks and the serial operations per value, so
// any nlanes gives the same ids and bits (CPU: one lane; GPU: one warp, __syncwarp).
template <class Sync>
DQ_HD void route_from_logits(const float* logits, const float* bias, const int32_t* tid2eid, int token, int E,
                             int K, float routed_scale, int32_t* ids, float* wts, float* scratch, int lane,
                             int nlanes, Sync sync) {
    float* score = scratch;
    float* sel = scratch + E;
    for (int e = lane; e < E; e += nlanes) {
        score[e] = sqrt_softplus(logits[e]);
        sel[e] = score[e] + bias[e];
    }
    sync();
    if (tid2eid != nullptr) {
        for (int k = lane; k < K; k += nlanes) ids[k] = tid2eid[size_t(token) * K + k];
    } else {
        for (int e = lane; e < E; e += nlanes) {
            const float v = sel[e];
            if (!(v > -INFINITY)) continue;  // -inf or NaN: never taken
            int rank = 0;
            for (int f = 0; f < E; ++f) {
                const float u = sel[f];
                rank += (u > v || (u == v && f < e)) ? 1 : 0;
            }
            if (rank < K) ids[rank] = e;
        }
    }
    sync();
    if (lane != 0) return;
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += score[ids[k]];
    for (int k = 0; k < K; ++k) wts[k] = score[ids[k]] / sum * routed_scale;
}
DQ_HD void route_from_logits(const float* logits, const float* bias, const int32_t* tid2eid, int token, int E,
                             int K, float routed_scale, int32_t* ids, float* wts, float* scratch) {
    route_from_logits(logits, bias, tid2eid, token, E, K, routed_scale, ids, wts, scratch, 0, 1, NoSync{});
}

// The MoE column layout of a step of w tokens (ids [w, K]): columns 0..w-1 are the shared
// expert's (token order), then each routed expert's columns in expert index order, tokens in
// order within an expert. Writes tok_of_col [w + w*K] (the token of each column), col_of
// [w * K] ((token, slot) -> its column), and per expert its first column base[e] and count[e]
// (count 0 when unused); returns the number of columns (w + w*K). The CUDA router calls it; the
// CPU's moe_step gathers its columns in this same order. Lanes lane = 0 .. nlanes - 1 share it
// (each expert's count and columns by one lane, the first columns by lane 0 in expert order,
// sync() between): integers only, so any nlanes writes the same layout (CPU: one lane).
template <class Sync>
DQ_HD int moe_columns(const int32_t* ids, int w, int K, int E, int32_t* tok_of_col, int32_t* col_of, int32_t* base,
                      int32_t* count, int lane, int nlanes, Sync sync) {
    for (int t = lane; t < w; t += nlanes) tok_of_col[t] = t;
    for (int e = lane; e < E; e += nlanes) {
        int c = 0;
        for (int i = 0; i < w * K; ++i) c += ids[i] == e ? 1 : 0;
        count[e] = c;
    }
    sync();
    if (lane == 0) {
        int n = w;
        for (int e = 0; e < E; ++e) {
            base[e] = n;
            n += count[e];
        }
    }
    sync();
    for (int e = lane; e < E; e += nlanes) {
        int n = base[e];
        for (int t = 0; t < w; ++t)
            for (int k = 0; k < K; ++k)
                if (ids[t * K + k] == e) {
                    col_of[t * K + k] = n;
                    tok_of_col[n++] = t;
                }
    }
    sync();
    return w + w * K;
}
DQ_HD int moe_columns(const int32_t* ids, int w, int K, int E, int32_t* tok_of_col, int32_t* col_of, int32_t* base,
                      int32_t* count) {
    return moe_columns(ids, w, K, E, tok_of_col, col_of, base, count, 0, 1, NoSync{});
}

// Hyper-connection pre/post weights of one token from its dyn values [2 hc + hc*hc]:
// pre[i] = sigmoid(static_pre[i] + s dyn[i]), post[i] = 2 sigmoid(static_post[i] + s dyn[hc + i]).
// Lanes lane = 0 .. nlanes - 1 take i = lane, lane + nlanes, ...: the serial bits at any nlanes.
DQ_HD void hc_pre_post(const float* static_pre, const float* static_post, float dyn_scale, const float* dyn, int hc,
                       float* pre, float* post, int lane = 0, int nlanes = 1) {
    for (int i = lane; i < hc; i += nlanes) {
        pre[i] = sigmoid(static_pre[i] + dyn_scale * dyn[i]);
        post[i] = 2.0f * sigmoid(static_post[i] + dyn_scale * dyn[hc + i]);
    }
}

// The mixing matrix M [hc, hc] of one token: exp(static_res + s dyn[2 hc ..] - max) made (nearly)
// doubly stochastic by `iters` Sinkhorn iterations (rows, then columns, each divided by its sum
// taken in index order). Lanes lane = 0 .. nlanes - 1 share the work, each element and each
// row / column sum computed by one lane in the serial order, so any nlanes gives the serial bits;
// sync() orders the lanes between phases (CPU: one lane, no-op; GPU: one warp, __syncwarp).
template <class Sync>
DQ_HD void hc_sinkhorn(const float* static_res, float dyn_scale, const float* dyn, int hc, int iters, float* M,
                       int lane, int nlanes, Sync sync) {
    const int n = hc * hc;
    for (int k = lane; k < n; k += nlanes) M[k] = static_res[k] + dyn_scale * dyn[2 * hc + k];
    sync();
    float m = -INFINITY;
    for (int k = 0; k < n; ++k) m = m < M[k] ? M[k] : m;  // std::max(m, M[k]), every lane alike
    sync();
    for (int k = lane; k < n; k += nlanes) M[k] = expf(M[k] - m);
    sync();
    for (int it = 0; it < iters; ++it) {
        for (int i = lane; i < hc; i += nlanes) {
            float s = 0.0f;
            for (int j = 0; j < hc; ++j) s += M[i * hc + j];
            for (int j = 0; j < hc; ++j) M[i * hc + j] /= s;
        }
        sync();
        for (int j = lane; j < hc; j += nlanes) {
            float s = 0.0f;
            for (int i = 0; i < hc; ++i) s += M[i * hc + j];
            for (int i = 0; i < hc; ++i) M[i * hc + j] /= s;
        }
        sync();
    }
}

// Both, serially (the CPU's hc_mix).
DQ_HD void hc_mix_weights(const float* static_pre, const float* static_post, const float* static_res, float dyn_scale,
                          const float* dyn, int hc, int iters, float* pre, float* post, float* M) {
    hc_pre_post(static_pre, static_post, dyn_scale, dyn, hc, pre, post);
    hc_sinkhorn(static_res, dyn_scale, dyn, hc, iters, M, 0, 1, NoSync{});
}

// The prefill argument checks of Session::prefill and GpuSession::prefill (host only): null
// when the call is valid, else the message of the std::invalid_argument to throw.
// pos: the session's position; tokens: host ids [n].
inline const char* prefill_arg_error(const ModelConfig& c, int pos, const int32_t* tokens, int n, int chunk,
                                     int mmvq_max_ncols, int approx_width) {
    if (n < 1) return "prefill needs at least one token";
    if (pos + n > c.ctx) return "prompt longer than the context";
    if (chunk < 1 || chunk > kMaxBandChunk) return "chunk must be 1..4";
    if (mmvq_max_ncols < 1 || mmvq_max_ncols > kMaxMmvqCols) return "mmvq_max_ncols must be 1..8";
    if (approx_width < 1 || approx_width > kMaxStep) return "approx_width must be 1..32";
    for (int i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= c.vocab) return "token id out of range";
    return nullptr;
}

}}  // namespace dq::rules
