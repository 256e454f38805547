// Public mul_mat_q8_0 entry point: picks the ISA kernel table once, splits rows over threads.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "cpu_features.h"
#include "kernels.h"
#include "simd/kernel_table.h"
#include "threadpool.h"

namespace dq {

namespace {

const simd::KernelSet* best_available() {
    const CpuFeatures& f = cpu_features();
    // amx (where the CPU and the kernel allow it) only when asked for: measured slower than
    // avx512vnni on the one AMX host here (csrc/simd/mmvq_amx.cpp).
    if (f.avx512vnni_path()) return &simd::kAvx512VnniKernels;
    if (f.avx2_path()) return &simd::kAvx2Kernels;
    return &simd::kScalarKernels;
}

const simd::KernelSet* by_name(const char* name) {
    const CpuFeatures& f = cpu_features();
    if (std::strcmp(name, "auto") == 0) return best_available();
    if (std::strcmp(name, "scalar") == 0) return &simd::kScalarKernels;
    if (std::strcmp(name, "avx2") == 0 && f.avx2_path()) return &simd::kAvx2Kernels;
    if (std::strcmp(name, "avx512vnni") == 0 && f.avx512vnni_path()) return &simd::kAvx512VnniKernels;
    if (std::strcmp(name, "amx") == 0 && f.amx_path()) return &simd::kAmxKernels;
    return nullptr;
}

// The start-up path: DQ_SIMD_PATH (scalar, avx2, avx512vnni, auto) when it names a path this
// CPU has, else the best available one (simd_path_env_error() says why it was not taken).
const simd::KernelSet* startup_path() {
    const char* env = std::getenv("DQ_SIMD_PATH");
    if (env == nullptr || *env == '\0') return best_available();
    const simd::KernelSet* ks = by_name(env);
    return ks != nullptr ? ks : best_available();
}

std::atomic<const simd::KernelSet*>& active() {
    static std::atomic<const simd::KernelSet*> set{startup_path()};
    return set;
}

// The part of `next` a thread whose rows start at fraction num / den of this dispatch reads in the
// next one: the same fraction, as the next dispatch's static split will give it (a hint only).
ReadAhead read_ahead_at(const ReadAhead& next, size_t num, size_t den) {
    if (next.p == nullptr || den == 0) return next;
    const size_t skip = next.bytes * num / den / 64 * 64;
    return {static_cast<const char*>(next.p) + skip, next.bytes - skip};
}

// Runs fn with the calling thread's hint (simd::call_hint) set to `next` and `threads`, then clears it.
template <class Fn>
void with_hint(const ReadAhead& next, int threads, Fn&& fn) {
    simd::call_hint() = {next, threads};
    fn();
    simd::call_hint() = {};
}

// The row kernel of ks for a product: narrow MMVQ needs w's x16 copy; a matrix without one (a
// row-major view from other code) gets the scalar reference's rows, the same bits.
simd::MatRowsFn rows_fn(const simd::KernelSet* ks, MatKernel kernel, const QMatrixView& w) {
    if (kernel == MatKernel::kMMQ) return ks->mmq;
    return w.packed != nullptr ? ks->mmvq : simd::mmvq_scalar;
}

}  // namespace

const char* simd_path() { return active().load(std::memory_order_relaxed)->name; }

const char* simd_path_env_error() {
    const char* env = std::getenv("DQ_SIMD_PATH");
    if (env == nullptr || *env == '\0' || by_name(env) != nullptr) return "";
    return "DQ_SIMD_PATH names no SIMD path this CPU has (expected scalar, avx2, avx512vnni, amx or auto)";
}

bool set_simd_path(const char* name) {
    const simd::KernelSet* chosen = by_name(name);
    if (chosen == nullptr) return false;
    active().store(chosen, std::memory_order_relaxed);
    return true;
}

// W is (N, K), X is (ncols, K), Y is (ncols, N). Threads get contiguous row slices whose
// boundaries are multiples of the kernel's grain; K is never split, so every output is
// computed by one thread in one fixed order and the result is independent of thread count.
void mul_mat_q8_0(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                  MatKernel kernel, ThreadPool* pool, ReadAhead next) {
    const simd::KernelSet* ks = active().load(std::memory_order_relaxed);
    const simd::MatRowsFn fn = rows_fn(ks, kernel, w);
    const int grain = kernel == MatKernel::kMMVQ ? ks->mmvq_grain : ks->mmq_grain;
    if (pool == nullptr || pool->size() <= 1 || w.rows <= grain) {
        with_hint(next, 1, [&] { fn(w, x, ncols, y, 0, w.rows); });
        return;
    }
    pool->parallel_for(w.rows, grain, [&](int begin, int end) {
        with_hint(read_ahead_at(next, size_t(begin), size_t(w.rows)), pool->size(),
                  [&] { fn(w, x, ncols, y, begin, end); });
    });
}

void mul_mat_q8_0_batch(const MatTask* tasks, int n, ThreadPool* pool, ReadAhead next) {
    const simd::KernelSet* ks = active().load(std::memory_order_relaxed);
    const int threads = pool == nullptr ? 1 : pool->size();
    auto run = [&](const MatTask& t, int lo, int hi, const ReadAhead& after) {  // rows [lo, hi) of one product
        with_hint(after, threads, [&] { rows_fn(ks, t.kernel, t.w)(t.w, t.x, t.ncols, t.y, lo, hi); });
    };
    if (pool == nullptr || pool->size() <= 1) {
        // One thread: each product's stream runs on into the next one's (the last into `next`).
        for (int i = 0; i < n; ++i) run(tasks[i], 0, tasks[i].w.rows, i + 1 < n ? read_ahead_of(tasks[i + 1].w) : next);
        return;
    }
    // A grain that is a multiple of both kernels' grains, so every slice boundary inside a task
    // is one its kernel could have seen from mul_mat_q8_0.
    const int grain = std::lcm(ks->mmvq_grain, ks->mmq_grain);
    std::vector<int> off(size_t(n) + 1, 0);  // task i owns [off[i], off[i] + rows) of the range
    for (int i = 0; i < n; ++i) off[i + 1] = off[i] + (tasks[i].w.rows + grain - 1) / grain * grain;
    pool->parallel_for(off[n], grain, [&](int begin, int end) {
        for (int i = 0; i < n; ++i) {
            const int lo = std::max(begin, off[i]) - off[i];
            const int hi = std::min(end, off[i] + tasks[i].w.rows) - off[i];
            // A slice that goes on into task i + 1 reads its first rows next; one that ends
            // here reads its part of `next` in the next dispatch.
            const ReadAhead after = i + 1 < n && end > off[i + 1] ? read_ahead_of(tasks[i + 1].w)
                                                                  : read_ahead_at(next, size_t(begin), size_t(off[n]));
            if (lo < hi) run(tasks[i], lo, hi, after);
        }
    });
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int k) {
    active().load(std::memory_order_relaxed)->quantize(x, y, k);
}

}  // namespace dq

namespace dq::simd {
bool prefetch_far() {
    static const bool far = cpu_features().avx512f;
    return far;
}
CallHint& call_hint() {
    thread_local CallHint hint;
    return hint;
}
float* kernel_scratch(size_t n) {
    thread_local std::vector<float> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}
uint8_t* kernel_scratch_bytes(size_t n) {
    struct alignas(64) Line {
        uint8_t b[64];
    };
    thread_local std::vector<Line> buf;
    if (buf.size() * 64 < n) buf.resize((n + 63) / 64);
    return buf.data()->b;
}
BlockQ8_0* kernel_scratch_blocks(size_t n) {
    thread_local std::vector<BlockQ8_0> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}
}  // namespace dq::simd
