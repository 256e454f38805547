// Q8_0 block format (32 int8 + fp16 scale, 34 bytes) and fp16 <-> fp32 conversion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dq {

constexpr int QK8_0 = 32;  // values per block

// One block covers 32 consecutive values along K: x[i] ~= d * qs[i].
struct BlockQ8_0 {
    uint16_t d;          // IEEE fp16 scale
    int8_t qs[QK8_0];    // quantized values
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

// Round-to-nearest-even fp32 -> fp16 and exact fp16 -> fp32 (portable, no F16C needed).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);

// Quantize one row of K floats (K % 32 == 0) into K/32 blocks: d = amax/127, q = round(x/d).
// Used for weights and for activations alike; a per-token op, so q1 and bands share it.
// Runs the active SIMD path's version (kernels_dispatch.cpp); every version produces the bytes
// of quantize_row_q8_0_ref, the portable scalar definition (q8_0.cpp), on any input.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int k);
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int k);

// The streaming layout of a weight matrix (rows, cols) for narrow MMVQ ("x16"), repacked once at
// load (like ggml's CPU repack): rows in groups of 16 (the last group padded with zero rows),
// each group one contiguous stream of nb = cols/32 blocks:
//   qs [nb][8][16][4] int8: block b, quad q (values 4q..4q+3), row r of the group
//   d  [nb][16] fp16:        block b's scale of row r
// so one 64-byte line holds 16 rows' 4 values of one quad (a zmm of 16 int32 lanes, one per row,
// for vpdpbusd; two ymm for AVX2), and a vector of per-row int32 sums needs no horizontal step.
constexpr int kPackRows = 16;
constexpr size_t kPackQuadBytes = 4 * kPackRows;                                  // 64: one quad, 16 rows
constexpr size_t kPackBlockBytes = size_t(QK8_0 / 4) * kPackQuadBytes;            // 512: one block's qs
constexpr size_t kPackGroupBlockBytes = kPackBlockBytes + 2 * size_t(kPackRows);  // 544 = 16 x 34
inline int pack_groups(int rows) { return (rows + kPackRows - 1) / kPackRows; }
inline size_t packed_group_bytes(int cols) { return size_t(cols / QK8_0) * kPackGroupBlockBytes; }
inline size_t packed_bytes(int rows, int cols) { return size_t(pack_groups(rows)) * packed_group_bytes(cols); }
// w: rows x cols/32 row-major blocks -> out: packed_bytes(rows, cols) bytes (64-byte aligned).
void pack_q8_0_x16(const BlockQ8_0* w, int rows, int cols, uint8_t* out);
// Row n, block b of a packed matrix: its 32 quants (gathered) and its fp16 scale.
void unpack_block_x16(const uint8_t* packed, int cols, int n, int b, BlockQ8_0* out);

}  // namespace dq
