// AVX-512 VNNI kernel set (F, BW, VL, VNNI on 256-bit vectors): the int8 dot is one vpdpbusd
// per column, whose lane j sums exactly the products 4j..4j+3 (the canonical lane layout).
#include "mmq_impl.h"
#include "mmvq_impl.h"

namespace dq::simd {

namespace {
// Offset trick: xu = x ^ 0x80 = x + 128 as unsigned bytes (transformed once per call), so
// one vpdpbusd(corr, xu, w) = corr + sum (x + 128) * w per lane; corr = -128 * sum w per lane
// is computed once per weight block and shared by all columns. All int32, exact, and any
// int8 w (even -128) is fine.
struct ISumVnni {
    static constexpr bool kTransformsX = true;
    struct Prep {
        __m256i wq, corr;
    };
    static inline Prep prep(__m256i wq) {
        const __m256i sum128 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(char(0x80)), wq);
        return {wq, _mm256_sub_epi32(_mm256_setzero_si256(), sum128)};
    }
    static inline __m256i transform_x(__m256i xq) {
        return _mm256_xor_si256(xq, _mm256_set1_epi8(char(0x80)));
    }
    static inline __m256i isum(const Prep& p, __m256i xu) { return _mm256_dpbusd_epi32(p.corr, xu, p.wq); }
};
}  // namespace

void mmvq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                     int row_begin, int row_end) {
    mmvq_any<ISumVnni>(w, x, ncols, y, row_begin, row_end);
}

void mmq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                    int row_begin, int row_end) {
    mmq_any<ISumVnni>(w, x, ncols, y, row_begin, row_end);
}

const KernelSet kAvx512VnniKernels = {"avx512vnni", mmvq_avx512vnni, mmq_avx512vnni, 4,
                                      kMmqRowTile};

}  // namespace dq::simd
