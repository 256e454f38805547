// AVX-512 VNNI kernel set: MMQ here (256-bit vpdpbusd per column; lane j sums exactly the
// products 4j..4j+3) and the table; the narrow MMVQ body is in mmvq_avx512.cpp.
#include "mmq_impl.h"

namespace dq::simd {


void mmq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                    int row_begin, int row_end) {
    mmq_any<ISumVnni>(w, x, ncols, y, row_begin, row_end);
}

const KernelSet kAvx512VnniKernels = {"avx512vnni", mmvq_avx512vnni, mmq_avx512vnni, 4,
                                      kMmqRowTile};

}  // namespace dq::simd
