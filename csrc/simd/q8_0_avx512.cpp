// AVX-512 VNNI kernel set (F, BW, VL, VNNI on 256-bit vectors): the int8 dot is one vpdpbusd,
// whose lane j sums exactly the products 4j..4j+3, i.e. the canonical lane layout.
#include "mmq_impl.h"
#include "mmvq_impl.h"

namespace dq::simd {

namespace {
// |w| (unsigned) times sign(x, w) (signed), 4 products per int32 lane, no saturation.
struct ISumVnni {
    static inline __m256i isum(__m256i wabs, __m256i wq, __m256i xq) {
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, _mm256_sign_epi8(xq, wq));
    }
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
