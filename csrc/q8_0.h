// Q8_0 block format (32 int8 + fp16 scale, 34 bytes) and fp16 <-> fp32 conversion.
#pragma once
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

}  // namespace dq
