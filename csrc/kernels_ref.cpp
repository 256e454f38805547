// Scalar reference kernels: the canonical Q8_0 dot order (kernels.h), narrow MMVQ over it, a scalar MMQ.
//
// This file is the definition of "exact": every SIMD path is tested bitwise against
// vec_dot_q8_0_q8_0_ref. It is always compiled and is the fallback path on any CPU.
#include <cmath>

#include "kernels.h"
#include "simd/kernel_table.h"

namespace dq {

// w, x: nblocks Q8_0 blocks each (one row of W, one row of X). Canonical order: per block in K
// order one exact int32 sum of its 32 products, s = fp16(w.d) * fp16(x.d), acc = fmaf(s, isum, acc).
float vec_dot_q8_0_q8_0_ref(const BlockQ8_0* w, const BlockQ8_0* x, int nblocks) {
    float acc = 0.0f;
    for (int b = 0; b < nblocks; ++b) {
        int32_t isum = 0;
        for (int i = 0; i < QK8_0; ++i) isum += int32_t(w[b].qs[i]) * int32_t(x[b].qs[i]);
        const float s = fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d);
        acc = std::fmaf(s, float(isum), acc);
    }
    return acc;
}

namespace {

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

// Narrow MMVQ, scalar: each column is exactly vec_dot_q8_0_q8_0_ref (a packed row gathered first).
void mmvq_scalar(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    BlockQ8_0* row = w.packed != nullptr ? kernel_scratch_blocks(size_t(nb)) : nullptr;
    for (int n = row_begin; n < row_end; ++n) {
        const BlockQ8_0* wr = w.blocks + size_t(n) * nb;
        if (row != nullptr) {
            for (int b = 0; b < nb; ++b) unpack_block_x16(w.packed, w.cols, n, b, row + b);
            wr = row;
        }
        for (int c = 0; c < ncols; ++c) y[size_t(c) * w.rows + n] = vec_dot_q8_0_q8_0_ref(wr, x + size_t(c) * nb, nb);
    }
}

const KernelSet kScalarKernels = {"scalar", mmvq_scalar, mmq_scalar, 1, 1, quantize_row_q8_0_ref};
}

}  // namespace dq
