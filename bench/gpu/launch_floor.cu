// The floor of a chain of dependent kernels in one replayed CUDA graph (not a test): what a step
// of N kernels costs before any of them does work, launched the way gpu_model.cu launches them.
//
// Usage: nvcc -O3 -arch=sm_90 -std=c++17 bench/gpu/launch_floor.cu -o /tmp/launch_floor && /tmp/launch_floor [N]
//
// Per shape (grid x block, cluster), with and without programmatic dependent launch (PDL): a
// graph of N kernels (default 81, ds4-gpu's q1 step), each waiting for its predecessor
// (griddepcontrol.wait, then launch_dependents, as csrc/cuda/launch.cuh's pdl_begin) and handing
// one value down the chain (block 0 reads what the previous kernel wrote, adds one, writes it),
// replayed R times between two events: us per kernel = elapsed / (R N). The chain's value is
// checked (N R after R replays), so no kernel was skipped.
//
// Second table: code fetch. A kernel of one warp running I straight-line instructions (8
// independent add chains, no memory) costs its issue time when its code is cached on the SM, and
// more when each 128-byte line of code must come from L2. Per size, a chain of N launches of one
// such kernel (code warm after the first) against N launches alternating between two copies of
// different code (A B A B ...: each launch finds its code evicted when the two do not fit the
// SM's instruction caches), us per kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

__global__ void chain_kernel(unsigned long long* v) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *v = *v + 1;
}

// I adds (a multiple of 512) in 8 independent chains, written out by the preprocessor (an
// unrolled loop of that length is left rolled); SALT makes each instantiation's code distinct.
#define DQ_ADD8                                                      \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a0));          \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a1));          \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a2));          \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a3));          \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a4));          \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a5));          \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a6));          \
    asm volatile("add.f32 %0, %0, 0f3F800000;" : "+f"(a7));
#define DQ_ADD64 DQ_ADD8 DQ_ADD8 DQ_ADD8 DQ_ADD8 DQ_ADD8 DQ_ADD8 DQ_ADD8 DQ_ADD8
#define DQ_ADD512 DQ_ADD64 DQ_ADD64 DQ_ADD64 DQ_ADD64 DQ_ADD64 DQ_ADD64 DQ_ADD64 DQ_ADD64

template <int B>  // B blocks of 512 adds
__device__ __forceinline__ void adds(float& a0, float& a1, float& a2, float& a3, float& a4, float& a5, float& a6,
                                     float& a7) {
    if constexpr (B > 0) {
        DQ_ADD512
        adds<B - 1>(a0, a1, a2, a3, a4, a5, a6, a7);
    }
}

template <int I, int SALT>
__global__ void code_kernel(unsigned long long* v) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const float t = float(threadIdx.x) * 0.5f + float(SALT);  // runtime values: no folding
    float a0 = t, a1 = t + 1, a2 = t + 2, a3 = t + 3, a4 = t + 4, a5 = t + 5, a6 = t + 6, a7 = t + 7;
    adds<I / 512>(a0, a1, a2, a3, a4, a5, a6, a7);
    if (threadIdx.x == 0) *v = *v + 1 + (a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 == -1.0f);
}

// One launch of kernel(v) as gpu_model.cu launches: PDL on or off, clusters of `cluster` blocks.
void launch(void (*kernel)(unsigned long long*), unsigned grid, unsigned block, unsigned cluster, bool pdl,
            cudaStream_t s, unsigned long long* v) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    int na = 1;
    if (cluster > 1) {
        attr[1].id = cudaLaunchAttributeClusterDimension;
        attr[1].val.clusterDim.x = cluster;
        attr[1].val.clusterDim.y = 1;
        attr[1].val.clusterDim.z = 1;
        na = 2;
    }
    cfg.attrs = attr;
    cfg.numAttrs = na;
    CK(cudaLaunchKernelEx(&cfg, kernel, v));
}

// A graph of n launches (launch_i(i) issues the i-th), replayed `warm` times, then `reps` times
// between two events: us per kernel. Every kernel adds one to *v, so the chain's value after
// the replays shows that none was skipped.
template <class LaunchI>
double graph_us(int n, int warm, int reps, cudaStream_t s, unsigned long long* v, LaunchI launch_i) {
    CK(cudaMemsetAsync(v, 0, sizeof(*v), s));
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < n; ++i) launch_i(i);
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge = nullptr;
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < warm; ++i) CK(cudaGraphLaunch(ge, s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, a, b));
    unsigned long long got = 0;
    CK(cudaMemcpy(&got, v, sizeof(got), cudaMemcpyDeviceToHost));
    const unsigned long long want = (unsigned long long)n * (reps + warm);
    if (got != want) {
        std::fprintf(stderr, "launch_floor: chain value %llu, expected %llu\n", got, want);
        std::exit(1);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return ms * 1e3 / (double(reps) * n);
}

// One warp of I-instruction code: the same kernel n times, or two copies of it alternated.
template <int I>
double code_us(bool alternate, int n, int reps, cudaStream_t s, unsigned long long* v) {
    return graph_us(n, 3, reps, s, v, [&](int i) {
        launch(alternate && i % 2 ? code_kernel<I, 1> : code_kernel<I, 0>, 1, 32, 1, true, s, v);
    });
}

struct Shape {
    const char* what;
    unsigned grid, block, cluster;
};

double per_kernel_us(const Shape& sh, bool pdl, int n, int reps, cudaStream_t s, unsigned long long* v) {
    return graph_us(n, 5, reps, s, v, [&](int) { launch(chain_kernel, sh.grid, sh.block, sh.cluster, pdl, s, v); });
}

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 81;
    const int reps = 200;
    if (n < 1) {
        std::fprintf(stderr, "usage: launch_floor [N >= 1]\n");
        return 2;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    const unsigned sms = unsigned(prop.multiProcessorCount);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long* v = nullptr;
    CK(cudaMalloc(&v, sizeof(*v)));
    const std::vector<Shape> shapes = {
        {"1 block of 32", 1, 32, 1},
        {"1 cluster of 8 x 512 (an HC boundary at q1)", 8, 512, 8},
        {"4 clusters of 8 x 512 (an HC boundary at q4)", 32, 512, 8},
        {"SMs x 128 (one wave)", sms, 128, 1},
        {"5 SMs x 128 (a grouped MMVQ's grid)", 5 * sms, 128, 1},
    };
    std::printf("%s, %u SMs: a graph of %d chained kernels, %d replays\n\n", prop.name, sms, n, reps);
    std::printf("| kernels of | PDL us/kernel | no PDL us/kernel | step of %d, PDL (us) |\n| --- | ---: | ---: | ---: |\n", n);
    for (const Shape& sh : shapes) {
        const double on = per_kernel_us(sh, true, n, reps, s, v);
        const double off = per_kernel_us(sh, false, n, reps, s, v);
        std::printf("| %s | %.2f | %.2f | %.0f |\n", sh.what, on, off, on * n);
    }
    std::printf("\n| one warp, straight-line code | same kernel N times, us/kernel | two kernels alternated, us/kernel |\n"
                "| --- | ---: | ---: |\n");
    auto row = [&](const char* what, double same, double alt) { std::printf("| %s | %.2f | %.2f |\n", what, same, alt); };
    row("1024 instructions (16 KB)", code_us<1024>(false, n, 50, s, v), code_us<1024>(true, n, 50, s, v));
    row("4096 instructions (64 KB)", code_us<4096>(false, n, 50, s, v), code_us<4096>(true, n, 50, s, v));
    row("8192 instructions (128 KB)", code_us<8192>(false, n, 50, s, v), code_us<8192>(true, n, 50, s, v));
    CK(cudaFree(v));
    return 0;
}
