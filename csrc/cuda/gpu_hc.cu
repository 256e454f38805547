// The hyper-connection boundary kernel (gpu_hc.cuh): producer of X + consumer, one cluster of
// C blocks per token, fixed trees (block tree per slice, then the block partials in rank order).
// Compiled with --fmad=false.
#include "gpu_hc.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/engine_rules.h"
#include "gpu_reduce.cuh"
#include "launch.cuh"
#include "model_config.h"
#include "q8_kernels.cuh"

namespace dq { namespace gpu {

using cuda::launch_kernel_cluster;
using cuda::check_launch;
using cuda::pdl_begin;
namespace cg = cooperative_groups;

namespace {

constexpr int kHcThreads = 512;  // threads per block at most (one channel each at d / C = 512)
constexpr int kMaxWarps = kHcThreads / 32;
constexpr int kMaxCluster = 16;  // hc_cluster's largest C (16: a non-portable cluster size)
constexpr int kRed = 32;         // values per cluster reduction: up to 31 dots, then a sum of squares
constexpr int kMaxHc = kHcMaxHc;
constexpr int kMaxTopK = kHcMaxTopK;
constexpr int kMaxExperts = kHcMaxExperts;
static_assert(2 * kMaxHc + kMaxHc * kMaxHc + 1 <= kRed && kMaxExperts + 1 <= kRed, "one cluster reduction");

// Blocks per token: the largest of 16, 8, 4, 2, 1 that splits d into whole Q8_0 blocks, at 16
// only with at least 256 channels per block and where the GPU allows a non-portable cluster size
// (d and the device only: fixed for a run, whatever the step width).
int hc_cluster(int d, bool allow16) {
    const int nb = d / 32;
    if (allow16 && nb % 16 == 0 && d / 16 >= 256) return 16;
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

// v [32] per lane -> lane l returns the sum over the warp's lanes of v[l]: recursive halving
// (exchange at xor 16, 8, 4, 2, 1; each step a lane keeps one half of its values and adds its
// partner's copy of that half), a fixed tree per value; 31 shuffles for 32 values.
__device__ __forceinline__ float warp_transpose_sum(float (&v)[kRed]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) {
        const bool up = (lane & off) != 0;
#pragma unroll
        for (int i = 0; i < off; ++i) {
            const float send = up ? v[i] : v[i + off];
            const float keep = up ? v[i + off] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
    }
    return v[0];
}

// The sum over the cluster's blocks of *p (p: this block's shared copy), added in rank order;
// every remote load is issued before the first add. Call after a cluster barrier that publishes it.
__device__ __forceinline__ float rank_order_sum(cg::cluster_group& cl, const float* p) {
    const int nb = int(cl.num_blocks());
    float part[kMaxCluster];
#pragma unroll
    for (int b = 0; b < kMaxCluster; ++b) part[b] = b < nb ? *cl.map_shared_rank(p, b) : 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int b = 0; b < kMaxCluster; ++b)
        if (b < nb) s += part[b];
    return s;
}

// out[i] = the cluster's sum of v[i] (i < 32; every thread's v): the warp tree above, the warp
// partials in warp order, then the block partials in rank order (distributed shared memory);
// out [32] in every block. wpart [kMaxWarps, 32] scratch; red [32] this call's own export (never
// reused in the kernel, so no remote read races a later write).
__device__ __forceinline__ void cluster_reduce(cg::cluster_group& cl, float (&v)[kRed], float* wpart, float* red, float* out) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float t = warp_transpose_sum(v);
    wpart[wid * kRed + lane] = t;
    __syncthreads();
    if (threadIdx.x < kRed) {
        float s = 0.0f;
        for (int i = 0; i < nw; ++i) s += wpart[i * kRed + threadIdx.x];
        red[threadIdx.x] = s;
    }
    cl.sync();
    if (threadIdx.x < kRed) out[threadIdx.x] = rank_order_sum(cl, red + threadIdx.x);
    __syncthreads();
}

// The cluster's sum of one value per thread (block tree, then the block partials in rank order).
__device__ float cluster_sum(cg::cluster_group& cl, float v, float* sh, float* slot) {
    v = block_sum(v, sh);
    if (threadIdx.x == 0) *slot = v;
    cl.sync();
    return rank_order_sum(cl, slot);
}

// v[u] += W[u] . x over this thread's channels for u < 31 (rows <= 31; rows past the last load
// the last row again, never read), v[31] += x . x; x: the slice xs [cs] times xg (null: 1).
__device__ __forceinline__ void dots_and_squares(const float* W, int rows, int d, int c0, int cs, const float* xs,
                                                 const float* xg, float (&v)[kRed]) {
#pragma unroll
    for (int u = 0; u < kRed; ++u) v[u] = 0.0f;
    for (int k = threadIdx.x; k < cs; k += blockDim.x) {
        const float x = xs[k];
        const float y = xg ? x * xg[k] : x;
        if (W) {  // 16 loads in flight, then 15
            const float* wk = W + c0 + k;
            float l[16];
#pragma unroll
            for (int u = 0; u < 16; ++u) l[u] = __ldg(wk + size_t(min(u, rows - 1)) * d);
#pragma unroll
            for (int u = 0; u < 16; ++u) v[u] += l[u] * y;
#pragma unroll
            for (int u = 16; u < kRed - 1; ++u) l[u - 16] = __ldg(wk + size_t(min(u, rows - 1)) * d);
#pragma unroll
            for (int u = 16; u < kRed - 1; ++u) v[u] += l[u - 16] * y;
        }
        v[kRed - 1] += x * x;
    }
}

// M = rules::hc_sinkhorn's result with one lane per element (hc * hc <= 32): every element, row
// sum and column sum is the same sequence of operations as in the rule (sums in index order), so
// the bits are the rule's. Lanes of warp 0 only; writes M_out [hc * hc].
__device__ void sinkhorn_lanes(const float* static_res, float dyn_scale, const float* dyn, int hc, int iters,
                               float* M_out) {
    const int lane = threadIdx.x & 31, n = hc * hc;
    const int e = lane < n ? lane : n - 1, i = e / hc, jj = e % hc;
    float m = static_res[e] + dyn_scale * dyn[2 * hc + e];
    float mx = -INFINITY;
    for (int k = 0; k < n; ++k) {
        const float v = __shfl_sync(0xffffffffu, m, k);
        mx = mx < v ? v : mx;
    }
    m = expf(m - mx);
    for (int it = 0; it < iters; ++it) {
        float s = 0.0f;
        for (int c = 0; c < hc; ++c) s += __shfl_sync(0xffffffffu, m, i * hc + c);
        m /= s;
        s = 0.0f;
        for (int r = 0; r < hc; ++r) s += __shfl_sync(0xffffffffu, m, r * hc + jj);
        m /= s;
    }
    if (lane < n) M_out[lane] = m;
}

struct WarpSync {
    __device__ void operator()() const { __syncwarp(); }
};

// The router tail of token j (warp 0 of the token's block 0; pos the step's position, token
// its id, read at the kernel's start), each rule shared by the lanes: scale the logits by inv,
// rules::route_from_logits on shared copies (a lane per expert's score and rank), publish the
// token's ids / weights; the token that finishes last (an atomic count; at w = 1 the only one)
// lays out the step's MoE table from every token's ids (rules::moe_columns, a lane per expert;
// the slots by lane 0) and counts the routed experts' bytes and calls.
__device__ void route_token(const HcStepArgs& a, int w, int j, int pos, int token, float* logits, float inv,
                            const float* bias, float* scratch, int32_t* ids_sh, float* wts_sh, int32_t* all_ids,
                            int32_t* base, int32_t* count) {
    const int E = a.n_experts, K = a.top_k, lane = threadIdx.x & 31;
    for (int e = lane; e < E; e += 32) logits[e] = logits[e] * inv;
    __syncwarp();
    rules::route_from_logits(logits, bias, a.tid2eid, token, E, K, a.routed_scale, ids_sh, wts_sh, scratch, lane, 32,
                             WarpSync{});
    __syncwarp();
    for (int k = lane; k < K; k += 32) {
        a.ids[size_t(j) * K + k] = ids_sh[k];
        a.rwts[size_t(j) * K + k] = wts_sh[k];
        if (a.rid) {
            a.rid[a.route_off + size_t(pos + j) * K + k] = ids_sh[k];
            a.rw[a.route_off + size_t(pos + j) * K + k] = wts_sh[k];
        }
    }
    if (w > 1) {  // the last token to finish lays out the table
        __threadfence();  // every lane's ids before the count (threadFenceReduction's pattern)
        __syncwarp();
        unsigned prev = 0;
        if (lane == 0) prev = atomicAdd(a.moe.done, 1u);
        prev = __shfl_sync(0xffffffffu, prev, 0);
        if (prev != unsigned(w - 1)) return;
        __threadfence();
        const volatile int32_t* ids = a.ids;
        for (int i = lane; i < w * K; i += 32) all_ids[i] = ids[i];
        if (lane == 0) *a.moe.done = 0u;
    } else {
        for (int k = lane; k < K; k += 32) all_ids[k] = ids_sh[k];
    }
    __syncwarp();
    const DevMoe& moe = a.moe;
    rules::moe_columns(all_ids, w, K, E, moe.tok_of_col, moe.col_of, base, count, lane, 32, WarpSync{});
    // The slot table: slot 0 the shared expert, then the used experts in index order, a lane per
    // expert (E <= 31): its slot is 1 + the used experts below it (a ballot's popcount).
    const int S = moe.max_slots;
    int32_t* mat = moe.slots + 1;
    int32_t* sbase = moe.slots + 1 + S;
    int32_t* scount = moe.slots + 1 + 2 * S;
    const bool used = lane < E && count[lane] > 0;
    const unsigned m = __ballot_sync(0xffffffffu, used);
    if (used) {
        const int n = 1 + __popc(m & ((1u << lane) - 1u));
        mat[n] = 1 + lane;
        sbase[n] = base[lane];
        scount[n] = count[lane];
    }
    if (lane != 0) return;
    const int routed = __popc(m);
    mat[0] = 0;
    sbase[0] = 0;
    scount[0] = w;
    moe.slots[0] = 1 + routed;
    atomicAdd(moe.counters, (unsigned long long)routed * moe.expert_bytes);
    atomicAdd(moe.counters + 1, (unsigned long long)routed * 2);
}

// grid (C, w), cluster (C, 1, 1), block hc_threads(d / C); dynamic shared: Xs [hc, cs] (this
// slice of the token's new streams), xs [cs] (the mean, then x_in, then the normed x_in).
__global__ void __launch_bounds__(kHcThreads) k_hc_step(HcStepArgs a, int w) {
    cg::cluster_group cl = cg::this_cluster();
    const int C = int(cl.num_blocks()), b = int(cl.block_rank()), j = blockIdx.y;
    const int d = a.d, hc = a.hc, cs = d / C, c0 = b * cs;
    const int rows = 2 * hc + hc * hc;
    const bool pre_out = a.out == HcOut::kPre;
    extern __shared__ float smem[];
    float* Xs = smem;
    float* xs = smem + size_t(hc) * cs;
    float* gain = xs + cs;  // [cs] the norm's slice
    __shared__ float sh[32], slot[1];
    __shared__ float wpart[kMaxWarps * kRed], red_a[kRed], red_b[kRed], dyn[kRed], logits[kRed];
    __shared__ float pmix[kMaxHc], Mmix[kMaxHc * kMaxHc], wk[kMaxTopK], pre[kMaxHc], post[kMaxHc], hcw[kMaxHc];
    __shared__ int ck[kMaxTopK];
    __shared__ float bias[kMaxExperts], rscratch[2 * kMaxExperts], wts_sh[kMaxTopK];
    __shared__ int32_t ids_sh[kMaxTopK], all_ids[kMaxStep * kMaxTopK], base_sh[kMaxExperts], count_sh[kMaxExperts];
    // Before the wait: weights (no kernel writes them) into L2 and shared memory.
    if (pre_out) {
        prefetch_rows(a.p.w_dyn, rows, d, c0, cs);
        if (a.router) prefetch_rows(a.router, a.n_experts, d, c0, cs);
    }
    for (int k = threadIdx.x; k < cs; k += blockDim.x) gain[k] = a.norm[c0 + k];
    if (a.router)
        for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x) bias[e] = a.router_bias[e];
    if (!pre_out)
        for (int i = threadIdx.x; i < hc; i += blockDim.x) hcw[i] = a.hc_final[i];
    pdl_begin();
    // The router's position and token id, loaded now so the tail does not wait on them (the id
    // only where a hash layer needs it).
    const bool router_warp = pre_out && a.router && b == 0 && threadIdx.x < 32;
    const int rpos = router_warp ? *a.pos : 0;
    const int rtoken = router_warp && a.tid2eid != nullptr ? a.tokens[rpos + j] : 0;
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
    }
    __syncthreads();
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
#pragma unroll
            for (int i = 0; i < kMaxHc; ++i) x[i] = i < hc ? X[size_t(i) * d + ch] : 0.0f;
#pragma unroll
            for (int i = 0; i < kMaxHc; ++i) {
                if (i >= hc) break;
                float acc = 0.0f;
#pragma unroll
                for (int c = 0; c < kMaxHc; ++c)
                    if (c < hc) acc += Mmix[i * hc + c] * x[c];
                acc += pmix[i] * o;
                Xs[i * cs + k] = acc;
                X[size_t(i) * d + ch] = acc;
                sum += acc;
            }
        }
        xs[k] = sum * inv_hc;
    }

    // 2. The consumer's x_in (and, for a pre, dyn = (w_dyn . mean) / rms(mean) first: the dots
    // and the sum of squares in one cluster reduction).
    float inv;
    if (pre_out) {
        float v[kRed];
        dots_and_squares(a.p.w_dyn, rows, d, c0, cs, xs, nullptr, v);
        cluster_reduce(cl, v, wpart, red_a, dyn);
        const float inv0 = 1.0f / sqrtf(dyn[kRed - 1] / float(d) + a.eps);
        if (threadIdx.x < 32) {  // warp 0: one lane per dyn row, then per stream
            for (int r = threadIdx.x; r < rows; r += 32) dyn[r] = dyn[r] * inv0;
            __syncwarp();
            rules::hc_pre_post(a.p.static_pre, a.p.static_post, a.p.dyn_scale, dyn, hc, pre, post, int(threadIdx.x), 32);
        }
        __syncthreads();
        if (b == 0)
            for (int i = threadIdx.x; i < hc; i += blockDim.x) a.post_out[size_t(j) * hc + i] = post[i];
        for (int k = threadIdx.x; k < cs; k += blockDim.x) {
            float s = 0.0f;
            for (int i = 0; i < hc; ++i) s += pre[i] * Xs[i * cs + k];
            xs[k] = s;
        }
        // The rms of x_in and, with a router, its logits (router . (x_in * gain)) / rms(x_in).
        dots_and_squares(a.router, a.n_experts, d, c0, cs, xs, gain, v);
        cluster_reduce(cl, v, wpart, red_b, logits);
        inv = 1.0f / sqrtf(logits[kRed - 1] / float(d) + a.eps);
    } else {
        float q = 0.0f;
        for (int k = threadIdx.x; k < cs; k += blockDim.x) {
            float s = 0.0f;
            for (int i = 0; i < hc; ++i) s += hcw[i] * Xs[i * cs + k];
            xs[k] = s;
            q += s * s;
        }
        if (j == w - 1)
            for (int i = 0; i < hc; ++i)
                for (int k = threadIdx.x; k < cs; k += blockDim.x) a.hc_streams[size_t(i) * d + c0 + k] = Xs[i * cs + k];
        inv = 1.0f / sqrtf(cluster_sum(cl, q, sh, slot) / float(d) + a.eps);
    }
    for (int k = threadIdx.x; k < cs; k += blockDim.x) xs[k] = xs[k] * inv * gain[k];
    __syncthreads();

    // 3. Routing by warp 0 of block 0, M (Sinkhorn) by warp 0 of the last block, while the
    // block's other warps quantize x_in.
    const bool sink_block = pre_out && b == C - 1;
    if (router_warp)
        route_token(a, w, j, rpos, rtoken, logits, inv, bias, rscratch, ids_sh, wts_sh, all_ids, base_sh, count_sh);
    if (sink_block && threadIdx.x < 32)
        sinkhorn_lanes(a.p.static_res, a.p.dyn_scale, dyn, hc, a.sinkhorn_iters, a.M_out + size_t(j) * hc * hc);
    const int first_warp = (pre_out && a.router && b == 0) || sink_block ? 1 : 0;
    block_quantize_row(xs, cs, a.xq + size_t(j) * d + c0, a.xd + (size_t(j) * d + c0) / 32, first_warp);
    cl.sync();  // no block leaves while another may still read its shared memory
}

}  // namespace

std::string hc_shape_error(int hc_mult, int n_experts, int top_k) {
    auto above = [](const char* key, int got, int limit) {
        return std::string(key) + " " + std::to_string(got) + " above " + std::to_string(limit) +
               " is not supported on the GPU";
    };
    if (hc_mult > kMaxHc) return above("hc_mult", hc_mult, kMaxHc);
    if (n_experts > kMaxExperts) return above("n_experts", n_experts, kMaxExperts);
    if (top_k > kMaxTopK) return above("top_k", top_k, kMaxTopK);
    return {};
}

void launch_hc_step(const HcStepArgs& a, int w, cudaStream_t s) {
    if (const std::string why = hc_shape_error(a.hc, a.router ? a.n_experts : 0, a.top_k); !why.empty())
        throw std::invalid_argument("hc_step: " + why);
    if (w < 1 || w > kMaxStep)
        throw std::invalid_argument("hc_step: step width must be 1.." + std::to_string(kMaxStep) + ", got " +
                                    std::to_string(w));
    static const bool allow16 = [] {  // clusters above 8 blocks are opt-in per kernel; else C <= 8
        const bool ok =
            cudaFuncSetAttribute(k_hc_step, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
        if (!ok) (void)cudaGetLastError();  // clear the refusal; the portable sizes follow
        return ok;
    }();
    const int C = hc_cluster(a.d, allow16), cs = a.d / C;
    const size_t smem = sizeof(float) * (size_t(a.hc) + 2) * cs;
    launch_kernel_cluster(k_hc_step, dim3(C, w), dim3(hc_threads(cs)), smem, unsigned(C), s, a, w);
    check_launch("hc_step");
}

}}  // namespace dq::gpu
