// Internal: the per-ISA kernel table that kernels_dispatch.cpp chooses from at start-up.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../kernels.h"

namespace dq::simd {

// Computes Y[c, n] for rows n in [row_begin, row_end) and all ncols columns.
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
using MatRowsFn = void (*)(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                           int row_begin, int row_end);
// Quantizes K floats (K % 32 == 0) into K/32 Q8_0 blocks, bitwise equal to quantize_row_q8_0_ref.
using QuantizeRowFn = void (*)(const float* x, BlockQ8_0* y, int k);

struct KernelSet {
    const char* name;  // "scalar", "avx2", "avx512vnni", "amx"
    // Canonical order; any ncols (groups of <= 8 columns), bitwise = reference. The SIMD sets'
    // kernels read w.packed (the dispatcher runs mmvq_scalar for a matrix without it) and take
    // row_begin on a multiple of mmvq_grain (the x16 group).
    MatRowsFn mmvq;
    MatRowsFn mmq;     // own order, any ncols >= 1
    int mmvq_grain;    // thread slice granularity (rows the kernel handles at once)
    int mmq_grain;
    QuantizeRowFn quantize;  // activation/weight quantization (same bits on every path)
};

// The scalar reference's narrow MMVQ rows (kernels_ref.cpp): reads w.packed when set, else the
// row-major blocks. The dispatcher runs it for matrices without the x16 layout on every path.
void mmvq_scalar(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin, int row_end);

// Always built (kernels_ref.cpp).
extern const KernelSet kScalarKernels;
// Built from csrc/simd/*_avx2.cpp / *_avx512.cpp; only called when cpu_features says so.
extern const KernelSet kAvx2Kernels;
extern const KernelSet kAvx512VnniKernels;
extern const KernelSet kAmxKernels;  // csrc/simd/*_amx.cpp: AMX-INT8 narrow MMVQ, the rest AVX-512

// Per-thread float scratch of at least n elements (contents unspecified), owned by portable
// code so ISA-flagged files never instantiate std:: templates (an ODR-merged copy compiled
// with -mavx512f could otherwise be picked for the AVX2 or scalar path).
float* kernel_scratch(size_t n);
// Per-thread scratch of at least n Q8_0 blocks (e.g. transformed activations).
BlockQ8_0* kernel_scratch_blocks(size_t n);
// Per-thread byte scratch of at least n bytes, 64-byte aligned.
uint8_t* kernel_scratch_bytes(size_t n);

// What the dispatcher tells the kernel call a thread is running (set around every call, reset
// after; thread-local, owned by portable code like the scratch buffers). Hints only: no output
// bit depends on them.
struct CallHint {
    ReadAhead next;   // the bytes this thread streams after its rows (kernels.h ReadAhead)
    int threads = 1;  // threads sharing the dispatch
};
CallHint& call_hint();

// Where a row group's prefetches go, as a byte offset from the bytes it reads: pf_bytes ahead
// in its own rows while that stays before `end` (the end of this thread's rows), else the same
// distance into the read-ahead region, as if it followed `end` directly. `group` and
// `group_bytes` span the group's rows; the test is on the group's middle. Integer arithmetic,
// since the two regions are separate allocations.
inline intptr_t prefetch_offset(const void* group, size_t group_bytes, size_t pf_bytes, const void* end,
                                const ReadAhead& next) {
    const uintptr_t g = reinterpret_cast<uintptr_t>(group), e = reinterpret_cast<uintptr_t>(end);
    if (next.p == nullptr || g + group_bytes / 2 + pf_bytes < e) return intptr_t(pf_bytes);
    return intptr_t(pf_bytes) + (intptr_t(reinterpret_cast<uintptr_t>(next.p)) - intptr_t(e));
}

// A prefetch address `offset` bytes from p (prefetch_offset), without pointer arithmetic across
// allocations.
inline const char* offset_ptr(const void* p, intptr_t offset) {
    return reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(offset));
}

namespace {  // internal linkage: each ISA file compiles its own copy

// The x16 kernels' weight stream (mmvq_avx512.cpp, mmvq_x16_avx2.cpp, mmvq_amx.cpp): one
// sequential stream per thread, prefetched kX16PrefetchBytes ahead (prefetcht2; the AVX2 body
// without AVX-512 uses its near distance and prefetcht0) on a linear cursor of 544 bytes per
// block, one prefetch per kX16PrefetchStep bytes (four per 64-byte line: docs/performance.md).
constexpr size_t kX16PrefetchBytes = 32768, kX16PrefetchStep = 16;

// Prefetches kBlocks blocks' worth of the group at `group` from block b on, `pfd` ahead
// (prefetch_offset); kLocality as __builtin_prefetch's (1 = prefetcht2, 3 = prefetcht0).
// kOneBase: one opaque base register per block and immediate offsets. The AVX2 body needs it:
// there GCC made each of the 34 addresses its own induction variable and kept them on the
// stack (a reload per prefetch; 1-column rate from L2 24 -> 50 GB/s with the body's other
// changes, forced AVX2 on the Zen 4). The AVX-512 body already got immediate offsets and
// measured no better with it.
template <int kLocality, int kBlocks = 1, bool kOneBase = false>
__attribute__((always_inline)) inline void prefetch_x16(const uint8_t* group, int b, intptr_t pfd) {
    const char* cursor = reinterpret_cast<const char*>(group) + size_t(b) * kPackGroupBlockBytes;
    if constexpr (kOneBase) {
        const char* pf = offset_ptr(cursor, pfd);
        asm("" : "+r"(pf));
#pragma GCC unroll 68
        for (size_t o = 0; o < kBlocks * kPackGroupBlockBytes; o += kX16PrefetchStep)
            __builtin_prefetch(pf + o, 0, kLocality);
    } else {
#pragma GCC unroll 68
        for (size_t o = 0; o < kBlocks * kPackGroupBlockBytes; o += kX16PrefetchStep)
            __builtin_prefetch(offset_ptr(cursor + o, pfd), 0, kLocality);
    }
}

// fn(group, n0, valid, pfd) for each 16-row x16 group of rows [row_begin, row_end) (row_begin a
// multiple of 16): its packed bytes, first row, rows to store, and its prefetch offset, which runs
// on into the thread's read-ahead region (call_hint) at its last groups.
template <class Fn>
inline void for_each_x16_group(const QMatrixView& w, int row_begin, int row_end, size_t pf_bytes, Fn&& fn) {
    const size_t gbytes = packed_group_bytes(w.cols);
    const uint8_t* end = w.packed + size_t(pack_groups(row_end)) * gbytes;
    const ReadAhead next = call_hint().next;
    for (int n = row_begin; n < row_end; n += kPackRows) {
        const uint8_t* g = w.packed + size_t(n / kPackRows) * gbytes;
        fn(g, n, row_end - n < kPackRows ? row_end - n : kPackRows, prefetch_offset(g, gbytes, pf_bytes, end, next));
    }
}

}  // namespace

// Whether the AVX2 bodies prefetch W far ahead into L2 (true on CPUs with AVX-512) or near into
// L1 (mmvq_impl.h); fixed for the process.
bool prefetch_far();

// Per-ISA row kernels (signatures of MatRowsFn), defined in csrc/simd/.
void mmvq_avx2(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
               int row_end);
void mmq_avx2(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin,
              int row_end);
void quantize_row_q8_0_avx2(const float* x, BlockQ8_0* y, int k);
void mmvq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                     int row_begin, int row_end);
void mmq_avx512vnni(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y,
                    int row_begin, int row_end);

}  // namespace dq::simd
