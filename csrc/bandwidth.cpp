// Timing probes: streaming read-bandwidth roofline and in-C++ timing of mul_mat_q8_0.
#include "bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu_features.h"
#include "model_weights.h"
#include "threadpool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dq {

namespace {

using Clock = std::chrono::steady_clock;

int64_t elapsed_ns(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

uint64_t sum_words_scalar(const uint64_t* p, size_t n) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
    }
    for (; i < n; ++i) a0 += p[i];
    return a0 + a1 + a2 + a3;
}

#if defined(__x86_64__)
// 4 independent 256-bit accumulators, 128 bytes per iteration: the loads, not the adds, bound it.
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + sum_words_scalar(p + i, n - i);
}
#endif

uint64_t sum_words(const uint64_t* p, size_t n) {
#if defined(__x86_64__)
    if (cpu_features().avx2) return sum_words_avx2(p, n);
#endif
    return sum_words_scalar(p, n);
}

// xorshift64*: deterministic filler for bench matrices (not a statistical RNG).
struct XorShift {
    uint64_t s;
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1DULL;
    }
};

void fill_random_blocks(BlockQ8_0* blocks, size_t n, XorShift& rng) {
    for (size_t i = 0; i < n; ++i) {
        const uint64_t r = rng.next();
        // scale in ~[1e-3, 1e-2]
        blocks[i].d = fp32_to_fp16(1e-3f + 9e-3f * float(r >> 40) / float(1 << 24));
        for (int j = 0; j < QK8_0; j += 8) {
            uint64_t q = rng.next();
            for (int t = 0; t < 8; ++t, q >>= 8) blocks[i].qs[j + t] = int8_t(int(q % 255u) - 127);
        }
    }
}

}  // namespace

double read_bandwidth_gbs(size_t bytes, int threads, int repeats) {
    const size_t words = std::max<size_t>(bytes / sizeof(uint64_t), 1);
    // Same memory as the model's weights (huge-page-advised arena), so the roofline is not
    // handicapped by 4 KiB page walks that the weights no longer pay.
    WeightArena arena(words * sizeof(uint64_t));
    uint64_t* const buf = static_cast<uint64_t*>(arena.data());
    ThreadPool pool(std::max(threads, 1));
    // Touch every page (from the threads that will read it) so first-touch faults are not timed.
    const int nslices = pool.size() * 64;
    pool.parallel_for(nslices, 1, [&](int b, int e) {
        const size_t w0 = words * size_t(b) / size_t(nslices), w1 = words * size_t(e) / size_t(nslices);
        for (size_t i = w0; i < w1; ++i) buf[i] = i;
    });
    std::atomic<uint64_t> sink{0};
    int64_t best = -1;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
        const auto t0 = Clock::now();
        pool.parallel_for(nslices, 1, [&](int b, int e) {
            const size_t w0 = words * size_t(b) / size_t(nslices), w1 = words * size_t(e) / size_t(nslices);
            sink.fetch_add(sum_words(buf + w0, w1 - w0), std::memory_order_relaxed);
        });
        const int64_t ns = elapsed_ns(t0);
        if (best < 0 || ns < best) best = ns;
    }
    return double(words * sizeof(uint64_t)) / double(std::max<int64_t>(best, 1));
}

MatBenchResult bench_mul_mat(int rows, int k, int ncols, MatKernel kernel, int threads,
                             int repeats, uint64_t seed, int mats) {
    const int nb = k / QK8_0;
    mats = std::max(mats, 1);
    XorShift rng{seed | 1};
    const size_t per_mat = size_t(rows) * nb;
    // W in a huge-page-advised arena like the model's weights (model_weights.h).
    // MMVQ reads the x16 copy (as the model's matrices carry one), MMQ the row-major blocks.
    const size_t pbytes = kernel == MatKernel::kMMVQ ? (packed_bytes(rows, k) + 63) / 64 * 64 : 0;
    WeightArena arena(per_mat * size_t(mats) * sizeof(BlockQ8_0));
    WeightArena parena(std::max<size_t>(pbytes * size_t(mats), 64));
    BlockQ8_0* const wb = static_cast<BlockQ8_0*>(arena.data());
    uint8_t* const pb = static_cast<uint8_t*>(parena.data());
    std::vector<BlockQ8_0> x(size_t(ncols) * nb);
    fill_random_blocks(wb, per_mat * size_t(mats), rng);
    fill_random_blocks(x.data(), x.size(), rng);
    if (pbytes > 0)
        for (int m = 0; m < mats; ++m) pack_q8_0_x16(wb + per_mat * size_t(m), rows, k, pb + pbytes * size_t(m));
    std::vector<float> y(size_t(ncols) * rows);
    ThreadPool pool(std::max(threads, 1));
    auto pass = [&] {
        for (int m = 0; m < mats; ++m) {
            const QMatrixView view{wb + per_mat * size_t(m), rows, k, pbytes > 0 ? pb + pbytes * size_t(m) : nullptr};
            mul_mat_q8_0(view, x.data(), ncols, y.data(), kernel, &pool);
        }
    };
    pass();  // warm-up
    std::vector<int64_t> times;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
        const auto t0 = Clock::now();
        pass();
        times.push_back(elapsed_ns(t0));
    }
    std::sort(times.begin(), times.end());
    MatBenchResult res;
    res.best_ns = times.front();
    res.median_ns = times[times.size() / 2];
    res.weight_bytes = per_mat * size_t(mats) * sizeof(BlockQ8_0);
    float sum = 0.0f;
    for (float v : y) sum += v;
    res.checksum = sum;
    return res;
}

}  // namespace dq
