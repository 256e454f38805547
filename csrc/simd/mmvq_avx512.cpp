// Narrow MMVQ, AVX-512 VNNI on 512-bit vectors: two activation columns per zmm, canonical order.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// A zmm holds the 8 canonical lanes of column c0 (low half) and of column c0+1 (high half).
// Every op is lane-wise (vpdpbusd, cvt, mul, fma), so each half performs exactly the
// per-column sequence of vec_dot_q8_0_q8_0_ref: isum lanes of 4 products, s = wd * xd,
// acc = fma(s, isum, acc), canonical horizontal sum per half. Halving the vector-op count
// per column is what lets 4 columns cost barely more than 1 once W streams from DRAM.
// ncols == 1 uses the 256-bit body (memory-bound; a zmm would carry a dead half).
// Also holds the AVX-512 kernel table and its MMQ (mmq_impl.h driver over these rows).
#include "kernel_table.h"
#include "mmq_impl.h"

namespace dq::simd {

namespace {

constexpr int kZmmPrefetchBytes = 512;

// Prepared activations per block b and column pair p (c0 = 2p, c1 = 2p+1, or c0 again for
// an odd tail whose high half is discarded): xp holds 64 bytes = (x+128) of c0 | of c1, and
// xd16 holds 16 floats = fp32(xd of c0) x 8 | fp32(xd of c1) x 8.
template <int NC, int R, bool kCanonicalTree>
inline void mmvq_rows_zmm(const BlockQ8_0* W, int nb, const uint8_t* xp, const float* xd16,
                          float* y, int N, int n0) {
    constexpr int NP = (NC + 1) / 2;
    __m512 acc[R * NP];
#pragma GCC unroll 16
    for (int i = 0; i < R * NP; ++i) acc[i] = _mm512_setzero_ps();
    const BlockQ8_0* wrow[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wrow[r] = W + size_t(n0 + r) * nb;
    const __m512i bias = _mm512_set1_epi8(char(0x80));
    for (int b = 0; b < nb; ++b) {
        __m512i wq[R], corr[R];
        __m512 wd[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const BlockQ8_0& wb = wrow[r][b];
            _mm_prefetch(reinterpret_cast<const char*>(&wb) + kZmmPrefetchBytes, _MM_HINT_T0);
            wq[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)));
            // corr = -128 * (sum of the 4 weights of each lane), so dpbusd(corr, x+128, w) = x.w
            corr[r] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wq[r]));
            wd[r] = _mm512_set1_ps(_cvtsh_ss(wb.d));
        }
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            const __m512i xu = _mm512_loadu_si512(xp + (size_t(b) * NP + p) * 64);
            const __m512 xdv = _mm512_loadu_ps(xd16 + (size_t(b) * NP + p) * 16);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m512 isum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr[r], xu, wq[r]));
                acc[r * NP + p] = _mm512_fmadd_ps(_mm512_mul_ps(wd[r], xdv), isum, acc[r * NP + p]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            const __m512 a = acc[r * NP + p];
            y[size_t(2 * p) * N + n0 + r] = hsum_tree<kCanonicalTree>(_mm512_castps512_ps256(a));
            if (2 * p + 1 < NC) {
                const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
                y[size_t(2 * p + 1) * N + n0 + r] = hsum_tree<kCanonicalTree>(hi);
            }
        }
    }
}

// Column-pair layout for a group of nc <= 8 columns: xp gets nb * 4 * 64 bytes, xd16 gets
// nb * 4 * 16 floats (4 = pairs in a full group).
constexpr int kZmmPairs = 4;

inline void prepare_zmm(const BlockQ8_0* x, int nc, int nb, uint8_t* xp, float* xd16) {
    const int np = (nc + 1) / 2;
    const __m256i bias = _mm256_set1_epi8(char(0x80));
    for (int b = 0; b < nb; ++b) {
        for (int c = 0; c < 2 * np; ++c) {
            const BlockQ8_0& xb = x[size_t(c < nc ? c : nc - 1) * nb + b];
            const size_t slot = size_t(b) * np + c / 2;
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(xp + slot * 64 + (c % 2) * 32),
                                _mm256_xor_si256(q, bias));
            _mm256_storeu_ps(xd16 + slot * 16 + (c % 2) * 8, _mm256_set1_ps(_cvtsh_ss(xb.d)));
        }
    }
}

template <int NC, bool kCanonicalTree>
void zmm_row_range(const QMatrixView& w, const uint8_t* xp, const float* xd16, float* y,
                   int row_begin, int row_end) {
    // 4 rows for every NC: <= 16 accumulators + 12 weight registers of 32; measured ~15%
    // faster than 2 rows for NC 5..8 on the Xeon device (more rows in flight per x load).
    constexpr int R = 4;
    const int nb = w.cols / QK8_0;
    int n = row_begin;
    for (; n + R <= row_end; n += R)
        mmvq_rows_zmm<NC, R, kCanonicalTree>(w.blocks, nb, xp, xd16, y, w.rows, n);
    for (; n < row_end; ++n) mmvq_rows_zmm<NC, 1, kCanonicalTree>(w.blocks, nb, xp, xd16, y, w.rows, n);
}

template <bool kCanonicalTree>
void zmm_row_range_any(int nc, const QMatrixView& w, const uint8_t* xp, const float* xd16,
                       float* y, int row_begin, int row_end) {
    switch (nc) {
        case 1: return zmm_row_range<1, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
        case 2: return zmm_row_range<2, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
        case 3: return zmm_row_range<3, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
        case 4: return zmm_row_range<4, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
        case 5: return zmm_row_range<5, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
        case 6: return zmm_row_range<6, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
        case 7: return zmm_row_range<7, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
        default: return zmm_row_range<8, kCanonicalTree>(w, xp, xd16, y, row_begin, row_end);
    }
}

// MMQ backend (mmq_impl.h) over the zmm rows with the non-canonical tree.
struct MmqBackendZmm {
    static size_t floats_per_group(int nb) { return size_t(nb) * kZmmPairs * 16; }
    static size_t bytes_per_group(int nb) { return size_t(nb) * kZmmPairs * 64; }
    static const void* prepare(const BlockQ8_0* x, int nc, int nb, float* xd16, uint8_t* xp) {
        prepare_zmm(x, nc, nb, xp, xd16);
        return xp;
    }
    static void rows(int nc, const QMatrixView& w, const void* prepared, const float* xd16,
                     float* y, int row_begin, int row_end) {
        zmm_row_range_any<false>(nc, w, static_cast<const uint8_t*>(prepared), xd16, y, row_begin,
                                 row_end);
    }
};

}  // namespace

void mmvq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                     int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    for (int c0 = 0; c0 < ncols; c0 += 8) {
        const int nc = ncols - c0 < 8 ? ncols - c0 : 8;
        const BlockQ8_0* xc = x + size_t(c0) * nb;
        float* yc = y + size_t(c0) * w.rows;
        if (nc == 1) {
            mmvq_nc<ISumVnni, 1>(w, xc, yc, row_begin, row_end);
            continue;
        }
        uint8_t* xp = kernel_scratch_bytes(MmqBackendZmm::bytes_per_group(nb));
        float* xd16 = kernel_scratch(MmqBackendZmm::floats_per_group(nb));
        prepare_zmm(xc, nc, nb, xp, xd16);
        zmm_row_range_any<true>(nc, w, xp, xd16, yc, row_begin, row_end);
    }
}

void mmq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                    int row_begin, int row_end) {
    mmq_tiled<MmqBackendZmm>(w, x, ncols, y, row_begin, row_end);
}

const KernelSet kAvx512VnniKernels = {"avx512vnni", mmvq_avx512vnni, mmq_avx512vnni, 4,
                                      kMmqRowTile, quantize_row_q8_0_avx2};

}  // namespace dq::simd
