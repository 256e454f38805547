// Shared-KV attention over the raw window + compressed rows, and the per-layer compressor.
#include "model_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model_ops.h"

// attn_head gets an AVX2 clone picked at load time beside the portable default, as the hot
// loops of model_ops.cpp do: the same per-element mul-then-add (no contraction), so the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !DQ_SANITIZE
#define DQ_ATTN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DQ_ATTN_CLONES
#endif

namespace dq {

LayerState make_layer_state(const ModelConfig& c, int layer) {
    LayerState s;
    s.ratio = c.ratios[layer];
    const size_t hd = size_t(c.head_dim);
    s.window.assign(size_t(c.window_cap()) * hd, 0.0f);
    if (s.ratio > 0) {
        const size_t rows = size_t(ModelConfig::comp_rows(s.ratio));
        s.comp_kv.assign(rows * hd, 0.0f);
        s.comp_score.assign(rows * hd, 0.0f);
        s.compressed.assign(size_t(c.max_compressed(s.ratio)) * hd, 0.0f);
    }
    return s;
}

void attn_write_token(const ModelConfig& c, LayerState& s, int pos, const float* kv,
                      const float* ckv, const float* cscore) {
    const size_t hd = size_t(c.head_dim);
    std::memcpy(&s.window[size_t(pos % c.window_cap()) * hd], kv, hd * sizeof(float));
    if (s.ratio > 0) {
        const size_t slot = size_t(pos % ModelConfig::comp_rows(s.ratio));
        std::memcpy(&s.comp_kv[slot * hd], ckv, hd * sizeof(float));
        std::memcpy(&s.comp_score[slot * hd], cscore, hd * sizeof(float));
    }
}

void attn_one(const ModelConfig& c, const LayerState& s, const float* q, int pos, float* out,
              float* scores) {
    for (int h = 0; h < c.n_heads; ++h) attn_head(c, s, q, pos, h, out, scores);
}

DQ_ATTN_CLONES void attn_head(const ModelConfig& c, const LayerState& s, const float* q, int pos, int h, float* out,
               float* scores) {
    const int hd = c.head_dim, cap = c.window_cap();
    const int lo = std::max(0, pos - c.n_swa + 1);
    const int nwin = pos - lo + 1;
    const int nc = s.n_compressed;
    const int n = nc + nwin;
    const float scale = 1.0f / std::sqrt(float(hd));
    const float* qh = q + size_t(h) * hd;
    float* oh = out + size_t(h) * hd;
    // Key/value row j: compressed rows first, then the window in position order.
    auto row = [&](int j) {
        return j < nc ? &s.compressed[size_t(j) * hd] : &s.window[size_t((lo + j - nc) % cap) * hd];
    };
    // Scores, eight keys per pass (dot_f32_cols: each bitwise dot_f32(qh, key)), so the eight
    // lane chains overlap instead of one key's 16 dependent adds at a time.
    for (int j0 = 0; j0 < n; j0 += 8) {
        const int m = n - j0 < 8 ? n - j0 : 8;
        const float* keys[8];
        for (int k = 0; k < m; ++k) keys[k] = row(j0 + k);
        dot_f32_cols(qh, keys, m, hd, scores + j0);
        for (int k = 0; k < m; ++k) scores[j0 + k] *= scale;
    }
    softmax_inplace(scores, n);
    // oh[k] = sum over j in order of p_j * v_j[k] (each term one mul, then one add, from 0).
    weighted_row_sum(row, [&](int j) { return scores[j]; }, n, hd, oh);
}

void compressor_pool(const ModelConfig& c, const LayerWeights& w, LayerState& s, int pos,
                     const float* rope_cos, const float* rope_sin, float* scratch) {
    const int r = s.ratio, hd = c.head_dim;
    const int rows = ModelConfig::comp_rows(r);
    const bool overlap = rows > r;
    const int block_start = pos + 1 - r;
    // Window positions [first, pos]; ape slot = offset within the full (possibly 2-block) window.
    const int win_start = overlap ? block_start - r : block_start;
    const int first = std::max(0, win_start);
    const int n = pos - first + 1;
    float* logit = scratch;                     // [n, hd]
    float* mx = scratch + size_t(rows) * hd;    // [hd] max, then sum
    float* sum = mx + hd;                       // [hd]
    for (int k = 0; k < hd; ++k) mx[k] = -INFINITY;
    for (int i = 0; i < n; ++i) {
        const int p = first + i;
        const float* sc = &s.comp_score[size_t(p % rows) * hd];
        const float* ape = &w.comp_ape[size_t(p - win_start) * hd];
        float* li = logit + size_t(i) * hd;
        for (int k = 0; k < hd; ++k) {
            li[k] = sc[k] + ape[k];
            mx[k] = std::max(mx[k], li[k]);
        }
    }
    for (int k = 0; k < hd; ++k) sum[k] = 0.0f;
    for (int i = 0; i < n; ++i) {
        float* li = logit + size_t(i) * hd;
        for (int k = 0; k < hd; ++k) {
            li[k] = std::exp(li[k] - mx[k]);
            sum[k] += li[k];
        }
    }
    if (s.n_compressed >= c.max_compressed(r)) throw std::logic_error("compressed rows exceed context");
    float* outp = &s.compressed[size_t(s.n_compressed) * hd];
    for (int k = 0; k < hd; ++k) outp[k] = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int p = first + i;
        const float* kv = &s.comp_kv[size_t(p % rows) * hd];
        const float* li = logit + size_t(i) * hd;
        for (int k = 0; k < hd; ++k) outp[k] += li[k] * kv[k];
    }
    for (int k = 0; k < hd; ++k) outp[k] /= sum[k];
    rms_norm(outp, w.comp_norm.data(), outp, hd, c.norm_eps);
    const size_t half = size_t(c.rope_dim / 2);
    rope_apply(outp, hd, c.rope_dim, rope_cos + size_t(block_start) * half,
               rope_sin + size_t(block_start) * half);
    s.n_compressed += 1;
}

}  // namespace dq
