// Internal SIMD building blocks for the Q8_0 kernels. Include only from csrc/simd/ files
// compiled with at least -mavx2 -mfma -mf16c. Everything here has internal linkage (static
// or anonymous namespace) so copies compiled with different -m flags never get merged.
#pragma once
#include <immintrin.h>

#include "../q8_0.h"
#include "kernel_table.h"

namespace dq::simd {
namespace {

// The strided horizontal sum ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)) (row-major bodies).
inline float hsum_canonical(__m256 a) {
    const __m128 lo = _mm256_castps256_ps128(a);
    const __m128 hi = _mm256_extractf128_ps(a, 1);
    const __m128 t = _mm_add_ps(lo, hi);                      // [a0+a4, a1+a5, a2+a6, a3+a7]
    const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));      // [t0+t2, t1+t3, ., .]
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));  // u0 + u1
}

// The other tree, used by MMQ on purpose (non-canonical):
// ((a0+a1) + (a2+a3)) + ((a4+a5) + (a6+a7)).
inline float hsum_adjacent(__m256 a) {
    const __m128 lo = _mm256_castps256_ps128(a);
    const __m128 hi = _mm256_extractf128_ps(a, 1);
    const __m128 p = _mm_hadd_ps(lo, hi);           // [a0+a1, a2+a3, a4+a5, a6+a7]
    const __m128 q = _mm_hadd_ps(p, p);             // [(a0+a1)+(a2+a3), (a4+a5)+(a6+a7), ...]
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

template <bool kCanonical>
inline float hsum_tree(__m256 a) {
    return kCanonical ? hsum_canonical(a) : hsum_adjacent(a);
}

// AVX2 packed dot policy on int16 words scaled by 256: the lane sums of ISumAvx2 times 2^8,
// without its per-column vpsignb, and 2 weight ops per block (a vpshufb + vpsraw widening took
// 4). Word m of the weight block holds bytes (w[2m], w[2m+1]); vpsllw 8 leaves w[2m] * 256 and
// vpand 0xFF00 leaves w[2m+1] * 256, both exact int16 (|w| <= 127). The activations are widened
// once per call to sign-extended words: even bytes (x[2m]) and odd bytes (x[2m+1]). Lane j
// (words 2j, 2j+1) of
// madd(even_w, even_x) + madd(odd_w, odd_x) = 256 * sum_{i<4} w[4j+i] * x[4j+i], exact in int32
// (|.| <= 256 * 4 * 127 * 127 < 2^24, so also exact as fp32). The caller scales xd by 2^-8
// (lane_scales): fl(wd * (xd / 256)) = fl(wd * xd) / 256 exactly (no fp16 product comes near
// the fp32 subnormals), so fma(s / 256, 256 * isum, acc) rounds the same real value as
// fma(s, isum, acc): the canonical bits.
struct ISumAvx2Words {
    static constexpr int kPackedVectors = 2;  // 32-byte vectors per packed (block, column)
    static constexpr float kScale = 1.0f / 256.0f;
    struct Prep {
        __m256i lo, hi;
    };
    static inline Prep prep(__m256i wq) {
        return {_mm256_slli_epi16(wq, 8), _mm256_and_si256(wq, _mm256_set1_epi16(short(0xFF00)))};
    }
    static inline void pack(const int8_t* qs, __m256i* out) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
        _mm256_store_si256(out, _mm256_srai_epi16(_mm256_slli_epi16(q, 8), 8));
        _mm256_store_si256(out + 1, _mm256_srai_epi16(q, 8));
    }
    static inline __m256i isum(const Prep& p, const __m256i* xp) {
        return _mm256_add_epi32(_mm256_madd_epi16(p.lo, _mm256_load_si256(xp)),
                                _mm256_madd_epi16(p.hi, _mm256_load_si256(xp + 1)));
    }
};

// AVX2 dot policy. Exact int32 lane sums of one block: lane j = sum_{i<4} w[4j+i] * x[4j+i].
// |w| (unsigned) * sign(x, w) (signed) = w * x per element; the int16 pair sums stay within
// 2*127*127 in magnitude, so maddubs never saturates for quants in [-127, 127]
// (quantize_row_q8_0 never produces -128; the bindings reject it).
struct ISumAvx2 {
    static constexpr bool kTransformsX = false;
    static constexpr bool kSingleStream = true;  // short MMVQ rows one at a time (mmvq_impl.h)
    using Packed = ISumAvx2Words;                 // 2..4 columns on short rows (mmvq_impl.h)
    struct Prep {
        __m256i wabs, wq;
    };
    static inline Prep prep(__m256i wq) { return {_mm256_abs_epi8(wq), wq}; }
    static inline __m256i transform_x(__m256i xq) { return xq; }
    static inline __m256i isum(const Prep& p, __m256i xq) {
        const __m256i p16 = _mm256_maddubs_epi16(p.wabs, _mm256_sign_epi8(xq, p.wq));
        return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    }
};

// fp16 scales of X (ncols rows of nb blocks) as fp32 (exact) into buf[b * stride + c].
inline void load_activation_scales(const BlockQ8_0* x, int ncols, int nb, int stride, float* buf) {
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < stride; ++c)
            buf[size_t(b) * stride + c] = c < ncols ? _cvtsh_ss(x[size_t(c) * nb + b].d) : 0.0f;
}

}  // namespace
}  // namespace dq::simd
