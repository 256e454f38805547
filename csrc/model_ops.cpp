// Per-token F32 ops: one code path for q1 and bands (see model_ops.h).
#include "model_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/engine_rules.h"

namespace dq {

// Hot per-token loops get an AVX2 clone picked at load time (GCC/Clang ifunc) beside the portable
// default. Both clones run the same per-lane mul-then-add sequence (-ffp-contract=off, no
// reassociation), so they produce the same bits; only the vector width differs.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !DQ_SANITIZE
#define DQ_OPS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DQ_OPS_CLONES
#endif

namespace {
// dot_f32's fixed tree over its 8 lanes (shared by dot_f32_cols, which must give the same bits).
inline float tree8(const float* acc) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
// dot_f32_cols' software prefetch distance along its row (512 floats = 2 KiB).
constexpr int kDotPrefetchFloats = 512;
}  // namespace

DQ_OPS_CLONES float dot_f32(const float* a, const float* b, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
    return tree8(acc);
}

namespace {
// NC columns against one row a, NC fixed at compile time and the lanes written as vectors
// (F32x8) so the accumulators stay in registers (with a run-time NC and plain arrays, GCC kept
// them on the stack and multiplied lane by lane in scalar code). Per column exactly dot_f32's
// lanes and tree; the NC chains are independent, so they overlap (one chain is one add latency
// per 8 floats).
template <int NC>
DQ_OPS_CLONES void dot_f32_cols_n(const float* a, const float* const* b, int n, float* out) {
    F32x8 acc[NC];
    const float* bc[NC];
    for (int c = 0; c < NC; ++c) {
        acc[c] = F32x8{};
        bc[c] = b[c];
    }
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        // The rows a (HC w_dyn, router) come from DRAM every step (the Q8_0 weight stream
        // evicts them) and each 4 KiB row restarts the hardware prefetcher: run 2 KiB
        // ahead, into the next row of the caller's contiguous rows. A hint only (never
        // faults past the end); it does not touch the arithmetic.
        if ((i & 15) == 0) __builtin_prefetch(a + i + kDotPrefetchFloats);
        F32x8 av, bv;
        std::memcpy(&av, a + i, sizeof av);
        for (int c = 0; c < NC; ++c) {
            std::memcpy(&bv, bc[c] + i, sizeof bv);
            acc[c] += av * bv;
        }
    }
    for (int c = 0; c < NC; ++c) {
        float ac[8];
        std::memcpy(ac, &acc[c], sizeof ac);
        for (int t = i, j = 0; t < n; ++t, ++j) ac[j] += a[t] * bc[c][t];
        out[c] = tree8(ac);
    }
}
}  // namespace

void dot_f32_cols(const float* a, const float* const* b, int ncols, int n, float* out) {
    // Shape: a [n], b[c] [n] for c < ncols, out [ncols]. Columns in groups of up to 8 (attention
    // scores eight keys per pass: eight chains instead of four).
    for (int c0 = 0; c0 < ncols; c0 += 8) {
        switch (ncols - c0 < 8 ? ncols - c0 : 8) {
            case 1: dot_f32_cols_n<1>(a, b + c0, n, out + c0); break;
            case 2: dot_f32_cols_n<2>(a, b + c0, n, out + c0); break;
            case 3: dot_f32_cols_n<3>(a, b + c0, n, out + c0); break;
            case 4: dot_f32_cols_n<4>(a, b + c0, n, out + c0); break;
            case 5: dot_f32_cols_n<5>(a, b + c0, n, out + c0); break;
            case 6: dot_f32_cols_n<6>(a, b + c0, n, out + c0); break;
            case 7: dot_f32_cols_n<7>(a, b + c0, n, out + c0); break;
            default: dot_f32_cols_n<8>(a, b + c0, n, out + c0); break;
        }
    }
}

DQ_OPS_CLONES void rms_norm(const float* x, const float* gain, float* y, int n, float eps) {
    const float ms = dot_f32(x, x, n) / float(n);
    const float inv = 1.0f / std::sqrt(ms + eps);
    if (gain) {
        for (int i = 0; i < n; ++i) y[i] = x[i] * inv * gain[i];
    } else {
        for (int i = 0; i < n; ++i) y[i] = x[i] * inv;
    }
}

void rope_apply(float* head, int head_dim, int rope_dim, const float* cos_t, const float* sin_t) {
    const int half = rope_dim / 2;
    float* r = head + (head_dim - rope_dim);
    for (int i = 0; i < half; ++i) {
        const float a = r[i], b = r[i + half];
        r[i] = a * cos_t[i] - b * sin_t[i];
        r[i + half] = a * sin_t[i] + b * cos_t[i];
    }
}

DQ_OPS_CLONES void softmax_inplace(float* s, int n) {
    float m = s[0];
    for (int i = 1; i < n; ++i) m = std::max(m, s[i]);
    // exp on 8 lanes (each element on its own; the zero-padded tail through the same lanes),
    // then the sum in index order as before.
    const F32x8 mv = F32x8{} + m;
    F32x8 v;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        std::memcpy(&v, s + i, sizeof v);
        exp_f32x8(v - mv, v);
        std::memcpy(s + i, &v, sizeof v);
    }
    if (i < n) {
        const size_t rest = sizeof(float) * size_t(n - i);
        v = mv;
        std::memcpy(&v, s + i, rest);
        exp_f32x8(v - mv, v);
        std::memcpy(s + i, &v, rest);
    }
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += s[j];
    const float inv = 1.0f / sum;
    for (int j = 0; j < n; ++j) s[j] *= inv;
}

namespace {
// h = min(g, limit) / (1 + exp(-min(g, limit))) * clamp(u, +-limit) on 8 lanes (std::min /
// std::max's comparisons, so a NaN gate passes through as before).
inline void swiglu8(const F32x8& g, const F32x8& u, float limit, F32x8& h) {
    const F32x8 lim = F32x8{} + limit, nlim = F32x8{} - limit;
    const F32x8 gi = lim < g ? lim : g;
    F32x8 ui = u < nlim ? nlim : u;
    ui = lim < ui ? lim : ui;
    F32x8 e;
    exp_f32x8(-gi, e);
    h = gi / (1.0f + e) * ui;
}
}  // namespace

DQ_OPS_CLONES void swiglu_clamped(const float* g, const float* u, float* h, int n, float limit) {
    int i = 0;
    F32x8 gv, uv, hv;
    for (; i + 8 <= n; i += 8) {
        std::memcpy(&gv, g + i, sizeof gv);
        std::memcpy(&uv, u + i, sizeof uv);
        swiglu8(gv, uv, limit, hv);
        std::memcpy(h + i, &hv, sizeof hv);
    }
    if (i < n) {  // the tail through the same lanes (zero-padded), so its bits match
        const size_t rest = sizeof(float) * size_t(n - i);
        gv = F32x8{};
        uv = F32x8{};
        std::memcpy(&gv, g + i, rest);
        std::memcpy(&uv, u + i, rest);
        swiglu8(gv, uv, limit, hv);
        std::memcpy(h + i, &hv, rest);
    }
}

float sqrt_softplus(float x) { return rules::sqrt_softplus(x); }

int argmax_f32(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

namespace {
// dst[k] = ((0 + w[0] X[0][k]) + ... + w[n-1] X[n-1][k]) + we e[k] (the last term only when e):
// the streams X [n, d] in order, then e as one more row.
DQ_OPS_CLONES void stream_mix(const float* X, const float* w, int n, int d, const float* e, float we, float* dst) {
    weighted_row_sum([&](int j) { return j < n ? X + size_t(j) * d : e; },
                     [&](int j) { return j < n ? w[j] : we; }, e ? n + 1 : n, d, dst);
}
}  // namespace

DQ_OPS_CLONES void hc_mean_norm(const ModelConfig& c, const float* X, float* mean) {
    const int hc = c.hc_mult, d = c.d_model;
    const float inv_hc = 1.0f / float(hc);
    // mean[k] = (0 + X[0][k] + ... + X[hc-1][k]) * inv_hc: a weight of 1 adds each stream exactly
    // as a plain add would (1 * x == x), so the sum keeps its stream order and bits.
    float ones[64];
    for (int i = 0; i < hc; ++i) ones[i] = 1.0f;
    stream_mix(X, ones, hc, d, nullptr, 0.0f, mean);
    for (int k = 0; k < d; ++k) mean[k] *= inv_hc;
    rms_norm(mean, nullptr, mean, d, c.norm_eps);
}

DQ_OPS_CLONES void hc_mix(const ModelConfig& c, const HCParams& p, const float* X, const float* dyn, float* x_in,
            float* post, float* M) {
    const int hc = c.hc_mult, d = c.d_model;
    float pre[64];
    rules::hc_mix_weights(p.static_pre.data(), p.static_post.data(), p.static_res.data(), p.dyn_scale, dyn, hc,
                          c.sinkhorn_iters, pre, post, M);
    stream_mix(X, pre, hc, d, nullptr, 0.0f, x_in);
}

void hc_pre(const ModelConfig& c, const HCParams& p, const float* X, float* x_in, float* post,
            float* M, float* tmp) {
    const int d = c.d_model;
    float* mean = tmp;     // [d]
    float* dyn = tmp + d;  // [dyn_rows]
    hc_mean_norm(c, X, mean);
    for (int r = 0; r < c.hc_dyn_rows(); ++r) dyn[r] = dot_f32(&p.w_dyn[size_t(r) * d], mean, d);
    hc_mix(c, p, X, dyn, x_in, post, M);
}

DQ_OPS_CLONES void hc_post_stream(const ModelConfig& c, const float* X, const float* out, const float* post,
                    const float* M, int i, float* dst) {
    stream_mix(X, &M[size_t(i) * c.hc_mult], c.hc_mult, c.d_model, out, post[i], dst);
}

void hc_post(const ModelConfig& c, float* X, const float* out, const float* post, const float* M,
             float* tmp) {
    const int hc = c.hc_mult, d = c.d_model;
    for (int i = 0; i < hc; ++i) hc_post_stream(c, X, out, post, M, i, tmp + size_t(i) * d);
    std::memcpy(X, tmp, sizeof(float) * size_t(hc) * d);
}

}  // namespace dq
