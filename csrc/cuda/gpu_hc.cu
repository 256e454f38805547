// The hyper-connection boundary kernel (gpu_hc.cuh): producer of X + consumer, one cluster of
// C blocks per token, fixed trees (block tree per slice, then the block partials in rank order).
// Compiled with --fmad=false.
#include "gpu_hc.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <stdexcept>

#include "common/engine_rules.h"
#include "gpu_reduce.cuh"
#include "launch.cuh"
#include "model_config.h"

namespace dq { namespace gpu {

using cuda::launch_kernel_cluster;
using cuda::pdl_begin;
namespace cg = cooperative_groups;

namespace {

constexpr int kHcThreads = 512;  // threads per block at most (one channel each at d / C = 512)
constexpr int kMaxWarps = kHcThreads / 32;
constexpr int kMaxDots = 288;  // dyn rows (2 hc + hc^2 at hc = 16) or router rows per launch
constexpr int kMaxHc = 16;
constexpr int kMaxTopK = 16;

// Blocks per token: the largest of 8, 4, 2, 1 that splits d into whole Q8_0 blocks (d only).
int hc_cluster(int d) {
    const int nb = d / 32;
    for (int c : {8, 4, 2})
        if (nb % c == 0) return c;
    return 1;
}
// Threads per block: the slice's channels, 64..512, a multiple of 32 (d only).
int hc_threads(int cs) { return (std::min(kHcThreads, std::max(64, cs)) + 31) / 32 * 32; }

// Weights no kernel writes: fetched into L2 before the wait for the previous grid.
__device__ __forceinline__ void prefetch_rows(const float* W, int rows, int d, int c0, int cs) {
    const int lines = cs / 32;  // 128-byte lines of a row's slice
    for (int i = threadIdx.x; i < rows * lines; i += blockDim.x) {
        const float* p = W + size_t(i / lines) * d + c0 + (i % lines) * 32;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    }
}

// Sum of v over the cluster: the block tree, then the block partials in rank order (every
// thread of every block gets the same bits). slot: this call's own shared float (never reused
// in the kernel, so no remote read can race a later write).
__device__ float cluster_sum(cg::cluster_group& cl, float v, float* sh, float* slot) {
    v = block_sum(v, sh);
    if (threadIdx.x == 0) *slot = v;
    cl.sync();
    float s = 0.0f;
    for (unsigned r = 0; r < cl.num_blocks(); ++r) s += *cl.map_shared_rank(slot, r);
    return s;
}

// out[r] = W[r] . x for r < rows over the cluster (x: this block's slice xs [cs] of channels
// c0..): per thread its channels in stride order, the warp butterfly, the warp partials in
// warp order, then the block partials in rank order. Rows go kDotChunk at a time, so a thread's
// weight loads of a chunk are all in flight together (one memory latency per chunk, not per
// row). wpart [kMaxWarps, kMaxDots] scratch, red [kMaxDots] this call's exported partials; out
// [rows] in shared memory of every block.
constexpr int kDotChunk = 32;
__device__ void cluster_dots(cg::cluster_group& cl, const float* W, int rows, int d, int c0, int cs, const float* xs,
                             float* wpart, float* red, float* out) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int r0 = 0; r0 < rows; r0 += kDotChunk) {
        float acc[kDotChunk];
#pragma unroll
        for (int u = 0; u < kDotChunk; ++u) acc[u] = 0.0f;
        for (int k = threadIdx.x; k < cs; k += blockDim.x) {
            const float x = xs[k];
            const float* wk = W + size_t(r0) * d + c0 + k;
#pragma unroll
            for (int u = 0; u < kDotChunk; ++u)
                if (r0 + u < rows) acc[u] += wk[size_t(u) * d] * x;
        }
#pragma unroll
        for (int u = 0; u < kDotChunk; ++u)
            if (r0 + u < rows) {
                const float v = warp_sum(acc[u]);
                if (lane == 0) wpart[wid * kMaxDots + r0 + u] = v;
            }
    }
    __syncthreads();
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < nw; ++i) s += wpart[i * kMaxDots + r];
        red[r] = s;
    }
    cl.sync();
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        float s = 0.0f;
        for (unsigned b = 0; b < cl.num_blocks(); ++b) s += cl.map_shared_rank(red, b)[r];
        out[r] = s;
    }
    __syncthreads();
}

// The MoE table of the step from every token's ids (one thread; k_route's former tail): the
// columns (rules::moe_columns), the slots, and the routed experts' bytes and calls.
__device__ void moe_table(const HcStepArgs& a, int w, int32_t* ids_sh) {
    const int E = a.n_experts, K = a.top_k;
    const volatile int32_t* ids = a.ids;  // written by other clusters (fenced before their count)
    for (int i = 0; i < w * K; ++i) ids_sh[i] = ids[i];
    const DevMoe& moe = a.moe;
    int32_t* base = moe.scratch;
    int32_t* count = moe.scratch + E;
    rules::moe_columns(ids_sh, w, K, E, moe.tok_of_col, moe.col_of, base, count);
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

// grid (C, w), cluster (C, 1, 1), block hc_threads(d / C); dynamic shared: Xs [hc, cs] (this
// slice of the token's new streams), xs [cs] (the mean, then x_in, then the normed x_in).
__global__ void __launch_bounds__(kHcThreads) k_hc_step(HcStepArgs a, int w) {
    cg::cluster_group cl = cg::this_cluster();
    const int C = int(cl.num_blocks()), b = int(cl.block_rank()), j = blockIdx.y;
    const int d = a.d, hc = a.hc, cs = d / C, c0 = b * cs;
    const int rows = 2 * hc + hc * hc;
    const bool pre_out = a.out == HcOut::kPre;
    if (pre_out) {
        prefetch_rows(a.p.w_dyn, rows, d, c0, cs);
        if (a.router) prefetch_rows(a.router, a.n_experts, d, c0, cs);
    }
    const float gain0 = int(threadIdx.x) < cs ? a.norm[c0 + threadIdx.x] : 0.0f;  // the first channel's
    pdl_begin();
    extern __shared__ float smem[];
    float* Xs = smem;
    float* xs = smem + size_t(hc) * cs;
    __shared__ float sh[32], slots[2];
    __shared__ float wpart[kMaxWarps * kMaxDots], red_dyn[kMaxDots], red_rt[kMaxDots], dyn[kMaxDots], logits[kMaxDots];
    __shared__ float pmix[kMaxHc], Mmix[kMaxHc * kMaxHc], wk[kMaxTopK], pre[kMaxHc], post[kMaxHc], Msk[kMaxHc * kMaxHc];
    __shared__ int ck[kMaxTopK];
    __shared__ float rscratch[2 * kMaxDots];
    __shared__ int32_t ids_sh[kMaxStep * kMaxTopK];
    float* X = a.X + size_t(j) * hc * d;
    const int K = a.top_k;

    // 1. The producer: this slice of the token's new streams (Xs and X) and their mean (xs).
    if (a.in != HcIn::kEmbed) {
        for (int i = threadIdx.x; i < hc * hc; i += blockDim.x) Mmix[i] = a.M_in[size_t(j) * hc * hc + i];
        for (int i = threadIdx.x; i < hc; i += blockDim.x) pmix[i] = a.post_in[size_t(j) * hc + i];
        if (a.in == HcIn::kCombine)
            for (int s = threadIdx.x; s < K; s += blockDim.x) {
                wk[s] = a.wts[j * K + s];
                ck[s] = a.col_of[j * K + s];
            }
        __syncthreads();
    }
    const float inv_hc = 1.0f / float(hc);
    const float* e = a.in == HcIn::kEmbed ? a.embed + size_t(a.tokens[*a.pos + j]) * d : nullptr;
    for (int k = threadIdx.x; k < cs; k += blockDim.x) {
        const int ch = c0 + k;
        float sum = 0.0f;  // the mean over streams in stream order
        if (a.in == HcIn::kEmbed) {
            const float v = e[ch];
            for (int i = 0; i < hc; ++i) {
                Xs[i * cs + k] = v;
                X[size_t(i) * d + ch] = v;
                sum += v;
            }
        } else {
            float o = a.o[size_t(j) * d + ch];
            if (a.in == HcIn::kCombine)
                for (int s = 0; s < K; ++s) o += wk[s] * a.o[size_t(ck[s]) * d + ch];
            float x[kMaxHc];
            for (int i = 0; i < hc; ++i) x[i] = X[size_t(i) * d + ch];
            for (int i = 0; i < hc; ++i) {
                float acc = 0.0f;
                for (int c = 0; c < hc; ++c) acc += Mmix[i * hc + c] * x[c];
                acc += pmix[i] * o;
                Xs[i * cs + k] = acc;
                X[size_t(i) * d + ch] = acc;
                sum += acc;
            }
        }
        xs[k] = sum * inv_hc;
    }

    // 2. The consumer's x_in, rms-normed with its gain.
    if (pre_out) {
        // dyn = w_dyn . rms_norm(mean) (no gain), then pre / post.
        float q = 0.0f;
        for (int k = threadIdx.x; k < cs; k += blockDim.x) q += xs[k] * xs[k];
        const float ms = cluster_sum(cl, q, sh, &slots[0]) / float(d);
        const float inv = 1.0f / sqrtf(ms + a.eps);
        for (int k = threadIdx.x; k < cs; k += blockDim.x) xs[k] = xs[k] * inv;
        __syncthreads();
        cluster_dots(cl, a.p.w_dyn, rows, d, c0, cs, xs, wpart, red_dyn, dyn);
        if (threadIdx.x == 0) rules::hc_pre_post(a.p.static_pre, a.p.static_post, a.p.dyn_scale, dyn, hc, pre, post);
        __syncthreads();
        if (b == 0)
            for (int i = threadIdx.x; i < hc; i += blockDim.x) a.post_out[size_t(j) * hc + i] = post[i];
        for (int k = threadIdx.x; k < cs; k += blockDim.x) {
            float s = 0.0f;
            for (int i = 0; i < hc; ++i) s += pre[i] * Xs[i * cs + k];
            xs[k] = s;
        }
    } else {
        for (int k = threadIdx.x; k < cs; k += blockDim.x) {
            float s = 0.0f;
            for (int i = 0; i < hc; ++i) s += a.hc_final[i] * Xs[i * cs + k];
            xs[k] = s;
        }
        if (j == w - 1)
            for (int i = 0; i < hc; ++i)
                for (int k = threadIdx.x; k < cs; k += blockDim.x) a.hc_streams[size_t(i) * d + c0 + k] = Xs[i * cs + k];
    }
    {
        float q = 0.0f;
        for (int k = threadIdx.x; k < cs; k += blockDim.x) q += xs[k] * xs[k];
        const float ms = cluster_sum(cl, q, sh, &slots[1]) / float(d);
        const float inv = 1.0f / sqrtf(ms + a.eps);
        for (int k = threadIdx.x; k < cs; k += blockDim.x) xs[k] = xs[k] * inv * (k == int(threadIdx.x) ? gain0 : a.norm[c0 + k]);
    }
    __syncthreads();
    block_quantize_row(xs, cs, a.xq + size_t(j) * d + c0, a.xd + (size_t(j) * d + c0) / 32);

    // 3. The router (FFN): logits over the cluster, then block 0 routes the token; the token
    // that finishes last lays out the step's MoE table.
    if (pre_out && a.router) {
        const int E = a.n_experts;
        cluster_dots(cl, a.router, E, d, c0, cs, xs, wpart, red_rt, logits);
        if (b == 0 && threadIdx.x == 0) {
            const int pos = *a.pos;
            int32_t* ids = a.ids + size_t(j) * K;
            float* wts = a.rwts + size_t(j) * K;
            rules::route_from_logits(logits, a.router_bias, a.tid2eid, a.tokens[pos + j], E, K, a.routed_scale, ids,
                                     wts, rscratch);
            if (a.rid)
                for (int k = 0; k < K; ++k) {
                    a.rid[a.route_off + size_t(pos + j) * K + k] = ids[k];
                    a.rw[a.route_off + size_t(pos + j) * K + k] = wts[k];
                }
            __threadfence();
            if (atomicAdd(a.moe.done, 1u) == unsigned(w - 1)) {
                __threadfence();
                moe_table(a, w, ids_sh);
                *a.moe.done = 0u;
            }
        }
    }
    // 4. M (Sinkhorn) by one warp of the last block, off the router's path.
    if (pre_out && b == C - 1 && threadIdx.x < 32) {
        rules::hc_sinkhorn(a.p.static_res, a.p.dyn_scale, dyn, hc, a.sinkhorn_iters, Msk, int(threadIdx.x), 32,
                           [] { __syncwarp(); });
        for (int k = threadIdx.x; k < hc * hc; k += 32) a.M_out[size_t(j) * hc * hc + k] = Msk[k];
    }
    cl.sync();  // no block leaves while another may still read its shared memory
}

}  // namespace

void launch_hc_step(const HcStepArgs& a, int w, cudaStream_t s) {
    if (a.hc > kMaxHc) throw std::invalid_argument("hc_mult above 16 is not supported on the GPU");
    if (a.top_k > kMaxTopK) throw std::invalid_argument("top_k above 16 is not supported on the GPU");
    if (2 * a.hc + a.hc * a.hc > kMaxDots || (a.router && a.n_experts > kMaxDots))
        throw std::invalid_argument("hc_step: more than 288 dyn rows or experts");
    if (w < 1 || w > kMaxStep) throw std::invalid_argument("hc_step: step width must be 1..32");
    const int C = hc_cluster(a.d), cs = a.d / C;
    const size_t smem = sizeof(float) * (size_t(a.hc) + 1) * cs;
    launch_kernel_cluster(k_hc_step, dim3(C, w), dim3(hc_threads(cs)), smem, unsigned(C), s, a, w);
    check_launch("hc_step");
}

}}  // namespace dq::gpu
