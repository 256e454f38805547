// MMQ kernel body: tiled Q8_0 mat-mat for any ncols with its own (non-canonical) reduction
// order, templated on the int8 dot op. Internal linkage only.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// Tiles of RT rows x CT columns: the RT weight rows (RT * K * 34/32 bytes) stay in L1/L2
// while every column tile streams past them, so W is read from memory once for any ncols;
// X (ncols * K * 34/32 bytes) is reused from L2. Each x block load serves RT rows and each
// weight block load serves CT columns.
// Reduction order (differs from kernels.h on purpose; NOT bitwise equal to MMVQ): per block
// the same 8 exact int32 lane sums and fma(s, isum, acc), then the adjacent-pair tree
// ((a0+a1) + (a2+a3)) + ((a4+a5) + (a6+a7)) instead of the canonical one.
#pragma once
#include "q8_0_simd.h"

namespace dq::simd {
namespace {

inline float hsum_adjacent(__m256 a) {
    const __m128 lo = _mm256_castps256_ps128(a);
    const __m128 hi = _mm256_extractf128_ps(a, 1);
    const __m128 plo = _mm_hadd_ps(lo, lo);  // [a0+a1, a2+a3, ...]
    const __m128 phi = _mm_hadd_ps(hi, hi);  // [a4+a5, a6+a7, ...]
    const float q0 = _mm_cvtss_f32(_mm_hadd_ps(plo, plo));
    const float q1 = _mm_cvtss_f32(_mm_hadd_ps(phi, phi));
    return q0 + q1;
}

constexpr int kMmqRowTile = 2;
constexpr int kMmqColTile = 4;

// xd holds this column tile's scales as xd[b * kMmqColTile + c].
template <class ISum, int RT, int CT>
inline void mmq_tile(const BlockQ8_0* const* wrow, const BlockQ8_0* const* xcol, const float* xd,
                     int nb, float* const* yout) {
    __m256 acc[RT][CT];
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < CT; ++c) acc[r][c] = _mm256_setzero_ps();
    for (int b = 0; b < nb; ++b) {
        __m256i xq[CT];
#pragma GCC unroll 4
        for (int c = 0; c < CT; ++c)
            xq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xcol[c][b].qs));
#pragma GCC unroll 4
        for (int r = 0; r < RT; ++r) {
            const typename ISum::Prep prep =
                ISum::prep(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow[r][b].qs)));
            const __m256 wd = _mm256_set1_ps(_cvtsh_ss(wrow[r][b].d));
#pragma GCC unroll 4
            for (int c = 0; c < CT; ++c) {
                const __m256 isum = _mm256_cvtepi32_ps(ISum::isum(prep, xq[c]));
                const __m256 s = _mm256_mul_ps(wd, _mm256_broadcast_ss(xd + size_t(b) * kMmqColTile + c));
                acc[r][c] = _mm256_fmadd_ps(s, isum, acc[r][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < CT; ++c) yout[c][r] = hsum_adjacent(acc[r][c]);
}

template <class ISum, int RT>
void mmq_row_tile(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int n0,
                  const float* scales) {
    const int nb = w.cols / QK8_0;
    const BlockQ8_0* wrow[RT];
    for (int r = 0; r < RT; ++r) wrow[r] = w.blocks + size_t(n0 + r) * nb;
    for (int c0 = 0; c0 < ncols; c0 += kMmqColTile) {
        const int ct = ncols - c0 < kMmqColTile ? ncols - c0 : kMmqColTile;
        const BlockQ8_0* xcol[kMmqColTile] = {};
        float* yout[kMmqColTile] = {};
        for (int c = 0; c < ct; ++c) {
            xcol[c] = x + size_t(c0 + c) * nb;
            yout[c] = y + size_t(c0 + c) * w.rows + n0;
        }
        const float* xd = scales + size_t(nb) * c0;
        switch (ct) {
            case 1: mmq_tile<ISum, RT, 1>(wrow, xcol, xd, nb, yout); break;
            case 2: mmq_tile<ISum, RT, 2>(wrow, xcol, xd, nb, yout); break;
            case 3: mmq_tile<ISum, RT, 3>(wrow, xcol, xd, nb, yout); break;
            default: mmq_tile<ISum, RT, 4>(wrow, xcol, xd, nb, yout); break;
        }
    }
}

template <class ISum>
void mmq_any(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
             int row_end) {
    const int nb = w.cols / QK8_0;
    // Scales per column tile, each tile laid out [b][c] with stride kMmqColTile.
    const int ntiles = (ncols + kMmqColTile - 1) / kMmqColTile;
    float* scales = kernel_scratch(size_t(nb) * kMmqColTile * ntiles);
    for (int t = 0; t < ntiles; ++t) {
        const int c0 = t * kMmqColTile;
        const int ct = ncols - c0 < kMmqColTile ? ncols - c0 : kMmqColTile;
        load_activation_scales(x + size_t(c0) * nb, ct, nb, kMmqColTile,
                               scales + size_t(nb) * c0);
    }
    if (ISum::kTransformsX) {
        BlockQ8_0* xt = kernel_scratch_blocks(size_t(ncols) * nb);
        for (size_t i = 0; i < size_t(ncols) * nb; ++i) {
            xt[i].d = x[i].d;
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(xt[i].qs), ISum::transform_x(q));
        }
        x = xt;
    }
    int n = row_begin;
    for (; n + kMmqRowTile <= row_end; n += kMmqRowTile)
        mmq_row_tile<ISum, kMmqRowTile>(w, x, ncols, y, n, scales);
    for (; n < row_end; ++n) mmq_row_tile<ISum, 1>(w, x, ncols, y, n, scales);
}

}  // namespace
}  // namespace dq::simd
