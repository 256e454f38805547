// Per-token F32 ops of DS4-mini (norms, RoPE, softmax, SwiGLU, hyper-connections, routing
// helpers). Exactness rule 1: q1 and bands call exactly these functions, one token at a time;
// nothing here reduces across tokens. Every reduction has one fixed order.
#pragma once
#include <cstdint>
#include <cstring>

#include "model_config.h"
#include "model_weights.h"

namespace dq {

// Fixed-order dot product of n floats: 8 independent lanes (i % 8), then a fixed tree.
float dot_f32(const float* a, const float* b, int n);
// dot_f32 of one row a [n] with each of ncols vectors b[c] [n] (any ncols): out[c] is
// bitwise dot_f32(a, b[c], n) (same lanes, same tree per column); a is read once for all columns,
// so a band streams an F32 projection row once instead of once per token (and attention
// scores eight keys per pass).
void dot_f32_cols(const float* a, const float* const* b, int ncols, int n, float* out);

// 8 fp32 lanes as a GCC vector: one ymm in an AVX2 clone, two xmm in the portable one; either
// way each lane is its own IEEE mul and add, so every clone gives the same bits.
typedef float F32x8 __attribute__((vector_size(32)));

typedef int32_t I32x8 __attribute__((vector_size(32)));

// exp(x) on 8 lanes in plain fp32 mul/add (no libm call), so every clone gives the same bits per
// lane (SwiGLU, softmax). Below ln(FLT_MIN) the result is 0; above 88 x is clamped, so the
// result stays finite. Method and constants: Cephes expf (S. L. Moshier, Cephes Math Library,
// expf.c): n = round(x / ln 2), r = x - n ln 2 in two steps (ln 2 = C1 + C2, C1 exact in 9
// bits), e^r = 1 + r + r^2 P(r) with a degree-5 P, times 2^n built in the exponent bits. Max
// 0.97 ulp against float64 exp on [-87, 88] (checked in tests/test_kernels.py).
// x by reference: a 32-byte vector passed by value draws GCC's -Wpsabi note in the portable
// (non-AVX) clone's translation unit.
__attribute__((always_inline)) inline void exp_f32x8(const F32x8& x_in, F32x8& out) {
    F32x8 x = x_in;
    const F32x8 lo = F32x8{} - 87.0f, hi = F32x8{} + 88.0f, zero = F32x8{};
    const auto under = x < F32x8{} - 87.3365448f;  // exp(x) < FLT_MIN: 0
    x = x < lo ? lo : x;
    x = hi < x ? hi : x;
    const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds |v| < 2^22 to an integer
    const F32x8 n = (x * 1.44269504088896341f + kRound) - kRound;
    const F32x8 r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    F32x8 p = F32x8{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const F32x8 er = (p * (r * r) + r) + 1.0f;
    const I32x8 bits = (__builtin_convertvector(n, I32x8) + 127) << 23;  // 2^n, n in [-126, 127]
    F32x8 scale;
    std::memcpy(&scale, &bits, sizeof scale);
    out = under ? zero : er * scale;
}

// GCC's unroll pragma; empty for nvcc's front end, which reads this header through the GPU
// forward's includes and does not know it (warning 1675).
#if defined(__CUDACC__)
#define DQ_GCC_UNROLL8
#else
#define DQ_GCC_UNROLL8 _Pragma("GCC unroll 8")
#endif

// dst[k] = (((0 + weight(0) row(0)[k]) + weight(1) row(1)[k]) + ... + weight(n-1) row(n-1)[k]) for
// k < d: each term one mul then one add, rows in order (row(j) -> const float* [d]). 64 outputs
// (8 vectors: 8 independent add chains, enough to cover the add latency) stay in registers
// across all rows instead of a load and a store per row, then 32, then one at a time. Inlined,
// so it runs in the vector width of its (cloned) caller: the HC stream sums and attention's
// value sum.
template <int V, class Row, class Weight>
__attribute__((always_inline)) inline void weighted_row_sum_pass(Row row, Weight weight, int n, int k0, float* dst) {
    // Named-size array of vectors, fully unrolled: an array copied out with one memcpy was kept
    // on the stack (zeroed by `rep stos` and stored back every 32 outputs), which cost the HC
    // stream sums about as much as their arithmetic; per-vector memcpy keeps them in registers.
    F32x8 acc[V];
DQ_GCC_UNROLL8
    for (int v = 0; v < V; ++v) acc[v] = F32x8{};
    for (int j = 0; j < n; ++j) {
        const float wj = weight(j);
        const F32x8 wv = {wj, wj, wj, wj, wj, wj, wj, wj};
        const float* rj = row(j) + k0;
DQ_GCC_UNROLL8
        for (int v = 0; v < V; ++v) {
            F32x8 x;
            std::memcpy(&x, rj + 8 * v, sizeof x);
            acc[v] += wv * x;
        }
    }
DQ_GCC_UNROLL8
    for (int v = 0; v < V; ++v) std::memcpy(dst + k0 + 8 * v, &acc[v], sizeof acc[v]);
}

template <class Row, class Weight>
__attribute__((always_inline)) inline void weighted_row_sum(Row row, Weight weight, int n, int d, float* dst) {
    int k0 = 0;
    for (; k0 + 64 <= d; k0 += 64) weighted_row_sum_pass<8>(row, weight, n, k0, dst);
    for (; k0 + 32 <= d; k0 += 32) weighted_row_sum_pass<4>(row, weight, n, k0, dst);
    for (int k = k0; k < d; ++k) {  // the same sequence, one output at a time
        float v = 0.0f;
        for (int j = 0; j < n; ++j) v += weight(j) * row(j)[k];
        dst[k] = v;
    }
}

// y = x / rms(x) * gain (gain may be null). x and y may alias. Shape: [n].
void rms_norm(const float* x, const float* gain, float* y, int n, float eps);

// Rotates the last rope_dim dims of one head vector in place (neox pairs i, i + rope_dim/2).
// cos_t/sin_t: [rope_dim/2] for the position.
void rope_apply(float* head, int head_dim, int rope_dim, const float* cos_t, const float* sin_t);

// In-place numerically stable softmax of n scores.
void softmax_inplace(float* s, int n);

// Clamped SwiGLU, elementwise over n values: h = silu(min(gate, limit)) * clamp(up, +-limit).
void swiglu_clamped(const float* gate, const float* up, float* h, int n, float limit);

// sqrt(softplus(x)), stable for large |x|.
float sqrt_softplus(float x);

// Greedy argmax (lowest index wins ties).
int argmax_f32(const float* x, int n);

// Hyper-connections for one token. X: [hc, d] residual streams.
// hc_pre: computes pre/post weights and the Sinkhorn-normalized mixing matrix M [hc, hc]
// from the mean stream, and x_in = sum_i pre[i] * X[i]. tmp: [d + dyn_rows] scratch.
void hc_pre(const ModelConfig& c, const HCParams& p, const float* X, float* x_in, float* post,
            float* M, float* tmp);
// The three stages of hc_pre, so callers can spread the dyn dot products over threads:
// mean = rmsnorm(mean_i X[i]) [d]; dyn[r] = dot(w_dyn[r], mean) [dyn_rows]; then hc_mix
// turns dyn into pre/post/M and x_in.
void hc_mean_norm(const ModelConfig& c, const float* X, float* mean);
void hc_mix(const ModelConfig& c, const HCParams& p, const float* X, const float* dyn, float* x_in,
            float* post, float* M);
// hc_post: X[i] <- sum_j M[i,j] X[j] + post[i] * out. tmp: [hc * d] scratch.
// hc_post_stream writes one new stream i into dst [d] without touching X.
void hc_post_stream(const ModelConfig& c, const float* X, const float* out, const float* post,
                    const float* M, int i, float* dst);
void hc_post(const ModelConfig& c, float* X, const float* out, const float* post, const float* M,
             float* tmp);

}  // namespace dq
