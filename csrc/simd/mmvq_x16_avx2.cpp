// Narrow MMVQ on the AVX2 path over the x16 layout (q8_0.h), canonical order, 1..8 columns.
//
// One ymm lane per row: a 64-byte line qs[b][q] holds 16 rows' 4 values of quad q, read as two
// ymm (rows 0..7, rows 8..15). Per half and quad (no VNNI): |w| once (vpabsb), shared by the
// columns; per column x4 (its 4 activation bytes, broadcast from memory) given w's signs
// (vpsignb), vpmaddubsw(|w|, x4 * sign(w)) (pairs of products: |w| <= 128 and |x| <= 127 fit
// int16), vpmaddwd by ones (the row's 4 products, int32), vpaddd into the row's block sum: exact
// int32, so each lane ends the block with its row's exact sum. Then per block, half and column
// one vcvtdq2ps, s = wd * xd (8 rows' scales by one vcvtph2ps, one vmulps) and one fma: the bits
// of vec_dot_q8_0_q8_0_ref. On the Zen 4 vpabsb, vpsignb, vpmaddubsw and vpmaddwd share two
// pipes (bench/engine/pipe_mix.py), so per column and 32 values that is 3 ops on them.
//
// Registers (16 ymm): NC <= 2 runs both halves per block; 3..4 columns one half per pass (the
// group's second pass reads its lines from L2); 5..8 columns as groups of at most 4.
#include <algorithm>
#include <cstring>

#include "kernel_table.h"
#include "q8_0_simd.h"

namespace dq::simd {

namespace {

// prefetch_far(): prefetcht2 kX16PrefetchBytes ahead (AVX-512 hosts running this path); else
// prefetcht0 4 KB ahead (the near policy measured on Zen 3 for row-major streams).
// Four prefetches per 64-byte line, as on the AVX-512 path: forced AVX2 on the 2.6 GHz Zen 4,
// ds4-mini 64-token prefill, one process toggling the step per prefill (20 rounds): against one
// per 16 bytes, one per 32 / 64 bytes gave q1 0.863x / 0.769x at 1 thread and 0.959x / 0.937x at
// 2 threads, q4 1.003x / 0.937x and 1.022x / 0.959x; one per 8 bytes 0.901x (q1), 0.869x (q4).
constexpr size_t kNearBytes = 4352;

struct X16Prep2 {
    const int8_t* xq;  // [nb][nc][32] signed quants
    const float* xd;   // [nb][nc]
};

inline X16Prep2 prepare_x16_avx2(const BlockQ8_0* x, int nc, int nb) {
    uint8_t* buf = kernel_scratch_bytes(size_t(nb) * nc * (32 + 4));
    int8_t* xq = reinterpret_cast<int8_t*>(buf);
    float* xd = reinterpret_cast<float*>(buf + size_t(nb) * nc * 32);
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < nc; ++c) {
            const BlockQ8_0& xb = x[size_t(c) * nb + b];
            std::memcpy(xq + (size_t(b) * nc + c) * 32, xb.qs, 32);
            xd[size_t(b) * nc + c] = _cvtsh_ss(xb.d);
        }
    return {xq, xd};
}

inline __m256i bcast4(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Halves [h0, h0 + H) of one group x NC columns -> y rows n0 + 8h .. (valid rows of the group),
// the ops of the header. The block's 8 lines are unrolled with immediate offsets from one weight
// and one activation pointer, so the loop keeps no pointer on the stack.
template <int NC, int H>
inline void x16_group_avx2(const uint8_t* base, int nb, const X16Prep2& xp, float* y, int N, int n0, int valid,
                           int h0, intptr_t pfd, bool far) {
    const __m256i ones = _mm256_set1_epi16(1);
    const uint16_t* dsec = reinterpret_cast<const uint16_t*>(base + size_t(nb) * kPackBlockBytes);
    __m256 acc[H * NC];
#pragma GCC unroll 8
    for (int i = 0; i < H * NC; ++i) acc[i] = _mm256_setzero_ps();
    for (int b = 0; b < nb; ++b) {
        const uint8_t* q = base + size_t(b) * kPackBlockBytes + 32 * h0;
        const int8_t* xb = xp.xq + size_t(b) * NC * 32;
        if (h0 == 0) {  // the first pass over a group prefetches its stream
            if (far) prefetch_x16<1, 1, true>(base, b, pfd);
            else prefetch_x16<3, 1, true>(base, b, pfd);
        }
        __m256i s[H * NC];
#pragma GCC unroll 8
        for (int i = 0; i < H * NC; ++i) s[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            __m256i w[H], wa[H];
#pragma GCC unroll 2
            for (int h = 0; h < H; ++h) {
                w[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i * kPackQuadBytes + 32 * h));
                wa[h] = _mm256_abs_epi8(w[h]);
            }
#pragma GCC unroll 4
            for (int c = 0; c < NC; ++c) {
                const __m256i xc = bcast4(xb + c * 32 + 4 * i);
#pragma GCC unroll 2
                for (int h = 0; h < H; ++h) {
                    const __m256i p = _mm256_maddubs_epi16(wa[h], _mm256_sign_epi8(xc, w[h]));
                    s[h * NC + c] = _mm256_add_epi32(s[h * NC + c], _mm256_madd_epi16(p, ones));
                }
            }
            // Keep each sum one running register: unbarred, GCC reassociated the 8 lines' adds
            // into trees and spilled the products to the stack.
#pragma GCC unroll 8
            for (int k = 0; k < H * NC; ++k) asm("" : "+x"(s[k]));
        }
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
            const __m256 wd = _mm256_cvtph_ps(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(dsec + size_t(b) * kPackRows + 8 * (h0 + h))));
#pragma GCC unroll 4
            for (int c = 0; c < NC; ++c) {
                const __m256 sc = _mm256_mul_ps(wd, _mm256_set1_ps(xp.xd[size_t(b) * NC + c]));
                acc[h * NC + c] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(s[h * NC + c]), acc[h * NC + c]);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h) {
        const int r0 = 8 * (h0 + h), nv = std::min(8, valid - r0);
        if (nv <= 0) continue;
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
            float* out = y + size_t(c) * N + n0 + r0;
            if (nv == 8) {
                _mm256_storeu_ps(out, acc[h * NC + c]);
            } else {
                alignas(32) float t[8];
                _mm256_store_ps(t, acc[h * NC + c]);
                std::memcpy(out, t, sizeof(float) * size_t(nv));
            }
        }
    }
}

template <int NC>
void x16_range_avx2(const QMatrixView& w, const BlockQ8_0* x, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    const X16Prep2 xp = prepare_x16_avx2(x, NC, nb);
    const bool far = prefetch_far();
    for_each_x16_group(w, row_begin, row_end, far ? kX16PrefetchBytes : kNearBytes,
                       [&](const uint8_t* g, int n, int valid, intptr_t pfd) {
                           if constexpr (NC <= 2) {
                               x16_group_avx2<NC, 2>(g, nb, xp, y, w.rows, n, valid, 0, pfd, far);
                           } else {
                               x16_group_avx2<NC, 1>(g, nb, xp, y, w.rows, n, valid, 0, pfd, far);
                               if (valid > 8) x16_group_avx2<NC, 1>(g, nb, xp, y, w.rows, n, valid, 1, pfd, far);
                           }
                       });
}

}  // namespace

void mmvq_avx2(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    for (int c0 = 0; c0 < ncols; c0 += 4) {
        const int nc = std::min(4, ncols - c0);
        const BlockQ8_0* xc = x + size_t(c0) * nb;
        float* yc = y + size_t(c0) * w.rows;
        switch (nc) {
            case 1: x16_range_avx2<1>(w, xc, yc, row_begin, row_end); break;
            case 2: x16_range_avx2<2>(w, xc, yc, row_begin, row_end); break;
            case 3: x16_range_avx2<3>(w, xc, yc, row_begin, row_end); break;
            default: x16_range_avx2<4>(w, xc, yc, row_begin, row_end); break;
        }
    }
}

}  // namespace dq::simd
