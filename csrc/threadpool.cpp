// ThreadPool: fixed workers that spin briefly on a generation counter, then sleep on a condvar.
//
// Dispatch cost matters: the model calls parallel_for dozens of times per token on small
// matrices. The caller publishes the job, bumps `generation_`, and runs slice 0 itself;
// workers that are still spinning pick the job up without a syscall, and the condvar is only
// touched when some worker has gone to sleep. Slices are static (worker t always gets the
// t-th slice), so which thread computes which rows is deterministic. One caller at a time:
// parallel_for is not meant to be entered concurrently from two outside threads; calls from
// inside a slice run inline on the calling worker.
#include "threadpool.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DQ_CPU_RELAX() _mm_pause()
#else
#define DQ_CPU_RELAX() ((void)0)
#endif

namespace dq {

namespace {
// ~tens of microseconds of pause before a worker sleeps: long enough to bridge back-to-back
// mat-vecs inside one token, short enough not to burn a shared core between requests.
constexpr int kSpinIters = 20000;
// The caller waits for stragglers by spinning this long, then yields.
constexpr int kWaitSpinIters = 2000;
// Set while this thread runs a slice: a nested parallel_for (a kernel called from inside a
// parallel region) runs inline instead of deadlocking on the busy pool.
thread_local bool t_in_parallel = false;

struct InParallelScope {
    bool prev;
    InParallelScope() : prev(t_in_parallel) { t_in_parallel = true; }
    ~InParallelScope() { t_in_parallel = prev; }
};
}  // namespace

struct ThreadPool::Impl {
    int n_threads = 1;
    std::vector<std::thread> workers;

    std::atomic<uint64_t> generation{0};
    std::atomic<int> pending{0};
    std::atomic<int> sleepers{0};
    std::atomic<bool> stop{false};  // set before the final generation bump
    std::mutex mu;
    std::condition_variable cv;

    // The current job (written by the caller before bumping generation).
    const std::function<void(int, int)>* fn = nullptr;
    int n = 0;
    int grain = 1;

    void run_slice(int t) const {
        InParallelScope scope;
        const int chunks = (n + grain - 1) / grain;
        const int c0 = int(int64_t(chunks) * t / n_threads);
        const int c1 = int(int64_t(chunks) * (t + 1) / n_threads);
        if (c0 >= c1) return;
        const int begin = c0 * grain;
        const int end = c1 * grain < n ? c1 * grain : n;
        (*fn)(begin, end);
    }

    void worker_loop(int t) {
        uint64_t seen = 0;
        for (;;) {
            uint64_t g = generation.load(std::memory_order_acquire);
            int spins = 0;
            while (g == seen) {
                if (++spins < kSpinIters) {
                    DQ_CPU_RELAX();
                } else {
                    std::unique_lock<std::mutex> lock(mu);
                    sleepers.fetch_add(1, std::memory_order_seq_cst);
                    cv.wait(lock, [&] { return generation.load(std::memory_order_seq_cst) != seen; });
                    sleepers.fetch_sub(1, std::memory_order_relaxed);
                    spins = 0;
                }
                g = generation.load(std::memory_order_acquire);
            }
            seen = g;
            if (stop.load(std::memory_order_acquire)) return;
            run_slice(t);
            pending.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    void publish() {
        generation.fetch_add(1, std::memory_order_seq_cst);
        if (sleepers.load(std::memory_order_seq_cst) > 0) {
            { std::lock_guard<std::mutex> lock(mu); }
            cv.notify_all();
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
    impl_->n_threads = n_threads < 1 ? 1 : n_threads;
    for (int t = 1; t < impl_->n_threads; ++t) {
        impl_->workers.emplace_back([this, t] { impl_->worker_loop(t); });
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->stop.store(true, std::memory_order_release);
        impl_->generation.fetch_add(1, std::memory_order_seq_cst);
    }
    impl_->cv.notify_all();
    for (std::thread& th : impl_->workers) th.join();
    delete impl_;
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int n, int grain, const std::function<void(int, int)>& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    Impl& im = *impl_;
    if (im.n_threads == 1 || n <= grain || t_in_parallel) {
        fn(0, n);
        return;
    }
    im.fn = &fn;
    im.n = n;
    im.grain = grain;
    im.pending.store(im.n_threads - 1, std::memory_order_relaxed);
    im.publish();
    im.run_slice(0);
    int spins = 0;
    while (im.pending.load(std::memory_order_acquire) != 0) {
        if (++spins < kWaitSpinIters) {
            DQ_CPU_RELAX();
        } else {
            std::this_thread::yield();
        }
    }
}

}  // namespace dq
