// Timing probes for benches: DRAM read-bandwidth roofline and in-C++ mat-mul timing.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels.h"

namespace dq {

// Multi-threaded streaming read (sum of 64-bit words, AVX2 loads into 4 accumulators when
// available) over a freshly allocated buffer of `bytes` (default callers use >= 1 GiB, far
// above the LLC), in huge-page-advised memory like the model's weights (WeightArena). Returns the best of `repeats` passes in GB/s (1e9 bytes per second).
double read_bandwidth_gbs(size_t bytes, int threads, int repeats);

struct MatBenchResult {
    int64_t best_ns = 0;     // fastest of `repeats` calls (after one untimed warm-up call)
    int64_t median_ns = 0;   // median of the timed calls
    size_t weight_bytes = 0; // Q8_0 bytes of W read per call
    float checksum = 0.0f;   // sum of Y from the last call (keeps the work observable)
};

// Times mul_mat_q8_0 on a random W (rows x k, Q8_0, in a WeightArena like the model's weights)
// and X (ncols x k) built in C++, so no Python overhead is measured. Quants are uniform in [-127, 127], scales fp16 in ~[1e-3, 1e-2].
// mats > 1: `mats` distinct matrices of rows x k, called back to back as one timed pass (the
// model's pattern: many 1-2 MB matrices streamed from DRAM); times and bytes cover the pass.
MatBenchResult bench_mul_mat(int rows, int k, int ncols, MatKernel kernel, int threads,
                             int repeats, uint64_t seed, int mats = 1);

}  // namespace dq
