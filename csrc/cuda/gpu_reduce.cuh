// Block-level device helpers of the GPU forward's per-token kernels (gpu_ops.cu, gpu_hc.cu):
// fixed reduction trees (the per-warp xor butterfly, then a butterfly over the warp partials), the
// block RMS norm and the Q8_0 activation quantization with quantize_row_q8_0_ref semantics.
// Every tree depends on the block size only, never on the step width.
#pragma once
#include <cuda_fp16.h>

#include <cmath>

namespace dq { namespace gpu {

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
__device__ __forceinline__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // sh may still be read by a previous call
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    return warp_sum(lane < nw ? sh[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v, float* sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    return warp_max(lane < nw ? sh[lane] : -INFINITY);
}

// y = x / rms(x) * gain over the block (x and y may alias; gain may be null).
__device__ __forceinline__ void block_rms_norm(const float* x, const float* gain, float* y, int n, float eps, float* sh) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i] * x[i];
    const float ms = block_sum(s, sh) / float(n);
    const float inv = 1.0f / sqrtf(ms + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = gain ? x[i] * inv * gain[i] : x[i] * inv;
}

// One Q8_0 block of 32 activations, value v in each lane of a warp: the semantics of
// quantize_row_q8_0_ref / dq::cuda::quantize_q8 (d = amax / 127, q = round(x / d) clamped to
// +-127, the scale stored fp16-rounded as a float); lane l writes qs[l], lane 0 *d.
__device__ __forceinline__ void warp_quantize_block(float v, int lane, int8_t* qs, float* d) {
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = __fdiv_rn(amax, 127.0f);
    float q = dd != 0.0f ? roundf(__fdiv_rn(v, dd)) : 0.0f;
    q = fminf(127.0f, fmaxf(-127.0f, q));
    qs[lane] = static_cast<int8_t>(static_cast<int>(q));
    if (lane == 0) *d = __half2float(__float2half_rn(dd));
}

// Quantizes row x [n] (n % 32 == 0) to Q8_0 activations, one warp per 32-value block
// (warp_quantize_block) by the warps first_warp .. of the block (the others are free for other
// work: a block's value bits do not depend on which warp quantizes them). Call after a barrier
// that publishes x; every thread of those warps must call it.
__device__ __forceinline__ void block_quantize_row(const float* x, int n, int8_t* qs, float* d, int first_warp = 0) {
    const int lane = threadIdx.x & 31, wid = (threadIdx.x >> 5) - first_warp, nw = (blockDim.x >> 5) - first_warp;
    if (wid < 0) return;
    for (int b = wid; b < n / 32; b += nw) warp_quantize_block(x[b * 32 + lane], lane, qs + b * 32, d + b);
}

}}  // namespace dq::gpu
