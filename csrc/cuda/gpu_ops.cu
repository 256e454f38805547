// Per-token CUDA ops of the DS4-mini forward; one block per token or (token, head), fixed
// block sizes, fixed reduction trees (see gpu_ops.cuh). Compiled with --fmad=false.
#include "gpu_ops.cuh"

#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "common/engine_rules.h"
#include "launch.cuh"
#include "q8_kernels.cuh"

namespace dq { namespace gpu {

using cuda::launch_kernel;
using cuda::pdl_begin;

namespace {

constexpr int kTokBlock = 1024;  // threads per token block (elementwise and norm work over d)
constexpr int kDotBlock = 1024;  // threads per (token, row) dot product (4 values each at d = 4096)
constexpr int kHeadBlock = 512;  // threads per (token, head) attention block
constexpr int kRopeBlock = 256;  // threads per (token, head) norm + RoPE block
constexpr int kChanBlock = 256;  // threads per block of the channel-parallel X producers
int chan_blocks(int d) { return (d + kChanBlock - 1) / kChanBlock; }
constexpr int kPoolBlock = 128;  // threads of the compressor pool (one per channel)
constexpr int kMaxHc = 16;
constexpr int kMaxTopK = 16;

void check_launch(const char* what) {
    dq::cuda::count_launch();
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA launch failed (") + what + "): " + cudaGetErrorString(e));
}

// Xor butterfly: every lane ends with the same bits (each step adds a + b on both partners).
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over the block (fixed tree: per-warp butterfly, then a butterfly over the warp partials);
// every thread gets the total. sh: [32] shared.
__device__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // sh may still be read by a previous call
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    return warp_sum(lane < nw ? sh[lane] : 0.0f);
}
__device__ float block_max(float v, float* sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    return warp_max(lane < nw ? sh[lane] : -INFINITY);
}

// y = x / rms(x) * gain over the block (x and y may alias; gain may be null).
__device__ void block_rms_norm(const float* x, const float* gain, float* y, int n, float eps, float* sh) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i] * x[i];
    const float ms = block_sum(s, sh) / float(n);
    const float inv = 1.0f / sqrtf(ms + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = gain ? x[i] * inv * gain[i] : x[i] * inv;
}

// Quantizes row x [n] (n % 32 == 0) to Q8_0 activations, one warp per 32-value block: the
// semantics of quantize_row_q8_0_ref / dq::cuda::quantize_q8 (d = amax / 127, q = round(x / d)
// clamped to +-127, the scale stored fp16-rounded as a float). Call after a barrier that
// publishes x; every thread of the block must call it.
__device__ void block_quantize_row(const float* x, int n, int8_t* qs, float* d) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int b = wid; b < n / 32; b += nw) {
        const float v = x[b * 32 + lane];
        float amax = fabsf(v);
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float dd = __fdiv_rn(amax, 127.0f);
        float q = dd != 0.0f ? roundf(__fdiv_rn(v, dd)) : 0.0f;
        q = fminf(127.0f, fmaxf(-127.0f, q));
        qs[b * 32 + lane] = static_cast<int8_t>(static_cast<int>(q));
        if (lane == 0) d[b] = __half2float(__float2half_rn(dd));
    }
}

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

// Channel-parallel producers of X: grid (channel blocks, tokens), one channel per thread.
#define DQ_FOR_CHANNELS(k, d) for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < (d); k += gridDim.x * blockDim.x)

__global__ void k_embed(const int32_t* tokens, const int* pos, const float* embed, float* X, float* mean_all, int hc,
                        int d) {
    pdl_begin();
    const int j = blockIdx.y;
    const float* e = embed + size_t(tokens[*pos + j]) * d;
    float* x = X + size_t(j) * hc * d;
    float* mean = mean_all + size_t(j) * d;
    const float inv_hc = 1.0f / float(hc);
    DQ_FOR_CHANNELS(k, d) {
        const float v = e[k];
        float s = 0.0f;
        for (int i = 0; i < hc; ++i) {
            x[size_t(i) * d + k] = v;
            s += v;  // the mean over streams in stream order
        }
        mean[k] = s * inv_hc;
    }
}

// dyn[j, r] = W[r] . rms_norm(mean[j]) (no gain), one block per (row, token): the norm as
// block_rms_norm computes it (sum of squares in thread-stride order, the block tree, then
// x * inv per element), each block for itself, then the dot with fixed strides and the tree.
__global__ void k_dyn_dot(const float* W, const float* mean_all, float* dyn_all, int rows, int d, float eps) {
    pdl_begin();
    __shared__ float sh[32];
    const int r = blockIdx.x, j = blockIdx.y;
    const float* wr = W + size_t(r) * d;
    const float* x = mean_all + size_t(j) * d;
    float q = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) q += x[i] * x[i];
    const float ms = block_sum(q, sh) / float(d);
    const float inv = 1.0f / sqrtf(ms + eps);
    float s = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += wr[i] * (x[i] * inv);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) dyn_all[size_t(j) * rows + r] = s;
}

// y[j, r] = W[r] . x[j] for r < rows (one block per (row, token); fixed per-thread strides,
// then the block tree). W [rows, d] row-major, x [w, d], y [w, rows].
__global__ void k_rowdot(const float* W, const float* x_all, float* y_all, int rows, int d) {
    pdl_begin();
    __shared__ float sh[32];
    const int r = blockIdx.x, j = blockIdx.y;
    const float* wr = W + size_t(r) * d;
    const float* x = x_all + size_t(j) * d;
    float s = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += wr[i] * x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) y_all[size_t(j) * rows + r] = s;
}

// hc_mix + sublayer norm for token j: dyn [rows] -> pre/post/M (Sinkhorn), x_in, xn.
__global__ void k_hc_mix(DevHC p, const float* norm, const float* Xall, const float* dyn_all, float* xin_all,
                         float* xn_all, float* post_all, float* M_all, int hc, int d, int sinkhorn_iters,
                         float eps, int8_t* xq_all, float* xd_all) {
    pdl_begin();
    __shared__ float sh[32];
    __shared__ float pre[kMaxHc];
    const int j = blockIdx.x;
    const int rows = 2 * hc + hc * hc;
    const float* X = Xall + size_t(j) * hc * d;
    const float* dyn = dyn_all + size_t(j) * rows;
    float* xin = xin_all + size_t(j) * d;
    __shared__ float M[kMaxHc * kMaxHc];
    // hc_mix's small part (the CPU's rules): pre/post first, then warp 0 runs Sinkhorn (a lane per
    // element, row and column) while the other warps start the mix; M is stored after the norm's
    // barriers.
    if (threadIdx.x == 0)
        rules::hc_pre_post(p.static_pre, p.static_post, p.dyn_scale, dyn, hc, pre, post_all + size_t(j) * hc);
    __syncthreads();
    if (threadIdx.x < 32)
        rules::hc_sinkhorn(p.static_res, p.dyn_scale, dyn, hc, sinkhorn_iters, M, int(threadIdx.x), 32,
                           [] { __syncwarp(); });
#pragma unroll 4
    for (int k = threadIdx.x; k < d; k += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < hc; ++i) s += pre[i] * X[size_t(i) * d + k];
        xin[k] = s;
    }
    block_rms_norm(xin, norm, xn_all + size_t(j) * d, d, eps, sh);
    for (int k = threadIdx.x; k < hc * hc; k += blockDim.x) M_all[size_t(j) * hc * hc + k] = M[k];
    __syncthreads();
    block_quantize_row(xn_all + size_t(j) * d, d, xq_all + size_t(j) * d, xd_all + size_t(j) * (d / 32));
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

__global__ void k_attend(AttendArgs a) {
    pdl_begin();
    extern __shared__ float qsh[];  // [head_dim] the query head
    __shared__ float sh[32];
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
    float* s = a.scores + size_t(item) * a.score_stride;
    // One warp per key row (coalesced): lane l sums channels l, l + 32, ... in order, then the
    // warp's xor butterfly; a fixed tree per (token, head), whatever the step width.
    {
        const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll 4
        for (int i = wid; i < n; i += nw) {
            const float* key = i < nc ? a.compressed + size_t(i) * hd
                                      : a.window + size_t((lo + i - nc) % a.window_cap) * hd;
            float acc = 0.0f;
            for (int k = lane; k < hd; k += 32) acc += qsh[k] * key[k];
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
#pragma unroll 8
        for (int i = i0; i < i1; ++i) {
            const float* v = i < nc ? a.compressed + size_t(i) * hd
                                    : a.window + size_t((lo + i - nc) % a.window_cap) * hd;
            acc += (s[i] * inv) * v[k];
        }
        part_out[size_t(g) * hd + k] = acc;
    }
    __syncthreads();
    float* out = a.out + size_t(j) * a.q_dim + size_t(h) * hd;
    for (int k = threadIdx.x; k < hd; k += blockDim.x) {
        float acc = part_out[k];
        for (int gg = 1; gg < kAttnGroups; ++gg) acc += part_out[size_t(gg) * hd + k];
        out[k] = acc;
    }
    __syncthreads();  // this head's slice of the row is whole Q8_0 blocks (head_dim % 32 == 0)
    const size_t off = size_t(j) * a.q_dim + size_t(h) * hd;
    block_quantize_row(out, hd, a.out_q + off, a.out_d + off / 32);
}

__global__ void k_pool(PoolArgs a) {
    pdl_begin();
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

// X[j] <- M X[j] + post o[j] per channel, and the new streams' mean (mean_all may be null).
__device__ __forceinline__ void post_mix_store(float* X, const float* M, const float* post, float o, int hc, int d, int k,
                                               float* mean, float inv_hc) {
    float x[kMaxHc];
    for (int i = 0; i < hc; ++i) x[i] = X[size_t(i) * d + k];
    float s = 0.0f;
    for (int i = 0; i < hc; ++i) {
        float acc = 0.0f;
        for (int c = 0; c < hc; ++c) acc += M[i * hc + c] * x[c];
        acc += post[i] * o;
        X[size_t(i) * d + k] = acc;
        s += acc;  // the mean over streams in stream order
    }
    if (mean) mean[k] = s * inv_hc;
}

// The token's post [hc] and M [hc, hc] into shared memory (read once, not per channel).
__device__ __forceinline__ void load_mix(const float* post_g, const float* M_g, int hc, float* post, float* M) {
    for (int i = threadIdx.x; i < hc * hc; i += blockDim.x) M[i] = M_g[i];
    for (int i = threadIdx.x; i < hc; i += blockDim.x) post[i] = post_g[i];
    __syncthreads();
}

__global__ void k_hc_post(float* Xall, float* mean_all, const float* o_all, const float* post_all, const float* M_all,
                          int hc, int d) {
    pdl_begin();
    __shared__ float post[kMaxHc], M[kMaxHc * kMaxHc];
    const int j = blockIdx.y;
    float* X = Xall + size_t(j) * hc * d;
    const float* o = o_all + size_t(j) * d;
    load_mix(post_all + size_t(j) * hc, M_all + size_t(j) * hc * hc, hc, post, M);
    float* mean = mean_all ? mean_all + size_t(j) * d : nullptr;
    const float inv_hc = 1.0f / float(hc);
    DQ_FOR_CHANNELS(k, d) post_mix_store(X, M, post, o[k], hc, d, k, mean, inv_hc);
}

// One block for the step: thread j < w routes token j (the CPU's rule), then thread 0 lays
// out the MoE columns and the slot table, and counts the routed experts' bytes and calls.
__global__ void k_route(RouterArgs a, DevMoe moe, const float* logits_all, int w) {
    pdl_begin();
    extern __shared__ float sm[];  // [w, 2 * E] per-token scratch
    const int E = a.n_experts, K = a.top_k, j = threadIdx.x;
    const int pos = *a.pos;
    if (j < w) {
        int32_t* ids = a.ids + size_t(j) * K;
        float* wts = a.wts + size_t(j) * K;
        rules::route_from_logits(logits_all + size_t(j) * E, a.router_bias, a.tid2eid, a.tokens[pos + j], E, K,
                                 a.routed_scale, ids, wts, sm + size_t(j) * 2 * E);
        if (a.rid) {
            for (int k = 0; k < K; ++k) {
                a.rid[a.route_off + size_t(pos + j) * K + k] = ids[k];
                a.rw[a.route_off + size_t(pos + j) * K + k] = wts[k];
            }
        }
    }
    __syncthreads();  // every token's ids are written (global memory, visible in the block)
    if (j != 0) return;
    int32_t* base = moe.scratch;
    int32_t* count = moe.scratch + E;
    rules::moe_columns(a.ids, w, K, E, moe.tok_of_col, moe.col_of, base, count);
    const int S = moe.max_slots;
    int32_t* mat = moe.slots + 1;
    int32_t* sbase = moe.slots + 1 + S;
    int32_t* scount = moe.slots + 1 + 2 * S;
    int n = 0;
    mat[n] = 0;
    sbase[n] = 0;
    scount[n] = w;
    ++n;
    for (int e = 0; e < E; ++e)
        if (count[e] > 0) {
            mat[n] = 1 + e;
            sbase[n] = base[e];
            scount[n] = count[e];
            ++n;
        }
    moe.slots[0] = n;
    moe.counters[0] += (unsigned long long)(n - 1) * moe.expert_bytes;
    moe.counters[1] += (unsigned long long)(n - 1) * 2;
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

__global__ void k_swiglu(const float* gu, float* h, int f, float limit, int8_t* hq, float* hd) {
    pdl_begin();
    const int r = blockIdx.x;
    const float* g = gu + size_t(r) * 2 * f;
    const float* u = g + f;
    float* hr = h + size_t(r) * f;
    for (int i = threadIdx.x; i < f; i += blockDim.x) {
        const float gi = fminf(g[i], limit);
        const float ui = fminf(fmaxf(u[i], -limit), limit);
        hr[i] = gi / (1.0f + expf(-gi)) * ui;
    }
    __syncthreads();
    block_quantize_row(hr, f, hq + size_t(r) * f, hd + size_t(r) * (f / 32));
}

// o = y[t] + sum over k in order of wts[t, k] * y[col_of[t, k]] (per channel), then hc_post
// with that o: X[t, i] <- sum_c M[i, c] X[t, c] + post[i] * o, and the new streams' mean.
__global__ void k_combine_post(const float* y, const int32_t* col_of, const float* wts, float* Xall, float* mean_all,
                               const float* post_all, const float* M_all, int hc, int K, int d) {
    pdl_begin();
    __shared__ float post[kMaxHc], M[kMaxHc * kMaxHc], wk[kMaxTopK];
    __shared__ int ck[kMaxTopK];
    const int t = blockIdx.y;
    const float* ys = y + size_t(t) * d;
    float* X = Xall + size_t(t) * hc * d;
    for (int s = threadIdx.x; s < K; s += blockDim.x) {
        wk[s] = wts[t * K + s];
        ck[s] = col_of[t * K + s];
    }
    load_mix(post_all + size_t(t) * hc, M_all + size_t(t) * hc * hc, hc, post, M);
    float* mean = mean_all ? mean_all + size_t(t) * d : nullptr;
    const float inv_hc = 1.0f / float(hc);
    DQ_FOR_CHANNELS(k, d) {
        float o = ys[k];
        for (int s = 0; s < K; ++s) o += wk[s] * y[size_t(ck[s]) * d + k];
        post_mix_store(X, M, post, o, hc, d, k, mean, inv_hc);
    }
}

__global__ void k_final(const float* Xall, const float* hc_final, const float* final_norm, float* xin_all, int hc,
                        int d, float eps, int8_t* xq_all, float* xd_all) {
    pdl_begin();
    __shared__ float sh[32];
    const int j = blockIdx.x;
    const float* X = Xall + size_t(j) * hc * d;
    float* hrow = xin_all + size_t(j) * d;
    for (int k = threadIdx.x; k < d; k += blockDim.x) {
        float acc = 0.0f;
        for (int i = 0; i < hc; ++i) acc += hc_final[i] * X[size_t(i) * d + k];
        hrow[k] = acc;
    }
    block_rms_norm(hrow, final_norm, hrow, d, eps, sh);
    __syncthreads();
    block_quantize_row(hrow, d, xq_all + size_t(j) * d, xd_all + size_t(j) * (d / 32));
}

__global__ void k_step_end(int* pos, const float* logits, float* out_logits, float* last_logits, const float* X,
                           float* hc_streams, int w, int vocab, int hc, int d) {
    pdl_begin();
    const int p = *pos;
    for (int i = threadIdx.x; i < w * vocab; i += blockDim.x) out_logits[size_t(p) * vocab + i] = logits[i];
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) last_logits[i] = logits[size_t(w - 1) * vocab + i];
    const float* xl = X + size_t(w - 1) * hc * d;
    for (int i = threadIdx.x; i < hc * d; i += blockDim.x) hc_streams[i] = xl[i];
    __syncthreads();  // every thread has read pos
    if (threadIdx.x == 0) *pos = p + w;
}

}  // namespace

void launch_embed(const int32_t* tokens, DevCtl ctl, const float* embed, float* X, float* mean, int w, int hc, int d,
                  float eps, cudaStream_t s) {
    launch_kernel(k_embed, dim3(chan_blocks(d), w), dim3(kChanBlock), 0, s, tokens, ctl.pos(), embed, X, mean, hc, d);
    check_launch("embed");
}

void launch_hc_pre(const DevHC& p, const float* norm, const float* X, const float* mean, float* dyn, float* xin,
                   float* xn, float* post, float* M, int8_t* xq, float* xd, int w, int hc, int d,
                   int sinkhorn_iters, float eps, cudaStream_t s) {
    if (hc > kMaxHc) throw std::invalid_argument("hc_mult above 16 is not supported on the GPU");
    const int rows = 2 * hc + hc * hc;
    launch_kernel(k_dyn_dot, dim3(rows, w), dim3(kDotBlock), 0, s, p.w_dyn, mean, dyn, rows, d, eps);
    check_launch("hc_dyn");
    launch_kernel(k_hc_mix, dim3(w), dim3(kTokBlock), 0, s, p, norm, X, dyn, xin, xn, post, M, hc, d, sinkhorn_iters, eps, xq, xd);
    check_launch("hc_mix");
}

void launch_qk_rope(const QkRopeArgs& a, int w, cudaStream_t s) {
    launch_kernel(k_qk_rope, dim3(a.n_heads + 1, w), dim3(kRopeBlock), 0, s, a);
    check_launch("qk_rope");
}

void launch_attend(const AttendArgs& a, int ntok, cudaStream_t s) {
    launch_kernel(k_attend, dim3(ntok * a.n_heads), dim3(kHeadBlock), sizeof(float) * size_t(a.head_dim), s, a);
    check_launch("attend");
}

void launch_pool(const PoolArgs& a, cudaStream_t s) {
    launch_kernel(k_pool, dim3(1), dim3(kPoolBlock), 0, s, a);
    check_launch("pool");
}

void launch_hc_post(float* X, float* mean, const float* o, const float* post, const float* M, int w, int hc, int d,
                    float eps, cudaStream_t s) {
    launch_kernel(k_hc_post, dim3(chan_blocks(d), w), dim3(kChanBlock), 0, s, X, mean, o, post, M, hc, d);
    check_launch("hc_post");
}

void launch_route(const RouterArgs& a, const DevMoe& moe, float* logits, int w, cudaStream_t s) {
    if (w < 1 || w > 32) throw std::invalid_argument("route: step width must be 1..32");
    launch_kernel(k_rowdot, dim3(a.n_experts, w), dim3(kDotBlock), 0, s, a.router, a.xn, logits, a.n_experts, a.d);
    check_launch("router_logits");
    launch_kernel(k_route, dim3(1), dim3(32), sizeof(float) * 2 * size_t(a.n_experts) * w, s, a, moe, logits, w);
    check_launch("route");
}

void launch_gather(const int8_t* xq, const float* xd, const int32_t* tok_of_row, int rows, int d, int8_t* xg,
                   float* xgd, cudaStream_t s) {
    launch_kernel(k_gather, dim3(rows), dim3(kTokBlock), 0, s, xq, xd, tok_of_row, d, xg, xgd);
    check_launch("gather");
}

void launch_swiglu(const float* gu, float* h, int8_t* hq, float* hqd, int rows, int f, float limit,
                   cudaStream_t s) {
    launch_kernel(k_swiglu, dim3(rows), dim3(kTokBlock), 0, s, gu, h, f, limit, hq, hqd);
    check_launch("swiglu");
}

void launch_combine_post(const float* y, const int32_t* col_of, const float* wts, float* X, float* mean,
                         const float* post, const float* M, int w, int hc, int top_k, int d, float eps, cudaStream_t s) {
    if (top_k > kMaxTopK) throw std::invalid_argument("top_k above 16 is not supported on the GPU");
    launch_kernel(k_combine_post, dim3(chan_blocks(d), w), dim3(kChanBlock), 0, s, y, col_of, wts, X, mean, post, M, hc,
                  top_k, d);
    check_launch("combine_post");
}

void launch_final(const float* X, const float* hc_final, const float* final_norm, float* xin, int8_t* xq, float* xd,
                  int w, int hc, int d, float eps, cudaStream_t s) {
    launch_kernel(k_final, dim3(w), dim3(kTokBlock), 0, s, X, hc_final, final_norm, xin, hc, d, eps, xq, xd);
    check_launch("final");
}

void launch_step_end(DevCtl ctl, const float* logits, float* out_logits, float* last_logits, const float* X,
                     float* hc_streams, int w, int vocab, int hc, int d, cudaStream_t s) {
    launch_kernel(k_step_end, dim3(1), dim3(kTokBlock), 0, s, ctl.ctl, logits, out_logits, last_logits, X, hc_streams, w, vocab, hc, d);
    check_launch("step_end");
}

}}  // namespace dq::gpu
