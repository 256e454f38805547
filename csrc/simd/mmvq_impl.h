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
#pragma once
#include <algorithm>
#include <cstdint>
#include "q8_0_simd.h"

namespace dq::simd {
namespace {

// Minimum software prefetch distance in weight blocks (128 blocks = 4352 bytes).
constexpr int kMmvqPrefetchBlocks = 128;

// kWideScales: xd holds each activation scale already broadcast to 8 lanes, at
// xd[(b * NC + c) * 8] (broadcast_scales below), so a column's s = wd * xd is one vmulps with a
// memory operand instead of vbroadcastss + vmulps, and wd is vpbroadcastw + vcvtph2ps. Same
// fp32 values and the same single rounding of s; only the instruction count per block drops.
template <class ISum, int NC, int R, bool kCanonicalTree = true, bool kWideScales = false>
inline void mmvq_rows(const BlockQ8_0* W, int nb, const BlockQ8_0* x, const float* xd, float* y,
                      int N, int n0) {
    // Fully unrolled (pragmas) so GCC keeps the accumulators in registers instead of
    // mirroring the array to the stack on every block.
    __m256 acc[R * NC];
#pragma GCC unroll 16
    for (int i = 0; i < R * NC; ++i) acc[i] = _mm256_setzero_ps();
    const BlockQ8_0* wrow[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wrow[r] = W + size_t(n0 + r) * nb;
    // Prefetch the same block of the next row group (at least kMmvqPrefetchBlocks ahead): a
    // thread's rows are one contiguous stream, so this runs ahead across row-group boundaries,
    // where a fixed in-row distance stalls at the start of every group of short rows.
    const size_t pf = std::max(size_t(R) * nb, size_t(kMmvqPrefetchBlocks));
    for (int b = 0; b < nb; ++b) {
        typename ISum::Prep prep[R];
        __m256 wd[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const BlockQ8_0& wb = wrow[r][b];
            // W streams from DRAM once; run ahead of the R interleaved row streams.
            _mm_prefetch(reinterpret_cast<const char*>(&wb + pf), _MM_HINT_T0);
            prep[r] = ISum::prep(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)));
            if constexpr (kWideScales)
                wd[r] = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(wb.d)));
            else
                wd[r] = _mm256_set1_ps(_cvtsh_ss(wb.d));
        }
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
            const __m256i xq =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[size_t(c) * nb + b].qs));
            const __m256 xdc = kWideScales ? _mm256_load_ps(xd + (size_t(b) * NC + c) * 8)
                                           : _mm256_broadcast_ss(xd + size_t(b) * 8 + c);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m256 isum = _mm256_cvtepi32_ps(ISum::isum(prep[r], xq));
                // s = wd * xd: the same single fp32 rounding as the scalar reference.
                acc[r * NC + c] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], xdc), isum, acc[r * NC + c]);
            }
        }
    }
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

// Rows [row_begin, row_end) for one prepared group of NC columns, R rows per step.
template <class ISum, int NC, bool kCanonicalTree, int R = mmvq_rows_per_step<NC>(), bool kWideScales = false>
void mmvq_row_range(const QMatrixView& w, const BlockQ8_0* x, const float* xd, float* y,
                    int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    int n = row_begin;
    for (; n + R <= row_end; n += R)
        mmvq_rows<ISum, NC, R, kCanonicalTree, kWideScales>(w.blocks, nb, x, xd, y, w.rows, n);
    for (; n < row_end; ++n)
        mmvq_rows<ISum, NC, 1, kCanonicalTree, kWideScales>(w.blocks, nb, x, xd, y, w.rows, n);
}

// xd [b * 8 + c] -> wide [(b * NC + c) * 8 + lane] (32-byte aligned; NC * nb * 32 bytes, L1-resident).
template <int NC>
inline void broadcast_scales(const float* xd, int nb, float* wide) {
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < NC; ++c)
            _mm256_store_ps(wide + (size_t(b) * NC + c) * 8, _mm256_set1_ps(xd[size_t(b) * 8 + c]));
}

// Wide scales where they were measured to pay: the single-stream (AVX2) short-row path with
// NC >= 2, which is compute-bound on Zen 3 (~10 cycles per block at NC = 4). Same process,
// alternated, 5 rounds on a shared box, NC = 4: L2-resident 128 x 1024, 1 thread, best
// 4.16 -> 3.91 ns per block (~6%); 2 threads streaming 80 x 1.5 MiB, median 10.6 -> 12.8 GB/s.
// NC = 2, 3: within the noise. NC = 1 is bandwidth-bound: unchanged.
template <class ISum, int NC>
constexpr bool use_wide_scales(int nb) {
    return ISum::kSingleStream && NC >= 2 && nb <= kSingleStreamMaxBlocks;
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
    // One scratch holds xd [nb * 8] then (aligned) the wide scales [nb * NC * 8].
    float* xd = kernel_scratch(size_t(nb) * 8 * (NC + 1) + 8);
    BlockQ8_0* xt = ISum::kTransformsX ? kernel_scratch_blocks(size_t(NC) * nb) : nullptr;
    const BlockQ8_0* xp = prepare_group<ISum>(x, NC, nb, xd, xt);
    if (use_wide_scales<ISum, NC>(nb)) {
        float* wide = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(xd + size_t(nb) * 8) + 31) &
                                               ~uintptr_t(31));
        broadcast_scales<NC>(xd, nb, wide);
        mmvq_row_range<ISum, NC, true, mmvq_stream_rows_per_step<ISum, NC>(), true>(w, xp, wide, y, row_begin,
                                                                                  row_end);
    } else if (nb <= kSingleStreamMaxBlocks)
        mmvq_row_range<ISum, NC, true, mmvq_stream_rows_per_step<ISum, NC>()>(w, xp, xd, y, row_begin, row_end);
    else
        mmvq_row_range<ISum, NC, true>(w, xp, xd, y, row_begin, row_end);
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
