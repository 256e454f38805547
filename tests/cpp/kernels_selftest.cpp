// Standalone C++ self-test of the Q8_0 kernels (no Python), for sanitizer builds:
//   tests/cpp/run_selftest.sh   (builds with -fsanitize=address,undefined and runs it)
// Checks, for every SIMD path this CPU has: narrow MMVQ bitwise equal to the scalar reference
// for ncols 1..12 and thread counts 1..3 on ragged shapes; MMQ thread-count independent and
// within a loose relative bound. Exits non-zero on the first failure.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels.h"
#include "q8_0.h"
#include "threadpool.h"

using namespace dq;

namespace {

std::vector<BlockQ8_0> random_rows(std::mt19937& rng, int n, int k) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n) * k);
    for (float& v : x) v = nd(rng);
    std::vector<BlockQ8_0> b(size_t(n) * (k / QK8_0));
    for (int r = 0; r < n; ++r) quantize_row_q8_0(x.data() + size_t(r) * k, b.data() + size_t(r) * (k / QK8_0), k);
    return b;
}

int failures = 0;

void check(bool ok, const char* what, const char* path, int rows, int k, int nc, int t) {
    if (ok) return;
    ++failures;
    std::fprintf(stderr, "FAIL %s path=%s rows=%d k=%d ncols=%d threads=%d\n", what, path, rows, k, nc, t);
}

}  // namespace

int main() {
    std::mt19937 rng(1234);
    const char* paths[] = {"scalar", "avx2", "avx512vnni", "amx"};
    const int shapes[][2] = {{1, 32}, {7, 64}, {33, 96}, {257, 160}, {40, 4096}};
    ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
    for (const auto& sh : shapes) {
        const int rows = sh[0], k = sh[1], nb = k / QK8_0;
        const auto w = random_rows(rng, rows, k);
        const auto x = random_rows(rng, 12, k);
        std::vector<float> ref(size_t(12) * rows);
        for (int c = 0; c < 12; ++c)
            for (int n = 0; n < rows; ++n)
                ref[size_t(c) * rows + n] = vec_dot_q8_0_q8_0_ref(w.data() + size_t(n) * nb, x.data() + size_t(c) * nb, nb);
        std::vector<uint8_t> packed(packed_bytes(rows, k));
        pack_q8_0_x16(w.data(), rows, k, packed.data());
        const QMatrixView view{w.data(), rows, k, packed.data()};  // narrow MMVQ streams the x16 copy
        for (const char* path : paths) {
            if (!set_simd_path(path)) continue;
            for (int nc = 1; nc <= 12; ++nc) {
                std::vector<float> mmq1;
                for (int t = 0; t < 3; ++t) {
                    std::vector<float> y(size_t(nc) * rows, -1.0f);
                    mul_mat_q8_0(view, x.data(), nc, y.data(), MatKernel::kMMVQ, &pools[t]);
                    check(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0, "mmvq!=ref", path, rows, k, nc, t + 1);
                    std::vector<float> q(size_t(nc) * rows, -1.0f);
                    mul_mat_q8_0(view, x.data(), nc, q.data(), MatKernel::kMMQ, &pools[t]);
                    if (t == 0) mmq1 = q;
                    check(std::memcmp(q.data(), mmq1.data(), q.size() * sizeof(float)) == 0, "mmq thread-dependent", path, rows, k, nc, t + 1);
                    double worst = 0.0;
                    for (size_t i = 0; i < q.size(); ++i) {
                        worst = std::fmax(worst, std::fabs(double(q[i]) - ref[i]) / (std::fabs(double(ref[i])) + 1e-3));
                    }
                    check(worst < 1e-3, "mmq far from ref", path, rows, k, nc, t + 1);
                }
            }
            std::printf("ok %-10s rows=%d k=%d\n", path, rows, k);
        }
    }
    set_simd_path("auto");
    std::printf(failures ? "FAILED (%d)\n" : "all passed\n", failures);
    return failures ? 1 : 0;
}
