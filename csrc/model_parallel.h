// Spreads per-token / per-element work of one step over the thread pool. Every helper
// partitions independent items only (tokens, heads, Q8_0 blocks, elements), each computed by
// exactly one thread with the same code, so results never depend on the split (rule 3).
#pragma once
#include <functional>

#include "q8_0.h"
#include "threadpool.h"

namespace dq {

// fn(i) for every i in [0, n); inline when there is no pool or fewer than min_items items
// (a pool dispatch costs microseconds: tiny per-token work runs faster on the caller).
void par_items(ThreadPool* pool, int n, const std::function<void(int)>& fn, int min_items = 2);

// Quantizes nrows contiguous rows of k floats (x [nrows, k] -> y [nrows, k/32] blocks) with
// dq::quantize_row_q8_0 on block ranges: blocks are independent, so the bytes equal row-by-row
// quantization.
void par_quantize_rows(ThreadPool* pool, const float* x, BlockQ8_0* y, int nrows, int k);

// Clamped SwiGLU then quantization for ncols columns: gu [ncols, 2f] (gate | up) ->
// h [ncols, f] -> hq [ncols, f/32], split over blocks of h.
void par_swiglu_quantize(ThreadPool* pool, const float* gu, float* h, BlockQ8_0* hq, int ncols, int f,
                         float limit);

}  // namespace dq
