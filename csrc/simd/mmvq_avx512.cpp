// Narrow MMVQ on the AVX-512 VNNI path, canonical order: 1..4 columns stream W with 256-bit
// vpdpbusd lanes (stream_nc below), 5..8 columns take two activation columns per zmm.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// 5..8 columns: a zmm holds the 8 canonical lanes of column c0 (low half) and of column c0+1 (high half).
// Every op is lane-wise (vpdpbusd, cvt, mul, fma), so each half performs exactly the
// per-column sequence of vec_dot_q8_0_q8_0_ref: isum lanes of 4 products, s = wd * xd,
// acc = fma(s, isum, acc), canonical horizontal sum per half. Halving the vector-op count
// per column.
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

// ---- Streaming narrow MMVQ (1..4 columns), canonical order, 256-bit VNNI lanes ----------------
//
// The int8 dot puts the WEIGHTS on vpdpbusd's unsigned side: wu = w ^ 0x80 = w + 128, so
// dpbusd(c, wu, x) = c + sum (w + 128) x = c + w.x + 128 sum x per lane. The correction
// c = -128 * (sum of the 4 x of each lane) depends on X only: computed once per call and loaded
// as the accumulator's start, so a weight block costs one vpxor however many columns share it.
// Exact for any int8 w and x (w = -128 gives wu = 0). Every lane sum is exact int32; then per (row, block, column) s = wd * xd (one fp32 multiply)
// and acc = fma(s, isum, acc), the canonical horizontal sum at the end: the bits of
// vec_dot_q8_0_q8_0_ref.
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
    if (nc <= 4)  // lanes c + 4 repeat lanes c (the shared-multiply layout)
        for (int b = 0; b < nb; ++b)
            for (int c = 0; c < 4; ++c) {
                if (c >= nc) xd8[size_t(b) * 8 + c] = 0.0f;
                xd8[size_t(b) * 8 + 4 + c] = xd8[size_t(b) * 8 + c];
            }
}

// Block b of R rows x NC columns into acc (the body of stream_rows' block loop, also run
// interleaved with a second product's block by stream_pair_rows).
template <int NC, int R>
__attribute__((always_inline)) inline void stream_block(__m256 (&acc)[R * NC], const BlockQ8_0* const (&wrow)[R],
                                                        int b, intptr_t pfd, const uint8_t* xs, const float* xd8) {
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
    if constexpr (NC >= 2) {
        // One vmulps per row-block for every column: lanes c and c + 4 of xd8 hold xd of
        // column c, so s8 lane c = fl(wd * xd_c) (the same one rounding); vpermilps
        // broadcasts it in-lane. Saves NC - 1 multiplies on the FMA pipes, which bound
        // 2..4 columns at one thread (L2-resident, 4 columns: ~14 -> ~15 GB/s).
        const __m256 xd4 = _mm256_load_ps(xd8 + size_t(b) * 8);
        __m256 s8[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) s8[r] = _mm256_mul_ps(wd[r], xd4);
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
            const uint8_t* slot = xs + (size_t(b) * NC + c) * kStreamSlot;
            const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(slot));
            const __m256i corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(slot + 32));
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m256 isum = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(corr, wu[r], xq));
                acc[r * NC + c] = _mm256_fmadd_ps(_mm256_permute_ps(s8[r], c * 0x55), isum, acc[r * NC + c]);
            }
        }
    } else {
        const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + size_t(b) * kStreamSlot));
        const __m256i corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(xs + size_t(b) * kStreamSlot + 32));
        const __m256 xdc = _mm256_broadcast_ss(xd8 + size_t(b) * 8);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 isum = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(corr, wu[r], xq));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], xdc), isum, acc[r]);
        }
    }
}

template <int NC, int R>
__attribute__((always_inline)) inline void stream_store(const __m256 (&acc)[R * NC], float* y, int N, int n0) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) y[size_t(c) * N + n0 + r] = hsum_canonical(acc[r * NC + c]);
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
    __m256 acc[R * NC];
#pragma GCC unroll 16
    for (int i = 0; i < R * NC; ++i) acc[i] = _mm256_setzero_ps();
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
    __m256 acca[R * NC], accb[R];
#pragma GCC unroll 16
    for (int i = 0; i < R * NC; ++i) acca[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) accb[i] = _mm256_setzero_ps();
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
