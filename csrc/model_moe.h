// MoE FFN of one layer for a step: routing per token, then the shared expert and the routed
// experts run grouped (each expert sees only the columns routed to it, like mul_mat_id).
#pragma once
#include <cstdint>

#include "model_config.h"
#include "model_matmul.h"
#include "model_weights.h"

namespace dq {

// Per-token routing. Hash layers take experts from tid2eid[token]; learned layers pick the
// top-k of (score + selection bias) where score = sqrt(softplus(router . xn)). Weights are
// the chosen scores renormalized over the k slots, times routed_scale (bias never enters).
// xn: [d] normed FFN input; ids/wts: [top_k]; scratch: [2 * n_experts].
void route_token(const ModelConfig& c, const LayerWeights& w, bool hash_layer, const float* xn,
                 int token, int32_t* ids, float* wts, float* scratch);
// route_token after its router dot products: logits[e] = router[e] . xn (computed by the caller,
// possibly spread over threads). scratch: [2 * n_experts].
void route_from_logits(const ModelConfig& c, const LayerWeights& w, bool hash_layer, const float* logits,
                       int token, int32_t* ids, float* wts, float* scratch);

struct MoeScratch {
    BlockQ8_0* xg;   // [w * top_k, d/32] routed experts' gathered activations
    float* gu;       // [w * (top_k + 1), 2*d_ff] columns: shared expert's, then routed experts'
    float* h;        // [w * (top_k + 1), d_ff]
    BlockQ8_0* hq;   // [w * (top_k + 1), d_ff/32]
    float* y;        // [w * (top_k + 1), d]
    MatTask* up;     // [n_experts + 1] the step's w13 products (shared expert first)
    MatTask* down;   // [n_experts + 1] its w2 products
    int* col_of;     // [w * top_k] (token, slot) -> its column of y
};

// xq: [w, d/32] quantized normed FFN input; ids/wts: [w, top_k]; out: [w, d].
// out[t] = shared(x_t) + sum over slots k in order of wts[t,k] * expert_{ids[t,k]}(x_t).
// next: the weights read after the step's last product (a prefetch hint, kernels.h ReadAhead).
void moe_step(const ModelConfig& c, const LayerWeights& w, const Matmul& mm, const BlockQ8_0* xq,
              int ntok, const int32_t* ids, const float* wts, float* out, const MoeScratch& s,
              StepStats& stats, ReadAhead next = {});

}  // namespace dq
