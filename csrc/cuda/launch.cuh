// Kernel launches with programmatic dependent launch (PDL, Hopper): a kernel's grid may be
// scheduled while the previous kernel on the stream drains, and waits (pdl_begin) until that
// kernel has completed and its memory is visible before it reads anything the kernel wrote or
// writes anything, so the order and the bits are those of plain stream order. Before the wait a
// kernel only touches data no kernel writes (weights: the bulk-copy and grouped MMVQ's first
// loads, the HC boundary's L2 prefetches and gains). Captured into CUDA graphs as programmatic edges.
// DQ_GPU_PDL=0 launches without it (same bits; an A/B switch for benches).
#pragma once
#include <cuda_runtime.h>

#include <utility>

namespace dq { namespace cuda {

bool pdl_enabled();  // DQ_GPU_PDL != "0", read once

// Every kernel launched through launch_kernel starts with this: wait for the previous grid,
// then let the next one be scheduled (after the wait, so at most one grid waits ahead).
__device__ __forceinline__ void pdl_begin() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// pdl_begin's two steps the other way round, for a short kernel whose successor is a matmul: the
// next grid is scheduled first, so it becomes resident and issues its weight loads while this
// kernel's predecessor still runs (two grids wait ahead); the wait still precedes every read of
// the previous grid's data, so the order and bits are those of pdl_begin.
__device__ __forceinline__ void pdl_begin_early() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// p, passed through an empty volatile asm: call it after pdl_begin on every pointer to data the
// previous grid writes, when a kernel does work before the wait. The compiler may move loads
// through `const __restrict__` pointers (ld.global.nc) above the wait's memory clobber (seen in
// SASS: a table read hoisted above griddepcontrol.wait); a load through the returned pointer
// depends on this asm, which stays after the wait's.
template <class T>
__device__ __forceinline__ T* after_wait(T* p) {
    asm volatile("" : "+l"(p));
    return p;
}

// kernel<<<grid, block, smem, s>>>(args...) with the PDL attribute and, when cluster_x > 1,
// thread-block clusters of cluster_x blocks along x; errors are left for cudaGetLastError (the
// callers' launch checks).
template <class... P, class... A>
void launch_kernel_cluster(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                           cudaStream_t s, A&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cluster_x > 1) {
        attr[1].id = cudaLaunchAttributeClusterDimension;
        attr[1].val.clusterDim.x = cluster_x;
        attr[1].val.clusterDim.y = 1;
        attr[1].val.clusterDim.z = 1;
        cfg.numAttrs = 2;
    }
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

template <class... P, class... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
    launch_kernel_cluster(kernel, grid, block, smem, 1u, s, std::forward<A>(args)...);
}

}}  // namespace dq::cuda
