// Per-token CUDA ops of the DS4-mini forward (the GPU twins of model_ops / model_attention /
// model_moe's per-token parts; the hyper-connection boundaries and the router are in gpu_hc.cuh).
// Exactness rule 1 on the GPU: every launcher runs one block per token (or per (token, head))
// with a fixed block size and a fixed reduction tree, so a token is computed by the same
// instructions whatever the step width; nothing reduces across tokens.
// All pointers are device pointers; shapes in the comments are per step of w tokens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace dq { namespace gpu {

// Key groups of the attention output: group g sums its slice of the keys, the partials are
// added in group order (AttendArgs' scratch holds kAttnGroups * head_dim partials).
constexpr int kAttnGroups = 16;

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

// The MoE dispatch of a step, written on the device by the router (launch_hc_step, gpu_hc.cuh):
// slots = the matrices to run (slot 0 the shared expert on all w columns, then each routed
// expert with columns, in index order; mat 0 = shared, 1 + e = expert e), columns laid out as
// rules::moe_columns.
// Device arrays: slots [1 + 3 S] (n, mat[S], base[S], count[S]; S = 1 + n_experts), tok_of_col
// [kMaxStep (1 + K)], col_of [kMaxStep K] (the router's base/count scratch is its shared memory).
struct DevMoe {
    int32_t* slots; int max_slots;
    int32_t* tok_of_col; int32_t* col_of;
    unsigned long long* counters;  // [2] += routed experts' weight bytes and matmul calls
    unsigned long long expert_bytes;  // w13 + w2 bytes of one routed expert
    unsigned int* done;  // [1] tokens routed so far in this step (0 between steps)
};

// xg row r <- xq row tok_of_row[r] (int8 [d] and float scales [d/32]).
void launch_gather(const int8_t* xq, const float* xd, const int32_t* tok_of_row, int rows, int d, int8_t* xg,
                   float* xgd, cudaStream_t s);

// The Q8_0 activations hq [rows, f] / hqd [rows, f/32] of the clamped SwiGLU of gu [rows, 2f]
// (gate | up); the F32 row itself is not stored (nothing reads it on the GPU).
void launch_swiglu(const float* gu, int8_t* hq, float* hqd, int rows, int f, float limit, cudaStream_t s);

// Step end (one block): logits [w, vocab] -> out_logits rows pos .. pos + w - 1 and last_logits,
// then pos += w.
void launch_step_end(DevCtl ctl, const float* logits, float* out_logits, float* last_logits, int w, int vocab,
                     cudaStream_t s);

}}  // namespace dq::gpu
