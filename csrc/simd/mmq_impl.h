// MMQ driver: cache-tiled Q8_0 mat-mat for any ncols with its own (non-canonical) reduction
// order, built on a row-kernel backend (the MMVQ bodies). Internal linkage only.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// Tiling: all column groups (8 columns each) are prepared once; then for each tile of
// kMmqRowTile rows, every column group runs over that tile while its weights sit in L1/L2,
// so W is streamed from memory once for any ncols (narrow MMVQ with ncols > 8 would stream
// it once per group of 8). X (ncols * K * 34/32 bytes) is reused from L2.
// Reduction order (differs from kernels.h on purpose; NOT bitwise equal to MMVQ): per block
// 8 exact int32 lane sums of 4 products and fma(s, isum, acc) per lane, then the adjacent-pair
// tree ((a0+a1) + (a2+a3)) + ((a4+a5) + (a6+a7)), where MMVQ takes one fma per block.
//
// Backend interface (static members):
//   size_t floats_per_group(int nb), bytes_per_group(int nb)       scratch per column group
//   const void* prepare(const BlockQ8_0* x, int nc, int nb, float*, uint8_t*)
//   void rows(int nc, const QMatrixView&, const void* prepared, const float* xd, float* y,
//             int row_begin, int row_end)                          non-canonical tree
#pragma once
#include "mmvq_impl.h"

namespace dq::simd {
namespace {

// Rows per tile: 16 rows of K = 4096 are ~70 KB of weights, resident in L2 while every
// column group passes over them; a multiple of every backend's rows-per-step.
constexpr int kMmqRowTile = 16;
constexpr int kMmqGroup = 8;

template <class Backend>
void mmq_tiled(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
               int row_end) {
    const int nb = w.cols / QK8_0;
    const int ngroups = (ncols + kMmqGroup - 1) / kMmqGroup;
    const size_t fpg = Backend::floats_per_group(nb), bpg = Backend::bytes_per_group(nb);
    float* xd = kernel_scratch(fpg * ngroups);
    uint8_t* bytes = bpg ? kernel_scratch_bytes(bpg * ngroups) : nullptr;
    const void* prepared[64];  // up to 512 columns in one call
    const void** prep = prepared;
    struct Heap {
        const void** p = nullptr;
        ~Heap() { delete[] p; }
    } heap;
    if (ngroups > 64) prep = heap.p = new const void*[ngroups];
    for (int g = 0; g < ngroups; ++g) {
        const int c0 = g * kMmqGroup;
        const int nc = ncols - c0 < kMmqGroup ? ncols - c0 : kMmqGroup;
        prep[g] = Backend::prepare(x + size_t(c0) * nb, nc, nb, xd + fpg * g,
                                   bytes ? bytes + bpg * g : nullptr);
    }
    for (int n0 = row_begin; n0 < row_end; n0 += kMmqRowTile) {
        const int n1 = n0 + kMmqRowTile < row_end ? n0 + kMmqRowTile : row_end;
        for (int g = 0; g < ngroups; ++g) {
            const int c0 = g * kMmqGroup;
            const int nc = ncols - c0 < kMmqGroup ? ncols - c0 : kMmqGroup;
            Backend::rows(nc, w, prep[g], xd + fpg * g, y + size_t(c0) * w.rows, n0, n1);
        }
    }
}

// 256-bit backend over mmvq_rows (AVX2 or VNNI dot policy).
template <class ISum>
struct MmqBackend256 {
    static size_t floats_per_group(int nb) { return size_t(nb) * 8; }
    static size_t bytes_per_group(int nb) {
        return ISum::kTransformsX ? size_t(nb) * kMmqGroup * sizeof(BlockQ8_0) : 0;
    }
    static const void* prepare(const BlockQ8_0* x, int nc, int nb, float* xd, uint8_t* bytes) {
        return prepare_group<ISum>(x, nc, nb, xd, reinterpret_cast<BlockQ8_0*>(bytes));
    }
    static void rows(int nc, const QMatrixView& w, const void* prepared, const float* xd, float* y,
                     int row_begin, int row_end) {
        mmvq_row_range_any<ISum>(nc, w, static_cast<const BlockQ8_0*>(prepared), xd, y, row_begin, row_end);
    }
};

}  // namespace
}  // namespace dq::simd
