// Per-token CUDA ops of the DS4-mini forward; one block per token or (token, head), SwiGLU one
// warp per Q8_0 block; fixed block sizes, fixed reduction trees (see gpu_ops.cuh). --fmad=false.
#include "gpu_ops.cuh"

#include <cmath>
#include <stdexcept>
#include <string>

#include "common/engine_rules.h"
#include "gpu_reduce.cuh"
#include "launch.cuh"
#include "q8_kernels.cuh"

namespace dq { namespace gpu {

using cuda::launch_kernel;
using cuda::check_launch;
using cuda::pdl_begin;
using cuda::pdl_begin_early;

namespace {

constexpr int kTokBlock = 1024;  // threads per token block (elementwise and norm work over d)
constexpr int kHeadBlock = 1024;  // threads per (token, head) attention block
constexpr int kRopeBlock = 256;  // threads per (token, head) norm + RoPE block
constexpr int kPoolBlock = 128;  // threads of the compressor pool (one per channel)
constexpr int kSwigluBlock = 256;  // threads per SwiGLU block: 8 warps, a Q8_0 block each
constexpr size_t kAttendSmemMax = 48 * 1024;  // attention scratch in shared memory up to this


// Neox RoPE on the last rope_dim dims of one head row (thread per pair).
__device__ void block_rope(float* head, int head_dim, int rope_dim, const float* c, const float* sn) {
    const int half = rope_dim / 2;
    float* r = head + (head_dim - rope_dim);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float a = r[i], b = r[i + half];
        r[i] = a * c[i] - b * sn[i];
        r[i + half] = a * sn[i] + b * c[i];
    }
}

__global__ void k_qk_rope(QkRopeArgs a) {
    pdl_begin();
    __shared__ float sh[32];
    const int j = blockIdx.y, h = blockIdx.x;
    const bool kv = h == a.n_heads;
    float* row = a.proj + size_t(j) * a.proj_rows + (kv ? a.q_dim : size_t(h) * a.head_dim);
    block_rms_norm(row, kv ? a.kv_norm : a.q_norm, row, a.head_dim, a.eps, sh);
    __syncthreads();
    const size_t half = size_t(a.rope_dim / 2);
    const int pos = *a.pos + j;
    block_rope(row, a.head_dim, a.rope_dim, a.rope_cos + size_t(pos) * half, a.rope_sin + size_t(pos) * half);
    if (kv) {
        __syncthreads();
        float* dst = a.window + size_t(pos % a.window_cap) * a.head_dim;
        for (int k = threadIdx.x; k < a.head_dim; k += blockDim.x) dst[k] = row[k];
    }
}

// kSmem: the scores, the group partials and the output row live in shared memory (smem [hd +
// score_stride] floats), else in the global scratch (long contexts). Same operations in the
// same order either way, so the same bits; in shared memory no score store can alias the key
// loads, so the compiler issues a warp's next keys before this one's store and the softmax and
// output loops read no L2 round trips back.
template <bool kSmem>
__global__ void __launch_bounds__(kHeadBlock) k_attend(AttendArgs a) {
    pdl_begin();
    extern __shared__ float smem[];  // [head_dim] the query head (then the output row), then kSmem's scratch
    __shared__ float sh[32];
    float* qsh = smem;
    const int item = blockIdx.x;
    const int j = a.j0 + item / a.n_heads, h = item % a.n_heads;
    const int pos = *a.pos + j, hd = a.head_dim;
    const float* p = a.proj + size_t(j) * a.proj_rows;
    if (a.ratio > 0 && h == 0) {  // compressor rows of this token (read only by the later pool)
        const size_t slot = size_t(pos % a.comp_rows) * hd;
        for (int k = threadIdx.x; k < hd; k += blockDim.x) {
            a.comp_kv[slot + k] = p[a.q_dim + hd + k];
            a.comp_score[slot + k] = p[a.q_dim + 2 * hd + k];
        }
    }
    for (int k = threadIdx.x; k < hd; k += blockDim.x) qsh[k] = p[size_t(h) * hd + k];
    __syncthreads();
    const int lo = max(0, pos - a.n_swa + 1);
    const int nwin = pos - lo + 1, nc = *a.n_compressed, n = nc + nwin;
    const float scale = 1.0f / sqrtf(float(hd));
    // The keys and values: rows no kernel writes while this one runs (read-only loads).
    const float* __restrict__ comp = a.compressed;
    const float* __restrict__ win = a.window;
    float* s = kSmem ? smem + hd : a.scores + size_t(item) * a.score_stride;
    // One warp per key row (coalesced): lane l sums channels l, l + 32, ... in order, then the
    // warp's xor butterfly; a fixed tree per (token, head), whatever the step width.
    {
        const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll 8
        for (int i = wid; i < n; i += nw) {
            const float* key = i < nc ? comp + size_t(i) * hd : win + size_t((lo + i - nc) % a.window_cap) * hd;
            float acc = 0.0f;
            for (int k = lane; k < hd; k += 32) acc += qsh[k] * __ldg(key + k);
            acc = warp_sum(acc);
            if (lane == 0) s[i] = acc * scale;
        }
    }
    __syncthreads();  // the scores are read by every thread below
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, s[i]);
    m = block_max(m, sh);
    float part = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(s[i] - m);
        s[i] = e;
        part += e;
    }
    const float inv = 1.0f / block_sum(part, sh);  // block_sum's barriers publish s[]
    // Output: kAttnGroups thread groups, group g sums keys [g*chunk, (g+1)*chunk) in order per
    // channel; the group partials are then added in group order (a fixed tree for any step).
    float* part_out = s + n;  // [kAttnGroups, hd] after the scores (score_stride has room)
    const int chunk = (n + kAttnGroups - 1) / kAttnGroups;
    const int per_group = blockDim.x / kAttnGroups;
    const int g = threadIdx.x / per_group;
    for (int k = threadIdx.x % per_group; k < hd; k += per_group) {
        const int i0 = g * chunk, i1 = min(n, i0 + chunk);
        float acc = 0.0f;
#pragma unroll 16
        for (int i = i0; i < i1; ++i) {
            const float* v = i < nc ? comp + size_t(i) * hd : win + size_t((lo + i - nc) % a.window_cap) * hd;
            acc += (s[i] * inv) * __ldg(v + k);
        }
        part_out[size_t(g) * hd + k] = acc;
    }
    __syncthreads();
    float* out = a.out + size_t(j) * a.q_dim + size_t(h) * hd;
    float* row = kSmem ? qsh : out;  // the row the quantization reads (qsh is free after the scores)
    for (int k = threadIdx.x; k < hd; k += blockDim.x) {
        float acc = part_out[k];
        for (int gg = 1; gg < kAttnGroups; ++gg) acc += part_out[size_t(gg) * hd + k];
        out[k] = acc;
        if (kSmem) row[k] = acc;
    }
    __syncthreads();  // this head's slice of the row is whole Q8_0 blocks (head_dim % 32 == 0)
    const size_t off = size_t(j) * a.q_dim + size_t(h) * hd;
    block_quantize_row(row, hd, a.out_q + off, a.out_d + off / 32);
}

__global__ void k_pool(PoolArgs a) {
    pdl_begin_early();  // the output projection after it loads its first weights during attention
    __shared__ float sh[32];
    const int r = a.ratio, hd = a.head_dim;
    const int pos = *a.pos + a.j;
    if (r <= 0 || (pos + 1) % r != 0) return;  // not a boundary: the whole block returns
    const int ncomp = *a.n_compressed;
    const int rows = r == 4 ? 2 * r : r;
    const bool overlap = rows > r;
    const int block_start = pos + 1 - r;
    const int win_start = overlap ? block_start - r : block_start;
    const int first = max(0, win_start);
    const int n = pos - first + 1;
    float* outp = a.compressed + size_t(ncomp) * hd;
    for (int k = threadIdx.x; k < hd; k += blockDim.x) {
        float mx = -INFINITY;
        for (int i = 0; i < n; ++i) {
            const int p = first + i;
            mx = fmaxf(mx, a.comp_score[size_t(p % rows) * hd + k] + a.comp_ape[size_t(p - win_start) * hd + k]);
        }
        float sum = 0.0f, acc = 0.0f;
#pragma unroll 4
        for (int i = 0; i < n; ++i) {
            const int p = first + i;
            const float l = a.comp_score[size_t(p % rows) * hd + k] + a.comp_ape[size_t(p - win_start) * hd + k];
            const float e = expf(l - mx);
            sum += e;
            acc += e * a.comp_kv[size_t(p % rows) * hd + k];
        }
        outp[k] = acc / sum;
    }
    __syncthreads();
    block_rms_norm(outp, a.comp_norm, outp, hd, a.eps, sh);
    __syncthreads();
    const size_t half = size_t(a.rope_dim / 2);
    block_rope(outp, hd, a.rope_dim, a.rope_cos + size_t(block_start) * half, a.rope_sin + size_t(block_start) * half);
    __syncthreads();  // every thread has read the count
    if (threadIdx.x == 0) *a.n_compressed = ncomp + 1;
}

__global__ void k_gather(const int8_t* xq, const float* xd, const int32_t* tok_of_row, int d, int8_t* xg, float* xgd) {
    pdl_begin();
    const int r = blockIdx.x;
    const int t = tok_of_row[r];
    const int* src = reinterpret_cast<const int*>(xq + size_t(t) * d);
    int* dst = reinterpret_cast<int*>(xg + size_t(r) * d);
    for (int i = threadIdx.x; i < d / 4; i += blockDim.x) dst[i] = src[i];
    const int nb = d / 32;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) xgd[size_t(r) * nb + i] = xd[size_t(t) * nb + i];
}

// One warp per Q8_0 block of an output row: rows * f / 32 warps, kSwigluBlock threads a block.
// The warp's 32 values stay in registers from the activation to the quantization (no barrier,
// no row round trip through memory); the clamped SwiGLU expression of the CPU rule, then
// warp_quantize_block.
__global__ void k_swiglu(const float* gu, int rows, int f, float limit, int8_t* hq, float* hd) {
    pdl_begin_early();  // the grouped w2 after it loads its slot-0 weights during the grouped w13
    const int lane = threadIdx.x & 31;
    const int nbf = f / 32, blk = blockIdx.x * (kSwigluBlock / 32) + (threadIdx.x >> 5);
    if (blk >= rows * nbf) return;  // whole warps only: the shuffles below see every lane
    const int r = blk / nbf, i = (blk % nbf) * 32 + lane;
    const float* g = gu + size_t(r) * 2 * f;
    const float gi = fminf(g[i], limit);
    const float ui = fminf(fmaxf(g[f + i], -limit), limit);
    const float v = gi / (1.0f + expf(-gi)) * ui;
    warp_quantize_block(v, lane, hq + size_t(r) * f + size_t(i - lane), hd + size_t(r) * nbf + (blk % nbf));
}

__global__ void k_step_end(int* pos, const float* logits, float* out_logits, float* last_logits, int w, int vocab) {
    pdl_begin();
    const int p = *pos;
    for (int i = threadIdx.x; i < w * vocab; i += blockDim.x) out_logits[size_t(p) * vocab + i] = logits[i];
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) last_logits[i] = logits[size_t(w - 1) * vocab + i];
    __syncthreads();  // every thread has read pos
    if (threadIdx.x == 0) *pos = p + w;
}

}  // namespace

void launch_qk_rope(const QkRopeArgs& a, int w, cudaStream_t s) {
    launch_kernel(k_qk_rope, dim3(a.n_heads + 1, w), dim3(kRopeBlock), 0, s, a);
    check_launch("qk_rope");
}

void launch_attend(const AttendArgs& a, int ntok, cudaStream_t s) {
    // The scratch in shared memory while it fits the default 48 KB (ds4-gpu at ctx 4096: 9.2 KB),
    // else in the global scratch: a function of the model only, fixed for a run.
    const size_t smem = sizeof(float) * (size_t(a.head_dim) + a.score_stride);
    if (smem <= kAttendSmemMax)
        launch_kernel(k_attend<true>, dim3(ntok * a.n_heads), dim3(kHeadBlock), smem, s, a);
    else
        launch_kernel(k_attend<false>, dim3(ntok * a.n_heads), dim3(kHeadBlock), sizeof(float) * size_t(a.head_dim),
                      s, a);
    check_launch("attend");
}

void launch_pool(const PoolArgs& a, cudaStream_t s) {
    launch_kernel(k_pool, dim3(1), dim3(kPoolBlock), 0, s, a);
    check_launch("pool");
}

void launch_gather(const int8_t* xq, const float* xd, const int32_t* tok_of_row, int rows, int d, int8_t* xg,
                   float* xgd, cudaStream_t s) {
    launch_kernel(k_gather, dim3(rows), dim3(kTokBlock), 0, s, xq, xd, tok_of_row, d, xg, xgd);
    check_launch("gather");
}

void launch_swiglu(const float* gu, int8_t* hq, float* hqd, int rows, int f, float limit, cudaStream_t s) {
    const int warps = rows * (f / 32), per_block = kSwigluBlock / 32;
    launch_kernel(k_swiglu, dim3((warps + per_block - 1) / per_block), dim3(kSwigluBlock), 0, s, gu, rows, f, limit,
                  hq, hqd);
    check_launch("swiglu");
}

void launch_step_end(DevCtl ctl, const float* logits, float* out_logits, float* last_logits, int w, int vocab,
                     cudaStream_t s) {
    launch_kernel(k_step_end, dim3(1), dim3(kTokBlock), 0, s, ctl.ctl, logits, out_logits, last_logits, w, vocab);
    check_launch("step_end");
}

}}  // namespace dq::gpu
