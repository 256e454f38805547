// CUDA Q8_0 kernels: quantize_q8 (bitwise equal to quantize_row_q8_0_ref), narrow MMVQ in the GPU
// canonical order (q8_kernels.cuh), and an int8 tensor-core MMQ.
//
// Shapes: W is (rows, cols) row-major int8 with fp16 scales per 32-wide block along cols;
//         X is (ncols, cols) int8 with float scales per block; Y is (ncols, rows) float32.
// All float arithmetic that decides result bits is written with explicit _rn intrinsics, so
// fp-contraction settings cannot change it.
#include "q8_kernels.cuh"

#include "launch.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace dq { namespace cuda {

namespace {

constexpr int kQK = 32;  // values per Q8_0 block

thread_local long long t_launches = 0;

// ---------------------------------------------------------------------------------------------
// Loads. Weights stream once: read-only path, no L1 allocation (keeps L1 for the activations,
// which every warp of an SM re-reads), and L2 evict-first, so the ~1 GB stream of a step does not
// push out of L2 what the step's small kernels re-read (activations, the KV window, HC and router
// weights, kernel code). Activations: read-only path, L1-cached.
__device__ __forceinline__ uint64_t l2_evict_first() {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
__device__ __forceinline__ uint2 ld_stream_v2(const int8_t* p) {
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
        : "=r"(v.x), "=r"(v.y)
        : "l"(p), "l"(l2_evict_first()));
    return v;
}
__device__ __forceinline__ unsigned short ld_stream_u16(const uint16_t* p) {
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_evict_first()));
    return v;
}

// Hopper bulk copies (TMA, non-tensor form) into shared memory, completed on an mbarrier that
// counts the bytes: one thread issues a whole row chunk, nothing is held in registers.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(
                     smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(phase)
            : "memory");
    } while (!done);
}
__device__ __forceinline__ void bulk_g2s(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(smem)),
        "l"(gmem), "r"(bytes), "r"(smem_addr(bar)), "l"(l2_evict_first())
        : "memory");
}

__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
    return __half2float(__ushort_as_half(h));  // exact widening
}

// Exact int32 -> fp32 for |v| < 2^22 without I2F (whose throughput is a quarter of the FMA
// pipe's): 0x4B400000 is the bit pattern of 1.5 * 2^23, where one ulp is 1, so the float whose bits
// are 0x4B400000 + v is 1.5 * 2^23 + v exactly, and one subtract leaves v. The integer chains
// start from kBiasBits instead of 0 (the dp4a / mma accumulator input), so the bias costs no add.
constexpr int kBiasBits = 0x4B400000;
__device__ __forceinline__ float biased_int_to_float(int biased) {
    return __fsub_rn(__int_as_float(biased), 12582912.0f);
}

// ---------------------------------------------------------------------------------------------
// quantize_q8: one warp per 32-value block, lane i owns value i. Mirrors quantize_row_q8_0_ref:
// amax = fmax over |x| starting at 0 (NaN-ignoring, exact and order-free), d = amax / 127 (IEEE
// division), stored d = fp16(d) widened back, q = round-half-away(x / d) with the unrounded d,
// clamped to [-127, 127]; an all-zero block stores d = 0 and q = 0.

// fp32_to_fp16 of q8_0.cpp, bit for bit (the fp32 adder does the rounding).
__device__ __forceinline__ unsigned short fp32_to_fp16_bits(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = __fmul_rn(__fmul_rn(fabsf(f), scale_to_inf), scale_to_zero);
    const uint32_t w = __float_as_uint(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = __fadd_rn(__uint_as_float((bias >> 1) + 0x07800000u), base);
    const uint32_t bits = __float_as_uint(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (unsigned short)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

__global__ void quantize_q8_kernel(const float* __restrict__ x, int8_t* __restrict__ qs,
                                   float* __restrict__ d, long long nblocks_total) {
    pdl_begin();
    const long long blk = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks_total) return;  // whole warps exit together
    const int lane = threadIdx.x & 31;
    const float v = x[blk * kQK + lane];
    float amax = fmaxf(0.0f, fabsf(v));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = __fdiv_rn(amax, 127.0f);
    float q = dd != 0.0f ? roundf(__fdiv_rn(v, dd)) : 0.0f;
    q = fminf(127.0f, fmaxf(-127.0f, q));
    qs[blk * kQK + lane] = (int8_t)(int)q;
    if (lane == 0) d[blk] = half_bits_to_float(fp32_to_fp16_bits(dd));
}

// ---------------------------------------------------------------------------------------------
// Narrow MMVQ. A row group of P warps (32 P lanes) owns R consecutive rows and splits K between
// its lanes: per (1024 P)-byte chunk of K, lane t owns block t of the chunk (32 bytes of each row
// and of each activation column; one activation load serves the R rows). Per lane and (row,
// column) the float sequence is the canonical one in the header: one fmul and one fma per block,
// blocks in K order; then the fixed butterfly in each warp and the fixed pairwise tree across the
// group's P warps, whatever R, U, NC, the block size or the mode are. P is part of the order: it
// is a function of cols only (mmvq_warps_per_row).
constexpr int kMmvqMaxWarps = 8;  // warps per CTA at most

// A lane's block: its 32 bytes as two 16-byte halves (a, b). The int32 sum over the block is
// exact, so the halves may be taken in either order; the bulk-copy mode reads them from shared
// memory in a lane-dependent order (see mmvq_tma_kernel), the register mode in address order.
struct Q8Block32 {
    int4 a, b;
};

// The order's per-lane step for one (row, column) and one block: the exact int32 dot of the
// lane's 32 weight bytes with the column's 32 activation bytes (8 chained dp4a, started from the
// conversion's bias), s = w.d * x.d, acc = fma(s, (float)isum, acc). Every mode runs this.
__device__ __forceinline__ void mmvq_lane_step(const Q8Block32& w, float wd, const Q8Block32& x, float xs,
                                               float& acc) {
    int isum = __dp4a(w.a.x, x.a.x, kBiasBits);
    isum = __dp4a(w.a.y, x.a.y, isum);
    isum = __dp4a(w.a.z, x.a.z, isum);
    isum = __dp4a(w.a.w, x.a.w, isum);
    isum = __dp4a(w.b.x, x.b.x, isum);
    isum = __dp4a(w.b.y, x.b.y, isum);
    isum = __dp4a(w.b.z, x.b.z, isum);
    isum = __dp4a(w.b.w, x.b.w, isum);
    acc = __fmaf_rn(__fmul_rn(wd, xs), biased_int_to_float(isum), acc);
}

// Weight loads of the register mode: both halves of a lane's block. One warp instruction touches
// every 32-byte sector of its 1 KB for half of each, so the lines go through L1 (evict-first)
// and the second half's load finds them there instead of fetching the sectors from L2 again.
__device__ __forceinline__ int4 ld_weight_v4(const int8_t* p) {
    int4 v;
    asm("ld.global.nc.L1::evict_first.L2::cache_hint.v4.s32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(l2_evict_first()));
    return v;
}

// One chunk of the row group for every column: column c's activations start at xc[c] (its
// scales at xdc[c]); the lane's block sits at byte xoff / block xboff of every row.
template <int NC, int R>
__device__ __forceinline__ void mmvq_chunk(const Q8Block32 (&wv)[R], const unsigned short (&wd)[R],
                                           const int8_t* const (&xc)[NC], const float* const (&xdc)[NC],
                                           size_t xoff, int xboff, float (&acc)[R][NC]) {
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        const int8_t* xp = xc[c] + xoff;
        const Q8Block32 xv{__ldg(reinterpret_cast<const int4*>(xp)), __ldg(reinterpret_cast<const int4*>(xp + 16))};
        const float xs = __ldg(xdc[c] + xboff);
#pragma unroll
        for (int r = 0; r < R; ++r) mmvq_lane_step(wv[r], half_bits_to_float(wd[r]), xv, xs, acc[r][c]);
    }
}

// Pairwise tree over n consecutive values at stride `stride`: (p0 + p1) + (p2 + p3) for n = 4.
template <int N>
__device__ __forceinline__ float pairwise_sum(const float* p, int stride) {
    if constexpr (N == 1) {
        return p[0];
    } else {
        return __fadd_rn(pairwise_sum<N / 2>(p, stride), pairwise_sum<N / 2>(p + (N / 2) * stride, stride));
    }
}

// The order's warp step: the xor butterfly (offsets 16, 8, 4, 2, 1; each step v + shfl(v)).
__device__ __forceinline__ float warp_butterfly(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The order's tail, the one reduce-and-store of every MMVQ kernel (it decides the output bits):
// each accumulator's xor butterfly in its warp, the warp partials through shared memory, then
// one thread per (row, column) adds the row group's P warp partials in the fixed pairwise tree
// and hands the sum to store(r, c, v). acc holds columns [c0, c0 + NCH) of the group's R rows
// (NCH < NC when copies of the group split the columns); part is [P per group][R][NC] from
// warp gwarp0 on; t is the thread's lane within its group copy (32 P lanes) and sidx its index
// among all the group's threads (those below R * NC store).
// The acc are reset to 0 for the next row group. A caller that refills part afterwards
// synchronizes first.
template <int NC, int NCH, int R, int P, class Store>
__device__ __forceinline__ void mmvq_reduce_store(float (&acc)[R][NCH], float (*part)[R][NC], int gwarp0, int t,
                                                  int c0, int sidx, Store store) {
    const int lane = threadIdx.x & 31, warp = gwarp0 + (t >> 5);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NCH; ++c) {
            const float v = warp_butterfly(acc[r][c]);
            if (lane == 0) part[warp][r][c0 + c] = v;
            acc[r][c] = 0.0f;
        }
    if constexpr (P > 1 || NCH < NC) __syncthreads();
    if (sidx < R * NC) {
        const int r = sidx / NC, c = sidx % NC;
        store(r, c, pairwise_sum<P>(&part[gwarp0][r][c], R * NC));
    }
}

// MODE 0 (register streaming) for one row group: each lane loads U chunks' blocks of its R rows,
// then uses them. Any shape with cols % 32 == 0. ready(xc, xdc) is called once by every thread,
// before any activation is read or y written (kEarly: after the first weight loads are issued): it
// waits for what the activations need (the PDL wait) and sets column c's activations to start
// at xc[c] (scales xdc[c]). store(r, c, v) writes row row0 + r of column c. part: the CTA's
// [warps][R][NC] partials.
template <int NC, int R, int U, int P, bool kEarly, class Ready, class Store>
__device__ __forceinline__ void mmvq_rows(const int8_t* __restrict__ wq, const uint16_t* __restrict__ wdp,
                                          Ready ready, float (*part)[R][NC], int rows, int cols, Store store) {
    constexpr int kLanes = 32 * P;
    constexpr int kChunkBlocks = kLanes;  // a lane owns one block per chunk
    constexpr int kChunkBytes = kQK * kChunkBlocks;
    const int grp = threadIdx.x / kLanes;               // row group within the CTA
    const int t = threadIdx.x % kLanes;                 // lane within the row group
    const long long row0 = ((long long)blockIdx.x * (blockDim.x / kLanes) + grp) * R;
    const bool active = row0 < rows;                    // idle groups still reach the barrier
    const int nb = cols / kQK;
    const int nfull = active ? nb / kChunkBlocks : 0;   // chunks whose blocks all exist
    const int nchunks = active ? (nb + kChunkBlocks - 1) / kChunkBlocks : 0;
    const int lo = t * kQK;                             // this lane's byte offset within a chunk

    const int8_t* wrow[R];
    const uint16_t* drow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        long long row = row0 + r < rows ? row0 + r : rows - 1;  // tail rows: load, don't store
        wrow[r] = wq + size_t(row) * cols + lo;
        drow[r] = wdp + size_t(row) * nb + t;
    }
    float acc[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;

    auto load = [&](Q8Block32 (&wv)[R], unsigned short (&wd)[R], int ch) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int8_t* p = wrow[r] + size_t(ch) * kChunkBytes;
            wv[r] = Q8Block32{ld_weight_v4(p), ld_weight_v4(p + 16)};
            wd[r] = ld_stream_u16(drow[r] + ch * kChunkBlocks);
        }
    };
    const int8_t* xc[NC];
    const float* xdc[NC];
    int ch = 0;
    // kEarly: the first chunks (U of them, or the first one when fewer are full) are loaded
    // before ready(); then the same chunk sequence as the loops below, so the same bits.
    if constexpr (!kEarly) {
        ready(xc, xdc);
    } else if (U <= nfull) {
        Q8Block32 wv[U][R];
        unsigned short wd[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u) load(wv[u], wd[u], u);
        ready(xc, xdc);
#pragma unroll
        for (int u = 0; u < U; ++u)
            mmvq_chunk<NC, R>(wv[u], wd[u], xc, xdc, size_t(u) * kChunkBytes + lo, u * kChunkBlocks + t, acc);
        ch = U;
    } else if (nchunks > 0) {
        const bool mine = t < nb;
        Q8Block32 wv[R];
        unsigned short wd[R];
        if (mine) load(wv, wd, 0);
        ready(xc, xdc);
        if (mine) mmvq_chunk<NC, R>(wv, wd, xc, xdc, size_t(lo), t, acc);
        ch = 1;
    } else {
        ready(xc, xdc);  // lanes of an idle group still wait before anything is stored
    }
    for (; ch + U <= nfull; ch += U) {
        Q8Block32 wv[U][R];
        unsigned short wd[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u) load(wv[u], wd[u], ch + u);
#pragma unroll
        for (int u = 0; u < U; ++u)
            mmvq_chunk<NC, R>(wv[u], wd[u], xc, xdc, size_t(ch + u) * kChunkBytes + lo, (ch + u) * kChunkBlocks + t,
                              acc);
    }
    for (; ch < nchunks; ++ch) {  // the rest, one chunk at a time, same per-lane order
        if (ch * kChunkBlocks + t < nb) {
            Q8Block32 wv[R];
            unsigned short wd[R];
            load(wv, wd, ch);
            mmvq_chunk<NC, R>(wv, wd, xc, xdc, size_t(ch) * kChunkBytes + lo, ch * kChunkBlocks + t, acc);
        }
    }
    mmvq_reduce_store<NC, NC, R, P>(acc, part, grp * P, t, 0, t, [&](int r, int c, float v) {
        if (row0 + r < rows) store(r, c, row0 + r, v);
    });
}

// MODE 0 kernel: columns X [ncols, cols] contiguous, y [ncols, rows].
template <int NC, int R, int U, int P>
__global__ void mmvq_kernel(const int8_t* __restrict__ wq, const uint16_t* __restrict__ wdp,
                            const int8_t* __restrict__ xq, const float* __restrict__ xd,
                            float* __restrict__ y, int rows, int cols) {
    __shared__ float part[kMmvqMaxWarps][R][NC];
    const int nb = cols / kQK;
    pdl_begin();
    auto ready = [&](const int8_t* (&xc)[NC], const float* (&xdc)[NC]) {
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            xc[c] = xq + size_t(c) * cols;
            xdc[c] = xd + size_t(c) * nb;
        }
    };
    mmvq_rows<NC, R, U, P, false>(wq, wdp, ready, part, rows, cols,
                           [&](int, int c, long long row, float v) { y[size_t(c) * rows + row] = v; });
}

// Grouped MODE 0 (MoE): blockIdx.y is a slot of the device table (slots [0] n, then mat[S],
// base[S], count[S]); slot s applies matrix mat[s] to columns base[s] .. base[s] + count[s] - 1,
// column j's activations being row x_row[j] of X (x_row null: row j) and its output row j of
// y [*, rows]. Blocks of slots past n exit at once. Every (row, column) takes mode 0's sequence,
// so each column is bitwise equal to a 1-column mmvq call of its matrix on it.
constexpr int kGroupWarps = 4;  // warps per CTA of the grouped kernel: 4 / P row groups
// Occupancy floor of five CTAs per SM (20 warps; 96 registers). Unbounded, the 4-column form
// took 130 registers, room for three CTAs: H200 q4 1426 us/step; bounded for four (128 registers)
// 1321, for five (96, a 12-byte spill) 1270, for six (80, 76 bytes of spill) 1293. The 1-column
// form took 88 registers unbounded (five CTAs; q1 848 us/step); bounded for five it takes 96 and
// q1 ran 810, for four (128) 809, for six (80) 837.
template <int NCMAX, int R, int U, int P>
__global__ void __launch_bounds__(32 * kGroupWarps, 5) mmvq_group_kernel(const int8_t* const* __restrict__ mqs, const uint16_t* const* __restrict__ md,
                                  const int32_t* __restrict__ slots, int max_slots, const int32_t* __restrict__ x_row,
                                  const int8_t* __restrict__ xq, const float* __restrict__ xd,
                                  float* __restrict__ y, int rows, int cols, int lead) {
    __shared__ float part_raw[kMmvqMaxWarps * R * NCMAX];
    const int s = blockIdx.y;
    // Slot 0 known before the step (lead > 0: matrix 0 over columns 0 .. lead - 1): its blocks
    // load their first weights before the PDL wait; every other slot is read from the table after it.
    // One-column form only: with the early path the 4-column form spilled 24/76 bytes (none
    // without), and q4 ran 1150 -> 1135 us/step without it there (H200, 2 December).
    constexpr bool kEarlyForm = NCMAX == 1;
    const bool early = kEarlyForm && s == 0 && lead > 0;
    if (!early) {
        pdl_begin();
        if (s >= slots[0]) return;  // the whole block: no barrier reached
    }
    const int mat = early ? 0 : slots[1 + s];
    const int base = early ? 0 : slots[1 + max_slots + s];
    const int count = early ? lead : slots[1 + 2 * max_slots + s];
    const int nb = cols / kQK;
    const int8_t* wq = mqs[mat];
    const uint16_t* wd = md[mat];
    auto run = [&](auto nc_t) {
        constexpr int NC = decltype(nc_t)::value;
        auto ready = [&](const int8_t* (&xc)[NC], const float* (&xdc)[NC]) {
            if (early) pdl_begin();
            const int32_t* xr = after_wait(x_row);
            const int8_t* xqw = after_wait(xq);
            const float* xdw = after_wait(xd);
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                const int row = xr ? xr[base + c] : base + c;
                xc[c] = xqw + size_t(row) * cols;
                xdc[c] = xdw + size_t(row) * nb;
            }
        };
        mmvq_rows<NC, R, U, P, kEarlyForm>(wq, wd, ready, reinterpret_cast<float (*)[R][NC]>(part_raw), rows, cols,
                               [&](int, int c, long long r, float v) { y[size_t(base + c) * rows + r] = v; });
    };
    switch (count) {
        case 1: run(std::integral_constant<int, 1>{}); break;
        case 2: if constexpr (NCMAX >= 2) run(std::integral_constant<int, 2>{}); break;
        case 3: if constexpr (NCMAX >= 3) run(std::integral_constant<int, 3>{}); break;
        default: if constexpr (NCMAX >= 4) run(std::integral_constant<int, 4>{}); break;
    }
}

using MmvqFn = void (*)(const int8_t*, const uint16_t*, const int8_t*, const float*, float*, int,
                        int);

template <int R, int U, int P>
MmvqFn mmvq_fn(int nc) {
    switch (nc) {
        case 1: return mmvq_kernel<1, R, U, P>;
        case 2: return mmvq_kernel<2, R, U, P>;
        case 3: return mmvq_kernel<3, R, U, P>;
        case 4: return mmvq_kernel<4, R, U, P>;
        case 5: return mmvq_kernel<5, R, U, P>;
        case 6: return mmvq_kernel<6, R, U, P>;
        case 7: return mmvq_kernel<7, R, U, P>;
        default: return mmvq_kernel<8, R, U, P>;
    }
}

// MODE 3 (bulk copy): a U-stage ring in shared memory; a stage holds G consecutive chunks of each
// of the R rows (G * 4096 contiguous bytes per row at P = 4) and their scales, filled by Hopper
// bulk copies (cp.async.bulk: one thread issues the stage, completion counted in bytes on its
// mbarrier). Nothing in flight holds a register. A CTA is CS copies of the row group's 32 P
// lanes: copy h plays every lane's part for the columns [h NC/CS, (h + 1) NC/CS), reading the
// same weight blocks from the stage, so each (row, column) accumulator takes exactly mode 0's
// sequence and the butterfly and warp tree are unchanged (CS only trades registers per thread for
// threads). The activations of the next chunk are loaded while the current one is used. Needs
// 16-byte aligned qs and d and nb % 8 == 0 (every stage's scale run is a multiple of 16 bytes).
template <int NC, int R, int U, int G, int P, int CS>
__global__ void __launch_bounds__(32 * P * CS) mmvq_tma_kernel(const int8_t* __restrict__ wq,
                                                               const uint16_t* __restrict__ wdp,
                                                               const int8_t* __restrict__ xq,
                                                               const float* __restrict__ xd,
                                                               float* __restrict__ y, int rows, int cols) {
    static_assert(NC % CS == 0, "the column split must divide the columns");
    constexpr int NCH = NC / CS;               // columns per thread
    constexpr int kLanes = 32 * P;
    constexpr int kChunkBlocks = kLanes;       // a lane owns one block per chunk
    constexpr int kChunkBytes = kQK * kChunkBlocks;
    constexpr int kStageQ = G * kChunkBytes;   // qs bytes per row and stage
    constexpr int kStageB = G * kChunkBlocks;  // scales per row and stage
    constexpr int kStageBytes = R * (kStageQ + 2 * kStageB);
    __shared__ float part[P][R][NC];
    __shared__ uint64_t full[U];
    extern __shared__ __align__(128) unsigned char ring[];  // [U][R qs runs | R scale runs]
    const int t = threadIdx.x % kLanes;        // the lane whose part this thread plays
    const int c0 = (threadIdx.x / kLanes) * NCH;  // its first column
    // Persistent: this CTA takes row groups blockIdx.x, blockIdx.x + gridDim.x, ... and streams
    // all their stages through one ring (stage q of its sequence is chunk group q % ngroups of
    // its row group q / ngroups), so the ring stays full across row groups and the grid has no
    // partial last wave. Each row's sequence of operations is unchanged.
    const int nb = cols / kQK;
    const int nchunks = (nb + kChunkBlocks - 1) / kChunkBlocks;
    const int ngroups = (nchunks + G - 1) / G;
    const int nrowgroups = (rows + R - 1) / R;
    const int nmine = (nrowgroups - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
    const int nq = nmine * ngroups;  // stages in this CTA's sequence
    auto row0_of = [&](int i) { return (long long)(blockIdx.x + (long long)i * gridDim.x) * R; };
    const int lo = t * kQK;
    // The lane reads its two halves in the order h, 16 - h with h = 16 * bit 2 of the lane, so
    // each 8-lane phase of a 16-byte shared-memory load covers all 32 banks (lane t's first half
    // sits at bank (8 t + h / 4) mod 32). The activations are read in the same order.
    const int h = ((t >> 2) & 1) * 16;
    auto stage_q = [&](int s, int r) { return ring + size_t(s) * kStageBytes + size_t(r) * kStageQ; };
    auto stage_d = [&](int s, int r) {
        return reinterpret_cast<uint16_t*>(ring + size_t(s) * kStageBytes + size_t(R) * kStageQ) + r * kStageB;
    };
    auto issue = [&](int s, int q) {  // thread 0 only
        const int g = q % ngroups;
        const long long row0 = row0_of(q / ngroups);
        const int b0 = g * kStageB, cb = min(kStageB, nb - b0);
        mbar_expect_tx(&full[s], uint32_t(R * cb * (kQK + 2)));
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long row = row0 + r < rows ? row0 + r : rows - 1;  // tail rows: load, don't store
            bulk_g2s(stage_q(s, r), wq + size_t(row) * cols + size_t(b0) * kQK, uint32_t(cb * kQK), &full[s]);
            bulk_g2s(stage_d(s, r), wdp + size_t(row) * nb + b0, uint32_t(cb * 2), &full[s]);
        }
    };
    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < U; ++s) mbar_init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#pragma unroll
        for (int s = 0; s < U; ++s)
            if (s < nq) issue(s, s);
    }
    // The first U stages read weights only (no kernel writes them), so they are issued before
    // the wait for the previous grid: they stream while it finishes. The activations and y wait.
    pdl_begin();
    xq = after_wait(xq);
    xd = after_wait(xd);
    float acc[R][NCH];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NCH; ++c) acc[r][c] = 0.0f;
    // The order's tail (mmvq_reduce_store, one row group per CTA in CS copies); the
    // accumulators restart for the next row group. The last barrier keeps the next row group's
    // butterfly from overwriting part before it is read.
    auto reduce_store = [&](long long row0) {
        mmvq_reduce_store<NC, NCH, R, P>(acc, part, 0, t, c0, int(threadIdx.x), [&](int r, int c, float v) {
            if (row0 + r < rows) y[size_t(c) * rows + row0 + r] = v;
        });
        __syncthreads();
    };
    // kFull: every chunk of the row and every stage is full (cols a multiple of the stage's
    // bytes, the shapes mode 3 is tuned for), so the loop needs no per-lane block checks.
    auto run = [&](auto full_t) {
        constexpr bool kFull = decltype(full_t)::value;
        auto block_exists = [&](int ch) {
            return kFull ? ch < nchunks : ch < nchunks && ch * kChunkBlocks + t < nb;
        };
        auto load_x = [&](int ch, Q8Block32 (&v)[NCH], float (&sc)[NCH]) {
            if (block_exists(ch)) {
#pragma unroll
                for (int c = 0; c < NCH; ++c) {
                    const int8_t* xp = xq + size_t(c0 + c) * cols + size_t(ch) * kChunkBytes + lo;
                    v[c] = Q8Block32{__ldg(reinterpret_cast<const int4*>(xp + h)),
                                     __ldg(reinterpret_cast<const int4*>(xp + (16 - h)))};
                    sc[c] = __ldg(xd + size_t(c0 + c) * nb + ch * kChunkBlocks + t);
                }
            }
        };
        Q8Block32 xv[NCH];
        float xs[NCH];
        load_x(0, xv, xs);
        __syncthreads();  // the barriers are initialised
        for (int q = 0, g = 0; q < nq; ++q) {
            const int s = q % U;
            mbar_wait(&full[s], uint32_t((q / U) & 1));
#pragma unroll
            for (int k = 0; k < G; ++k) {
                const int ch = g * G + k;
                Q8Block32 nxv[NCH];
                float nxs[NCH];
                load_x(ch + 1 < nchunks ? ch + 1 : 0, nxv, nxs);  // one chunk ahead (the next row group's first)
                if (kFull || block_exists(ch)) {  // this lane's block exists (the last chunk may be partial)
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const unsigned char* wp = stage_q(s, r) + k * kChunkBytes + lo;
                        const Q8Block32 wv{*reinterpret_cast<const int4*>(wp + h),
                                           *reinterpret_cast<const int4*>(wp + (16 - h))};
                        const float wd = half_bits_to_float(stage_d(s, r)[k * kChunkBlocks + t]);
#pragma unroll
                        for (int c = 0; c < NCH; ++c)  // the canonical step for (row r, column c0 + c)
                            mmvq_lane_step(wv, wd, xv[c], xs[c], acc[r][c]);
                    }
                }
#pragma unroll
                for (int c = 0; c < NCH; ++c) {
                    xv[c] = nxv[c];
                    xs[c] = nxs[c];
                }
            }
            if (q + U < nq) {  // refill this stage once every lane has read it
                __syncthreads();
                if (threadIdx.x == 0) {
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                    issue(s, q + U);
                }
            }
            if (++g == ngroups) {  // the row group is done: the order's tail, then the next one
                reduce_store(row0_of(q / ngroups));
                g = 0;
            }
        }
    };
    // The check-free loop is compiled for 4..7 columns per thread only (measured with the
    // half-block order: at 1-3 and 8 columns its extra registers made the kernel slower).
    // Same per-lane order either way.
    bool ran = false;
    if constexpr (NCH >= 4 && NCH <= 7) {
        if (nb % kChunkBlocks == 0 && nchunks % G == 0) {
            run(std::integral_constant<bool, true>{});
            ran = true;
        }
    }
    if (!ran) run(std::integral_constant<bool, false>{});
}

template <int R, int U, int G, int P, int CS>
MmvqFn mmvq_tma_fn(int nc) {
    if constexpr (CS == 1) {
        switch (nc) {
            case 1: return mmvq_tma_kernel<1, R, U, G, P, 1>;
            case 2: return mmvq_tma_kernel<2, R, U, G, P, 1>;
            case 3: return mmvq_tma_kernel<3, R, U, G, P, 1>;
            case 4: return mmvq_tma_kernel<4, R, U, G, P, 1>;
            case 5: return mmvq_tma_kernel<5, R, U, G, P, 1>;
            case 6: return mmvq_tma_kernel<6, R, U, G, P, 1>;
            case 7: return mmvq_tma_kernel<7, R, U, G, P, 1>;
            default: return mmvq_tma_kernel<8, R, U, G, P, 1>;
        }
    } else {  // even column counts only
        switch (nc) {
            case 2: return mmvq_tma_kernel<2, R, U, G, P, 2>;
            case 4: return mmvq_tma_kernel<4, R, U, G, P, 2>;
            case 6: return mmvq_tma_kernel<6, R, U, G, P, 2>;
            case 8: return mmvq_tma_kernel<8, R, U, G, P, 2>;
            default: return nullptr;
        }
    }
}

constexpr int kTmaWarpsPerRow = 4;  // mode 3 is built for P = 4 only

// Dynamic shared memory of mode 3: U stages of R rows x G chunks, each qs plus fp16 scales.
size_t mmvq_tma_smem(const MmvqConfig& c) {
    constexpr size_t kChunkBytes = kQK * 32 * kTmaWarpsPerRow;   // a row's chunk
    constexpr size_t kChunkScaleBytes = 2 * (kChunkBytes / kQK);  // its fp16 scales
    return size_t(c.unroll) * c.rows_per_warp * std::max(1, c.stage_chunks) * (kChunkBytes + kChunkScaleBytes);
}

// Instantiated variants: mode 0 at every P that mmvq_warps_per_row returns, mode 3 at P = 4.
MmvqFn mmvq_pick(int nc, const MmvqConfig& c, int p) {
#define DQ_MMVQ_CASE(R_, U_)                                                                   \
    if (c.mode == 0 && c.rows_per_warp == R_ && c.unroll == U_)                                \
        return p == 4 ? mmvq_fn<R_, U_, 4>(nc) : p == 2 ? mmvq_fn<R_, U_, 2>(nc) : p == 1 ? mmvq_fn<R_, U_, 1>(nc) : nullptr;
    DQ_MMVQ_CASE(1, 2)
    DQ_MMVQ_CASE(1, 4)
    DQ_MMVQ_CASE(2, 1)
    DQ_MMVQ_CASE(2, 2)
    DQ_MMVQ_CASE(4, 1)
    DQ_MMVQ_CASE(4, 2)
#undef DQ_MMVQ_CASE
    if (p != kTmaWarpsPerRow) return nullptr;
#define DQ_MMVQ_TMA(R_, U_, G_, W_)                                                           \
    if (c.mode == 3 && c.rows_per_warp == R_ && c.unroll == U_ && std::max(1, c.stage_chunks) == G_ && \
        c.warps_per_block == W_)                                                                   \
        return mmvq_tma_fn<R_, U_, G_, kTmaWarpsPerRow, W_ / kTmaWarpsPerRow>(nc);
    DQ_MMVQ_TMA(2, 2, 1, 4)
    DQ_MMVQ_TMA(4, 2, 1, 4)
    DQ_MMVQ_TMA(4, 3, 1, 4)
    DQ_MMVQ_TMA(8, 2, 1, 4)
    DQ_MMVQ_TMA(4, 2, 1, 8)
#undef DQ_MMVQ_TMA
    return nullptr;
}

// Kernel attributes are set on a kernel's first launch only; the lock is held while they are
// set, so no launch of that kernel can run ahead of them.
class OncePerKernel {
public:
    template <class F>
    void run(const void* fn, F&& set) {
        std::lock_guard<std::mutex> lock(mu_);
        if (done_.insert(fn).second) set();
    }

private:
    std::mutex mu_;
    std::set<const void*> done_;
};

// Ask for the largest L1 (the kernels' shared memory is at most a few KB): every CTA of an SM
// re-reads the activations from L1.
void prefer_l1(const void* fn) {
    static OncePerKernel once;
    once.run(fn, [&] {
        if (cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxL1) != cudaSuccess) {
            cudaGetLastError();  // a hint only; clear the error so the launch check does not see it
        }
    });
}

// The bulk-copy mode's ring lives in shared memory but the activations are read through L1,
// which shares the same storage. Ask for just the shared memory that the register-limited number
// of blocks per SM needs, so the rest stays L1 (the driver's default would give shared memory
// everything, and the activations would then come from L2).
void tma_carveout_once(const void* fn, size_t smem, int threads) {
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
        throw std::runtime_error("dq::cuda::mmvq: " + std::to_string(smem) + " bytes of shared memory refused");
    cudaFuncAttributes fa{};
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaFuncGetAttributes(&fa, fn) != cudaSuccess || cudaGetDevice(&dev) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        return;  // a hint only
    }
    const int regs_per_block = std::max(1, fa.numRegs) * threads;
    const int by_regs = std::max(1, prop.regsPerMultiprocessor / regs_per_block);
    const size_t per_block = smem + fa.sharedSizeBytes + prop.reservedSharedMemPerBlock;
    const size_t want = std::min(size_t(prop.sharedMemPerMultiprocessor), per_block * size_t(by_regs));
    const int pct = int((want * 100 + prop.sharedMemPerMultiprocessor - 1) / prop.sharedMemPerMultiprocessor);
    if (cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, std::min(100, pct)) != cudaSuccess)
        cudaGetLastError();
}

// Mode 3's set-up, once per kernel on its first launch (one lock, one lookup per launch): the
// carveout above, then the number of blocks that fit on the device at once for the persistent
// grid (blocks per SM, asked after the carveout is set, times SMs; at least 1).
long long tma_setup(const void* fn, size_t smem, int threads) {
    static std::mutex mu;
    static std::map<const void*, long long> resident;
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = resident.find(fn); it != resident.end()) return it->second;
    tma_carveout_once(fn, smem, threads);
    int per_sm = 0, dev = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem) != cudaSuccess ||
        cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        cudaGetLastError();
        per_sm = 1;
        sms = 1;
    }
    const long long n = std::max(1LL, (long long)std::max(per_sm, 1) * std::max(sms, 1));
    resident.emplace(fn, n);
    return n;
}

void validate(const Q8Weights& w, const Q8Acts& x, const float* y, int max_ncols) {
    if (w.qs == nullptr || w.d == nullptr || x.qs == nullptr || x.d == nullptr || y == nullptr)
        throw std::invalid_argument("dq::cuda: null pointer");
    if (w.rows <= 0 || w.cols <= 0 || w.cols % kQK != 0)
        throw std::invalid_argument("dq::cuda: weight shape must be rows > 0, cols > 0, cols % 32 == 0");
    if (x.cols != w.cols) throw std::invalid_argument("dq::cuda: activation cols != weight cols");
    if (x.ncols < 1 || (max_ncols > 0 && x.ncols > max_ncols))
        throw std::invalid_argument("dq::cuda: ncols out of range (" + std::to_string(x.ncols) + ")");
    if ((reinterpret_cast<uintptr_t>(w.qs) | reinterpret_cast<uintptr_t>(x.qs)) % 16 != 0)
        throw std::invalid_argument("dq::cuda: qs buffers must be 16-byte aligned");
}

// ---------------------------------------------------------------------------------------------
// MMQ: a CTA of kMmqWarps warps computes a 16-row x (8 * NT)-column tile; warp w takes the
// blocks b = w (mod kMmqWarps) and the warps' partial sums are added in warp order at the end.
// One k-step = one Q8_0 block = one mma.sync.m16n8k32 (s8 x s8 -> exact s32) per n-tile.
// The 32 k positions of a block may be permuted freely as long as A and B agree (the block dot
// is an exact integer sum), so lane (g, t) loads the 8 contiguous bytes [8t, 8t + 8) of row g,
// row g + 8 and column g and uses them as the fragment's k = 4t..4t+3 and 16+4t..16+4t+3.
constexpr int kMmqWarps = 4;

template <int NT, int U>
__global__ void __launch_bounds__(32 * kMmqWarps) mmq_kernel(const int8_t* __restrict__ wq,
                                                  const uint16_t* __restrict__ wdp,
                                                  const int8_t* __restrict__ xq,
                                                  const float* __restrict__ xd,
                                                  float* __restrict__ y, int rows, int cols,
                                                  int ncols) {
    pdl_begin();
    __shared__ float part[kMmqWarps - 1][NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const long long row0 = (long long)blockIdx.x * 16;
    const int col0 = blockIdx.y * (8 * NT);
    const int nb = cols / kQK;
    const long long ra = row0 + g < rows ? row0 + g : rows - 1;
    const long long rb = row0 + g + 8 < rows ? row0 + g + 8 : rows - 1;
    const int8_t* wa = wq + size_t(ra) * cols + 8 * t;
    const int8_t* wb = wq + size_t(rb) * cols + 8 * t;
    const uint16_t* da = wdp + size_t(ra) * nb;
    const uint16_t* db = wdp + size_t(rb) * nb;
    const int8_t* xc[NT];
    const float* xdc[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int cb = col0 + 8 * j + g;
        xc[j] = xq + size_t(cb < ncols ? cb : ncols - 1) * cols + 8 * t;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int cc = col0 + 8 * j + 2 * t + e;
            xdc[j][e] = xd + size_t(cc < ncols ? cc : ncols - 1) * nb;
        }
    }
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;

    auto step = [&](const uint2& av, const uint2& bv, unsigned short sa, unsigned short sb, int b) {
        const float fa = half_bits_to_float(sa), fb = half_bits_to_float(sb);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const uint2 xv = __ldg(reinterpret_cast<const uint2*>(xc[j] + size_t(b) * kQK));
            int c0, c1, c2, c3;
            asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
                : "=r"(c0), "=r"(c1), "=r"(c2), "=r"(c3)
                : "r"(av.x), "r"(bv.x), "r"(av.y), "r"(bv.y), "r"(xv.x), "r"(xv.y), "r"(kBiasBits));
            const float x0 = __ldg(xdc[j][0] + b), x1 = __ldg(xdc[j][1] + b);
            acc[j][0] = __fmaf_rn(__fmul_rn(fa, x0), biased_int_to_float(c0), acc[j][0]);
            acc[j][1] = __fmaf_rn(__fmul_rn(fa, x1), biased_int_to_float(c1), acc[j][1]);
            acc[j][2] = __fmaf_rn(__fmul_rn(fb, x0), biased_int_to_float(c2), acc[j][2]);
            acc[j][3] = __fmaf_rn(__fmul_rn(fb, x1), biased_int_to_float(c3), acc[j][3]);
        }
    };
    int b = warp;
    for (; b + kMmqWarps * (U - 1) < nb; b += kMmqWarps * U) {
        uint2 av[U], bv[U];
        unsigned short sa[U], sb[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int bu = b + kMmqWarps * u;
            av[u] = ld_stream_v2(wa + size_t(bu) * kQK);
            bv[u] = ld_stream_v2(wb + size_t(bu) * kQK);
            sa[u] = ld_stream_u16(da + bu);
            sb[u] = ld_stream_u16(db + bu);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) step(av[u], bv[u], sa[u], sb[u], b + kMmqWarps * u);
    }
    for (; b < nb; b += kMmqWarps) {
        const uint2 av = ld_stream_v2(wa + size_t(b) * kQK), bv = ld_stream_v2(wb + size_t(b) * kQK);
        step(av, bv, ld_stream_u16(da + b), ld_stream_u16(db + b), b);
    }
    if (warp > 0) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) part[warp - 1][j * 4 + i][lane] = acc[j][i];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int w = 0; w < kMmqWarps - 1; ++w)
                acc[j][i] = __fadd_rn(acc[j][i], part[w][j * 4 + i][lane]);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int cc = col0 + 8 * j + 2 * t + e;
            if (cc >= ncols) continue;
            if (row0 + g < rows) y[size_t(cc) * rows + row0 + g] = acc[j][e];
            if (row0 + g + 8 < rows) y[size_t(cc) * rows + row0 + g + 8] = acc[j][2 + e];
        }
}

}  // namespace

void split_q8_blocks(const void* blocks, int rows, int cols, int8_t* qs_out, uint16_t* d_out) {
    if (blocks == nullptr || qs_out == nullptr || d_out == nullptr || rows < 0 || cols < 0 ||
        cols % kQK != 0)
        throw std::invalid_argument("dq::cuda::split_q8_blocks: bad arguments");
    const int nb = cols / kQK;
    const unsigned char* p = static_cast<const unsigned char*>(blocks);
    constexpr size_t kBlockBytes = 2 + kQK;  // BlockQ8_0: uint16_t d, int8_t qs[32]
    for (size_t i = 0; i < size_t(rows) * nb; ++i, p += kBlockBytes) {
        std::memcpy(d_out + i, p, 2);
        std::memcpy(qs_out + i * kQK, p + 2, kQK);
    }
}

void quantize_q8(const float* x, int ncols, int cols, int8_t* qs, float* d, cudaStream_t s) {
    if (x == nullptr || qs == nullptr || d == nullptr || ncols < 0 || cols < 0 || cols % kQK != 0)
        throw std::invalid_argument("dq::cuda::quantize_q8: bad arguments");
    const long long nblocks = (long long)ncols * (cols / kQK);
    if (nblocks == 0) return;
    constexpr int kWarps = 8;
    launch_kernel(quantize_q8_kernel, dim3(unsigned((nblocks + kWarps - 1) / kWarps)), dim3(kWarps * 32), 0, s, x, qs, d,
                                                                                      nblocks);
    check_launch("quantize_q8");
}

int mmvq_warps_per_row(int cols) {
    // One block per lane and chunk: 4 warps (128 blocks per chunk) from 4096 columns up, fewer
    // below so that a short row still keeps every lane busy (ds4-gpu's 2048-column matrices).
    const int nb = cols / kQK;
    return nb >= 128 ? 4 : nb >= 64 ? 2 : 1;
}

namespace {
// The register-streaming (mode 0) configuration per ncols: the path for shapes the bulk-copy mode
// does not take (cols < 4096 or % 256 != 0, unaligned scales, few rows below 4 columns).
MmvqConfig mmvq_register_config(int ncols) {
    // H200, 2026-11-29, after the whole-block order: R = 2 at 2..4 columns, R = 4 elsewhere, on
    // 16384 x 16384 and on the ds4-gpu shapes (4096 x 4096, 2048 x 4096, 4096 x 2048) alike; U = 2
    // also where a row has a single chunk. docs/gpu-kernels.md has the sweep.
    return ncols >= 2 && ncols <= 4 ? MmvqConfig{2, 2, 4, 0, 0} : MmvqConfig{4, 2, 4, 0, 0};
}

bool tma_shape_ok(const Q8Weights& w) {
    return reinterpret_cast<uintptr_t>(w.d) % 16 == 0 && (w.cols / kQK) % 8 == 0;
}
}  // namespace

MmvqConfig mmvq_default_config(int ncols) {
    // The fastest measured configuration per ncols (H200, 16384 x 16384 and 32768 x 16384,
    // docs/gpu-kernels.md): the persistent bulk-copy ring (mode 3) at every width. R4U3 at 2 and
    // 4 columns: over 17 sweeps at 16384^2 it was 0.9% faster than R2U2 at 2 columns and level
    // at 4, and at 32768 x 16384 1.2-1.7% faster at both; at 3 columns R2U2 stayed ahead.
    // Every entry computes the same bits.
    switch (ncols) {
        case 1:
        case 3: return {2, 2, 4, 0, 3, 1};
        case 2:
        case 4: return {4, 3, 4, 0, 3, 1};
        case 5:
        case 6: return {4, 2, 4, 0, 3, 1};
        default: return {8, 2, 4, 0, 3, 1};  // 7, 8
    }
}

void mmvq_with_config(const Q8Weights& w, const Q8Acts& x, float* y, const MmvqConfig& cfg,
                      cudaStream_t s) {
    validate(w, x, y, 8);
    const int p = cfg.warps_per_row > 0 ? cfg.warps_per_row : mmvq_warps_per_row(w.cols);
    if (cfg.warps_per_block < p || cfg.warps_per_block > kMmvqMaxWarps ||
        cfg.warps_per_block % p != 0)
        throw std::invalid_argument("dq::cuda::mmvq: warps_per_block must be a multiple of the "
                                    "warps per row, at most 8");
    if (cfg.mode == 3 && p != kTmaWarpsPerRow)
        throw std::invalid_argument("dq::cuda::mmvq: the bulk-copy mode is built for 4 warps per row (cols >= 4096)");
    const MmvqFn fn = mmvq_pick(x.ncols, cfg, p);
    if (fn == nullptr)
        throw std::invalid_argument("dq::cuda::mmvq: no kernel for this configuration");
    if (cfg.mode == 3) {
        if (cfg.warps_per_block != p && !(cfg.warps_per_block == 2 * p && x.ncols % 2 == 0))
            throw std::invalid_argument("dq::cuda::mmvq: the bulk-copy mode runs one row group per block, "
                                        "or two copies of it splitting an even column count");
        if (!tma_shape_ok(w))
            throw std::invalid_argument("dq::cuda::mmvq: the bulk-copy mode needs 16-byte aligned scales "
                                        "and cols % 256 == 0");
        const size_t smem = mmvq_tma_smem(cfg);
        const long long resident = tma_setup(reinterpret_cast<const void*>(fn), smem, cfg.warps_per_block * 32);
        const long long groups = (w.rows + cfg.rows_per_warp - 1) / cfg.rows_per_warp;
        const unsigned grid = unsigned(cfg.persistent ? std::min(groups, resident) : groups);
        launch_kernel(fn, dim3(grid), dim3(cfg.warps_per_block * 32), smem, s, w.qs, w.d, x.qs, x.d, y, w.rows, w.cols);
        check_launch("mmvq");
        return;
    }
    prefer_l1(reinterpret_cast<const void*>(fn));
    const long long groups = (w.rows + cfg.rows_per_warp - 1) / cfg.rows_per_warp;
    const int groups_per_cta = cfg.warps_per_block / p;
    const unsigned grid = unsigned((groups + groups_per_cta - 1) / groups_per_cta);
    launch_kernel(fn, dim3(grid), dim3(cfg.warps_per_block * 32), 0, s, w.qs, w.d, x.qs, x.d, y, w.rows, w.cols);
    check_launch("mmvq");
}

MmvqConfig mmvq_default_config(int ncols, int rows, int cols) {
    // The bulk-copy table where it was measured to win: 4 warps per row, scale runs that bulk
    // copies can take (cols % 256 == 0) and enough row groups to fill the SMs (about 2048).
    // The table's R4U3 at 2 and 4 columns was measured on 16384^2 and larger only; smaller
    // matrices (the ds4-gpu shapes) take R2U2 there, which was measured on them.
    const bool small = (long long)rows * cols < (1LL << 28);
    const MmvqConfig t = small && (ncols == 2 || ncols == 4) ? MmvqConfig{2, 2, 4, 0, 3, 1} : mmvq_default_config(ncols);
    // At 4+ columns it also wins on the ds4-gpu shapes with fewer row groups (4096 x 4096 and
    // 2048 x 4096: 3-6% faster than mode 0); below 4 columns it takes 2048 row groups of 2 rows.
    if (mmvq_warps_per_row(cols) == kTmaWarpsPerRow && (cols / kQK) % 8 == 0 &&
        ((rows + 1) / 2 >= 2048 || ncols >= 4))
        return t;
    return mmvq_register_config(ncols);  // same bits at any R and U
}

void mmvq(const Q8Weights& w, const Q8Acts& x, float* y, cudaStream_t s) {
    validate(w, x, y, 8);
    MmvqConfig c = mmvq_default_config(x.ncols, w.rows, w.cols);
    if (c.mode == 3 && !tma_shape_ok(w)) c = mmvq_register_config(x.ncols);  // unaligned scales
    mmvq_with_config(w, x, y, c, s);
}

long long launch_count() { return t_launches; }

bool pdl_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("DQ_GPU_PDL");
        return v == nullptr || std::string(v) != "0";
    }();
    return on;
}
void check_launch(const char* what) {
    ++t_launches;
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA launch failed (") + what + "): " + cudaGetErrorString(e));
}

namespace {
template <int NCMAX, int R, int U>
void launch_group(const Q8Group& g, const int32_t* slots, int max_slots, int run_slots, const int32_t* x_row,
                  const int8_t* xq, const float* xd, float* y, int lead, cudaStream_t s) {
    const int p = mmvq_warps_per_row(g.cols);
    const long long groups = (g.rows + R - 1) / R;
    const int per_cta = kGroupWarps / p;
    const dim3 grid(unsigned((groups + per_cta - 1) / per_cta), unsigned(run_slots));
    auto args = [&](auto fn) {
        prefer_l1(reinterpret_cast<const void*>(fn));
        launch_kernel(fn, dim3(grid), dim3(kGroupWarps * 32), 0, s, g.qs, g.d, slots, max_slots, x_row, xq, xd, y, g.rows, g.cols, lead);
    };
    if (p == 4) args(mmvq_group_kernel<NCMAX, R, U, 4>);
    else if (p == 2) args(mmvq_group_kernel<NCMAX, R, U, 2>);
    else args(mmvq_group_kernel<NCMAX, R, U, 1>);
    check_launch("mmvq_grouped");
}
}  // namespace

void mmvq_grouped(const Q8Group& g, const int32_t* slots, int max_slots, int run_slots, int max_count,
                  const int32_t* x_row, const int8_t* xq, const float* xd, float* y, cudaStream_t s, int lead) {
    if (g.qs == nullptr || g.d == nullptr || slots == nullptr || xq == nullptr || xd == nullptr || y == nullptr)
        throw std::invalid_argument("dq::cuda::mmvq_grouped: null pointer");
    if (g.rows <= 0 || g.cols <= 0 || g.cols % kQK != 0 || max_slots < 1 || run_slots < 1 || run_slots > max_slots)
        throw std::invalid_argument("dq::cuda::mmvq_grouped: bad shape");
    if (max_count < 1 || max_count > 4) throw std::invalid_argument("dq::cuda::mmvq_grouped: max_count must be 1..4");
    if (lead < 0 || lead > max_count) throw std::invalid_argument("dq::cuda::mmvq_grouped: lead must be 0..max_count");
    // The register-streaming table's row counts (R = 4 at one column, 2 at 2..4); same bits at any R.
    if (max_count == 1) launch_group<1, 4, 2>(g, slots, max_slots, run_slots, x_row, xq, xd, y, lead, s);
    else launch_group<4, 2, 2>(g, slots, max_slots, run_slots, x_row, xq, xd, y, lead, s);
}

void mmq(const Q8Weights& w, const Q8Acts& x, float* y, cudaStream_t s) {
    validate(w, x, y, 0);
    if ((reinterpret_cast<uintptr_t>(w.qs) | reinterpret_cast<uintptr_t>(x.qs)) % 8 != 0)
        throw std::invalid_argument("dq::cuda::mmq: qs buffers must be 8-byte aligned");
    // Column tile: the smallest of 8, 16, 32, 64 that covers ncols (64 beyond).
    const int nt = x.ncols <= 8 ? 1 : x.ncols <= 16 ? 2 : x.ncols <= 32 ? 4 : 8;
    const dim3 grid(unsigned((w.rows + 15) / 16), unsigned((x.ncols + 8 * nt - 1) / (8 * nt)));
    switch (nt) {
        case 1: launch_kernel(mmq_kernel<1, 4>, dim3(grid), dim3(32 * kMmqWarps), 0, s, w.qs, w.d, x.qs, x.d, y, w.rows, w.cols, x.ncols); break;
        case 2: launch_kernel(mmq_kernel<2, 4>, dim3(grid), dim3(32 * kMmqWarps), 0, s, w.qs, w.d, x.qs, x.d, y, w.rows, w.cols, x.ncols); break;
        case 4: launch_kernel(mmq_kernel<4, 4>, dim3(grid), dim3(32 * kMmqWarps), 0, s, w.qs, w.d, x.qs, x.d, y, w.rows, w.cols, x.ncols); break;
        default: launch_kernel(mmq_kernel<8, 4>, dim3(grid), dim3(32 * kMmqWarps), 0, s, w.qs, w.d, x.qs, x.d, y, w.rows, w.cols, x.ncols); break;
    }
    check_launch("mmq");
}

}}  // namespace dq::cuda
