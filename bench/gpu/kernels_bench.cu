// GPU kernel bench: checks, then timings, of csrc/cuda/q8_kernels (quantize_q8, narrow MMVQ, MMQ).
//
// Usage: gpu_kernels_bench OUT.json [--reps N] [--time-even-if-failed]
// Build: the CMake target gpu_kernels_bench (option DQ_GPU_BENCH; CMakeLists.txt shows the
//        two commands; scripts/gpu_device_run.sh runs them).
//
// Checks (every one must pass before anything is timed; exit code 1 otherwise):
//   quantize_q8      bytes and scales bitwise equal to quantize_row_q8_0_ref (random, specials).
//   mmvq bitwise     for every config and ncols 1..8, column j == the 1-column default call on
//                    column j, bit for bit; every output written (outputs poisoned first).
//   mmvq grouped     every column of a grouped call (three matrices, slots of 1..4 columns,
//                    activation rows permuted, one slot past n skipped) == the 1-column default
//                    call of its matrix on its activation row, bit for bit.
//   mmvq / mmq ref   ||y - ref|| / ||ref|| < kRelTol against a float64 reference of the same
//                    quantized operands (float32 accumulation over <= 512 blocks lands near 1e-7).
// Timing: W is 16384 x 16384 Q8_0 (256 MiB qs + 16 MiB scales), three such matrices rotated so no
// launch finds its weights in the 60 MB L2; CUDA events around each launch, warm-ups first,
// median of --reps launches. Bytes counted: weight bytes streamed (34 per 32 weights).
// The device-to-device copy rate (1 GiB, read + write bytes) is measured in the same run, and the
// per-launch fixed cost: an empty kernel, the read-only stream at 256 MiB..1 GiB and the default
// MMVQ at 8192, 16384 and 32768 x 16384, fitted as t = t0 + bytes / rate.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/q8_kernels.cuh"
#include "q8_0.h"

using dq::cuda::MmvqConfig;
using dq::cuda::Q8Acts;
using dq::cuda::Q8Weights;

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, \
                         __LINE__, cudaGetErrorString(e_));                                   \
            std::exit(2);                                                                     \
        }                                                                                     \
    } while (0)

namespace {

constexpr double kRelTol = 1e-5;  // float32 accumulation vs float64; a wrong block shows ~1e-2
constexpr uint32_t kPoison = 0x7fc0dead;  // a NaN no kernel produces from finite inputs

int g_fail = 0;
std::set<std::string> g_bad_variants;  // sweep configs that failed a bitwise check (not timed)
void check(bool ok, const std::string& what) {
    std::printf("  [%s] %s\n", ok ? "ok" : "FAIL", what.c_str());
    if (!ok) ++g_fail;
}

uint32_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

template <class T>
T* dalloc(size_t n) {
    T* p = nullptr;
    CK(cudaMalloc(&p, n * sizeof(T) + 16));
    return p;
}

// Host-side Q8 matrix (SoA) plus device copies.
struct HostQ8 {
    int rows = 0, cols = 0;
    std::vector<int8_t> qs;
    std::vector<uint16_t> d;
};

HostQ8 make_host_weights(int rows, int cols, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> row(cols);
    std::vector<dq::BlockQ8_0> blocks(size_t(rows) * (cols / 32));
    for (int r = 0; r < rows; ++r) {
        const float scale = 0.02f * (1.0f + float(r % 7));
        for (int c = 0; c < cols; ++c) row[c] = nd(rng) * scale;
        dq::quantize_row_q8_0_ref(row.data(), blocks.data() + size_t(r) * (cols / 32), cols);
    }
    HostQ8 h;
    h.rows = rows;
    h.cols = cols;
    h.qs.resize(size_t(rows) * cols);
    h.d.resize(size_t(rows) * (cols / 32));
    dq::cuda::split_q8_blocks(blocks.data(), rows, cols, h.qs.data(), h.d.data());
    return h;
}

struct DevQ8W {
    int8_t* qs = nullptr;
    uint16_t* d = nullptr;
    int rows = 0, cols = 0;
    Q8Weights view() const { return {qs, d, rows, cols}; }
};

DevQ8W upload(const HostQ8& h) {
    DevQ8W w;
    w.rows = h.rows;
    w.cols = h.cols;
    w.qs = dalloc<int8_t>(h.qs.size());
    w.d = dalloc<uint16_t>(h.d.size());
    CK(cudaMemcpy(w.qs, h.qs.data(), h.qs.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w.d, h.d.data(), h.d.size() * 2, cudaMemcpyHostToDevice));
    return w;
}

// Activations: random floats -> quantize on the GPU (checked bitwise against the CPU) -> host copy.
struct Acts {
    int ncols = 0, cols = 0;
    int8_t* qs = nullptr;
    float* d = nullptr;
    std::vector<int8_t> hqs;
    std::vector<float> hd;
    Q8Acts view(int n, int first = 0) const {
        return {qs + size_t(first) * cols, d + size_t(first) * (cols / 32), n, cols};
    }
};

Acts make_acts(int ncols, int cols, std::mt19937& rng, bool specials) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(ncols) * cols);
    for (auto& v : x) v = nd(rng) * 3.0f;
    if (specials && cols >= 64) {
        // Block 0 of column 0: all zero. Block 1: exact halfway quotients (x/d = k + 0.5),
        // subnormal-scale values and an exact amax. Last column's block 0: tiny values.
        for (int i = 0; i < 32; ++i) x[i] = 0.0f;
        for (int i = 0; i < 32; ++i) x[32 + i] = (i == 0) ? 127.0f : float(i) + 0.5f;
        for (int i = 0; i < 32; ++i) x[size_t(ncols - 1) * cols + i] = 1e-30f * float(i - 16);
    }
    float* dx = dalloc<float>(x.size());
    CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    Acts a;
    a.ncols = ncols;
    a.cols = cols;
    a.qs = dalloc<int8_t>(x.size());
    a.d = dalloc<float>(x.size() / 32);
    dq::cuda::quantize_q8(dx, ncols, cols, a.qs, a.d, nullptr);
    CK(cudaDeviceSynchronize());
    a.hqs.resize(x.size());
    a.hd.resize(x.size() / 32);
    CK(cudaMemcpy(a.hqs.data(), a.qs, a.hqs.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(a.hd.data(), a.d, a.hd.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(dx));
    // Bitwise against the CPU reference.
    std::vector<dq::BlockQ8_0> ref(cols / 32);
    size_t bad = 0;
    for (int c = 0; c < ncols; ++c) {
        dq::quantize_row_q8_0_ref(x.data() + size_t(c) * cols, ref.data(), cols);
        for (int b = 0; b < cols / 32; ++b) {
            const size_t bi = size_t(c) * (cols / 32) + b;
            if (fbits(a.hd[bi]) != fbits(dq::fp16_to_fp32(ref[b].d))) ++bad;
            if (std::memcmp(&a.hqs[bi * 32], ref[b].qs, 32) != 0) ++bad;
        }
    }
    check(bad == 0, "quantize_q8 " + std::to_string(ncols) + "x" + std::to_string(cols) +
                        (specials ? " (with zero/halfway/tiny blocks)" : "") +
                        " bitwise == quantize_row_q8_0_ref (" + std::to_string(bad) + " bad)");
    return a;
}

// float64 reference of y[c, r] for the listed rows.
double rel_err_vs_f64(const HostQ8& w, const Acts& a, int ncols, const std::vector<float>& y,
                      const std::vector<int>& rows_to_check) {
    const int nb = w.cols / 32;
    double num = 0, den = 0;
    for (int c = 0; c < ncols; ++c)
        for (int r : rows_to_check) {
            double acc = 0;
            for (int b = 0; b < nb; ++b) {
                int isum = 0;
                const int8_t* wq = &w.qs[size_t(r) * w.cols + b * 32];
                const int8_t* xq = &a.hqs[size_t(c) * w.cols + b * 32];
                for (int i = 0; i < 32; ++i) isum += int(wq[i]) * int(xq[i]);
                acc += double(dq::fp16_to_fp32(w.d[size_t(r) * nb + b])) *
                       double(a.hd[size_t(c) * nb + b]) * double(isum);
            }
            const double diff = double(y[size_t(c) * w.rows + r]) - acc;
            num += diff * diff;
            den += acc * acc;
        }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}


// Host emulation of the documented GPU canonical order (q8_kernels.cuh) for P warps per row:
// lane t of 32 P owns block 32 P i + t of chunk i; isum over its 32 products; s = fp16(w.d) * x.d;
// acc = fmaf(s, isum, acc); the xor butterfly in each warp; the pairwise tree over the P warp
// sums. The kernels must match it bit for bit.
float pairwise(const float* p, int n) {
    return n == 1 ? p[0] : pairwise(p, n / 2) + pairwise(p + n / 2, n / 2);
}

float gpu_order_emulated(const HostQ8& w, const Acts& a, int r, int c, int P) {
    const int nb = w.cols / 32;
    float warp_sum[16];
    for (int wi = 0; wi < P; ++wi) {
        float lane[32];
        for (int l = 0; l < 32; ++l) {
            const int t = 32 * wi + l;
            float acc = 0.0f;
            for (int b = t; b < nb; b += 32 * P) {
                int isum = 0;
                for (int i = 0; i < 32; ++i) {
                    const int k = b * 32 + i;
                    isum += int(w.qs[size_t(r) * w.cols + k]) * int(a.hqs[size_t(c) * w.cols + k]);
                }
                const float s = dq::fp16_to_fp32(w.d[size_t(r) * nb + b]) * a.hd[size_t(c) * nb + b];
                acc = std::fmaf(s, float(isum), acc);
            }
            lane[l] = acc;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float next[32];
            for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
            std::memcpy(lane, next, sizeof lane);
        }
        warp_sum[wi] = lane[0];
    }
    return pairwise(warp_sum, P);
}

std::vector<float> run_to_host(int which, const Q8Weights& w, const Q8Acts& x, const MmvqConfig* cfg) {
    const size_t n = size_t(x.ncols) * w.rows;
    float* dy = dalloc<float>(n);
    std::vector<uint32_t> poison(n, kPoison);
    CK(cudaMemcpy(dy, poison.data(), n * 4, cudaMemcpyHostToDevice));
    if (which == 0) {
        if (cfg) dq::cuda::mmvq_with_config(w, x, dy, *cfg, nullptr);
        else dq::cuda::mmvq(w, x, dy, nullptr);
    } else {
        dq::cuda::mmq(w, x, dy, nullptr);
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> y(n);
    CK(cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(dy));
    return y;
}

size_t count_unwritten(const std::vector<float>& y) {
    size_t n = 0;
    for (float v : y) n += fbits(v) == kPoison || !std::isfinite(v);
    return n;
}

const std::vector<MmvqConfig>& sweep_configs() {
    static const std::vector<MmvqConfig> v = {
        {1, 2, 8, 4, 0}, {1, 4, 8, 4, 0}, {2, 1, 4, 4, 0}, {2, 2, 4, 4, 0}, {4, 1, 4, 4, 0},
        {4, 1, 8, 4, 0}, {4, 2, 4, 4, 0},
        {2, 2, 4, 4, 3, 1}, {4, 2, 4, 4, 3, 1}, {4, 3, 4, 4, 3, 1}, {8, 2, 4, 4, 3, 1}, {4, 2, 8, 4, 3, 1},
        {2, 2, 4, 4, 3, 1, 0}, {4, 2, 4, 4, 3, 1, 0},  // not persistent: one row group per CTA
    };
    return v;
}

std::string cfg_name(const MmvqConfig& c) {
    return "R" + std::to_string(c.rows_per_warp) + "U" + std::to_string(c.unroll) + "W" +
           std::to_string(c.warps_per_block) + (c.mode == 3 ? "t" + std::to_string(c.stage_chunks) + (c.persistent ? "" : "n") : "");
}

// Bitwise column checks for one weight matrix: every config, every ncols 1..8, column j equals
// the 1-column call on column j with the same warps per row P (the default path: canonical P);
// configs of one P agree with each other. Returns the default path's ncols-8 output.
void check_mmvq_bitwise(const std::string& label, const Q8Weights& w, const Acts& a) {
    const int canon_p = dq::cuda::mmvq_warps_per_row(w.cols);
    std::vector<std::vector<float>> single_by_p[17];
    auto singles = [&](int p) -> std::vector<std::vector<float>>& {
        auto& v = single_by_p[p];
        if (v.empty()) {
            const MmvqConfig c1{1, 4, 8, 0, 0};
            for (int j = 0; j < 8; ++j) {
                if (p == canon_p) v.push_back(run_to_host(0, w, a.view(1, j), nullptr));
                else {
                    MmvqConfig c = {1, 4, 8, p, 0};
                    v.push_back(run_to_host(0, w, a.view(1, j), &c));
                }
            }
            (void)c1;
        }
        return v;
    };
    size_t bad = 0, unwritten = 0, cases = 0;
    for (const auto& cfg : sweep_configs()) {
        size_t vbad = 0;
        for (int n = 1; n <= 8; ++n) {
            std::vector<float> y;
            try {
                y = run_to_host(0, w, a.view(n), &cfg);
            } catch (const std::exception& e) {  // too many registers, or a shape the mode refuses
                if (label == "16384x16384")
                    std::printf("  (skip) %s ncols %d: %s\n", cfg_name(cfg).c_str(), n, e.what());
                continue;
            }
            const auto& single = singles(cfg.warps_per_row > 0 ? cfg.warps_per_row : canon_p);
            vbad += count_unwritten(y);
            for (int j = 0; j < n; ++j)
                for (int r = 0; r < w.rows; ++r)
                    vbad += fbits(y[size_t(j) * w.rows + r]) != fbits(single[j][r]);
            ++cases;
        }
        if (vbad) {  // a sweep variant is only timed if it computes the canonical bits
            std::printf("  [FAIL variant] %s on %s: %zu outputs differ from the 1-column call or unwritten; "
                        "not timed\n", cfg_name(cfg).c_str(), label.c_str(), vbad);
            g_bad_variants.insert(cfg_name(cfg));
        }
    }
    const auto& single = singles(canon_p);
    for (int n = 1; n <= 8; ++n) {  // the default path too
        const auto y = run_to_host(0, w, a.view(n), nullptr);
        unwritten += count_unwritten(y);
        for (int j = 0; j < n; ++j)
            for (int r = 0; r < w.rows; ++r) bad += fbits(y[size_t(j) * w.rows + r]) != fbits(single[j][r]);
        ++cases;
    }
    check(bad == 0 && unwritten == 0,
          "mmvq " + label + ": " + std::to_string(cases) +
              " (config, ncols) runs, every column bitwise == 1-column call (" + std::to_string(bad) +
              " differ, " + std::to_string(unwritten) + " unwritten)");
}

// CPU canonical order (kernels_ref.cpp) for a few rows: how far GPU and CPU orders differ.
double max_rel_vs_cpu_order(const HostQ8& w, const Acts& a, const std::vector<float>& y, int nrows) {
    const int nb = w.cols / 32;
    double worst = 0;
    for (int r = 0; r < nrows; ++r) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int b = 0; b < nb; ++b) {
            const float s = dq::fp16_to_fp32(w.d[size_t(r) * nb + b]) * a.hd[b];
            for (int j = 0; j < 8; ++j) {
                int isum = 0;
                for (int i = 0; i < 4; ++i)
                    isum += int(w.qs[size_t(r) * w.cols + b * 32 + 4 * j + i]) * int(a.hqs[b * 32 + 4 * j + i]);
                acc[j] = std::fmaf(s, float(isum), acc[j]);
            }
        }
        const float cpu = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        worst = std::max(worst, std::fabs(double(cpu) - double(y[r])) / std::max(1e-30, std::fabs(double(cpu))));
    }
    return worst;
}

// ---------------------------------------------------------------------------------------------
// Timing.
__global__ void fill_weights(int8_t* qs, uint16_t* d, size_t nq, size_t nd, uint32_t seed) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nq / 4; i += stride) {
        uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
        h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) v |= uint32_t(uint8_t(int8_t(int((h >> (8 * k)) & 0xFF) % 255 - 127))) << (8 * k);
        reinterpret_cast<uint32_t*>(qs)[i] = v;
        if (i < nd) d[i] = uint16_t(0x1C00u + (h & 0x3FFu) + ((h >> 10) & 1u) * 0x8000u);  // +-[2^-8, 2^-7)
    }
}

__global__ void empty_kernel() {}

__global__ void read_stream(const int4* __restrict__ p, size_t n, int* out) {
    int acc = 0;
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        int4 v;
        asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p + i));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678) *out = acc;
}

template <class F>
double median_us(F&& launch, int warm, int reps) {
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto& e : ev) CK(cudaEventCreate(&e));
    for (int i = 0; i < warm; ++i) launch(i);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(ev[2 * i]));
        launch(warm + i);
        CK(cudaEventRecord(ev[2 * i + 1]));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<double> t(reps);
    for (int i = 0; i < reps; ++i) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms * 1e3;
    }
    for (auto& e : ev) CK(cudaEventDestroy(e));
    std::sort(t.begin(), t.end());
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

struct Row {
    std::string kind, cfg;
    int ncols;
    double us, tbps, gweights;
};

int run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}

namespace {
int run(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s OUT.json [--reps N]\n", argv[0]);
        return 2;
    }
    const char* out_path = argv[1];
    int reps = 101;
    bool time_even_if_failed = false;  // device-time economy: get the numbers, exit 1 anyway
    for (int i = 2; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--time-even-if-failed")) time_even_if_failed = true;
    }

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, sm_clock_khz = 0, mem_clock_khz = 0;
    CK(cudaDriverGetVersion(&driver));
    cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
    std::printf("device: %s, %d SMs, L2 %.1f MB, cc %d.%d, driver %d\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize / 1e6, prop.major, prop.minor, driver);

    // ---- checks --------------------------------------------------------------------------
    std::printf("checks:\n");
    std::mt19937 rng(20261129);
    {
        // Invalid shapes must throw std::invalid_argument.
        int thrown = 0;
        Q8Weights w{reinterpret_cast<const int8_t*>(16), reinterpret_cast<const uint16_t*>(16), 4, 48};
        Q8Acts x{reinterpret_cast<const int8_t*>(16), reinterpret_cast<const float*>(16), 1, 48};
        float* y = reinterpret_cast<float*>(16);
        try { dq::cuda::mmvq(w, x, y, nullptr); } catch (const std::invalid_argument&) { ++thrown; }
        w.cols = x.cols = 64; x.ncols = 9;
        try { dq::cuda::mmvq(w, x, y, nullptr); } catch (const std::invalid_argument&) { ++thrown; }
        x.ncols = 0;
        try { dq::cuda::mmq(w, x, y, nullptr); } catch (const std::invalid_argument&) { ++thrown; }
        check(thrown == 3, "bad shapes throw std::invalid_argument (cols % 32, ncols 9, ncols 0)");
    }
    {
        // Grouped MMVQ (the MoE dispatch) against 1-column calls, at the ds4-gpu expert shapes
        // (4096 columns: 4 warps per row; 2048: 2) and a ds4-tiny one (128: 1 warp per row).
        const int shapes_g[][2] = {{512, 4096}, {256, 2048}, {256, 128}};
        for (const auto& sh : shapes_g) {
            const int rows = sh[0], cols = sh[1], nmat = 3;
            std::vector<DevQ8W> mats;
            std::vector<const int8_t*> qs;
            std::vector<const uint16_t*> ds;
            for (int m = 0; m < nmat; ++m) {
                mats.push_back(upload(make_host_weights(rows, cols, rng)));
                qs.push_back(mats.back().qs);
                ds.push_back(mats.back().d);
            }
            const Acts a = make_acts(8, cols, rng, false);
            const int8_t** dqs = dalloc<const int8_t*>(nmat);
            const uint16_t** dds = dalloc<const uint16_t*>(nmat);
            CK(cudaMemcpy(dqs, qs.data(), sizeof(void*) * nmat, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dds, ds.data(), sizeof(void*) * nmat, cudaMemcpyHostToDevice));
            for (int max_count : {1, 4}) {
                // Slots (mat, base, count); S = 4, n = 3 (the fourth is past n and must not run).
                const int S = 4, n = 3;
                const int mat[S] = {2, 0, 1, 1};
                const int cnt[S] = {max_count, max_count == 1 ? 1 : 3, max_count == 1 ? 1 : 2, 1};
                int base[S], ncol = 0;
                for (int i = 0; i < S; ++i) {
                    base[i] = ncol;
                    ncol += cnt[i];
                }
                std::vector<int32_t> table(1 + 3 * S);
                table[0] = n;
                for (int i = 0; i < S; ++i) {
                    table[1 + i] = mat[i];
                    table[1 + S + i] = base[i];
                    table[1 + 2 * S + i] = cnt[i];
                }
                std::vector<int32_t> xrow(ncol);
                for (int c = 0; c < ncol; ++c) xrow[c] = (5 * c + 3) % 8;
                int32_t* dtable = dalloc<int32_t>(table.size());
                int32_t* dxrow = dalloc<int32_t>(xrow.size());
                CK(cudaMemcpy(dtable, table.data(), 4 * table.size(), cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dxrow, xrow.data(), 4 * xrow.size(), cudaMemcpyHostToDevice));
                const size_t ny = size_t(ncol) * rows;
                float* dy = dalloc<float>(ny);
                std::vector<uint32_t> poison(ny, kPoison);
                CK(cudaMemcpy(dy, poison.data(), ny * 4, cudaMemcpyHostToDevice));
                dq::cuda::mmvq_grouped(dq::cuda::Q8Group{dqs, dds, rows, cols}, dtable, S, S, max_count, dxrow, a.qs,
                                       a.d, dy, nullptr);
                CK(cudaDeviceSynchronize());
                std::vector<uint32_t> y(ny);
                CK(cudaMemcpy(y.data(), dy, ny * 4, cudaMemcpyDeviceToHost));
                size_t bad = 0;
                for (int i = 0; i < S; ++i)
                    for (int c = 0; c < cnt[i]; ++c) {
                        const int col = base[i] + c;
                        const auto ref = run_to_host(0, mats[mat[i]].view(), a.view(1, xrow[col]), nullptr);
                        for (int r = 0; r < rows; ++r) {
                            const uint32_t got = y[size_t(col) * rows + r];
                            if (i < n ? got != fbits(ref[r]) : got != kPoison) ++bad;
                        }
                    }
                check(bad == 0, "mmvq grouped " + std::to_string(rows) + "x" + std::to_string(cols) + " max_count " +
                                    std::to_string(max_count) + ": every column bitwise == 1-column call, slot past n "
                                    "untouched (" + std::to_string(bad) + " bad)");
                CK(cudaFree(dtable));
                CK(cudaFree(dxrow));
                CK(cudaFree(dy));
            }
            for (DevQ8W& m : mats) {
                CK(cudaFree(m.qs));
                CK(cudaFree(m.d));
            }
            CK(cudaFree(dqs));
            CK(cudaFree(dds));
            CK(cudaFree(a.qs));
            CK(cudaFree(a.d));
        }
    }
    struct Shape { int rows, cols; };
    const Shape shapes[] = {{37, 96}, {129, 800}, {1000, 4096}, {515, 11008}, {64, 512}, {200, 2048}, {77, 3072}};
    std::vector<double> mmvq_errs, mmq_errs;
    double worst_cpu_order = 0;
    for (const Shape& s : shapes) {
        const HostQ8 hw = make_host_weights(s.rows, s.cols, rng);
        DevQ8W dw = upload(hw);
        const Acts a8 = make_acts(8, s.cols, rng, s.rows == 37);
        const std::string label = std::to_string(s.rows) + "x" + std::to_string(s.cols);
        check_mmvq_bitwise(label, dw.view(), a8);
        std::vector<int> all_rows(s.rows);
        for (int r = 0; r < s.rows; ++r) all_rows[r] = r;
        const auto y8 = run_to_host(0, dw.view(), a8.view(8), nullptr);
        const double e = rel_err_vs_f64(hw, a8, 8, y8, all_rows);
        mmvq_errs.push_back(e);
        char buf[160];
        std::snprintf(buf, sizeof buf, "mmvq %s ncols 8 vs float64: rel err %.2e (tol %.0e)", label.c_str(), e, kRelTol);
        check(e < kRelTol, buf);
        for (int p : {1, 2, 4}) {
            const MmvqConfig c8{1, 4, 8, p, 0};
            const auto yp = p == dq::cuda::mmvq_warps_per_row(s.cols) ? y8 : run_to_host(0, dw.view(), a8.view(8), &c8);
            size_t emu_bad = 0;
            for (int c = 0; c < 8; ++c)
                for (int r = 0; r < s.rows; ++r)
                    emu_bad += fbits(gpu_order_emulated(hw, a8, r, c, p)) != fbits(yp[size_t(c) * s.rows + r]);
            check(emu_bad == 0, "mmvq " + label + " ncols 8 bitwise == host emulation of the documented order, P=" +
                                    std::to_string(p) + (p == dq::cuda::mmvq_warps_per_row(s.cols) ? " (canonical)" : "") +
                                    " (" + std::to_string(emu_bad) + " differ)");
        }
        worst_cpu_order = std::max(worst_cpu_order, max_rel_vs_cpu_order(hw, a8, y8, std::min(s.rows, 64)));
        const Acts a100 = make_acts(100, s.cols, rng, false);
        size_t unwritten = 0;
        double worst = 0;
        for (int n : {1, 3, 8, 13, 16, 33, 64, 100}) {
            const auto y = run_to_host(1, dw.view(), a100.view(n), nullptr);
            unwritten += count_unwritten(y);
            worst = std::max(worst, rel_err_vs_f64(hw, a100, n, y, all_rows));
        }
        mmq_errs.push_back(worst);
        std::snprintf(buf, sizeof buf, "mmq %s ncols 1,3,8,13,16,33,64,100 vs float64: worst rel err %.2e (tol %.0e), %zu unwritten",
                      label.c_str(), worst, kRelTol, unwritten);
        check(worst < kRelTol && unwritten == 0, buf);
        CK(cudaFree(dw.qs));
        CK(cudaFree(dw.d));
        CK(cudaFree(a8.qs)); CK(cudaFree(a8.d)); CK(cudaFree(a100.qs)); CK(cudaFree(a100.d));
    }
    std::printf("  (info) GPU vs CPU canonical order (kernels_ref.cpp), column 0: max rel diff %.2e\n",
                worst_cpu_order);

    // ---- the big matrices ------------------------------------------------------------------
    constexpr int kRows = 16384, kCols = 16384, kBufs = 3;
    const size_t nq = size_t(kRows) * kCols, nd = nq / 32;
    std::vector<DevQ8W> big(kBufs);
    for (int i = 0; i < kBufs; ++i) {
        big[i].rows = kRows;
        big[i].cols = kCols;
        big[i].qs = dalloc<int8_t>(nq);
        big[i].d = dalloc<uint16_t>(nd);
        fill_weights<<<prop.multiProcessorCount * 8, 256>>>(big[i].qs, big[i].d, nq, nd, 0x1234u + i);
        CK(cudaGetLastError());
    }
    CK(cudaDeviceSynchronize());
    const Acts abig = make_acts(64, kCols, rng, false);
    {
        // Bitwise column checks on buffer 0 for the default path and every config, plus a
        // float64 check on sampled rows.
        HostQ8 hb;
        hb.rows = kRows;
        hb.cols = kCols;
        hb.qs.resize(nq);
        hb.d.resize(nd);
        CK(cudaMemcpy(hb.qs.data(), big[0].qs, nq, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hb.d.data(), big[0].d, nd * 2, cudaMemcpyDeviceToHost));
        check_mmvq_bitwise("16384x16384", big[0].view(), abig);
        std::vector<int> sample;
        for (int r = 0; r < kRows; r += 61) sample.push_back(r);
        sample.push_back(kRows - 1);
        const auto y8 = run_to_host(0, big[0].view(), abig.view(8), nullptr);
        char buf[200];
        const double e = rel_err_vs_f64(hb, abig, 8, y8, sample);
        std::snprintf(buf, sizeof buf, "mmvq 16384x16384 ncols 8 vs float64 (%zu rows): rel err %.2e", sample.size(), e);
        check(e < kRelTol, buf);
        const auto y64 = run_to_host(1, big[0].view(), abig.view(64), nullptr);
        const double e2 = rel_err_vs_f64(hb, abig, 64, y64, sample);
        std::snprintf(buf, sizeof buf, "mmq 16384x16384 ncols 64 vs float64 (%zu rows): rel err %.2e, %zu unwritten",
                      sample.size(), e2, count_unwritten(y64));
        check(e2 < kRelTol && count_unwritten(y64) == 0, buf);
        mmvq_errs.push_back(e);
        mmq_errs.push_back(e2);
    }
    if (g_fail && !time_even_if_failed) {
        std::printf("%d check(s) FAILED: nothing timed\n", g_fail);
        return 1;
    }
    if (g_fail) std::printf("%d check(s) FAILED: timing anyway (--time-even-if-failed)\n", g_fail);
    else std::printf("all checks passed\n");

    // ---- timings ---------------------------------------------------------------------------
    const int warm = 10;
    std::vector<Row> rows;
    const double wbytes = double(nq) * 34.0 / 32.0;

    // Copy ceiling: 1 GiB device-to-device, read + write bytes.
    const size_t cbytes = size_t(1) << 30;
    void *ca = nullptr, *cb = nullptr;
    CK(cudaMalloc(&ca, cbytes));
    CK(cudaMalloc(&cb, cbytes));
    CK(cudaMemset(ca, 1, cbytes));
    const double copy_us = median_us([&](int) { CK(cudaMemcpyAsync(cb, ca, cbytes, cudaMemcpyDeviceToDevice)); }, 5, 31);
    const double copy_tbps = 2.0 * cbytes / (copy_us * 1e-6) / 1e12;
    int* dummy = dalloc<int>(1);
    const double read_us = median_us([&](int) {
        read_stream<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<const int4*>(ca), cbytes / 16, dummy);
    }, 5, 31);
    const double read_tbps = cbytes / (read_us * 1e-6) / 1e12;
    CK(cudaFree(ca));
    CK(cudaFree(cb));

    // The first `rows` rows of the rotated buffers, n columns; cfg null: the default path.
    auto time_mmvq_on = [&](const std::vector<DevQ8W>& bufs, int rows, int n, const MmvqConfig* cfg) {
        float* dy = dalloc<float>(size_t(8) * rows);
        const double us = median_us([&](int i) {
            const DevQ8W& b = bufs[i % bufs.size()];
            const Q8Weights w{b.qs, b.d, rows, b.cols};
            if (cfg) dq::cuda::mmvq_with_config(w, abig.view(n), dy, *cfg, nullptr);
            else dq::cuda::mmvq(w, abig.view(n), dy, nullptr);
        }, warm, reps);
        CK(cudaFree(dy));
        return us;
    };
    auto time_mmvq = [&](int n, const MmvqConfig* cfg) { return time_mmvq_on(big, kRows, n, cfg); };
    // Config sweep (all configs compute the same bits; checked above).
    std::vector<std::vector<double>> sweep(sweep_configs().size(), std::vector<double>(9, 0));
    for (size_t k = 0; k < sweep_configs().size(); ++k)
        for (int n = 1; n <= 8; ++n) {
            if (g_bad_variants.count(cfg_name(sweep_configs()[k]))) {
                sweep[k][n] = -2;
                continue;
            }
            try {
                sweep[k][n] = time_mmvq(n, &sweep_configs()[k]);
            } catch (const std::exception& e) {
                std::printf("  sweep %s ncols %d failed: %s\n", cfg_name(sweep_configs()[k]).c_str(), n, e.what());
                sweep[k][n] = -1;
            }
        }
    for (int n = 1; n <= 8; ++n) {
        const double us = time_mmvq(n, nullptr);
        const MmvqConfig c = dq::cuda::mmvq_default_config(n, kRows, kCols);
        rows.push_back({"mmvq", cfg_name(c), n, us, wbytes / (us * 1e-6) / 1e12, double(n) * nq / (us * 1e-6) / 1e9});
    }
    for (int n : {8, 16, 32, 64}) {
        float* dy = dalloc<float>(size_t(n) * kRows);
        const double us = median_us([&](int i) {
            dq::cuda::mmq(big[i % kBufs].view(), abig.view(n), dy, nullptr);
        }, warm, reps);
        CK(cudaFree(dy));
        rows.push_back({"mmq", "", n, us, wbytes / (us * 1e-6) / 1e12, double(n) * nq / (us * 1e-6) / 1e9});
    }

    // Smaller matrices (the ds4-gpu shapes): sub-matrices carved from the three big buffers,
    // 48 of them rotated so no launch finds its weights in L2. The shape-aware default
    // (mmvq_default_config(ncols, rows, cols)) against the 16384-tuned table.
    struct SmallRow { int rows, cols, ncols; double us_shape, us_table; };
    std::vector<SmallRow> small;
    std::vector<std::string> small_sweep;
    for (const Shape sh : {Shape{4096, 4096}, Shape{2048, 4096}, Shape{4096, 2048}}) {
        const size_t mq = size_t(sh.rows) * sh.cols;
        const int per_buf = int(nq / mq);
        float* dy = dalloc<float>(size_t(8) * sh.rows);
        auto view = [&](int i) {
            const int k = i % (kBufs * std::min(per_buf, 16));
            const DevQ8W& b = big[k % kBufs];
            const size_t off = size_t(k / kBufs) * mq;
            return Q8Weights{b.qs + off, b.d + off / 32, sh.rows, sh.cols};
        };
        // Activations of this shape's K: the first n rows of the big buffer re-read with stride sh.cols.
        auto acts = [&](int n) { return Q8Acts{abig.qs, abig.d, n, sh.cols}; };
        for (int n : {1, 2, 3, 4, 8}) {
            const MmvqConfig shaped = dq::cuda::mmvq_default_config(n, sh.rows, sh.cols);
            const MmvqConfig table = dq::cuda::mmvq_default_config(n);
            const double a = median_us([&](int i) { dq::cuda::mmvq_with_config(view(i), acts(n), dy, shaped, nullptr); }, warm, reps);
            double b = -1;  // -1: the 16384-tuned table does not run on this shape (mode 3 needs P = 4)
            try {
                b = median_us([&](int i) { dq::cuda::mmvq_with_config(view(i), acts(n), dy, table, nullptr); }, warm, reps);
            } catch (const std::invalid_argument&) {
            }
            small.push_back({sh.rows, sh.cols, n, a, b});
            // The register mode's configurations at this shape's canonical P.
            std::string line;
            for (const MmvqConfig& c : {MmvqConfig{1, 2, 4, 0, 0}, MmvqConfig{1, 2, 8, 0, 0}, MmvqConfig{1, 4, 8, 0, 0},
                                        MmvqConfig{2, 1, 4, 0, 0}, MmvqConfig{2, 2, 4, 0, 0}, MmvqConfig{4, 1, 4, 0, 0},
                                        MmvqConfig{4, 1, 8, 0, 0}, MmvqConfig{4, 2, 4, 0, 0}}) {
                char cell[48];
                try {
                    const double us = median_us([&](int i) { dq::cuda::mmvq_with_config(view(i), acts(n), dy, c, nullptr); }, warm, reps);
                    std::snprintf(cell, sizeof cell, " %s %.1f", cfg_name(c).c_str(), us);
                } catch (const std::exception&) {
                    std::snprintf(cell, sizeof cell, " %s -", cfg_name(c).c_str());
                }
                line += cell;
            }
            small_sweep.push_back(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " ncols " + std::to_string(n) + ":" + line);
        }
        CK(cudaFree(dy));
    }

    // Per-launch fixed cost: every launch pays a start (launch, first loads in flight) and an end
    // (the last CTAs draining) that do not scale with bytes, so a rate measured on one matrix size
    // mixes that cost with the streaming rate. Time an empty kernel, the read-only stream and the
    // default MMVQ at three sizes each (three buffers rotated, none fits in L2) and fit
    // t = t0 + bytes / rate by least squares: t0 is the fixed cost, rate the marginal stream.
    struct SizeRow { std::string what; double mib, us; };
    std::vector<SizeRow> sized;
    const double empty_us = median_us([&](int) { empty_kernel<<<prop.multiProcessorCount * 4, 128>>>(); }, warm, reps);
    {
        const size_t gib = size_t(1) << 30;
        unsigned char* rb = dalloc<unsigned char>(3 * gib);
        CK(cudaMemset(rb, 1, 3 * gib));
        for (const size_t b : {gib / 4, gib / 2, gib}) {
            const double us = median_us([&](int i) {
                read_stream<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<const int4*>(rb + size_t(i % 3) * gib), b / 16, dummy);
            }, warm, reps);
            sized.push_back({"read", b / double(1 << 20), us});
        }
        CK(cudaFree(rb));
    }
    std::vector<std::string> tall_sweep;
    constexpr int kTallRows = 2 * kRows;  // 32768 x 16384: 544 MiB of Q8_0, near cuBLAS bf16's 512 MiB at 16384^2
    {
        std::vector<DevQ8W> tall(kBufs);
        const size_t tq = size_t(kTallRows) * kCols;
        for (int i = 0; i < kBufs; ++i) {
            tall[i].rows = kTallRows;
            tall[i].cols = kCols;
            tall[i].qs = dalloc<int8_t>(tq);
            tall[i].d = dalloc<uint16_t>(tq / 32);
            fill_weights<<<prop.multiProcessorCount * 8, 256>>>(tall[i].qs, tall[i].d, tq, tq / 32, 0x5678u + i);
        }
        for (const int r : {kRows / 2, kRows, kTallRows})
            for (int n : {1, 2, 3, 4, 8})
                sized.push_back({"mmvq " + std::to_string(n), double(r) * kCols * 34.0 / 32.0 / (1 << 20),
                                 time_mmvq_on(tall, r, n, nullptr)});
        // The persistent bulk-copy configurations at 1..4 columns on the tall matrix (us).
        for (const MmvqConfig& c : sweep_configs()) {
            if (c.mode != 3 || !c.persistent || c.warps_per_block != 4) continue;
            std::string line = cfg_name(c) + ":";
            for (int n = 1; n <= 4; ++n) {
                char cell[24];
                std::snprintf(cell, sizeof cell, " %.2f", time_mmvq_on(tall, kTallRows, n, &c));
                line += cell;
            }
            tall_sweep.push_back(line);
        }
        for (DevQ8W& w : tall) {
            CK(cudaFree(w.qs));
            CK(cudaFree(w.d));
        }
    }
    struct Fit { std::string what; double t0_us, rate_tbps; };
    std::vector<Fit> fits;
    for (size_t i = 0; i < sized.size(); ++i) {  // one fit per name, over all its sizes
        bool seen = false;
        for (const Fit& ft : fits) seen = seen || ft.what == sized[i].what;
        if (seen) continue;
        double k = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (const SizeRow& r : sized) {
            if (r.what != sized[i].what) continue;
            const double x = r.mib * (1 << 20) / 1e6;  // MB
            k += 1; sx += x; sy += r.us; sxx += x * x; sxy += x * r.us;
        }
        const double slope = (k * sxy - sx * sy) / (k * sxx - sx * sx);  // us per MB
        fits.push_back({sized[i].what, (sy - slope * sx) / k, 1.0 / slope});  // MB/us = TB/s
    }

    // ---- report ----------------------------------------------------------------------------
    std::printf("\nMMVQ config sweep (us, median of %d; 16384x16384 Q8_0, %.1f MiB streamed):\n", reps, wbytes / (1 << 20));
    std::printf("  (-1: did not launch, -2: failed its bitwise check)\n  %-9s", "config");
    for (int n = 1; n <= 8; ++n) std::printf(" %7d", n);
    std::printf("\n");
    for (size_t k = 0; k < sweep.size(); ++k) {
        std::printf("  %-9s", cfg_name(sweep_configs()[k]).c_str());
        for (int n = 1; n <= 8; ++n) std::printf(" %7.1f", sweep[k][n]);
        std::printf("\n");
    }
    std::printf("\ncopy D2D 1 GiB: %.1f us, %.3f TB/s (read+write); read-only stream: %.3f TB/s\n", copy_us, copy_tbps, read_tbps);
    std::printf("%-5s %-8s %5s %9s %8s %8s %12s\n", "kern", "config", "ncols", "us", "TB/s", "%copy", "Gcol*w/s");
    for (const Row& r : rows)
        std::printf("%-5s %-8s %5d %9.2f %8.3f %7.1f%% %12.1f\n", r.kind.c_str(), r.cfg.c_str(), r.ncols, r.us,
                    r.tbps, 100.0 * r.tbps / copy_tbps, r.gweights);

    std::printf("\nsmaller matrices (us; shape-aware default vs the 16384-tuned table; TB/s of the first):\n");
    for (const SmallRow& r : small)
        std::printf("  %5dx%-5d ncols %d: %7.2f vs %7.2f  (%.3f TB/s)\n", r.rows, r.cols, r.ncols, r.us_shape,
                    r.us_table, double(r.rows) * r.cols * 34.0 / 32.0 / (r.us_shape * 1e-6) / 1e12);
    std::printf("\nsmaller matrices, register-mode sweep (us):\n");
    for (const std::string& l : small_sweep) std::printf("  %s\n", l.c_str());

    std::printf("\nper-launch fixed cost (t = t0 + bytes / rate, least squares over the sizes; empty kernel %.2f us):\n", empty_us);
    for (const SizeRow& r : sized)
        std::printf("  %-7s %7.1f MiB: %8.2f us  %.3f TB/s\n", r.what.c_str(), r.mib, r.us, r.mib * (1 << 20) / (r.us * 1e-6) / 1e12);
    for (const Fit& ft : fits)
        std::printf("  fit %-7s t0 %5.2f us, marginal rate %.3f TB/s\n", ft.what.c_str(), ft.t0_us, ft.rate_tbps);
    std::printf("  persistent bulk-copy configurations at %d x %d, us at 1..4 columns:\n", kTallRows, kCols);
    for (const std::string& l : tall_sweep) std::printf("    %s\n", l.c_str());

    FILE* f = std::fopen(out_path, "w");
    if (!f) {
        std::perror(out_path);
        return 2;
    }
    std::fprintf(f, "{\n  \"schema\": \"dflash-qualify/gpu-kernels-bench/1\",\n");
    std::fprintf(f, "  \"device\": \"%s\", \"sms\": %d, \"l2_bytes\": %d, \"driver\": %d, \"sm_clock_khz\": %d, \"mem_clock_khz\": %d,\n",
                 prop.name, prop.multiProcessorCount, prop.l2CacheSize, driver, sm_clock_khz, mem_clock_khz);
    std::fprintf(f, "  \"matrix\": {\"rows\": %d, \"cols\": %d, \"buffers\": %d, \"bytes_streamed\": %.0f},\n", kRows, kCols, kBufs, wbytes);
    std::fprintf(f, "  \"reps\": %d, \"warmups\": %d, \"statistic\": \"median of per-launch CUDA-event times\",\n", reps, warm);
    std::fprintf(f, "  \"copy\": {\"bytes\": %zu, \"us\": %.3f, \"tbps_read_plus_write\": %.4f},\n", cbytes, copy_us, copy_tbps);
    std::fprintf(f, "  \"read_stream\": {\"bytes\": %zu, \"us\": %.3f, \"tbps\": %.4f},\n", cbytes, read_us, read_tbps);
    std::fprintf(f, "  \"checks\": {\"failed\": %d, \"rel_tol\": %g, \"mmvq_worst_rel\": %.3e, \"mmq_worst_rel\": %.3e, \"gpu_vs_cpu_order_max_rel\": %.3e},\n",
                 g_fail, kRelTol, *std::max_element(mmvq_errs.begin(), mmvq_errs.end()),
                 *std::max_element(mmq_errs.begin(), mmq_errs.end()), worst_cpu_order);
    std::fprintf(f, "  \"results\": [\n");
    for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(f, "    {\"kernel\": \"%s\", \"config\": \"%s\", \"ncols\": %d, \"us\": %.3f, \"tbps\": %.4f, \"gcolweights_per_s\": %.2f}%s\n",
                     r.kind.c_str(), r.cfg.c_str(), r.ncols, r.us, r.tbps, r.gweights, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"mmvq_small\": [\n");
    for (size_t i = 0; i < small.size(); ++i)
        std::fprintf(f, "    {\"rows\": %d, \"cols\": %d, \"ncols\": %d, \"us_shape_default\": %.3f, \"us_table_default\": %.3f}%s\n",
                     small[i].rows, small[i].cols, small[i].ncols, small[i].us_shape, small[i].us_table,
                     i + 1 < small.size() ? "," : "");
    std::fprintf(f, "  ],\n  \"fixed_cost\": {\"empty_kernel_us\": %.3f, \"sizes\": [\n", empty_us);
    for (size_t i = 0; i < sized.size(); ++i)
        std::fprintf(f, "    {\"what\": \"%s\", \"mib\": %.2f, \"us\": %.3f}%s\n", sized[i].what.c_str(), sized[i].mib,
                     sized[i].us, i + 1 < sized.size() ? "," : "");
    std::fprintf(f, "  ], \"fits\": [\n");
    for (size_t i = 0; i < fits.size(); ++i)
        std::fprintf(f, "    {\"what\": \"%s\", \"t0_us\": %.3f, \"marginal_tbps\": %.4f}%s\n", fits[i].what.c_str(),
                     fits[i].t0_us, fits[i].rate_tbps, i + 1 < fits.size() ? "," : "");
    std::fprintf(f, "  ]},\n");
    std::fprintf(f, "  \"mmvq_sweep_us\": {\n");
    for (size_t k = 0; k < sweep.size(); ++k) {
        std::fprintf(f, "    \"%s\": [", cfg_name(sweep_configs()[k]).c_str());
        for (int n = 1; n <= 8; ++n) std::fprintf(f, "%.3f%s", sweep[k][n], n < 8 ? ", " : "");
        std::fprintf(f, "]%s\n", k + 1 < sweep.size() ? "," : "");
    }
    std::fprintf(f, "  }\n}\n");
    std::fclose(f);
    std::printf("wrote %s%s\n", out_path, g_fail ? " (CHECKS FAILED)" : "");
    return g_fail ? 1 : 0;
}
}  // namespace
