// One matmul call site for the model: picks MMVQ/MMQ per call, counts the weight bytes each
// issued call streams, and times op families (steady_clock ns) for profiling.
#pragma once
#include <chrono>
#include <cstdint>

#include "kernels.h"
#include "model_weights.h"

namespace dq {

enum OpFamily : int {
    kOpMatmul = 0,   // every mul_mat_q8_0 call
    kOpAttention,    // per-token attention (window + compressed rows)
    kOpCompressor,   // compressor writes + pooling
    kOpRouter,       // routing (sqrt-softplus scores, top-k)
    kOpHC,           // hyper-connection pre/post
    kOpPerToken,     // norms, RoPE, activation quantization, SwiGLU, gathers/combines
    kOpCount,
};
inline const char* op_family_name(int op) {
    static const char* names[kOpCount] = {"matmul", "attention", "compressor", "router", "hc", "per_token"};
    return names[op];
}

struct StepStats {
    uint64_t weight_bytes = 0;  // sum of W.bytes() over issued matmul calls
    // F32 weight rows the step reads besides the matmuls (HC dyn projections, router): once per
    // step whatever its width, as the Q8_0 matrices; norm vectors and the embedding rows are not
    // counted (< 0.1 MB per ds4-mini token).
    uint64_t f32_weight_bytes = 0;
    uint64_t matmul_calls = 0;
    bool used_mmq = false;
    int64_t op_ns[kOpCount] = {};
};

// Exact mode: a call with ncols <= mmvq_max_ncols uses narrow MMVQ, wider ones MMQ (non-exact).
// Approximate mode: every call uses MMQ.
struct StepMode {
    int mmvq_max_ncols = 4;
    bool approximate = false;
};

inline int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the elapsed time of its scope to stats.op_ns[op].
class OpTimer {
public:
    OpTimer(StepStats& s, int op) : s_(s), op_(op), t0_(now_ns()) {}
    ~OpTimer() { s_.op_ns[op_] += now_ns() - t0_; }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;

private:
    StepStats& s_;
    int op_;
    int64_t t0_;
};

// A matrix or F32 rows as a read-ahead region (kernels.h ReadAhead, read_ahead_of(QMatrixView)).
inline ReadAhead read_ahead_of(const QMatrix& w) { return read_ahead_of(w.view()); }
inline ReadAhead read_ahead_of(const F32Rows& r) { return {r.data(), r.size() * sizeof(float)}; }

// How much of a read-ahead region per-token work prefetches for the product after it: the
// streaming kernels' own prefetch distance (1024 Q8_0 blocks), so that product's prefetches
// start where these end.
constexpr size_t kReadAheadBytes = 1024 * sizeof(BlockQ8_0);

// Part i of n of the first kReadAheadBytes of r, prefetched into L2: a loop of n latency-bound
// steps (F32 rows read one by one) spreads the next product's stream start over its steps.
inline void prefetch_part(const ReadAhead& r, int i, int n) {
    if (r.p == nullptr || n <= 0) return;
    const size_t total = r.bytes < kReadAheadBytes ? r.bytes : kReadAheadBytes;
    const size_t b = total * size_t(i) / size_t(n) / 64 * 64, e = total * size_t(i + 1) / size_t(n);
    for (size_t o = b; o < e; o += 64) __builtin_prefetch(static_cast<const char*>(r.p) + o, 0, 1);
}

struct Matmul {
    ThreadPool* pool;
    StepMode mode;
    StepStats* stats;
    // Y (ncols, W.rows) = X (ncols, W.cols) @ W^T; X already quantized to Q8_0. next: the weights
    // the step reads after this product (a prefetch hint, kernels.h ReadAhead).
    void operator()(const QMatrix& w, const BlockQ8_0* x, int ncols, float* y, ReadAhead next = {}) const {
        OpTimer t(*stats, kOpMatmul);
        mul_mat_q8_0(w.view(), x, ncols, y, issue(w.view(), ncols), pool, next);
    }
    // Several independent products in one dispatch (mul_mat_q8_0_batch); each task's kernel is
    // chosen from its own ncols exactly as a single call would, and counted as one call.
    // tasks[i].kernel is set here.
    void batch(MatTask* tasks, int n, ReadAhead next = {}) const {
        OpTimer t(*stats, kOpMatmul);
        for (int i = 0; i < n; ++i) tasks[i].kernel = issue(tasks[i].w, tasks[i].ncols);
        mul_mat_q8_0_batch(tasks, n, pool, next);
    }

private:
    // The kernel for one product (MMQ when approximate or wider than the narrow-MMVQ cap), and
    // its count: the weight bytes it streams, one call.
    MatKernel issue(const QMatrixView& w, int ncols) const {
        const bool mmq = mode.approximate || ncols > mode.mmvq_max_ncols;
        stats->weight_bytes += w.bytes();
        stats->matmul_calls += 1;
        stats->used_mmq = stats->used_mmq || mmq;
        return mmq ? MatKernel::kMMQ : MatKernel::kMMVQ;
    }
};

}  // namespace dq
