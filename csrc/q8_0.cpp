// Q8_0 block format: portable fp16 <-> fp32 conversion and row quantization (scalar, exact).
#include "q8_0.h"

#include <cmath>

namespace dq {

namespace {
inline float bits_to_f32(uint32_t w) {
    float f;
    std::memcpy(&f, &w, sizeof f);
    return f;
}
inline uint32_t f32_to_bits(float f) {
    uint32_t w;
    std::memcpy(&w, &f, sizeof w);
    return w;
}
}  // namespace

// Round-to-nearest-even via the float unit (Maratea's FP16 trick, as in ggml/FP16): scaling
// to the fp16 exponent range lets the fp32 adder do the rounding. Handles subnormals,
// overflow to inf and NaN (quiet 0x7E00). Requires default rounding and no fast-math.
uint16_t fp32_to_fp16(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = f32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = bits_to_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return uint16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// Exact widening (every fp16 value is representable in fp32).
float fp16_to_fp32(uint16_t h) {
    const uint32_t w = uint32_t(h) << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = bits_to_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = bits_to_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result =
        sign | (two_w < denormalized_cutoff ? f32_to_bits(denormalized) : f32_to_bits(normalized));
    return bits_to_f32(result);
}

// x is K floats (K % 32 == 0); y is K/32 blocks. d = amax/127 (rounded to fp16 for storage),
// q = round-half-away(x / d) computed with the unrounded fp32 d, clamped to [-127, 127] so
// the int8 kernels never see -128. An all-zero block stores d = 0 and q = 0.
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, int k) {
    const int nb = k / QK8_0;
    for (int b = 0; b < nb; ++b) {
        const float* xb = x + size_t(b) * QK8_0;
        float amax = 0.0f;
        for (int i = 0; i < QK8_0; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
        const float d = amax / 127.0f;
        y[b].d = fp32_to_fp16(d);
        for (int i = 0; i < QK8_0; ++i) {
            float q = d != 0.0f ? std::round(xb[i] / d) : 0.0f;
            q = std::fmin(127.0f, std::fmax(-127.0f, q));
            y[b].qs[i] = int8_t(q);
        }
    }
}

void pack_q8_0_x16(const BlockQ8_0* w, int rows, int cols, uint8_t* out) {
    const int nb = cols / QK8_0;
    std::memset(out, 0, packed_bytes(rows, cols));
    for (int g = 0; g < pack_groups(rows); ++g) {
        uint8_t* base = out + size_t(g) * packed_group_bytes(cols);
        uint16_t* d = reinterpret_cast<uint16_t*>(base + size_t(nb) * kPackBlockBytes);
        for (int r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
            const BlockQ8_0* row = w + size_t(g * kPackRows + r) * nb;
            for (int b = 0; b < nb; ++b) {
                for (int q = 0; q < QK8_0 / 4; ++q)
                    std::memcpy(base + size_t(b) * kPackBlockBytes + q * kPackQuadBytes + 4 * r, row[b].qs + 4 * q, 4);
                d[size_t(b) * kPackRows + r] = row[b].d;
            }
        }
    }
}

void unpack_block_x16(const uint8_t* packed, int cols, int n, int b, BlockQ8_0* out) {
    const int nb = cols / QK8_0, g = n / kPackRows, r = n % kPackRows;
    const uint8_t* base = packed + size_t(g) * packed_group_bytes(cols);
    for (int q = 0; q < QK8_0 / 4; ++q)
        std::memcpy(out->qs + 4 * q, base + size_t(b) * kPackBlockBytes + q * kPackQuadBytes + 4 * r, 4);
    std::memcpy(&out->d, base + size_t(nb) * kPackBlockBytes + (size_t(b) * kPackRows + r) * 2, 2);
}

}  // namespace dq
