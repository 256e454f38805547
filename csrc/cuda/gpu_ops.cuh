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

// Key groups of the attention output: group g sums its slice of the keys, the partials are
// added in group order (AttendArgs' scratch holds kAttnGroups * head_dim partials).
constexpr int kAttnGroups = 8;

// Hyper-connection parameters of one sublayer on the device (see HCParams).
struct DevHC {
    const float* static_pre;   // [hc]
    const float* static_post;  // [hc]
    const float* static_res;   // [hc*hc]
    const float* w_dyn;        // [2*hc + hc*hc, d]
    float dyn_scale;
};

// Positions and counts live on the device, so a step's launches do not depend on where it
// runs and one captured CUDA graph per step width replays at every position:
// ctl[0] = pos (the step's first position), ctl[1 + l] = n_compressed of layer l. Only the step
// end (pos) and the pool (its layer's count) write them. tokens are absolute: [ctx] ids by
// position; outputs by position likewise.
struct DevCtl {
    int* ctl;
    const int* pos() const { return ctl; }
    int* n_compressed(int layer) const { return ctl + 1 + layer; }
};

// The producers of X [w, hc, d] (channel-parallel: many blocks per token) also write mean [w, d]
// = the mean over streams of X[j], not normed: the next sublayer's hc_pre norms it (mean may be
// null: not needed).
// X [w, hc, d] <- embed[tokens[pos + j]] in every stream.
void launch_embed(const int32_t* tokens, DevCtl ctl, const float* embed, float* X, float* mean, int w, int hc, int d,
                  float eps, cudaStream_t s);

// hc_pre + sublayer norm per token from mean [w, d] (written by X's producer; rms-normed here, in
// each dyn dot block): X [w, hc, d] ->
// xn [w, d] (rms-normed with `norm`) and its Q8_0 activations xq [w, d] / xd [w, d/32], post
// [w, hc], M [w, hc*hc]; dyn [w, 2*hc + hc*hc] and xin [w, d] are scratch. Two launches: the
// dyn dots per (row, token), then the mix (rules::hc_mix_weights) + norm + quantize per token.
// Every fused quantization here has the semantics of quantize_row_q8_0_ref (CPU bytes).
void launch_hc_pre(const DevHC& p, const float* norm, const float* X, const float* mean, float* dyn, float* xin,
                   float* xn, float* post, float* M, int8_t* xq, float* xd, int w, int hc, int d,
                   int sinkhorn_iters, float eps, cudaStream_t s);

// Per (token, head): rms-norm + RoPE of the q heads and of the kv row inside proj [w, proj_rows]
// (in place); the kv row is also written to window slot (pos + j) % cap.
struct QkRopeArgs {
    float* proj; int proj_rows; int q_dim; int n_heads; int head_dim; int rope_dim;
    const float* q_norm; const float* kv_norm; const float* rope_cos; const float* rope_sin;
    const int* pos; float eps; float* window; int window_cap;
};
void launch_qk_rope(const QkRopeArgs& a, int w, cudaStream_t s);

// Attention of tokens j0 .. j0 + ntok - 1 of the step (one block per (token, head)); the head-0
// block of each token also writes its compressor kv/score rows (raw projections) first.
struct AttendArgs {
    const float* proj; int proj_rows; int q_dim; int n_heads; int head_dim;
    const float* window; int window_cap; int n_swa;
    const float* compressed; const int* n_compressed;
    float* comp_kv; float* comp_score; int comp_rows; int ratio;
    const int* pos; int j0;
    float* scores; size_t score_stride;  // [ntok * n_heads, score_stride] scratch:
                                         // n scores then kAttnGroups * head_dim partials
    float* out;                          // [w, q_dim]
    int8_t* out_q; float* out_d;         // its Q8_0 activations [w, q_dim], [w, q_dim/32]
};
void launch_attend(const AttendArgs& a, int ntok, cudaStream_t s);

// Compressor pool after token j of the step (one block): when pos + j is a boundary of the
// layer's ratio it appends one row at compressed[n_compressed] and counts it; otherwise nothing.
struct PoolArgs {
    const float* comp_kv; const float* comp_score; const float* comp_ape; const float* comp_norm;
    float* compressed; int* n_compressed; int ratio; int head_dim; int rope_dim; const int* pos; int j; float eps;
    const float* rope_cos; const float* rope_sin;
};
void launch_pool(const PoolArgs& a, cudaStream_t s);

// X[j] <- M_j X[j] + post_j * o[j] for every stream (in place), and mean[j] of the new X.
void launch_hc_post(float* X, float* mean, const float* o, const float* post, const float* M, int w, int hc, int d,
                    float eps, cudaStream_t s);

// The MoE dispatch of a step, written on the device by launch_route: slots = the matrices to run
// (slot 0 the shared expert on all w columns, then each routed expert with columns, in index
// order; mat 0 = shared, 1 + e = expert e), columns laid out as rules::moe_columns.
// One int32 buffer: slots [1 + 3 S] (n, mat[S], base[S], count[S]; S = 1 + n_experts), then
// tok_of_col [kMaxStep (1 + K)], col_of [kMaxStep K], base/count scratch [2 E].
struct DevMoe {
    int32_t* slots; int max_slots;
    int32_t* tok_of_col; int32_t* col_of; int32_t* scratch;
    unsigned long long* counters;  // [2] += routed experts' weight bytes and matmul calls
    unsigned long long expert_bytes;  // w13 + w2 bytes of one routed expert
};

// Routing per token (router dots one block per (expert, token) into logits [w, n_experts]
// scratch, then one block: thread j routes token j with rules::route_from_logits, thread 0
// lays out the columns): ids/wts [w, top_k]; also written to rid/rw at
// [route_off + (pos + j) * top_k + k]; the MoE table of the step.
struct RouterArgs {
    const float* xn; const float* router; const float* router_bias; const int32_t* tid2eid;  // null: learned
    const int32_t* tokens; const int* pos; int d; int n_experts; int top_k; float routed_scale;
    int32_t* ids; float* wts; int32_t* rid; float* rw; size_t route_off;
};
void launch_route(const RouterArgs& a, const DevMoe& moe, float* logits, int w, cudaStream_t s);

// xg row r <- xq row tok_of_row[r] (int8 [d] and float scales [d/32]).
void launch_gather(const int8_t* xq, const float* xd, const int32_t* tok_of_row, int rows, int d, int8_t* xg,
                   float* xgd, cudaStream_t s);

// h [rows, f] = clamped SwiGLU of gu [rows, 2f] (gate | up), and its Q8_0 activations
// hq [rows, f] / hqd [rows, f/32].
void launch_swiglu(const float* gu, float* h, int8_t* hq, float* hqd, int rows, int f, float limit,
                   cudaStream_t s);

// MoE combine + hc_post per token: o[t] = y[t] + sum over k in order of wts[t, k] *
// y[col_of[t, k]] (y [rows, d], rows 0..w-1 the shared expert), then X[t] <- M_t X[t] + post_t o,
// and mean[t] of the new X (mean may be null).
void launch_combine_post(const float* y, const int32_t* col_of, const float* wts, float* X, float* mean,
                         const float* post, const float* M, int w, int hc, int top_k, int d, float eps, cudaStream_t s);

// Final: xin[j] = rms_norm(sum_i hc_final[i] * X[j, i], final_norm), and its Q8_0 activations.
void launch_final(const float* X, const float* hc_final, const float* final_norm, float* xin, int8_t* xq, float* xd,
                  int w, int hc, int d, float eps, cudaStream_t s);

// Step end (one block): logits [w, vocab] -> out_logits rows pos .. pos + w - 1 and last_logits,
// X's last token -> hc_streams [hc, d], then pos += w.
void launch_step_end(DevCtl ctl, const float* logits, float* out_logits, float* last_logits, const float* X,
                     float* hc_streams, int w, int vocab, int hc, int d, cudaStream_t s);

}}  // namespace dq::gpu
