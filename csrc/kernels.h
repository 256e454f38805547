// Quantized mat-vec / mat-mat entry points: the canonical reduction order, narrow MMVQ, MMQ.
//
// Shapes: W is (N, K) row-major, Q8_0 blocks of 32 along K (N rows x K/32 blocks).
//         X is (ncols, K): ncols activation rows, already quantized to Q8_0.
//         Y is (ncols, N) float32, row c holds W @ X[c].
//
// Canonical per-output reduction order (exactness rule 2, DESIGN.md) -- every "exact" path
// (scalar reference, AVX2, AVX-512, narrow MMVQ at any ncols) produces these exact bits:
//   acc = 0
//   for each block b in K order:
//     isum = sum_{i=0..31} w.qs[i] * x.qs[i]       (exact int32: any summation order)
//     s    = fp16(w.d) * fp16(x.d)                  (one fp32 multiply)
//     acc  = fmaf(s, (float)isum, acc)              (fused; |isum| < 2^24, so (float) is exact)
//   y = acc
// One lane per output: with the x16 layout (q8_0.h) a vector lane is a row, so nothing is
// summed across lanes, and the float work is one multiply and one fma per 16 rows and block.
// MMQ uses a different order on purpose and is NOT bitwise equal to the above.
#pragma once
#include <cstddef>
#include <cstdint>
#include "q8_0.h"

namespace dq {

class ThreadPool;  // threadpool.h; nullptr means run on the calling thread

struct QMatrixView {
    const BlockQ8_0* blocks;  // rows * (cols / 32) blocks, row-major
    int rows;                 // N (output features)
    int cols;                 // K (input features), multiple of 32
    // The same matrix in the x16 streaming layout (q8_0.h pack_q8_0_x16), or null. The SIMD
    // narrow-MMVQ kernels stream it; without it they run the scalar reference (same bits, slow).
    const uint8_t* packed = nullptr;
    // Counted weight bytes of one product: 34 per 32 weights (the padding rows of x16 not counted).
    size_t bytes() const { return size_t(rows) * size_t(cols / QK8_0) * sizeof(BlockQ8_0); }
};

enum class MatKernel : int {
    kMMVQ = 0,  // narrow mat-vec, ncols 1..8, canonical order, bitwise equal per column to ncols=1
    kMMQ = 1,   // tiled mat-mat, any ncols, its own reduction order (non-exact)
};

// The weight bytes a caller streams after the current product (its next matrix, or the F32 rows
// its next per-token op reads): a prefetch hint, never read as data. The streaming MMVQ kernels
// point their tail prefetches into it, so the next product's first rows are not fetched cold
// after the per-token work in between (the stream does not restart at every dispatch).
struct ReadAhead {
    const void* p = nullptr;
    size_t bytes = 0;
};
// A whole matrix as a read-ahead region (model_matmul.h adds QMatrix and F32Rows).
inline ReadAhead read_ahead_of(const QMatrixView& w) {
    if (w.packed != nullptr) return {w.packed, packed_bytes(w.rows, w.cols)};
    return {w.blocks, w.bytes()};
}

// Y[c, n] = dot(W[n, :], X[c, :]). Threads split output rows only, never K.
// kMMVQ requires 1 <= ncols <= 8. Returns nothing; inputs are validated by callers.
void mul_mat_q8_0(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                  MatKernel kernel, ThreadPool* pool, ReadAhead next = {});

// One product of a batch: y [ncols, w.rows] = x [ncols, w.cols] W^T with its own kernel.
struct MatTask {
    QMatrixView w;
    const BlockQ8_0* x;
    int ncols;
    float* y;
    MatKernel kernel;
};
// Independent products in one parallel region (one dispatch instead of one per product): the
// rows of all tasks form one range, each task starting on a slice-grain boundary, so every
// output row is computed exactly as mul_mat_q8_0 computes it (rows split, never K).
void mul_mat_q8_0_batch(const MatTask* tasks, int n, ThreadPool* pool, ReadAhead next = {});

// Scalar reference of the canonical order for one output: always compiled, used by tests.
float vec_dot_q8_0_q8_0_ref(const BlockQ8_0* w, const BlockQ8_0* x, int nblocks);

// Name of the active SIMD path ("amx", "avx512vnni", "avx2", "scalar"). At start-up it is the
// best one the CPU has (amx only when named: csrc/simd/mmvq_amx.cpp), or the one the environment
// variable DQ_SIMD_PATH names (scalar, avx2, avx512vnni, amx, auto) when the CPU has it.
const char* simd_path();
// Force a path (tests / benches): "scalar", "avx2", "avx512vnni", "amx", or "auto". Returns
// false if the CPU lacks it.
bool set_simd_path(const char* name);
// Why DQ_SIMD_PATH was not taken at start-up ("" when it was, or is unset).
const char* simd_path_env_error();

}  // namespace dq
