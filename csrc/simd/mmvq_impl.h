// The row-major Q8_0 row body of MMQ's tiles (mmq_impl.h): 8 int32 lanes of 4 products per block,
// fp32 lane accumulators, then the adjacent-pair tree -- MMQ's own order, not the canonical one
// (the narrow MMVQ reads the x16 layout: mmvq_x16_avx2.cpp, mmvq_avx512.cpp). Templated on the
// int8 dot policy so the AVX2 and AVX-512 VNNI files instantiate the same loop. Internal linkage only.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// R rows are processed together (independent FMA chains for ILP); each weight block is
// loaded once and applied to all NC columns. Column c of row n: per block 8 exact int32 lane
// sums, s = wd * xd (one fp32 multiply), acc = fma(s, isum, acc) per lane, hsum_adjacent at the end.
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

// Block b of R rows x NC columns into acc (Q8_0 activation blocks [c][b]; xd[b * 8 + c]).
template <class ISum, int NC, int R>
__attribute__((always_inline)) inline void mmvq_block(__m256 (&acc)[R * NC], const BlockQ8_0* const (&wrow)[R],
                                                      int b, intptr_t pfd, bool far, const BlockQ8_0* x, const float* xd,
                                                      int nb) {
    typename ISum::Prep prep[R];
    __m256 wd[R];  // fp32(wd) in every lane
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const BlockQ8_0& wb = wrow[r][b];
        // W streams from DRAM once; run ahead of the R interleaved row streams.
        if (far)
            _mm_prefetch(offset_ptr(&wb, pfd), _MM_HINT_T2);
        else
            _mm_prefetch(offset_ptr(&wb, pfd), _MM_HINT_T0);
        prep[r] = ISum::prep(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)));
        wd[r] = _mm256_set1_ps(_cvtsh_ss(wb.d));
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[size_t(c) * nb + b].qs));
        const __m256 xdc = _mm256_broadcast_ss(xd + size_t(b) * 8 + c);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 isum = _mm256_cvtepi32_ps(ISum::isum(prep[r], xq));
            // s = wd * xd: one fp32 rounding, as in the scalar reference.
            acc[r * NC + c] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], xdc), isum, acc[r * NC + c]);
        }
    }
}

template <class ISum, int NC, int R>
inline void mmvq_rows(const BlockQ8_0* W, int nb, const BlockQ8_0* x, const float* xd, float* y, int N, int n0,
                      intptr_t pfd, bool far) {
    // Fully unrolled (pragmas) so GCC keeps the accumulators in registers instead of
    // mirroring the array to the stack on every block.
    __m256 acc[R * NC];
#pragma GCC unroll 16
    for (int i = 0; i < R * NC; ++i) acc[i] = _mm256_setzero_ps();
    const BlockQ8_0* wrow[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wrow[r] = W + size_t(n0 + r) * nb;
    for (int b = 0; b < nb; ++b) mmvq_block<ISum, NC, R>(acc, wrow, b, pfd, far, x, xd, nb);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) y[size_t(c) * N + n0 + r] = hsum_adjacent(acc[r * NC + c]);
}

// Rows per step: enough independent accumulators to hide FMA latency, few enough to stay in
// 16 ymm registers (R * NC accumulators + 2 R prepared weight vectors + R scales). R = 2 at
// NC 3..4 spilled the accumulators to the stack every block (AVX2, 1 GiB matrix, 1 thread:
// ncols 4 ran at 2.0 GB/s while ncols 5 at R = 1 ran at 3.8), so every NC >= 2 takes R = 1
// except NC = 2 (R = 2: 4 accumulators). MMQ's row tile (16) is a multiple of every R.
template <int NC>
constexpr int mmvq_rows_per_step() {
    return NC == 1 ? 4 : (NC == 2 ? 2 : 1);
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

// Rows [row_begin, row_end) of an MMQ tile for one prepared group of NC columns, R rows per step.
// Each row group prefetches the same block of a later group (at least kMmvqPrefetchBlocks ahead).
template <class ISum, int NC, int R = mmvq_rows_per_step<NC>()>
void mmvq_row_range(const QMatrixView& w, const BlockQ8_0* x, const float* xd, float* y, int row_begin,
                    int row_end) {
    const int nb = w.cols / QK8_0;
    const bool far = prefetch_far();
    const size_t pf = prefetch_distance(size_t(R) * nb, far) * sizeof(BlockQ8_0);
    const size_t row = size_t(nb) * sizeof(BlockQ8_0);
    const BlockQ8_0* end = w.blocks + size_t(row_end) * nb;
    int n = row_begin;
    for (; n + R <= row_end; n += R)
        mmvq_rows<ISum, NC, R>(w.blocks, nb, x, xd, y, w.rows, n,
                               prefetch_offset(w.blocks + size_t(n) * nb, R * row, pf, end, {}), far);
    for (; n < row_end; ++n)
        mmvq_rows<ISum, NC, 1>(w.blocks, nb, x, xd, y, w.rows, n,
                               prefetch_offset(w.blocks + size_t(n) * nb, row, pf, end, {}), far);
}

template <class ISum>
void mmvq_row_range_any(int nc, const QMatrixView& w, const BlockQ8_0* x, const float* xd,
                        float* y, int row_begin, int row_end) {
    switch (nc) {
        case 1: return mmvq_row_range<ISum, 1>(w, x, xd, y, row_begin, row_end);
        case 2: return mmvq_row_range<ISum, 2>(w, x, xd, y, row_begin, row_end);
        case 3: return mmvq_row_range<ISum, 3>(w, x, xd, y, row_begin, row_end);
        case 4: return mmvq_row_range<ISum, 4>(w, x, xd, y, row_begin, row_end);
        case 5: return mmvq_row_range<ISum, 5>(w, x, xd, y, row_begin, row_end);
        case 6: return mmvq_row_range<ISum, 6>(w, x, xd, y, row_begin, row_end);
        case 7: return mmvq_row_range<ISum, 7>(w, x, xd, y, row_begin, row_end);
        default: return mmvq_row_range<ISum, 8>(w, x, xd, y, row_begin, row_end);
    }
}

}  // namespace
}  // namespace dq::simd
