// AVX2 (+FMA, F16C) kernel set: narrow MMVQ (canonical order) and tiled MMQ, int8 dot via
// sign + maddubs + madd.
#include "mmvq_impl.h"
// (after mmvq_impl.h: the MMQ backend runs the MMVQ row bodies)
#include "mmq_impl.h"

namespace dq::simd {

void mmvq_avx2(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
               int row_end) {
    mmvq_any<ISumAvx2>(w, x, ncols, y, row_begin, row_end);
}

void mmq_avx2(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
              int row_end) {
    mmq_tiled<MmqBackend256<ISumAvx2>>(w, x, ncols, y, row_begin, row_end);
}

const KernelSet kAvx2Kernels = {"avx2", mmvq_avx2, mmq_avx2, 4, kMmqRowTile};

}  // namespace dq::simd
