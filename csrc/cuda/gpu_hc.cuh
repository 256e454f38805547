// The hyper-connection boundary between two sublayers as one kernel: the producer of the
// residual streams X (the embedding, HC post of the attention output, or the MoE combine + HC
// post) fused with their consumer (the next sublayer's HC pre + norm + Q8_0 activations, for the
// FFN also the router and the MoE table; or the final mix + norm before the LM head).
//
// Exactness: one thread-block cluster of C blocks per token (C = hc_cluster(d, allow16): a
// function of d and of whether the GPU allows 16-block clusters, fixed for a run); block b owns
// the channels [b d/C, (b+1) d/C). Every reduction over d (the rms of the stream mean, the dyn
// dots, the rms of x_in, the router dots) is the block tree over the slice, then the C block partials added in rank order through distributed shared memory: a
// fixed tree per token, whatever the step width; nothing reduces across tokens. The step's
// MoE table is laid out by the router thread of the token that finishes routing last (an
// atomic count), from every token's ids: a function of the ids, not of who lays it out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <cuda_runtime.h>

#include "gpu_ops.cuh"

namespace dq { namespace gpu {

// The boundary kernel's shape limits (its shared-memory arrays and 32-value cluster reductions);
// GpuModel refuses configs beyond them.
constexpr int kHcMaxHc = 4;        // 2 hc + hc^2 dyn rows + a sum of squares <= 32 values
constexpr int kHcMaxTopK = 16;
constexpr int kHcMaxExperts = 31;  // router dots + a sum of squares <= 32 values

// Empty when the kernel takes these shapes, else what it refuses first ("top_k 20 above 16 is
// not supported on the GPU"; n_experts 0: no router). GpuModel and launch_hc_step both ask it.
std::string hc_shape_error(int hc_mult, int n_experts, int top_k);

enum class HcIn { kEmbed, kPost, kCombine };
enum class HcOut { kPre, kFinal };

struct HcStepArgs {
    HcIn in;
    HcOut out;
    int hc, d;
    float eps;
    float* X;  // [w, hc, d]: read and rewritten (kEmbed: written)
    // in = kEmbed: X[j, i] = embed[tokens[pos + j]] for every stream i. tokens/pos also serve
    // the hash router (out = kPre with tid2eid).
    const int32_t* tokens;
    const int* pos;
    const float* embed;  // [vocab, d]
    // in = kPost: o [w, d]; in = kCombine: o = y [w + w K, d] (rows 0..w-1 the shared expert),
    // the token's output o[j] + sum over k in order of wts[j, k] * o[col_of[j, k]].
    // Then X[j, i] <- sum_c M_in[j, i, c] X[j, c] + post_in[j, i] * o.
    const float* o;
    const int32_t* col_of;  // [w, K]
    const float* wts;       // [w, K]
    int top_k;
    const float* post_in;  // [w, hc]
    const float* M_in;     // [w, hc, hc]
    // out = kPre: x_in = sum_i pre_i X[j, i] (pre, post_out, M_out from rules::hc_pre_post /
    // hc_sinkhorn of dyn = w_dyn . rms_norm(mean over streams of X[j])), rms-normed with norm.
    // out = kFinal: x_in = sum_i hc_final[i] X[j, i] rms-normed with norm (the final norm), and
    // X[w - 1] -> hc_streams [hc, d].
    DevHC p;
    const float* norm;  // [d]
    float* post_out;    // [w, hc]  (not post_in: the pre of the other sublayer kind)
    float* M_out;       // [w, hc, hc]
    int sinkhorn_iters;
    const float* hc_final;  // [hc]
    float* hc_streams;      // [hc, d]
    int8_t* xq;             // [w, d] Q8_0 activations of the normed x_in
    float* xd;              // [w, d / 32]
    // out = kPre with router non-null: router logits = router [E, d] . xn per token, then
    // rules::route_from_logits -> ids/rwts [w, K] and rid/rw [route_off + (pos + j) K + k], and
    // the MoE table of the step (DevMoe).
    const float* router;
    const float* router_bias;  // [E]
    const int32_t* tid2eid;    // null: learned routing
    int n_experts;
    float routed_scale;
    int32_t* ids;
    float* rwts;
    int32_t* rid;
    float* rw;
    size_t route_off;
    DevMoe moe;
};

// One launch: grid (C, w) of clusters (C, 1, 1). Throws std::invalid_argument on shapes it
// does not support (hc above 4, top_k above 16, n_experts above 31, w above 32).
void launch_hc_step(const HcStepArgs& a, int w, cudaStream_t s);

}}  // namespace dq::gpu
