// The AVX-512 VNNI path: narrow MMVQ over the x16 layout (canonical order, 2..8 columns below;
// one column runs the AVX2 x16 body, mmvq_avx512vnni) and MMQ, whose tiles run the row-major zmm body here (two activation columns per zmm, 8 int32
// lanes of 4 products each, its own non-canonical tree: not bitwise equal to MMVQ).
//
// W is (N, K), Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// GCC 12's avx512fintrin.h writes _mm512_undefined_* as `__m512 __Y = __Y;`, which trips
// -Wmaybe-uninitialized where the intrinsics inline (the sanitizer build's flags show it): GCC
// bug 105593, fixed in GCC 13. Before any include, so it covers that header's lines.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernel_table.h"
#include "mmq_impl.h"

namespace dq::simd {

namespace {

constexpr int kZmmPrefetchBytes = 512;

// Prepared activations per block b and column pair p (c0 = 2p, c1 = 2p+1, or c0 again for
// an odd tail whose high half is discarded): xp holds 64 bytes = (x+128) of c0 | of c1, and
// xd16 holds 16 floats = fp32(xd of c0) x 8 | fp32(xd of c1) x 8.
template <int NC, int R>
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
            y[size_t(2 * p) * N + n0 + r] = hsum_adjacent(_mm512_castps512_ps256(a));
            if (2 * p + 1 < NC) {
                const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
                y[size_t(2 * p + 1) * N + n0 + r] = hsum_adjacent(hi);
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

template <int NC>
void zmm_row_range(const QMatrixView& w, const uint8_t* xp, const float* xd16, float* y,
                   int row_begin, int row_end) {
    // 4 rows for every NC: <= 16 accumulators + 12 weight registers of 32; measured ~15%
    // faster than 2 rows for NC 5..8 on the Xeon device (more rows in flight per x load).
    constexpr int R = 4;
    const int nb = w.cols / QK8_0;
    int n = row_begin;
    for (; n + R <= row_end; n += R)
        mmvq_rows_zmm<NC, R>(w.blocks, nb, xp, xd16, y, w.rows, n);
    for (; n < row_end; ++n) mmvq_rows_zmm<NC, 1>(w.blocks, nb, xp, xd16, y, w.rows, n);
}

void zmm_row_range_any(int nc, const QMatrixView& w, const uint8_t* xp, const float* xd16,
                       float* y, int row_begin, int row_end) {
    switch (nc) {
        case 1: return zmm_row_range<1>(w, xp, xd16, y, row_begin, row_end);
        case 2: return zmm_row_range<2>(w, xp, xd16, y, row_begin, row_end);
        case 3: return zmm_row_range<3>(w, xp, xd16, y, row_begin, row_end);
        case 4: return zmm_row_range<4>(w, xp, xd16, y, row_begin, row_end);
        case 5: return zmm_row_range<5>(w, xp, xd16, y, row_begin, row_end);
        case 6: return zmm_row_range<6>(w, xp, xd16, y, row_begin, row_end);
        case 7: return zmm_row_range<7>(w, xp, xd16, y, row_begin, row_end);
        default: return zmm_row_range<8>(w, xp, xd16, y, row_begin, row_end);
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
        zmm_row_range_any(nc, w, static_cast<const uint8_t*>(prepared), xd16, y, row_begin,
                                 row_end);
    }
};

// ---- Narrow MMVQ over the x16 layout (q8_0.h), canonical order --------------------------------
//
// One zmm lane per row of a 16-row group: per block b and quad q, the line qs[b][q] holds the
// group's 16 rows' 4 values, and vpdpbusd with the column's 4 activation bytes broadcast
// ({1to16} from memory) adds each row's 4 products to its lane. The WEIGHTS sit on the unsigned
// side (wu = w ^ 0x80 = w + 128), so dpbusd(c, wu, x) = c + w.x + 128 sum x: the per-(block, column)
// correction c = -128 * sum(x) starts the int32 sum, computed once per call. After the 8 quads
// (two chains of 4, added: exact int32) each lane holds the row's exact block sum; then per block
// and column one vcvtdq2ps, s = wd * xd (16 rows' scales by one vcvtph2ps, one vmulps) and one
// fma: the bits of vec_dot_q8_0_q8_0_ref, with nothing summed across lanes.
//
// W streams as one sequential stream per thread (kernel_table.h for_each_x16_group,
// prefetch_x16). Four prefetches per 64-byte line (one per 16 bytes): on the 2.6 GHz Zen 4, one
// column streamed from a 1 GiB x16 matrix (K = 1024, 1 thread, 15 alternated passes, medians) read
// 20.9 GB/s at one prefetch per line, 21.8 at two, 24.1 at four, 20.9 at eight (row-major 4-row
// body of the earlier order 22.8, read probe 28.9); 16 / 32 / 64 KB ahead at four per line 22.6 /
// 24.1 / 24.1. Hardware prefetchers alone: ~12.

// Prepared activations of nc columns per block b (kernel scratch): xq [nb][nc][32] int8,
// corr [nb][nc] int32 (-128 * sum x), xd [nb][nc] fp32.
struct X16Prep {
    const int8_t* xq;
    const int32_t* corr;
    const float* xd;
};

inline X16Prep prepare_x16(const BlockQ8_0* x, int nc, int nb) {
    uint8_t* buf = kernel_scratch_bytes(size_t(nb) * nc * (32 + 4 + 4));
    int8_t* xq = reinterpret_cast<int8_t*>(buf);
    int32_t* corr = reinterpret_cast<int32_t*>(buf + size_t(nb) * nc * 32);
    float* xd = reinterpret_cast<float*>(buf + size_t(nb) * nc * 36);
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < nc; ++c) {
            const BlockQ8_0& xb = x[size_t(c) * nb + b];
            int32_t sum = 0;
            for (int i = 0; i < QK8_0; ++i) sum += xb.qs[i];
            std::memcpy(xq + (size_t(b) * nc + c) * 32, xb.qs, 32);
            corr[size_t(b) * nc + c] = -128 * sum;
            xd[size_t(b) * nc + c] = _cvtsh_ss(xb.d);
        }
    return {xq, corr, xd};
}

inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// One 16-row group (base: its packed bytes) x NC columns -> y rows [n0, n0 + valid).
template <int NC>
inline void x16_group(const uint8_t* base, int nb, const X16Prep& xp, float* y, int N, int n0, int valid,
                      intptr_t pfd) {
    const __m512i bias = _mm512_set1_epi8(char(0x80));
    const uint16_t* dsec = reinterpret_cast<const uint16_t*>(base + size_t(nb) * kPackBlockBytes);
    __m512 acc[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    for (int b = 0; b < nb; ++b) {
        const uint8_t* q = base + size_t(b) * kPackBlockBytes;
        prefetch_x16<1>(base, b, pfd);
        __m512i s0[NC], s1[NC];
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
            s0[c] = _mm512_set1_epi32(xp.corr[size_t(b) * NC + c]);
            s1[c] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int i = 0; i < 8; i += 2) {
            const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(q + i * kPackQuadBytes), bias);
            const __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(q + (i + 1) * kPackQuadBytes), bias);
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) {
                const int8_t* xc = xp.xq + (size_t(b) * NC + c) * 32;
                s0[c] = _mm512_dpbusd_epi32(s0[c], w0, bcast4(xc + 4 * i));
                s1[c] = _mm512_dpbusd_epi32(s1[c], w1, bcast4(xc + 4 * i + 4));
            }
        }
        const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dsec + size_t(b) * kPackRows)));
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
            const __m512 s = _mm512_mul_ps(wd, _mm512_set1_ps(xp.xd[size_t(b) * NC + c]));
            acc[c] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_add_epi32(s0[c], s1[c])), acc[c]);
        }
    }
    const __mmask16 m = valid >= kPackRows ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1u);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(y + size_t(c) * N + n0, m, acc[c]);
}

template <int NC>
void x16_range(const QMatrixView& w, const BlockQ8_0* x, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    const X16Prep xp = prepare_x16(x, NC, nb);
    for_each_x16_group(w, row_begin, row_end, kX16PrefetchBytes, [&](const uint8_t* g, int n, int valid, intptr_t pfd) {
        x16_group<NC>(g, nb, xp, y, w.rows, n, valid, pfd);
    });
}

}  // namespace

void mmvq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                     int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    for (int c0 = 0; c0 < ncols; c0 += 8) {
        const int nc = ncols - c0 < 8 ? ncols - c0 : 8;
        const BlockQ8_0* xc = x + size_t(c0) * nb;
        float* yc = y + size_t(c0) * w.rows;
        switch (nc) {
            // One column: the AVX2 x16 body (same canonical bits). It streams DRAM faster here:
            // on the 2.6 GHz Zen 4, ds4-mini q1 prefill with one process toggling the two bodies
            // per prefill, 1.08-1.14x at 1 thread (12-15 rounds, three runs), 1.03x at 2; at 4
            // columns the zmm body stays far ahead (the AVX2 body 0.81x / 0.85x). Four prefetch
            // placements in the zmm body (spread over its lines, 2 or 8 per line, prefetcht0,
            // 16 / 64 KB ahead) moved it by -22% .. +8%, none to the AVX2 body's rate.
            case 1: mmvq_avx2(w, xc, 1, yc, row_begin, row_end); break;
            case 2: x16_range<2>(w, xc, yc, row_begin, row_end); break;
            case 3: x16_range<3>(w, xc, yc, row_begin, row_end); break;
            case 4: x16_range<4>(w, xc, yc, row_begin, row_end); break;
            case 5: x16_range<5>(w, xc, yc, row_begin, row_end); break;
            case 6: x16_range<6>(w, xc, yc, row_begin, row_end); break;
            case 7: x16_range<7>(w, xc, yc, row_begin, row_end); break;
            default: x16_range<8>(w, xc, yc, row_begin, row_end); break;
        }
    }
}

void mmq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                    int row_begin, int row_end) {
    mmq_tiled<MmqBackendZmm>(w, x, ncols, y, row_begin, row_end);
}

const KernelSet kAvx512VnniKernels = {"avx512vnni", mmvq_avx512vnni, mmq_avx512vnni, kPackRows, kMmqRowTile,
                                      quantize_row_q8_0_avx2};

}  // namespace dq::simd
