// Scalar reference kernels: the canonical Q8_0 dot order (kernels.h) and a scalar MMQ.
//
// This file is the definition of "exact": every SIMD path is tested bitwise against
// vec_dot_q8_0_q8_0_ref. It is always compiled and is the fallback path on any CPU.
#include <cmath>

#include "kernels.h"
#include "simd/kernel_table.h"

namespace dq {

// w, x: nblocks Q8_0 blocks each (one row of W, one row of X). Canonical order:
// per block, 8 exact int32 lane sums of 4 products, s = fp16(w.d) * fp16(x.d),
// acc[j] = fmaf(s, isum[j], acc[j]); then the fixed tree
// ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7)).
float vec_dot_q8_0_q8_0_ref(const BlockQ8_0* w, const BlockQ8_0* x, int nblocks) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int b = 0; b < nblocks; ++b) {
        const float s = fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d);
        for (int j = 0; j < 8; ++j) {
            int32_t isum = 0;
            for (int i = 0; i < 4; ++i) {
                isum += int32_t(w[b].qs[4 * j + i]) * int32_t(x[b].qs[4 * j + i]);
            }
            acc[j] = std::fmaf(s, float(isum), acc[j]);
        }
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

namespace {

// Narrow MMVQ, scalar: each column is exactly vec_dot_q8_0_q8_0_ref.
void mmvq_scalar(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
                 int row_end) {
    const int nb = w.cols / QK8_0;
    for (int n = row_begin; n < row_end; ++n) {
        const BlockQ8_0* wr = w.blocks + size_t(n) * nb;
        for (int c = 0; c < ncols; ++c) {
            y[size_t(c) * w.rows + n] = vec_dot_q8_0_q8_0_ref(wr, x + size_t(c) * nb, nb);
        }
    }
}

// MMQ, scalar: its own order (non-exact on purpose): per block one full int32 sum of all 32
// products, then a single scalar accumulator acc += s * isum (unfused multiply, then add).
void mmq_scalar(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
                int row_end) {
    const int nb = w.cols / QK8_0;
    for (int n = row_begin; n < row_end; ++n) {
        const BlockQ8_0* wr = w.blocks + size_t(n) * nb;
        for (int c = 0; c < ncols; ++c) {
            const BlockQ8_0* xc = x + size_t(c) * nb;
            float acc = 0.0f;
            for (int b = 0; b < nb; ++b) {
                int32_t isum = 0;
                for (int i = 0; i < QK8_0; ++i) isum += int32_t(wr[b].qs[i]) * int32_t(xc[b].qs[i]);
                const float s = fp16_to_fp32(wr[b].d) * fp16_to_fp32(xc[b].d);
                const float p = s * float(isum);
                acc = acc + p;
            }
            y[size_t(c) * w.rows + n] = acc;
        }
    }
}

}  // namespace

namespace simd {
const KernelSet kScalarKernels = {"scalar", mmvq_scalar, mmq_scalar, 1, 1, quantize_row_q8_0_ref};
}

}  // namespace dq
