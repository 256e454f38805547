// The row-major Q8_0 row body (8 int32 lanes of 4 products per block, fp32 lane accumulators,
// then a horizontal tree), templated on the int8 dot policy so the AVX2 and AVX-512 VNNI files
// instantiate the same loop; MMQ's tiles run it (mmq_impl.h, its own non-canonical tree). The
// narrow MMVQ reads the x16 layout instead (mmvq_x16_avx2.cpp, mmvq_avx512.cpp). Internal linkage only.
//
// W is (N, K) row-major, Q8_0 blocks of 32 along K; X is (ncols, K) Q8_0; Y is (ncols, N).
// R rows are processed together (independent FMA chains for ILP); each weight block is
// loaded once and applied to all NC columns. Column c of row n: per block 8 exact int32 lane
// sums, s = wd * xd (one fp32 multiply), acc = fma(s, isum, acc) per lane, a horizontal tree at
// the end (the former canonical order, before the x16 layout; MMQ takes the adjacent tree).
//
// Dot policy (ISum): `Prep prep(__m256i wq)` once per weight block (shared by all columns),
// `__m256i isum(const Prep&, __m256i xq)` per column, and `transform_x(qs)` applied once per
// call to the activation quants (identity for AVX2; x ^ 0x80 for the VNNI offset trick).
// A packed policy (ISum::Packed, Activations::kPacked) instead takes `pack(qs, out)` once per
// call and `isum(const Prep&, const __m256i* packed)` per column.
#pragma once
#include <algorithm>
#include <cstdint>
#include "q8_0_simd.h"

namespace dq::simd {
namespace {

// Software prefetch of W, chosen once per process (kernel_table.h prefetch_far()):
//  near: prefetcht0 at least 128 blocks (4352 bytes) ahead: the AVX2 tuning measured on Zen 3,
//        kept on CPUs without AVX-512;
//  far:  prefetcht2 (into L2) at least 1024 blocks (~35 KB) ahead, on AVX-512 CPUs (Zen 4 and
//        Intel, where this file runs when the AVX2 path is forced): on the 2.6 GHz Zen 4, 1 column,
//        1536 x 1024 matrices streamed at 1 thread, median of 3 rounds 20.3 -> 25.1 GB/s (probe 32).
constexpr int kMmvqPrefetchBlocks = 128;
constexpr int kMmvqPrefetchBlocksFar = 1024;

inline size_t prefetch_distance(size_t min_blocks, bool far) {
    return std::max(min_blocks, size_t(far ? kMmvqPrefetchBlocksFar : kMmvqPrefetchBlocks));
}

// How the activations reach the row kernel. Both layouts compute the same exact int32 lane sums
// and the same fp32 scale product s = wd * xd (one rounding per row, block and column), so both
// give the canonical bits.
enum class Activations {
    // Q8_0 blocks [c][b]; xd[b * 8 + c]. Per column: vbroadcastss xd, s = wd * xd (vmulps).
    kBlocks,
    // NC <= 4, for a packed dot policy (ISumAvx2Words): each (block, column) packed by ISum::pack
    // into ISum::kPackedVectors aligned 32-byte vectors at [b][c] (pack_activations); xd[b * 8 + l]
    // holds column l % 4 times ISum::kScale in both 128-bit halves (lane_scales). Per block
    // s8 = wd * xd (one vmulps for all columns); per column s = vpermilps(s8, c), an in-lane
    // shuffle.
    kPacked,
};

// Block b of R rows x NC columns into acc: the body of mmvq_rows' block loop, also run
// interleaved with a second product's block by mmvq_pair_row.
template <class ISum, int NC, int R, Activations kAct>
__attribute__((always_inline)) inline void mmvq_block(__m256 (&acc)[R * NC], const BlockQ8_0* const (&wrow)[R],
                                                      int b, intptr_t pfd, bool far, const void* x, const float* xd,
                                                      int nb) {
    typename ISum::Prep prep[R];
    __m256 wd[R];  // kBlocks: fp32(wd) in every lane; kPacked: s8 = wd * xd[b * 8 + lane]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const BlockQ8_0& wb = wrow[r][b];
        // W streams from DRAM once; run ahead of the R interleaved row streams.
        if (far)
            _mm_prefetch(offset_ptr(&wb, pfd), _MM_HINT_T2);
        else
            _mm_prefetch(offset_ptr(&wb, pfd), _MM_HINT_T0);
        prep[r] = ISum::prep(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs)));
        if constexpr (kAct == Activations::kPacked)
            wd[r] = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(wb.d))),
                                  _mm256_load_ps(xd + size_t(b) * 8));
        else
            wd[r] = _mm256_set1_ps(_cvtsh_ss(wb.d));
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
        if constexpr (kAct == Activations::kPacked) {
            const __m256i* xp = static_cast<const __m256i*>(x) + (size_t(b) * NC + c) * ISum::kPackedVectors;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m256 isum = _mm256_cvtepi32_ps(ISum::isum(prep[r], xp));
                acc[r * NC + c] = _mm256_fmadd_ps(_mm256_permute_ps(wd[r], c * 0x55), isum, acc[r * NC + c]);
            }
        } else {
            const __m256i xq = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(static_cast<const BlockQ8_0*>(x)[size_t(c) * nb + b].qs));
            const __m256 xdc = _mm256_broadcast_ss(xd + size_t(b) * 8 + c);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m256 isum = _mm256_cvtepi32_ps(ISum::isum(prep[r], xq));
                // s = wd * xd: the same single fp32 rounding as the scalar reference.
                acc[r * NC + c] = _mm256_fmadd_ps(_mm256_mul_ps(wd[r], xdc), isum, acc[r * NC + c]);
            }
        }
    }
}

template <class ISum, int NC, int R, bool kCanonicalTree = true, Activations kAct = Activations::kBlocks>
inline void mmvq_rows(const BlockQ8_0* W, int nb, const void* x, const float* xd, float* y,
                      int N, int n0, intptr_t pfd, bool far) {
    static_assert(kAct != Activations::kPacked || NC <= 4, "lane scales hold at most 4 columns");
    // Fully unrolled (pragmas) so GCC keeps the accumulators in registers instead of
    // mirroring the array to the stack on every block.
    __m256 acc[R * NC];
#pragma GCC unroll 16
    for (int i = 0; i < R * NC; ++i) acc[i] = _mm256_setzero_ps();
    const BlockQ8_0* wrow[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wrow[r] = W + size_t(n0 + r) * nb;
    for (int b = 0; b < nb; ++b) mmvq_block<ISum, NC, R, kAct>(acc, wrow, b, pfd, far, x, xd, nb);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) y[size_t(c) * N + n0 + r] = hsum_tree<kCanonicalTree>(acc[r * NC + c]);
}

// Rows per step: enough independent accumulators to hide FMA latency, few enough to stay in
// 16 ymm registers (R * NC accumulators + 2 R prepared weight vectors + R scales). R = 2 at
// NC 3..4 spilled the accumulators to the stack every block (AVX2, 1 GiB matrix, 1 thread:
// ncols 4 ran at 2.0 GB/s while ncols 5 at R = 1 ran at 3.8), so every NC >= 2 takes R = 1
// except NC = 2 (R = 2: 4 accumulators). The thread grain (4) is a multiple of every R.
// This is the choice for W already in L1/L2 (MMQ tiles).
template <int NC>
constexpr int mmvq_rows_per_step() {
    return NC == 1 ? 4 : (NC == 2 ? 2 : 1);
}

// Rows per step when W streams from DRAM (narrow MMVQ). Policies with kSingleStream take one
// row at a time on short rows (nb <= kSingleStreamMaxBlocks), so a thread reads W as one
// sequential stream: on Zen 3 (AVX2, huge-page weights), ds4-mini's K = 1024 rows at R = 4
// (ncols 1) / R = 2 (ncols 2) streamed ~8 GB/s where one row at a time reached ~12, while on
// K = 4096 rows R = 4 was ~10% faster than one row (256-512 MiB of matrices, 1 thread, same
// process interleaved). One row is one FMA chain per column (4 cycles per block).
constexpr int kSingleStreamMaxBlocks = 64;  // K <= 2048

template <class ISum, int NC>
constexpr int mmvq_stream_rows_per_step() {
    return ISum::kSingleStream ? 1 : mmvq_rows_per_step<NC>();
}

// Prepares one group of NC <= 8 activation columns: fp32 scales into xd[b * 8 + c] and, for
// policies that transform X, the transformed blocks into xt. Returns the blocks to read.
template <class ISum>
inline const BlockQ8_0* prepare_group(const BlockQ8_0* x, int nc, int nb, float* xd, BlockQ8_0* xt) {
    load_activation_scales(x, nc, nb, 8, xd);
    if (!ISum::kTransformsX) return x;
    for (size_t i = 0; i < size_t(nc) * nb; ++i) {
        xt[i].d = x[i].d;
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xt[i].qs), ISum::transform_x(q));
    }
    return xt;
}

// Rows [row_begin, row_end) for one prepared group of NC columns, R rows per step. Each row group
// prefetches the same block of a later group (at least kMmvqPrefetchBlocks ahead): a thread's
// rows are one contiguous stream, so this runs ahead across row-group boundaries, where a fixed
// in-row distance stalls at the start of every group of short rows. Past the thread's last row
// the prefetches run on into `next` (kernel_table.h prefetch_offset): the narrow MMVQ passes the
// thread's read-ahead region, MMQ (W L2-resident, rows revisited) nothing.
template <class ISum, int NC, bool kCanonicalTree, int R = mmvq_rows_per_step<NC>(),
          Activations kAct = Activations::kBlocks>
void mmvq_row_range(const QMatrixView& w, const void* x, const float* xd, float* y, int row_begin,
                    int row_end, const ReadAhead& next = {}) {
    const int nb = w.cols / QK8_0;
    const bool far = prefetch_far();
    const size_t pf = prefetch_distance(size_t(R) * nb, far) * sizeof(BlockQ8_0);
    const size_t row = size_t(nb) * sizeof(BlockQ8_0);
    const BlockQ8_0* end = w.blocks + size_t(row_end) * nb;
    int n = row_begin;
    for (; n + R <= row_end; n += R)
        mmvq_rows<ISum, NC, R, kCanonicalTree, kAct>(w.blocks, nb, x, xd, y, w.rows, n,
                                                     prefetch_offset(w.blocks + size_t(n) * nb, R * row, pf, end, next), far);
    for (; n < row_end; ++n)
        mmvq_rows<ISum, NC, 1, kCanonicalTree, kAct>(w.blocks, nb, x, xd, y, w.rows, n,
                                                     prefetch_offset(w.blocks + size_t(n) * nb, row, pf, end, next), far);
}

// Q8_0 blocks [c][b] of NC columns -> the packed dot policy's layout at [b][c]
// (Activations::kPacked; 64-byte aligned scratch, NC * nb * 32 * kPackedVectors bytes).
template <class Packed, int NC>
inline void pack_activations(const BlockQ8_0* x, int nb, __m256i* packed) {
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < NC; ++c)
            Packed::pack(x[size_t(c) * nb + b].qs, packed + (size_t(b) * NC + c) * Packed::kPackedVectors);
}

// xd [b * 8 + c] (zeros past NC <= 4) -> times scale (a power of two: exact), then lanes 4..7
// repeat lanes 0..3, so an in-lane vpermilps selects column c in both halves (Activations::kPacked).
inline void lane_scales(float* xd, int nb, float scale) {
    for (int b = 0; b < nb; ++b) {
        for (int l = 0; l < 4; ++l) xd[size_t(b) * 8 + l] *= scale;
        for (int l = 4; l < 8; ++l) xd[size_t(b) * 8 + l] = xd[size_t(b) * 8 + l - 4];
    }
}

// The packed path where it was measured to pay: the single-stream (AVX2) short-row path with
// 2 <= NC <= 4, compute-bound on Zen 3. Against the Q8_0-block loop it replaced (which took the
// per-column scale as a pre-broadcast memory operand of vmulps), 1 thread, same process:
// 128 x 1024 L2-resident, best of 3000 interleaved: time 0.88x at NC = 4, 0.92x at NC = 3, 1.00x
// at NC = 2; streamed from huge pages (40 x 1536 x 1024 and 40 x 1024 x 768, medians of 4
// alternated rounds): 1.02-1.10x the GB/s at NC = 4, 1.21-1.36x at NC = 3, 0.93-0.99x at NC = 2.
// Per block at NC = 4 the loop is 32 vector ops (8 vpmaddwd, 4 each of vpaddd, vcvtdq2ps,
// vpermilps, vfmadd; vpsllw + vpand for the weights, which took 2 vpshufb + 2 vpsraw before
// the words layout; same in-engine time within the noise, q4 prefill 0.96-0.98x), about 8
// cycles on Zen 3's four FP pipes; it measures ~9.6. NC = 1 is bandwidth-bound: unchanged
// (int16 pairs were 4-9% slower there). NC 5..8 (never reached by prefill bands, which stop at
// 4) take the Q8_0-block loop. Rows longer than kSingleStreamMaxBlocks keep that loop too.
template <class ISum>
constexpr bool takes_packed(int nc, int nb) {
    return ISum::kSingleStream && nc >= 2 && nc <= 4 && nb <= kSingleStreamMaxBlocks;
}
// The width half of takes_packed, at compile time: which NC instantiate the packed path.
template <class ISum, int NC>
constexpr bool kPackedActivations = takes_packed<ISum>(NC, 1);

// xd [b * 8 + c] as loaded for NC columns -> the packed path's lane scales, and X's blocks
// packed into per-thread scratch (Activations::kPacked's two inputs).
template <class Packed, int NC>
inline const __m256i* pack_group(const BlockQ8_0* x, int nb, float* xd) {
    __m256i* packed =
        reinterpret_cast<__m256i*>(kernel_scratch_bytes(size_t(NC) * nb * 32 * Packed::kPackedVectors));
    pack_activations<Packed, NC>(x, nb, packed);
    lane_scales(xd, nb, Packed::kScale);
    return packed;
}

template <class ISum, bool kCanonicalTree>
void mmvq_row_range_any(int nc, const QMatrixView& w, const BlockQ8_0* x, const float* xd,
                        float* y, int row_begin, int row_end) {
    switch (nc) {
        case 1: return mmvq_row_range<ISum, 1, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 2: return mmvq_row_range<ISum, 2, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 3: return mmvq_row_range<ISum, 3, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 4: return mmvq_row_range<ISum, 4, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 5: return mmvq_row_range<ISum, 5, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 6: return mmvq_row_range<ISum, 6, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        case 7: return mmvq_row_range<ISum, 7, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
        default: return mmvq_row_range<ISum, 8, kCanonicalTree>(w, x, xd, y, row_begin, row_end);
    }
}

}  // namespace
}  // namespace dq::simd
