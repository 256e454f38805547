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

struct Matmul {
    ThreadPool* pool;
    StepMode mode;
    StepStats* stats;
    // Y (ncols, W.rows) = X (ncols, W.cols) @ W^T; X already quantized to Q8_0.
    void operator()(const QMatrix& w, const BlockQ8_0* x, int ncols, float* y) const {
        OpTimer t(*stats, kOpMatmul);
        mul_mat_q8_0(w.view(), x, ncols, y, issue(w.view(), ncols), pool);
    }
    // Several independent products in one dispatch (mul_mat_q8_0_batch); each task's kernel is
    // chosen from its own ncols exactly as a single call would, and counted as one call.
    // tasks[i].kernel is set here.
    void batch(MatTask* tasks, int n) const {
        OpTimer t(*stats, kOpMatmul);
        for (int i = 0; i < n; ++i) tasks[i].kernel = issue(tasks[i].w, tasks[i].ncols);
        mul_mat_q8_0_batch(tasks, n, pool);
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
