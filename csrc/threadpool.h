// A fixed pool of worker threads that splits an index range into contiguous slices.
#pragma once
#include <functional>

namespace dq {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads >= 1; thread 0 is the caller
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const;
    // Calls fn(begin, end) on contiguous, disjoint slices covering [0, n); slice
    // boundaries are multiples of `grain`. Blocks until all slices are done.
    void parallel_for(int n, int grain, const std::function<void(int, int)>& fn);

private:
    struct Impl;
    Impl* impl_;
};

}  // namespace dq
