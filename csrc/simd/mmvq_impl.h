// Narrow MMVQ kernel body (canonical order), templated on the int8 dot policy so the AVX2 and
// AVX-512 VNNI files instantiate the same loop. Internal linkage only.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// R rows are processed together (independent FMA chains for ILP); each weight block is
// loaded once and applied to all NC columns. Column c of row n accumulates exactly like
// vec_dot_q8_0_q8_0_ref: per block 8 exact int32 lane sums, s = wd * xd (one fp32 multiply),
// acc = fma(s, isum, acc), canonical horizontal sum at the end.
//
// Dot policy (ISum): `Prep prep(__m256i wq)` once per weight block (shared by all columns),
// `__m256i isum(const Prep&, __m256i xq)` per column, and `transform_x(qs)` applied once per
// call to the activation quants (identity for AVX2; x ^ 0x80 for the VNNI offset trick).
// A packed policy (ISum::Packed, Activations::kPacked) instead takes `pack(qs, out)` once per
// call and `isum(const Prep&, const __m256i* packed)` per column.
#pragma once
#include <algorithm>
#include <cstdint>
#include "q8_0_simd.h"

namespace dq::simd {
namespace {

// Software prefetch of W, chosen once per process (kernel_table.h prefetch_far()):
//  near: prefetcht0 at least 128 blocks (4352 bytes) ahead: the AVX2 tuning measured on Zen 3,
//        kept on CPUs without AVX-512;
//  far:  prefetcht2 (into L2) at least 1024 blocks (~35 KB) ahead, on AVX-512 CPUs (Zen 4 and
//        Intel, where this file runs when the AVX2 path is forced): on the 2.6 GHz Zen 4, 1 column,
//        1536 x 1024 matrices streamed at 1 thread, median of 3 rounds 20.3 -> 25.1 GB/s (probe 32).
constexpr int kMmvqPrefetchBlocks = 128;
constexpr int kMmvqPrefetchBlocksFar = 1024;

inline size_t prefetch_distance(size_t min_blocks, bool far) {
    return std::max(min_blocks, size_t(far ? kMmvqPrefetchBlocksFar : kMmvqPrefetchBlocks));
}

// How the activations reach the row kernel. Both layouts compute the same exact int32 lane sums
// and the same fp32 scale product s = wd * xd (one rounding per row, block and column), so both
// give the canonical bits.
enum class Activations {
    // Q8_0 blocks [c][b]; xd[b * 8 + c]. Per column: vbroadcastss xd, s = wd * xd (vmulps).
    kBlocks,
    // NC <= 4, for a packed dot policy (ISumAvx2Words): each (block, column) packed by ISum::pack
    // into ISum::kPackedVectors aligned 32-byte vectors at [b][c] (pack_activations); xd[b * 8 + l]
    // holds column l % 4 times ISum::kScale in both 128-bit halves (lane_scales). Per block
    // s8 = wd * xd (one vmulps for all columns); per column s = vpermilps(s8, c), an in-lane
    // shuffle.
    kPacked,
};

// Block b of R rows x NC columns into acc: the body of mmvq_rows' block loop, also run
// interleaved with a second product's block by mmvq_pair_row.
template <class ISum, int NC, int R, Activations kAct>
__attribute__((always_inline)) inline void mmvq_block(__m256 (&acc)[R * NC], const BlockQ8_0* const (&wrow)[R],
                                                      int b, intptr_t pfd, bool far, const void* x, const float* xd,
                                                      int nb) {
    typename ISum::Prep prep[R];
    __m256 wd[R];  // kBlocks: fp32(wd) in every lane; kPacked: s8 = wd * xd[b * 8 + lane]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const BlockQ8_0& wb = wrow[r][b];
        // W streams from DRAM once; run ahead of the R interleaved row streams.
        if (far)
            _mm_prefetch(offset_ptr(&wb, pfd), _MM_HINT_T2);
        else
            _mm_prefetch(offset_ptr(&wb, pfd), _MM_HINT_T0);
        prep[r] = ISum::prep(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)));
        if constexpr (kAct == Activations::kPacked)
            wd[r] = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(wb.d))),
                                  _mm256_load_ps(xd + size_t(b) * 8));
        else
            wd[r] = _mm256_set1_ps(_cvtsh_ss(wb.d));
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
        if constexpr (kAct == Activations::kPacked) {
            const __m256i* xp = static_cast<const __m256i*>(x) + (size_t(b) * NC + c) * ISum::kPackedVectors;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m256 isum = _mm256_cvtepi32_ps(ISum::isum(prep[r], xp));
                acc[r * NC + c] = _mm256_fmadd_ps(_mm256_permute_ps(wd[r], c * 0x55), isum, acc[r * NC + c]);
            }
        } else {
            const __m256i xq = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(static_cast<const BlockQ8_0*>(x)[size_t(c) * nb + b].qs));
            const __m256 xdc = _mm256_broadcast_ss(xd + size_t(b) * 8 + c);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m256 isum = _mm256_cvtepi32_ps(ISum::isum(prep[r], xq));
                // s = wd * xd: the same single fp32 rounding as the scalar reference.
                acc[r * NC + c] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], xdc), isum, acc[r * NC + c]);
            }
        }
    }
}

template <class ISum, int NC, int R, bool kCanonicalTree = true, Activations kAct = Activations::kBlocks>
inline void mmvq_rows(const BlockQ8_0* W, int nb, const void* x, const float* xd, float* y,
                      int N, int n0, intptr_t pfd, bool far) {
    static_assert(kAct != Activations::kPacked || NC <= 4, "lane scales hold at most 4 columns");
    // Fully unrolled (pragmas) so GCC keeps the accumulators in registers instead of
    // mirroring the array to the stack on every block.
    __m256 acc[R * NC];
#pragma GCC unroll 16
    for (int i = 0; i < R * NC; ++i) acc[i] = _mm256_setzero_ps();
    const BlockQ8_0* wrow[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wrow[r] = W + size_t(n0 + r) * nb;
    for (int b = 0; b < nb; ++b) mmvq_block<ISum, NC, R, kAct>(acc, wrow, b, pfd, far, x, xd, nb);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) y[size_t(c) * N + n0 + r] = hsum_tree<kCanonicalTree>(acc[r * NC + c]);
}

// Rows per step: enough independent accumulators to hide FMA latency, few enough to stay in
// 16 ymm registers (R * NC accumulators + 2 R prepared weight vectors + R scales). R = 2 at
// NC 3..4 spilled the accumulators to the stack every block (AVX2, 1 GiB matrix, 1 thread:
// ncols 4 ran at 2.0 GB/s while ncols 5 at R = 1 ran at 3.8), so every NC >= 2 takes R = 1
// except NC = 2 (R = 2: 4 accumulators). The thread grain (4) is a multiple of every R.
// This is the choice for W already in L1/L2 (MMQ tiles).
template <int NC>
constexpr int mmvq_rows_per_step() {
    return NC == 1 ? 4 : (NC == 2 ? 2 : 1);
}

// Rows per step when W streams from DRAM (narrow MMVQ). Policies with kSingleStream take one
// row at a time on short rows (nb <= kSingleStreamMaxBlocks), so a thread reads W as one
// sequential stream: on Zen 3 (AVX2, huge-page weights), ds4-mini's K = 1024 rows at R = 4
// (ncols 1) / R = 2 (ncols 2) streamed ~8 GB/s where one row at a time reached ~12, while on
// K = 4096 rows R = 4 was ~10% faster than one row (256-512 MiB of matrices, 1 thread, same
// process interleaved). One row is one FMA chain per column (4 cycles per block).
constexpr int kSingleStreamMaxBlocks = 64;  // K <= 2048

template <class ISum, int NC>
constexpr int mmvq_stream_rows_per_step() {
    return ISum::kSingleStream ? 1 : mmvq_rows_per_step<NC>();
}

// Prepares one group of NC <= 8 activation columns: fp32 scales into xd[b * 8 + c] and, for
// policies that transform X, the transformed blocks into xt. Returns the blocks to read.
template <class ISum>
inline const BlockQ8_0* prepare_group(const BlockQ8_0* x, int nc, int nb, float* xd, BlockQ8_0* xt) {
    load_activation_scales(x, nc, nb, 8, xd);
    if (!ISum::kTransformsX) return x;
    for (size_t i = 0; i < size_t(nc) * nb; ++i) {
        xt[i].d = x[i].d;
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xt[i].qs), ISum::transform_x(q));
    }
    return xt;
}

// Rows [row_begin, row_end) for one prepared group of NC columns, R rows per step. Each row group
// prefetches the same block of a later group (at least kMmvqPrefetchBlocks ahead): a thread's
// rows are one contiguous stream, so this runs ahead across row-group boundaries, where a fixed
// in-row distance stalls at the start of every group of short rows. Past the thread's last row
// the prefetches run on into `next` (kernel_table.h prefetch_offset): the narrow MMVQ passes the
// thread's read-ahead region, MMQ (W L2-resident, rows revisited) nothing.
template <class ISum, int NC, bool kCanonicalTree, int R = mmvq_rows_per_step<NC>(),
          Activations kAct = Activations::kBlocks>
void mmvq_row_range(const QMatrixView& w, const void* x, const float* xd, float* y, int row_begin,
                    int row_end, const ReadAhead& next = {}) {
    const int nb = w.cols / QK8_0;
    const bool far = prefetch_far();
    const size_t pf = prefetch_distance(size_t(R) * nb, far) * sizeof(BlockQ8_0);
    const size_t row = size_t(nb) * sizeof(BlockQ8_0);
    const BlockQ8_0* end = w.blocks + size_t(row_end) * nb;
    int n = row_begin;
    for (; n + R <= row_end; n += R)
        mmvq_rows<ISum, NC, R, kCanonicalTree, kAct>(w.blocks, nb, x, xd, y, w.rows, n,
                                                     prefetch_offset(w.blocks + size_t(n) * nb, R * row, pf, end, next), far);
    for (; n < row_end; ++n)
        mmvq_rows<ISum, NC, 1, kCanonicalTree, kAct>(w.blocks, nb, x, xd, y, w.rows, n,
                                                     prefetch_offset(w.blocks + size_t(n) * nb, row, pf, end, next), far);
}

// Q8_0 blocks [c][b] of NC columns -> the packed dot policy's layout at [b][c]
// (Activations::kPacked; 64-byte aligned scratch, NC * nb * 32 * kPackedVectors bytes).
template <class Packed, int NC>
inline void pack_activations(const BlockQ8_0* x, int nb, __m256i* packed) {
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < NC; ++c)
            Packed::pack(x[size_t(c) * nb + b].qs, packed + (size_t(b) * NC + c) * Packed::kPackedVectors);
}

// xd [b * 8 + c] (zeros past NC <= 4) -> times scale (a power of two: exact), then lanes 4..7
// repeat lanes 0..3, so an in-lane vpermilps selects column c in both halves (Activations::kPacked).
inline void lane_scales(float* xd, int nb, float scale) {
    for (int b = 0; b < nb; ++b) {
        for (int l = 0; l < 4; ++l) xd[size_t(b) * 8 + l] *= scale;
        for (int l = 4; l < 8; ++l) xd[size_t(b) * 8 + l] = xd[size_t(b) * 8 + l - 4];
    }
}

// The packed path where it was measured to pay: the single-stream (AVX2) short-row path with
// 2 <= NC <= 4, compute-bound on Zen 3. Against the Q8_0-block loop it replaced (which took the
// per-column scale as a pre-broadcast memory operand of vmulps), 1 thread, same process:
// 128 x 1024 L2-resident, best of 3000 interleaved: time 0.88x at NC = 4, 0.92x at NC = 3, 1.00x
// at NC = 2; streamed from huge pages (40 x 1536 x 1024 and 40 x 1024 x 768, medians of 4
// alternated rounds): 1.02-1.10x the GB/s at NC = 4, 1.21-1.36x at NC = 3, 0.93-0.99x at NC = 2.
// Per block at NC = 4 the loop is 32 vector ops (8 vpmaddwd, 4 each of vpaddd, vcvtdq2ps,
// vpermilps, vfmadd; vpsllw + vpand for the weights, which took 2 vpshufb + 2 vpsraw before
// the words layout; same in-engine time within the noise, q4 prefill 0.96-0.98x), about 8
// cycles on Zen 3's four FP pipes; it measures ~9.6. NC = 1 is bandwidth-bound: unchanged
// (int16 pairs were 4-9% slower there). NC 5..8 (never reached by prefill bands, which stop at
// 4) take the Q8_0-block loop. Rows longer than kSingleStreamMaxBlocks keep that loop too.
template <class ISum>
constexpr bool takes_packed(int nc, int nb) {
    return ISum::kSingleStream && nc >= 2 && nc <= 4 && nb <= kSingleStreamMaxBlocks;
}
// The width half of takes_packed, at compile time: which NC instantiate the packed path.
template <class ISum, int NC>
constexpr bool kPackedActivations = takes_packed<ISum>(NC, 1);

// xd [b * 8 + c] as loaded for NC columns -> the packed path's lane scales, and X's blocks
// packed into per-thread scratch (Activations::kPacked's two inputs).
template <class Packed, int NC>
inline const __m256i* pack_group(const BlockQ8_0* x, int nb, float* xd) {
    __m256i* packed =
        reinterpret_cast<__m256i*>(kernel_scratch_bytes(size_t(NC) * nb * 32 * Packed::kPackedVectors));
    pack_activations<Packed, NC>(x, nb, packed);
    lane_scales(xd, nb, Packed::kScale);
    return packed;
}

template <class ISum, bool kCanonicalTree>
void mmvq_row_range_any(int nc, const QMatrixView& w, const BlockQ8_0* x, const float* xd,
                        float* y, int row_begin, int row_end) {
    switch (nc) {
        case 1: return mmvq_row_range<ISum, 1, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 2: return mmvq_row_range<ISum, 2, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 3: return mmvq_row_range<ISum, 3, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 4: return mmvq_row_range<ISum, 4, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 5: return mmvq_row_range<ISum, 5, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 6: return mmvq_row_range<ISum, 6, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 7: return mmvq_row_range<ISum, 7, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        default: return mmvq_row_range<ISum, 8, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
    }
}

template <class ISum, int NC>
void mmvq_nc(const QMatrixView& w, const BlockQ8_0* x, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    // xd [nb * 8], 32-byte aligned for the lane-scale loads.
    float* xd = reinterpret_cast<float*>(
        (reinterpret_cast<uintptr_t>(kernel_scratch(size_t(nb) * 8 + 8)) + 31) & ~uintptr_t(31));
    BlockQ8_0* xt = ISum::kTransformsX ? kernel_scratch_blocks(size_t(NC) * nb) : nullptr;
    const BlockQ8_0* xp = prepare_group<ISum>(x, NC, nb, xd, xt);
    constexpr int kStreamR = mmvq_stream_rows_per_step<ISum, NC>();
    const ReadAhead next = call_hint().next;
    if constexpr (kPackedActivations<ISum, NC>) {
        if (takes_packed<ISum>(NC, nb)) {
            using Packed = typename ISum::Packed;
            return mmvq_row_range<Packed, NC, true, kStreamR, Activations::kPacked>(
                w, pack_group<Packed, NC>(xp, nb, xd), xd, y, row_begin, row_end, next);
        }
    }
    // One column, short rows, far prefetch (the AVX2 path forced on an AVX-512 CPU), one thread:
    // two rows per step. One row is one FMA chain (4 cycles a block: ~22 GB/s at 2.6 GHz, below
    // the DRAM probe); two chains lift it. On the 2-vCPU Zen 4, ds4-mini q1 prefill at 1 thread,
    // same process alternated (32-token prompts): 1.074x tok/s paired median (42 of 50 rounds
    // faster); 128 tokens 1.067x. Not at 2 threads: 0.964x (11 of 40), the two threads' four
    // streams read worse than two.
    if constexpr (NC == 1 && ISum::kSingleStream) {
        if (nb <= kSingleStreamMaxBlocks && prefetch_far() && call_hint().threads == 1)
            return mmvq_row_range<ISum, 1, true, 2>(w, xp, xd, y, row_begin, row_end, next);
    }
    if (nb <= kSingleStreamMaxBlocks)
        mmvq_row_range<ISum, NC, true, kStreamR>(w, xp, xd, y, row_begin, row_end, next);
    else
        mmvq_row_range<ISum, NC, true>(w, xp, xd, y, row_begin, row_end, next);
}

// A wide product's row (2..4 packed columns: compute-bound on AVX2) and a one-column product's
// row (bandwidth-bound) in one block loop, so the narrow row's DRAM stream overlaps the wide
// row's arithmetic instead of the two running one after the other. Each row's accumulators
// take exactly the steps mmvq_rows gives them alone (mmvq_block, same prefetch distance), so
// every output has the bits of its standalone call.
template <class ISum, int NC>
inline void mmvq_pair_row(const BlockQ8_0* wa_row, const void* xa, const float* xda, float* ya, int NA, int na,
                          const BlockQ8_0* wb_row, const BlockQ8_0* xb, const float* xdb, float* yb, int NB, int nbr,
                          int nb) {
    using Packed = typename ISum::Packed;
    __m256 acca[NC], accb[1] = {_mm256_setzero_ps()};
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acca[c] = _mm256_setzero_ps();
    const BlockQ8_0* const wa[1] = {wa_row};
    const BlockQ8_0* const wb[1] = {wb_row};
    const bool far = prefetch_far();
    const intptr_t pf = intptr_t(prefetch_distance(size_t(nb), far) * sizeof(BlockQ8_0));
    for (int b = 0; b < nb; ++b) {
        mmvq_block<Packed, NC, 1, Activations::kPacked>(acca, wa, b, pf, far, xa, xda, nb);
        mmvq_block<ISum, 1, 1, Activations::kBlocks>(accb, wb, b, pf, far, xb, xdb, nb);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) ya[size_t(c) * NA + na] = hsum_tree<true>(acca[c]);
    yb[nbr] = hsum_tree<true>(accb[0]);
}

// Rows a0 + i of a (2..4 columns) and b0 + i of b (1 column), i < min(a1 - a0, b1 - b0), fused
// row by row; returns that count. Callers check pair_eligible first.
template <class ISum, int NC>
int mmvq_pair_nc(const MatTask& a, int a0, int a1, const MatTask& b, int b0, int b1) {
    const int nb = a.w.cols / QK8_0;
    const int n = std::min(a1 - a0, b1 - b0);
    alignas(32) float xda[kSingleStreamMaxBlocks * 8 + 8];
    alignas(32) float xdb[kSingleStreamMaxBlocks * 8 + 8];
    // As mmvq_nc prepares each alone (pair_eligible: X is not transformed, so no xt).
    const BlockQ8_0* xa = prepare_group<ISum>(a.x, NC, nb, xda, nullptr);
    const __m256i* packed = pack_group<typename ISum::Packed, NC>(xa, nb, xda);
    const BlockQ8_0* xb = prepare_group<ISum>(b.x, 1, nb, xdb, nullptr);
    for (int i = 0; i < n; ++i)
        mmvq_pair_row<ISum, NC>(a.w.blocks + size_t(a0 + i) * nb, packed, xda, a.y, a.w.rows, a0 + i,
                                b.w.blocks + size_t(b0 + i) * nb, xb, xdb, b.y, b.w.rows, b0 + i, nb);
    return n;
}

// Whether mmvq_pair_any can fuse a (wide) with b (narrow): both narrow MMVQ, a on the packed
// path (takes_packed), b with one column and the same K.
template <class ISum>
bool pair_eligible(const MatTask& a, const MatTask& b) {
    return a.kernel == MatKernel::kMMVQ && b.kernel == MatKernel::kMMVQ && b.ncols == 1 && a.w.cols == b.w.cols &&
           takes_packed<ISum>(a.ncols, a.w.cols / QK8_0) && !ISum::kTransformsX;
}

template <class ISum>
int mmvq_pair_any(const MatTask& a, int a0, int a1, const MatTask& b, int b0, int b1) {
    if (!pair_eligible<ISum>(a, b)) return 0;
    if constexpr (ISum::kSingleStream) {
        switch (a.ncols) {
            case 2: return mmvq_pair_nc<ISum, 2>(a, a0, a1, b, b0, b1);
            case 3: return mmvq_pair_nc<ISum, 3>(a, a0, a1, b, b0, b1);
            default: return mmvq_pair_nc<ISum, 4>(a, a0, a1, b, b0, b1);
        }
    }
    return 0;
}

// Any ncols: groups of up to 8 columns, each column still in the canonical order.
template <class ISum>
void mmvq_any(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
              int row_end) {
    const int nb = w.cols / QK8_0;
    for (int c0 = 0; c0 < ncols; c0 += 8) {
        const BlockQ8_0* xc = x + size_t(c0) * nb;
        float* yc = y + size_t(c0) * w.rows;
        switch (ncols - c0 < 8 ? ncols - c0 : 8) {
            case 1: mmvq_nc<ISum, 1>(w, xc, yc, row_begin, row_end); break;
            case 2: mmvq_nc<ISum, 2>(w, xc, yc, row_begin, row_end); break;
            case 3: mmvq_nc<ISum, 3>(w, xc, yc, row_begin, row_end); break;
            case 4: mmvq_nc<ISum, 4>(w, xc, yc, row_begin, row_end); break;
            case 5: mmvq_nc<ISum, 5>(w, xc, yc, row_begin, row_end); break;
            case 6: mmvq_nc<ISum, 6>(w, xc, yc, row_begin, row_end); break;
            case 7: mmvq_nc<ISum, 7>(w, xc, yc, row_begin, row_end); break;
            default: mmvq_nc<ISum, 8>(w, xc, yc, row_begin, row_end); break;
        }
    }
}

}  // namespace
}  // namespace dq::simd
