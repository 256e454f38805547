// AVX2 (+FMA, F16C) kernel set: tiled MMQ (int8 dot via sign + maddubs + madd over row-major
// blocks), the quantizer, and the table; the narrow MMVQ is mmvq_x16_avx2.cpp.
#include "mmvq_impl.h"
// (after mmvq_impl.h: the MMQ backend runs the MMVQ row bodies)
#include "mmq_impl.h"

namespace dq::simd {

void mmq_avx2(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
              int row_end) {
    mmq_tiled<MmqBackend256<ISumAvx2>>(w, x, ncols, y, row_begin, row_end);
}

const KernelSet kAvx2Kernels = {"avx2", mmvq_avx2, mmq_avx2, kPackRows, kMmqRowTile, quantize_row_q8_0_avx2};

}  // namespace dq::simd

namespace dq::simd {

// quantize_row_q8_0_ref, 8 lanes at a time, with the same IEEE operations in the same order:
// amax by max (exact, any order), d = amax / 127 (one division), q = x / d (one division),
// round half away from zero as t = trunc(q); t += sign(q) where |q - t| >= 0.5 (q - t is exact),
// then clamp to [-127, 127] with NaN going to -127 like fmin(127, fmax(-127, NaN)); a block
// whose d is 0 stores zeros. fp16(d) is F16C's round-to-nearest-even conversion, which equals the
// reference's fp32_to_fp16 for every non-NaN float (checked exhaustively over all 2^32 bit
// patterns); a NaN d (not reachable: amax drops NaNs) would take the scalar path.
void quantize_row_q8_0_avx2(const float* x, BlockQ8_0* y, int k) {
    const int nb = k / QK8_0;
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < nb; ++b) {
        const float* xb = x + size_t(b) * QK8_0;
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            // max(|x|, amax): a NaN |x| yields amax (second operand), as std::fmax(amax, NaN) does.
            amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[i]), amax);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float d = _mm_cvtss_f32(m4) / 127.0f;
        y[b].d = d == d ? uint16_t(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT)) : fp32_to_fp16(d);
        if (d == 0.0f) {
            std::memset(y[b].qs, 0, QK8_0);
            continue;
        }
        const __m256 dv = _mm256_set1_ps(d);
        __m256i qi[4];
        for (int i = 0; i < 4; ++i) {
            const __m256 q = _mm256_div_ps(v[i], dv);
            __m256 t = _mm256_round_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 frac = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(q, t));
            const __m256 step = _mm256_or_ps(_mm256_and_ps(q, sign_bit), one);  // copysign(1, q)
            t = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), step));
            t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);  // max(NaN, -127) = -127
            qi[i] = _mm256_cvtps_epi32(t);
        }
        const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
        const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
        const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), p);
    }
}

}  // namespace dq::simd
