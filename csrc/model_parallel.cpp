// Split-independent parallel helpers for per-token ops (see model_parallel.h).
#include "model_parallel.h"

#include <cstddef>

#include "model_ops.h"

namespace dq {

namespace {
// Below this many Q8_0 blocks a dispatch costs more than it saves.
constexpr int kMinParallelBlocks = 16;
constexpr int kBlockGrain = 4;
}  // namespace

void par_items(ThreadPool* pool, int n, const std::function<void(int)>& fn, int min_items) {
    if (!pool || pool->size() == 1 || n <= 1 || n < min_items) {
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
    pool->parallel_for(n, 1, [&](int b, int e) {
        for (int i = b; i < e; ++i) fn(i);
    });
}

void par_quantize_rows(ThreadPool* pool, const float* x, BlockQ8_0* y, int nrows, int k) {
    const int nb = nrows * (k / QK8_0);
    auto run = [&](int b0, int b1) { quantize_row_q8_0(x + size_t(b0) * QK8_0, y + b0, (b1 - b0) * QK8_0); };
    if (!pool || pool->size() == 1 || nb < kMinParallelBlocks) {
        run(0, nb);
        return;
    }
    pool->parallel_for(nb, kBlockGrain, run);
}

void par_swiglu_quantize(ThreadPool* pool, const float* gu, float* h, BlockQ8_0* hq, int ncols, int f,
                         float limit) {
    const int bpr = f / QK8_0;  // blocks per column
    const int nb = ncols * bpr;
    auto run = [&](int b0, int b1) {
        for (int b = b0; b < b1;) {  // walk column segments of the block range
            const int col = b / bpr, first = b % bpr;
            const int last = (b1 / bpr == col) ? b1 % bpr : bpr;
            const int e0 = first * QK8_0, n = (last - first) * QK8_0;
            const float* g = gu + size_t(col) * 2 * f;
            swiglu_clamped(g + e0, g + f + e0, h + size_t(col) * f + e0, n, limit);
            quantize_row_q8_0(h + size_t(col) * f + e0, hq + size_t(col) * bpr + first, n);
            b += last - first;
        }
    };
    if (!pool || pool->size() == 1 || nb < kMinParallelBlocks) {
        run(0, nb);
        return;
    }
    pool->parallel_for(nb, kBlockGrain, run);
}

}  // namespace dq
