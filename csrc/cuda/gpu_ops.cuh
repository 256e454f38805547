// Per-token CUDA ops of the DS4-mini forward (the GPU twins of model_ops / model_attention /
// model_moe's per-token parts). Exactness rule 1 on the GPU: every launcher runs one block per
// token (or per (token, head)) with a fixed block size and a fixed reduction tree, so a token
// is computed by the same instructions whatever the step width; nothing reduces across tokens.
// All pointers are device pointers; shapes in the comments are per step of w tokens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace dq { namespace gpu {

// Hyper-connection parameters of one sublayer on the device (see HCParams).
struct DevHC {
    const float* static_pre;   // [hc]
    const float* static_post;  // [hc]
    const float* static_res;   // [hc*hc]
    const float* w_dyn;        // [2*hc + hc*hc, d]
    float dyn_scale;
};

// X [w, hc, d] <- embed[tokens[j]] in every stream.
void launch_embed(const int32_t* tokens, const float* embed, float* X, int w, int hc, int d, cudaStream_t s);

// hc_pre + sublayer norm per token: X [w, hc, d] -> xn [w, d] (rms-normed with `norm`) and its
// Q8_0 activations xq [w, d] / xd [w, d/32], post [w, hc], M [w, hc*hc]; mean/xin [w, d] and
// dyn [w, 2*hc + hc*hc] are scratch. Three launches: mean+norm per token, the dyn dots per
// (row, token), the mix + norm + quantize per token.
// Every fused quantization here has the semantics of quantize_row_q8_0_ref (CPU bytes).
void launch_hc_pre(const DevHC& p, const float* norm, const float* X, float* mean, float* dyn, float* xin,
                   float* xn, float* post, float* M, int8_t* xq, float* xd, int w, int hc, int d,
                   int sinkhorn_iters, float eps, cudaStream_t s);

// Per (token, head): rms-norm + RoPE of the q heads and of the kv row inside proj [w, proj_rows]
// (in place); the kv row is also written to window slot (pos0 + j) % cap.
struct QkRopeArgs {
    float* proj; int proj_rows; int q_dim; int n_heads; int head_dim; int rope_dim;
    const float* q_norm; const float* kv_norm; const float* rope_cos; const float* rope_sin;
    int pos0; float eps; float* window; int window_cap;
};
void launch_qk_rope(const QkRopeArgs& a, int w, cudaStream_t s);

// Attention of tokens j0 .. j0 + ntok - 1 of the step (one block per (token, head)); the head-0
// block of each token also writes its compressor kv/score rows (raw projections) first.
struct AttendArgs {
    const float* proj; int proj_rows; int q_dim; int n_heads; int head_dim;
    const float* window; int window_cap; int n_swa;
    const float* compressed; int n_compressed;
    float* comp_kv; float* comp_score; int comp_rows; int ratio;
    int pos0; int j0;
    float* scores; size_t score_stride;  // [ntok * n_heads, score_stride] scratch:
                                         // n scores then 4 * head_dim output partials
    float* out;                          // [w, q_dim]
    int8_t* out_q; float* out_d;         // its Q8_0 activations [w, q_dim], [w, q_dim/32]
};
void launch_attend(const AttendArgs& a, int ntok, cudaStream_t s);

// Compressor pool at boundary `pos` (one block): appends one row at compressed[n_compressed].
struct PoolArgs {
    const float* comp_kv; const float* comp_score; const float* comp_ape; const float* comp_norm;
    float* compressed; int n_compressed; int ratio; int head_dim; int rope_dim; int pos; float eps;
    const float* rope_cos; const float* rope_sin;
};
void launch_pool(const PoolArgs& a, cudaStream_t s);

// X[j] <- M_j X[j] + post_j * o[j] for every stream (in place).
void launch_hc_post(float* X, const float* o, const float* post, const float* M, int w, int hc, int d,
                    cudaStream_t s);

// Routing per token: ids/wts [w, top_k]; also written to rid/rw (if non-null) at
// [layer * route_stride + (tok0 + j) * top_k + k].
struct RouterArgs {
    const float* xn; const float* router; const float* router_bias; const int32_t* tid2eid;
    const int32_t* tokens; int d; int n_experts; int top_k; bool hash; float routed_scale;
    int32_t* ids; float* wts; int32_t* rid; float* rw; size_t route_off;
};
// logits [w, n_experts] is scratch (router dots, one block per (expert, token)).
void launch_router(const RouterArgs& a, float* logits, int w, cudaStream_t s);

// xg row r <- xq row tok_of_row[r] (int8 [d] and float scales [d/32]).
void launch_gather(const int8_t* xq, const float* xd, const int32_t* tok_of_row, int rows, int d, int8_t* xg,
                   float* xgd, cudaStream_t s);

// h [rows, f] = clamped SwiGLU of gu [rows, 2f] (gate | up), and its Q8_0 activations
// hq [rows, f] / hqd [rows, f/32].
void launch_swiglu(const float* gu, float* h, int8_t* hq, float* hqd, int rows, int f, float limit,
                   cudaStream_t s);

// MoE combine + hc_post per token: o[t] = y[t] + sum over k in order of wts[t, k] *
// y[rowmap[t, k]] (y [rows, d], rows 0..w-1 the shared expert), then X[t] <- M_t X[t] + post_t o.
void launch_combine_post(const float* y, const int32_t* rowmap, const float* wts, float* X, const float* post,
                         const float* M, int w, int hc, int top_k, int d, cudaStream_t s);

// Final: xin[j] = rms_norm(sum_i hc_final[i] * X[j, i], final_norm), and its Q8_0 activations.
void launch_final(const float* X, const float* hc_final, const float* final_norm, float* xin, int8_t* xq, float* xd,
                  int w, int hc, int d, float eps, cudaStream_t s);

}}  // namespace dq::gpu
