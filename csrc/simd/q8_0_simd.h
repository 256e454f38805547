// Internal SIMD building blocks for the Q8_0 kernels. Include only from csrc/simd/ files
// compiled with at least -mavx2 -mfma -mf16c. Everything here has internal linkage (static
// or anonymous namespace) so copies compiled with different -m flags never get merged.
#pragma once
#include <immintrin.h>

#include "../q8_0.h"
#include "kernel_table.h"

namespace dq::simd {
namespace {

// MMQ's horizontal sum of 8 lane accumulators (its own order, not the canonical one):
// ((a0+a1) + (a2+a3)) + ((a4+a5) + (a6+a7)).
inline float hsum_adjacent(__m256 a) {
    const __m128 lo = _mm256_castps256_ps128(a);
    const __m128 hi = _mm256_extractf128_ps(a, 1);
    const __m128 p = _mm_hadd_ps(lo, hi);           // [a0+a1, a2+a3, a4+a5, a6+a7]
    const __m128 q = _mm_hadd_ps(p, p);             // [(a0+a1)+(a2+a3), (a4+a5)+(a6+a7), ...]
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// AVX2 dot policy. Exact int32 lane sums of one block: lane j = sum_{i<4} w[4j+i] * x[4j+i].
// |w| (unsigned) * sign(x, w) (signed) = w * x per element; the int16 pair sums stay within
// 2*127*127 in magnitude, so maddubs never saturates for quants in [-127, 127]
// (quantize_row_q8_0 never produces -128; the bindings reject it).
struct ISumAvx2 {
    static constexpr bool kTransformsX = false;
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
