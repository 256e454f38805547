// ThreadPool: fixed workers that spin briefly on a generation counter, then sleep on a condvar.
//
// Dispatch cost matters: the model calls parallel_for dozens of times per token on small
// matrices. The caller publishes the job, bumps `generation_`, and runs slice 0 itself;
// workers that are still spinning pick the job up without a syscall, and the condvar is only
// touched when some worker has gone to sleep. Slices are static (slice t is worker t's), but
// the caller takes over any slice whose worker has not claimed it by the time the caller's
// own slice is done, so an oversubscribed machine degrades to one thread instead of waiting
// on a descheduled worker. Which thread computes a row never changes its value: every output
// is computed whole by one thread (rows are split, never K). One caller at a time:
// parallel_for is not meant to be entered concurrently from two outside threads; calls from
// inside a slice run inline on the calling worker.
#include "threadpool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
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
// How long an idle worker spins before sleeping: long enough to bridge the per-token work
// between back-to-back mat-vecs of one token, short enough not to burn a shared core between
// requests. Time-based because `pause` costs ~10 cycles on some cores and ~140 on others.
constexpr int64_t kSpinNs = 200000;
constexpr int kPausesPerClockCheck = 32;
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
    // claim[t] = the last generation whose slice t has been taken (by worker t or, if that
    // worker is slow to wake on an oversubscribed machine, by the caller). Generation-tagged,
    // so a worker waking late for a finished job can never take a slice of the next one.
    std::unique_ptr<std::atomic<uint64_t>[]> claim;
    std::atomic<int> done{0};  // slices 1..n_threads-1 finished for the current job
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

    bool try_claim(int t, uint64_t g) {
        uint64_t c = claim[t].load(std::memory_order_acquire);
        while (c < g) {
            if (claim[t].compare_exchange_weak(c, g, std::memory_order_acq_rel)) return true;
        }
        return false;
    }

    void worker_loop(int t) {
        uint64_t seen = 0;
        for (;;) {
            uint64_t g = generation.load(std::memory_order_acquire);
            int spins = 0;
            auto spin_start = std::chrono::steady_clock::now();
            while (g == seen) {
                bool keep_spinning = true;
                if (++spins % kPausesPerClockCheck == 0) {
                    keep_spinning = std::chrono::steady_clock::now() - spin_start <
                                    std::chrono::nanoseconds(kSpinNs);
                }
                if (keep_spinning) {
                    DQ_CPU_RELAX();
                } else {
                    std::unique_lock<std::mutex> lock(mu);
                    sleepers.fetch_add(1, std::memory_order_seq_cst);
                    cv.wait(lock, [&] { return generation.load(std::memory_order_seq_cst) != seen; });
                    sleepers.fetch_sub(1, std::memory_order_relaxed);
                    spins = 0;
                    spin_start = std::chrono::steady_clock::now();
                }
                g = generation.load(std::memory_order_acquire);
            }
            seen = g;
            if (stop.load(std::memory_order_acquire)) return;
            if (try_claim(t, g)) {
                run_slice(t);
                done.fetch_add(1, std::memory_order_acq_rel);
            }
        }
    }

    uint64_t publish() {
        const uint64_t g = generation.fetch_add(1, std::memory_order_seq_cst) + 1;
        if (sleepers.load(std::memory_order_seq_cst) > 0) {
            { std::lock_guard<std::mutex> lock(mu); }
            cv.notify_all();
        }
        return g;
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
    impl_->n_threads = n_threads < 1 ? 1 : n_threads;
    impl_->claim.reset(new std::atomic<uint64_t>[impl_->n_threads]);
    for (int t = 0; t < impl_->n_threads; ++t) impl_->claim[t].store(0);
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
    im.done.store(0, std::memory_order_relaxed);
    const uint64_t g = im.publish();
    im.run_slice(0);
    // Take over slices whose worker has not started yet (descheduled or still asleep).
    for (int t = 1; t < im.n_threads; ++t) {
        if (im.try_claim(t, g)) {
            im.run_slice(t);
            im.done.fetch_add(1, std::memory_order_acq_rel);
        }
    }
    int spins = 0;
    while (im.done.load(std::memory_order_acquire) != im.n_threads - 1) {
        if (++spins < kWaitSpinIters) {
            DQ_CPU_RELAX();
        } else {
            std::this_thread::yield();
        }
    }
}

}  // namespace dq
