// Narrow MMVQ with AMX-INT8 tiles over the x16 layout (q8_0.h), canonical order, 1..8 columns.
//
// An x16 block is already a tile B in AMX's VNNI format: 8 rows (quads) of 64 bytes, row q holding
// the group's 16 weight rows' values 4q..4q+3. A = the block's activations, one tile row per
// column (32 bytes, read in place from the Q8_0 blocks with a stride of one activation row).
// tdpbssd (signed x signed) gives C [ncols][16] = each (column, weight row)'s exact int32 sum of
// the block's 32 products; stored and read back as zmm, then per block and column one vcvtdq2ps,
// s = wd * xd (16 rows' scales by one vcvtph2ps) and one fma: the bits of vec_dot_q8_0_q8_0_ref.
// Prefetch as on the AVX-512 path. The tile configuration is loaded per call (each thread),
// released at its end. The rest of the kernel set (MMQ, quantization) is the AVX-512 one.
//
// Not the start-up default (kernels_dispatch.cpp): on the Xeon device host (16-core Intel with
// AMX-INT8, 300 MiB L3, 2 December 2026) it streamed 11.2-12.2 GB/s at 1..4 columns against the
// AVX-512 x16 kernels' 13.3-14.6 (`bench/engine/kernels.py --threads 1 --sections mmvq`, 1 GiB,
// K = 4096), and ds4-mini prefill at 1 thread read q1 272-274 vs 299-301 tok/s, q4 490-492 vs
// 514-542 (2 alternated rounds each); at 2 threads q4 857-1000 vs 858-907. With the x16 layout the
// AVX-512 kernels are no longer compute-bound there, so the tiles' per-block round trip
// (tile store, zmm load) costs more than the arithmetic they save. DQ_SIMD_PATH=amx selects it.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

// GCC 12's avx512fintrin.h writes _mm512_undefined_* as `__m512 __Y = __Y;`, which trips
// -Wmaybe-uninitialized where the intrinsics inline (the sanitizer build's flags show it): GCC
// bug 105593, fixed in GCC 13. Before any include, so it covers that header's lines.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernel_table.h"

namespace dq::simd {

namespace {

struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Tiles, two sets so that block b + 1's loads and product overlap block b's (t = 0 or 1):
// 3t = C [nc][16] int32, 3t + 1 = A [nc][32] int8, 3t + 2 = B [8][64] int8.
void load_config(int nc) {
    TileConfig cfg;
    for (int t = 0; t < 2; ++t) {
        cfg.colsb[3 * t] = 64;
        cfg.rows[3 * t] = uint8_t(nc);
        cfg.colsb[3 * t + 1] = QK8_0;
        cfg.rows[3 * t + 1] = uint8_t(nc);
        cfg.colsb[3 * t + 2] = 64;
        cfg.rows[3 * t + 2] = QK8_0 / 4;
    }
    _tile_loadconfig(&cfg);
}

// The block sums of blocks b (tiles 0..2 -> c0) and b + 1 (tiles 3..5 -> c1, when two).
inline void block_sums(const BlockQ8_0* x, size_t xstride, const uint8_t* base, int b, bool two, int32_t* c0,
                       int32_t* c1) {
    _tile_zero(0);
    _tile_loadd(1, x[b].qs, xstride);
    _tile_loadd(2, base + size_t(b) * kPackBlockBytes, 64);
    if (two) {
        _tile_zero(3);
        _tile_loadd(4, x[b + 1].qs, xstride);
        _tile_loadd(5, base + size_t(b + 1) * kPackBlockBytes, 64);
    }
    _tile_dpbssd(0, 1, 2);
    if (two) _tile_dpbssd(3, 4, 5);
    _tile_stored(0, c0, 64);
    if (two) _tile_stored(3, c1, 64);
}

void amx_range(const QMatrixView& w, const BlockQ8_0* x, int nc, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    float* xd = kernel_scratch(size_t(nb) * nc);
    for (int b = 0; b < nb; ++b)
        for (int c = 0; c < nc; ++c) xd[size_t(b) * nc + c] = _cvtsh_ss(x[size_t(c) * nb + b].d);
    const size_t xstride = size_t(nb) * sizeof(BlockQ8_0);
    alignas(64) int32_t cbuf[2][8 * kPackRows];
    load_config(nc);
    for_each_x16_group(w, row_begin, row_end, kX16PrefetchBytes, [&](const uint8_t* base, int n, int valid, intptr_t pfd) {
        const uint16_t* dsec = reinterpret_cast<const uint16_t*>(base + size_t(nb) * kPackBlockBytes);
        __m512 acc[8];
        for (int c = 0; c < nc; ++c) acc[c] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b += 2) {
            const bool two = b + 1 < nb;
            prefetch_x16<1, 2>(base, b, pfd);
            block_sums(x, xstride, base, b, two, cbuf[0], cbuf[1]);
            for (int k = 0; k < (two ? 2 : 1); ++k) {  // blocks in K order: b, then b + 1
                const __m512 wd = _mm512_cvtph_ps(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dsec + size_t(b + k) * kPackRows)));
                for (int c = 0; c < nc; ++c) {
                    const __m512 s = _mm512_mul_ps(wd, _mm512_set1_ps(xd[size_t(b + k) * nc + c]));
                    acc[c] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_load_si512(cbuf[k] + c * kPackRows)), acc[c]);
                }
            }
        }
        const __mmask16 m = valid >= kPackRows ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1u);
        for (int c = 0; c < nc; ++c) _mm512_mask_storeu_ps(y + size_t(c) * w.rows + n, m, acc[c]);
    });
    _tile_release();
}

}  // namespace

void mmvq_amx(const QMatrixView& w, const BlockQ8_0* x, int ncols, float* y, int row_begin, int row_end) {
    const int nb = w.cols / QK8_0;
    for (int c0 = 0; c0 < ncols; c0 += 8)
        amx_range(w, x + size_t(c0) * nb, std::min(8, ncols - c0), y + size_t(c0) * w.rows, row_begin, row_end);
}

const KernelSet kAmxKernels = {"amx", mmvq_amx, mmq_avx512vnni, kPackRows, 16, quantize_row_q8_0_avx2};

}  // namespace dq::simd
