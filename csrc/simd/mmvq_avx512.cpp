// Narrow MMVQ on the AVX-512 VNNI path, canonical order: 1..4 columns stream W with 256-bit
// vpdpbusd lanes (stream_nc below), 5..8 columns take two activation columns per zmm.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// 5..8 columns: a zmm holds the 8 lane sums of column c0 (low half) and of column c0+1 (high
// half); the canonical rows (mmvq_rows_zmm_halves) fold 4 rows' lane sums into their half
// sums (exact int32), then per block and pair one cvt, one mul, one fma: per output exactly
// vec_dot_q8_0_q8_0_ref's s = wd * xd, acc_h = fma(s, half_h, acc_h), acc_0 + acc_1. MMQ keeps
// the 8 lanes per column and its own tree.
// Also holds the AVX-512 kernel table and its MMQ (mmq_impl.h driver over these rows).
#include "kernel_table.h"
#include "mmq_impl.h"

namespace dq::simd {

namespace {

constexpr int kZmmPrefetchBytes = 512;

// Prepared activations per block b and column pair p (c0 = 2p, c1 = 2p+1, or c0 again for
// an odd tail whose high half is discarded): xp holds 64 bytes = (x+128) of c0 | of c1, and
// xd16 holds 16 floats = fp32(xd of c0) x 8 | fp32(xd of c1) x 8.
// half_sums4 on each 256-bit half: [a_lo, b_lo, c_lo, d_lo | a_hi, ..] per 128-bit lane.
inline __m512i half_sums4_zmm(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

// The canonical order for R <= 4 rows x NC columns (5..8): per pair p one accumulator whose lanes
// k, k + 4 hold row k's two halves for column 2p and lanes 8 + k, 12 + k for column 2p + 1
// (half_sums4_zmm over the R rows, zero rows past R), one convert, one multiply and one fma per
// block and pair.
template <int NC, int R>
inline void mmvq_rows_zmm_halves(const BlockQ8_0* W, int nb, const uint8_t* xp, const float* xd16, float* y, int N,
                                 int n0) {
    static_assert(R <= 4, "one group of 4 rows");
    constexpr int NP = (NC + 1) / 2;
    __m512 acc[NP];
#pragma GCC unroll 4
    for (int i = 0; i < NP; ++i) acc[i] = _mm512_setzero_ps();
    const BlockQ8_0* wrow[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wrow[r] = W + size_t(n0 + r) * nb;
    const __m512i bias = _mm512_set1_epi8(char(0x80));
    for (int b = 0; b < nb; ++b) {
        __m512i wq[4], corr[4];
        __m512 w4 = _mm512_setzero_ps();  // lanes k (mod 4): wd of row k
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const BlockQ8_0& wb = wrow[r][b];
            _mm_prefetch(reinterpret_cast<const char*>(&wb) + kZmmPrefetchBytes, _MM_HINT_T0);
            wq[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)));
            corr[r] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wq[r]));
            w4 = _mm512_mask_blend_ps(__mmask16(0x1111u << r), w4, _mm512_set1_ps(_cvtsh_ss(wb.d)));
        }
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            const __m512i xu = _mm512_loadu_si512(xp + (size_t(b) * NP + p) * 64);
            const __m512 xdv = _mm512_loadu_ps(xd16 + (size_t(b) * NP + p) * 16);
            __m512i v[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r)
                v[r] = r < R ? _mm512_dpbusd_epi32(corr[r < R ? r : 0], xu, wq[r < R ? r : 0]) : _mm512_setzero_si512();
            const __m512 h = _mm512_cvtepi32_ps(half_sums4_zmm(v[0], v[1], v[2], v[3]));
            acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(w4, xdv), h, acc[p]);
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
        alignas(16) float t[8];
        _mm_store_ps(t, hsum_halves4(_mm512_castps512_ps256(acc[p])));
        _mm_store_ps(t + 4, hsum_halves4(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1))));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            y[size_t(2 * p) * N + n0 + r] = t[r];
            if (2 * p + 1 < NC) y[size_t(2 * p + 1) * N + n0 + r] = t[4 + r];
        }
    }
}

template <int NC, int R, bool kCanonicalTree>
inline void mmvq_rows_zmm(const BlockQ8_0* W, int nb, const uint8_t* xp, const float* xd16,
                          float* y, int N, int n0) {
    if constexpr (kCanonicalTree) {
        return mmvq_rows_zmm_halves<NC, R>(W, nb, xp, xd16, y, N, n0);
    }
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

// ---- Streaming narrow MMVQ (1..4 columns), canonical order, 256-bit VNNI lanes ----------------
//
// The int8 dot puts the WEIGHTS on vpdpbusd's unsigned side: wu = w ^ 0x80 = w + 128, so
// dpbusd(c, wu, x) = c + sum (w + 128) x = c + w.x + 128 sum x per lane. The correction
// c = -128 * (sum of the 4 x of each lane) depends on X only: computed once per call and loaded
// as the accumulator's start, so a weight block costs one vpxor however many columns share it.
// Exact for any int8 w and x (w = -128 gives wu = 0). Every lane sum is exact int32; 4 outputs'
// half sums share a vector (half_sums4), then s = wd * xd (one fp32 multiply per output) and
// acc = fma(s, halves, acc), acc_0 + acc_1 at the end: the bits of vec_dot_q8_0_q8_0_ref.
//
// Prepared X per block b and column c (64 bytes, kStreamSlot): 32 signed quants | 8 int32
// corrections; xd8[b * 8 + c] = fp32(xd), lanes 4..7 repeating lanes 0..3.
//
// Streaming choices, measured on a 2-vCPU Zen 4 (EPYC, 2.6 GHz, ds4-mini-shaped 1536 x 1024
// matrices, 160 MB per pass, 1 thread, alternated configurations, best of 10-12 rounds on a
// shared host): the old VNNI body (R = 4 rows, prefetcht0 128 blocks ahead, weight-side
// correction) read 7-10 GB/s; prefetcht2 (into L2) 1024 blocks (~35 KB) ahead lifted the same
// loop shape to ~27-28 GB/s (probe ~33). prefetcht1 at that distance reached ~22; prefetcht0
// at 128 blocks ~25 with R = 1 but ~10 with R = 2. R = 4 keeps 4 independent FMA chains, the most
// arithmetic headroom (L2-resident 1 column: R = 4 ~49 GB/s, R = 1 ~34).
constexpr int kStreamSlot = 64;
constexpr int kStreamRows = 4;
constexpr int kStreamPrefetchBlocks = 1024;

inline void prepare_stream(const BlockQ8_0* x, int nc, int nb, uint8_t* xs, float* xd8) {
    const __m256i bias = _mm256_set1_epi8(char(0x80));
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < nc; ++c) {
            const BlockQ8_0& xb = x[size_t(c) * nb + b];
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
            uint8_t* slot = xs + (size_t(b) * nc + c) * kStreamSlot;
            _mm256_store_si256(reinterpret_cast<__m256i*>(slot), q);
            const __m256i s128 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, q);  // 128 * sum x
            _mm256_store_si256(reinterpret_cast<__m256i*>(slot + 32),
                               _mm256_sub_epi32(_mm256_setzero_si256(), s128));
            xd8[size_t(b) * 8 + c] = _cvtsh_ss(xb.d);
        }
    if (nc <= 4)  // lanes c + 4 repeat lanes c (the shared-multiply layout); nc = 2: lane l holds l % 2
        for (int b = 0; b < nb; ++b)
            for (int c = 0; c < 4; ++c) {
                if (c >= nc) xd8[size_t(b) * 8 + c] = nc == 2 ? xd8[size_t(b) * 8 + c - 2] : 0.0f;
                xd8[size_t(b) * 8 + 4 + c] = xd8[size_t(b) * 8 + c];
            }
}

// Accumulators of an R-row x NC-column tile: NC >= 3 one per row (lanes c and c + 4: column
// c's two halves), NC = 2 one per row pair (lanes 2k + c, 2k + c + 4: row k of the pair,
// column c), NC = 1 one per group of 4 rows (lanes k and k + 4: row k of the group).
template <int NC, int R>
constexpr int kStreamAccs = NC >= 3 ? R : (NC == 2 ? (R + 1) / 2 : (R + 3) / 4);

// Block b of R rows x NC columns into acc (the body of stream_rows' block loop, also run
// interleaved with a second product's block by stream_pair_rows). Per (row, column) one
// vpdpbusd of 8 exact lane sums; four such outputs' half sums go into one vector
// (half_sums4: shuffles and integer adds), then one vcvtdq2ps and one fma with their four
// scales, so the float work per output is a quarter of the 8-lane order's. Missing outputs of
// a group (NC = 3, or R < 4 at NC = 1) are zero vectors with a zero scale.
template <int NC, int R>
__attribute__((always_inline)) inline void stream_block(__m256 (&acc)[kStreamAccs<NC, R>],
                                                        const BlockQ8_0* const (&wrow)[R], int b, intptr_t pfd,
                                                        const uint8_t* xs, const float* xd8) {
    const __m256i bias = _mm256_set1_epi8(char(0x80));
    __m256i wu[R];
    __m256 wd[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const BlockQ8_0& wb = wrow[r][b];
        _mm_prefetch(offset_ptr(&wb, pfd), _MM_HINT_T2);
        wu[r] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)), bias);
        wd[r] = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(wb.d)));
    }
    if constexpr (NC == 2) {
        // Row pairs: xd8 lanes hold xd of column l % 2, so (wd of row 2g | 2g + 1) * xd4 scales
        // the pair's 4 outputs in one vmulps.
        const __m256 xd4 = _mm256_load_ps(xd8 + size_t(b) * 8);
        __m256i v[R][2];
#pragma GCC unroll 2
        for (int c = 0; c < 2; ++c) {
            const uint8_t* slot = xs + (size_t(b) * 2 + c) * kStreamSlot;
            const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(slot));
            const __m256i corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(slot + 32));
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) v[r][c] = _mm256_dpbusd_epi32(corr, wu[r], xq);
        }
#pragma GCC unroll 4
        for (int g = 0; g < kStreamAccs<2, R>; ++g) {
            const int r0 = 2 * g, r1 = 2 * g + 1 < R ? 2 * g + 1 : 2 * g;
            const __m256i z = _mm256_setzero_si256();
            const bool two = 2 * g + 1 < R;
            const __m256 h = _mm256_cvtepi32_ps(
                half_sums4(v[r0][0], v[r0][1], two ? v[r1][0] : z, two ? v[r1][1] : z));
            const __m256 w2 = two ? _mm256_blend_ps(wd[r0], wd[r1], 0xCC) : wd[r0];
            acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(w2, xd4), h, acc[g]);
        }
    } else if constexpr (NC >= 3) {
        // One vmulps per row-block for every column: lanes c and c + 4 of xd8 hold xd of
        // column c (zero past NC), so s8 lane c = fl(wd * xd_c), the reference's one rounding.
        const __m256 xd4 = _mm256_load_ps(xd8 + size_t(b) * 8);
        __m256i v[R][4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            if (c >= NC) {
#pragma GCC unroll 8
                for (int r = 0; r < R; ++r) v[r][c] = _mm256_setzero_si256();
                continue;
            }
            const uint8_t* slot = xs + (size_t(b) * NC + c) * kStreamSlot;
            const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(slot));
            const __m256i corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(slot + 32));
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) v[r][c] = _mm256_dpbusd_epi32(corr, wu[r], xq);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 h = _mm256_cvtepi32_ps(half_sums4(v[r][0], v[r][1], v[r][2], v[r][3]));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], xd4), h, acc[r]);
        }
    } else {
        const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + size_t(b) * kStreamSlot));
        const __m256i corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + size_t(b) * kStreamSlot + 32));
        const __m256 xdc = _mm256_broadcast_ss(xd8 + size_t(b) * 8);
#pragma GCC unroll 2
        for (int g = 0; g < kStreamAccs<1, R>; ++g) {
            __m256i v[4];
            __m256 w4 = _mm256_setzero_ps();  // lanes k and k + 4: wd of row 4g + k
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const int r = 4 * g + k;
                v[k] = r < R ? _mm256_dpbusd_epi32(corr, wu[r < R ? r : 0], xq) : _mm256_setzero_si256();
            }
            if (4 * g + 0 < R) w4 = _mm256_blend_ps(w4, wd[4 * g + 0 < R ? 4 * g + 0 : 0], 0x11);
            if (4 * g + 1 < R) w4 = _mm256_blend_ps(w4, wd[4 * g + 1 < R ? 4 * g + 1 : 0], 0x22);
            if (4 * g + 2 < R) w4 = _mm256_blend_ps(w4, wd[4 * g + 2 < R ? 4 * g + 2 : 0], 0x44);
            if (4 * g + 3 < R) w4 = _mm256_blend_ps(w4, wd[4 * g + 3 < R ? 4 * g + 3 : 0], 0x88);
            const __m256 h = _mm256_cvtepi32_ps(half_sums4(v[0], v[1], v[2], v[3]));
            acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(w4, xdc), h, acc[g]);
        }
    }
}

// The canonical final sums (lo + hi) of a tile's accumulators into Y.
template <int NC, int R>
__attribute__((always_inline)) inline void stream_store(const __m256 (&acc)[kStreamAccs<NC, R>], float* y, int N,
                                                        int n0) {
    alignas(16) float t[4];
#pragma GCC unroll 8
    for (int i = 0; i < kStreamAccs<NC, R>; ++i) {
        _mm_store_ps(t, hsum_halves4(acc[i]));
        if constexpr (NC == 2) {
#pragma GCC unroll 2
            for (int k = 0; k < 2; ++k)
                if (2 * i + k < R) {
                    y[n0 + 2 * i + k] = t[2 * k];
                    y[size_t(N) + n0 + 2 * i + k] = t[2 * k + 1];
                }
        } else if constexpr (NC >= 3) {
#pragma GCC unroll 4
            for (int c = 0; c < NC; ++c) y[size_t(c) * N + n0 + i] = t[c];
        } else {
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k)
                if (4 * i + k < R) y[n0 + 4 * i + k] = t[k];
        }
    }
}

template <int R>
__attribute__((always_inline)) inline void stream_row_ptrs(const BlockQ8_0* W, int nb, int n0,
                                                           const BlockQ8_0* (&wrow)[R]) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wrow[r] = W + size_t(n0 + r) * nb;
}

template <int NC, int R>
inline void stream_rows(const BlockQ8_0* W, int nb, const uint8_t* xs, const float* xd8, float* y, int N, int n0,
                        intptr_t pfd) {
    __m256 acc[kStreamAccs<NC, R>];
#pragma GCC unroll 16
    for (int i = 0; i < kStreamAccs<NC, R>; ++i) acc[i] = _mm256_setzero_ps();
    const BlockQ8_0* wrow[R];
    stream_row_ptrs<R>(W, nb, n0, wrow);
    for (int b = 0; b < nb; ++b) stream_block<NC, R>(acc, wrow, b, pfd, xs, xd8);
    stream_store<NC, R>(acc, y, N, n0);
}

// R rows of a wide product A (2..4 columns: arithmetic-bound at one thread) and R rows of a
// one-column product B (bandwidth-bound) in one block loop, so B's DRAM stream overlaps A's
// arithmetic instead of following it (mmvq_pair_any's idea on AVX2). Every output takes exactly
// its stream_rows steps (stream_block, same block order), so the bits are the separate calls'.
// ds4-mini prefill at 1 thread on the 2.6 GHz Zen 4, 4 alternated pairs of 3-round runs, fused
// vs not: q4 646-667 vs 523-624 tok/s in a first A/B, but 518-610 vs 500-649 in a second (inside
// this shared host's noise); kept because it cannot cost bandwidth and mirrors the AVX2 fusion.
template <int NC, int R>
inline void stream_pair_rows(const BlockQ8_0* WA, const uint8_t* xsa, const float* xda, float* ya, int NA, int na,
                             const BlockQ8_0* WB, const uint8_t* xsb, const float* xdb, float* yb, int NB, int nbr,
                             int nb, intptr_t pfd) {
    __m256 acca[kStreamAccs<NC, R>], accb[kStreamAccs<1, R>];
#pragma GCC unroll 16
    for (int i = 0; i < kStreamAccs<NC, R>; ++i) acca[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < kStreamAccs<1, R>; ++i) accb[i] = _mm256_setzero_ps();
    const BlockQ8_0* wa[R];
    const BlockQ8_0* wb[R];
    stream_row_ptrs<R>(WA, nb, na, wa);
    stream_row_ptrs<R>(WB, nb, nbr, wb);
    for (int b = 0; b < nb; ++b) {
        stream_block<NC, R>(acca, wa, b, pfd, xsa, xda);
        stream_block<1, R>(accb, wb, b, pfd, xsb, xdb);
    }
    stream_store<NC, R>(acca, ya, NA, na);
    stream_store<1, R>(accb, yb, NB, nbr);
}

// Rows [row_begin, row_end), R at a time, prefetching pf_min blocks (or R rows) ahead; the last
// groups' prefetches run on into the thread's read-ahead region (kernel_table.h call_hint), so
// the stream does not restart cold at the next product.
template <int NC, int R>
void stream_range(const QMatrixView& w, const uint8_t* xs, const float* xd8, float* y, int row_begin,
                  int row_end, int pf_min) {
    const int nb = w.cols / QK8_0;
    const size_t pf = std::max(size_t(R) * nb, size_t(pf_min)) * sizeof(BlockQ8_0);
    const size_t group = size_t(R) * nb * sizeof(BlockQ8_0);
    const BlockQ8_0* end = w.blocks + size_t(row_end) * nb;
    const ReadAhead next = call_hint().next;
    int n = row_begin;
    for (; n + R <= row_end; n += R) {
        const BlockQ8_0* g = w.blocks + size_t(n) * nb;
        stream_rows<NC, R>(w.blocks, nb, xs, xd8, y, w.rows, n, prefetch_offset(g, group, pf, end, next));
    }
    for (; n < row_end; ++n) {
        const BlockQ8_0* g = w.blocks + size_t(n) * nb;
        stream_rows<NC, 1>(w.blocks, nb, xs, xd8, y, w.rows, n, prefetch_offset(g, group / R, pf, end, next));
    }
}

// Bytes of one prepared group of nc columns (slots, then xd8; a multiple of 64).
inline size_t stream_prepared_bytes(int nc, int nb) {
    return size_t(nb) * nc * kStreamSlot + size_t(nb) * 8 * sizeof(float);
}

template <int NC>
void stream_nc(const QMatrixView& w, const BlockQ8_0* x, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    uint8_t* xs = kernel_scratch_bytes(stream_prepared_bytes(NC, nb));
    float* xd8 = reinterpret_cast<float*>(xs + size_t(nb) * NC * kStreamSlot);
    prepare_stream(x, NC, nb, xs, xd8);
    stream_range<NC, kStreamRows>(w, xs, xd8, y, row_begin, row_end, kStreamPrefetchBlocks);
}

// Rows a0 + i of a (2..4 columns) and b0 + i of b (1 column), i < the returned count (a multiple
// of kStreamRows; the rest stays for the plain kernels), fused by stream_pair_rows.
template <int NC>
int stream_pair_nc(const MatTask& a, int a0, int a1, const MatTask& b, int b0, int b1) {
    const int nb = a.w.cols / QK8_0;
    const int n = std::min(a1 - a0, b1 - b0) / kStreamRows * kStreamRows;
    if (n == 0) return 0;
    uint8_t* xsa = kernel_scratch_bytes(stream_prepared_bytes(NC, nb) + stream_prepared_bytes(1, nb));
    float* xda = reinterpret_cast<float*>(xsa + size_t(nb) * NC * kStreamSlot);
    uint8_t* xsb = xsa + stream_prepared_bytes(NC, nb);
    float* xdb = reinterpret_cast<float*>(xsb + size_t(nb) * kStreamSlot);
    prepare_stream(a.x, NC, nb, xsa, xda);
    prepare_stream(b.x, 1, nb, xsb, xdb);
    const intptr_t pf = intptr_t(std::max(size_t(kStreamRows) * nb, size_t(kStreamPrefetchBlocks)) * sizeof(BlockQ8_0));
    for (int i = 0; i < n; i += kStreamRows)
        stream_pair_rows<NC, kStreamRows>(a.w.blocks, xsa, xda, a.y, a.w.rows, a0 + i, b.w.blocks, xsb, xdb, b.y,
                                          b.w.rows, b0 + i, nb, pf);
    return n;
}

}  // namespace

void mmvq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                     int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    for (int c0 = 0; c0 < ncols; c0 += 8) {
        const int nc = ncols - c0 < 8 ? ncols - c0 : 8;
        const BlockQ8_0* xc = x + size_t(c0) * nb;
        float* yc = y + size_t(c0) * w.rows;
        if (nc <= 4) {
            switch (nc) {
                case 1: stream_nc<1>(w, xc, yc, row_begin, row_end); continue;
                case 2: stream_nc<2>(w, xc, yc, row_begin, row_end); continue;
                case 3: stream_nc<3>(w, xc, yc, row_begin, row_end); continue;
                default: stream_nc<4>(w, xc, yc, row_begin, row_end); continue;
            }
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

int mmvq_pair_avx512vnni(const MatTask& a, int a0, int a1, const MatTask& b, int b0, int b1) {
    if (a.kernel != MatKernel::kMMVQ || b.kernel != MatKernel::kMMVQ || b.ncols != 1 || a.w.cols != b.w.cols)
        return 0;
    switch (a.ncols) {
        case 2: return stream_pair_nc<2>(a, a0, a1, b, b0, b1);
        case 3: return stream_pair_nc<3>(a, a0, a1, b, b0, b1);
        case 4: return stream_pair_nc<4>(a, a0, a1, b, b0, b1);
        default: return 0;
    }
}

const KernelSet kAvx512VnniKernels = {"avx512vnni", mmvq_avx512vnni, mmq_avx512vnni, 4,
                                      kMmqRowTile, quantize_row_q8_0_avx2, mmvq_pair_avx512vnni};

}  // namespace dq::simd
