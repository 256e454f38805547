// Internal AVX2 helpers shared by the AVX2 and AVX-512 kernel files (include only from files
// compiled with -mavx2 -mfma -mf16c).
#pragma once
#include <immintrin.h>

#include <vector>

#include "../q8_0.h"

namespace dq::simd {

// Canonical horizontal sum (kernels.h): ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)).
static inline float hsum_canonical(__m256 a) {
    const __m128 lo = _mm256_castps256_ps128(a);
    const __m128 hi = _mm256_extractf128_ps(a, 1);
    const __m128 t = _mm_add_ps(lo, hi);                   // [a0+a4, a1+a5, a2+a6, a3+a7]
    const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));   // [t0+t2, t1+t3, ., .]
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));  // u0 + u1
}

// Exact int32 lane sums of one block: lane j = sum_{i<4} w[4j+i] * x[4j+i].
// wabs = |w| (unsigned), wq = w. Uses sign(x, w) so |w| * sign(x, w) = w * x per element;
// the int16 pair sums stay below 2*127*127 in magnitude, so maddubs never saturates for
// quants in [-127, 127] (quantize_row_q8_0 never produces -128).
static inline __m256i block_isum_avx2(__m256i wabs, __m256i wq, __m256i xq) {
    const __m256i p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xq, wq));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// fp16 scales of the ncols (<= stride) activation rows laid out as xd[b * stride + c] (fp32, exact).
static inline const float* activation_scales(const BlockQ8_0* x, int ncols, int nb, int stride) {
    thread_local std::vector<float> buf;
    buf.assign(size_t(nb) * stride, 0.0f);
    for (int c = 0; c < ncols; ++c) {
        for (int b = 0; b < nb; ++b) buf[size_t(b) * stride + c] = _cvtsh_ss(x[size_t(c) * nb + b].d);
    }
    return buf.data();
}

}  // namespace dq::simd
