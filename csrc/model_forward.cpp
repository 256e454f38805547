// Forward pass of one step: matmuls see all w columns at once (narrow MMVQ / MMQ), every
// per-token op runs token by token in q1 order, attention/compressor in causal order.
#include "model_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model_moe.h"
#include "model_ops.h"
#include "model_parallel.h"
#include "model_trace.h"

namespace dq {

Scratch::Scratch(const ModelConfig& c) {
    const size_t W = kMaxStep, d = c.d_model, hc = c.hc_mult, f = c.d_ff, K = c.top_k;
    X.resize(W * hc * d);
    X_next.resize(W * hc * d);
    xin.resize(W * d);
    xn.resize(W * d);
    xq.resize(W * d / QK8_0);
    post.resize(W * hc);
    M.resize(W * hc * hc);
    proj.resize(W * c.proj_rows());
    attn.resize(W * c.q_dim());
    attn_q.resize(W * c.q_dim() / QK8_0);
    o.resize(W * d);
    ids.resize(W * K);
    wts.resize(W * K);
    const size_t moe_cols = W * (K + 1);  // shared expert's columns + one per (token, slot)
    xg.resize(W * K * d / QK8_0);
    hq.resize(moe_cols * f / QK8_0);
    gu.resize(moe_cols * 2 * f);
    h.resize(moe_cols * f);
    y.resize(moe_cols * d);
    moe_up.resize(size_t(c.n_experts) + 1);
    moe_down.resize(size_t(c.n_experts) + 1);
    moe_col_of.resize(W * K);
    int max_comp = 0, max_rows = 0;
    for (int r : c.ratios) {
        max_comp = std::max(max_comp, c.max_compressed(r));
        max_rows = std::max(max_rows, ModelConfig::comp_rows(r));
    }
    const size_t need = std::max({hc * d + d + size_t(c.hc_dyn_rows()),
                                  size_t(max_comp + c.n_swa),
                                  size_t(2 * max_rows + 2) * c.head_dim,
                                  size_t(2 * c.n_experts)});
    tmp.resize(need);
    logits.resize(W * c.vocab);
    tok_stride = std::max(d + size_t(c.hc_dyn_rows()), size_t(c.n_experts));  // HC pre: mean | dyn; router logits
    tok_tmp_buf.resize(W * tok_stride);
    score_stride = size_t(max_comp + c.n_swa);
    score_buf.resize(W * size_t(c.n_heads) * score_stride);
}

Model::Model(const ModelConfig& cfg, int threads) : cfg_(cfg) {
    cfg_.validate();
    if (threads < 1) throw std::invalid_argument("threads must be >= 1");
    const int64_t t0 = now_ns();
    pool_ = std::make_unique<ThreadPool>(threads);
    w_ = build_weights(cfg_, pool_.get());
    const int half = cfg_.rope_dim / 2;
    rope_cos_.resize(size_t(cfg_.ctx) * half);
    rope_sin_.resize(size_t(cfg_.ctx) * half);
    for (int p = 0; p < cfg_.ctx; ++p)
        for (int i = 0; i < half; ++i) {
            const double inv_freq = std::pow(double(cfg_.rope_theta), -2.0 * i / cfg_.rope_dim);
            const double a = double(p) * inv_freq;
            rope_cos_[size_t(p) * half + i] = float(std::cos(a));
            rope_sin_[size_t(p) * half + i] = float(std::sin(a));
        }
    build_seconds_ = double(now_ns() - t0) * 1e-9;
}

State make_state(const ModelConfig& c) {
    State st;
    for (int l = 0; l < c.n_layers; ++l) st.layers.push_back(make_layer_state(c, l));
    st.hc_streams.assign(size_t(c.hc_mult) * c.d_model, 0.0f);
    st.last_logits.assign(c.vocab, 0.0f);
    return st;
}

State Model::new_state() const { return make_state(cfg_); }

ReadAhead Model::read_ahead_after(int l) const {
    if (l + 1 >= cfg_.n_layers) return read_ahead_of(w_.lm_head);
    const LayerWeights& L = w_.layers[size_t(l + 1)];
    return read_ahead_of(L.hc_attn.w_dyn);
}

void Model::hc_pre_step(const HCParams& p, const std::vector<float>& norm, int w, Scratch& sc, StepStats& stats,
                        ReadAhead next) const {
    const ModelConfig& c = cfg_;
    const int d = c.d_model, hc = c.hc_mult, rows = c.hc_dyn_rows();
    ThreadPool* pool = pool_.get();
    // Per token: mean stream (tok_tmp[0, d)), dyn coefficients (tok_tmp[d, d + rows)).
    par_items(pool, w, [&](int j) { hc_mean_norm(c, &sc.X[size_t(j) * hc * d], sc.tok_tmp(j)); });
    // The F32 dyn projection, one row for all w tokens (the row is read once per step; each
    // token's value is bitwise dot_f32(row, mean_j), as at q1). Split over threads even for
    // one token: the 96 KB of rows come from DRAM each step (the Q8_0 stream evicts them), so
    // two threads fetching halves beat one (q1, 2 threads: hc ~380 -> ~290 us/token).
    const float* means[kMaxStep];
    for (int j = 0; j < w; ++j) means[j] = sc.tok_tmp(j);
    stats.f32_weight_bytes += uint64_t(rows) * d * sizeof(float);
    par_items(pool, rows, [&](int r) {
        float out[kMaxStep];
        prefetch_part(next, r, rows);
        dot_f32_cols(&p.w_dyn[size_t(r) * d], means, w, d, out);
        for (int j = 0; j < w; ++j) sc.tok_tmp(j)[d + r] = out[j];
    });
    par_items(pool, w, [&](int j) {
        hc_mix(c, p, &sc.X[size_t(j) * hc * d], sc.tok_tmp(j) + d, &sc.xin[size_t(j) * d],
               &sc.post[size_t(j) * hc], &sc.M[size_t(j) * hc * hc]);
        rms_norm(&sc.xin[size_t(j) * d], norm.data(), &sc.xn[size_t(j) * d], d, c.norm_eps);
    });
}

void Model::hc_post_step(int w, Scratch& sc) const {
    const ModelConfig& c = cfg_;
    const int d = c.d_model, hc = c.hc_mult;
    // New streams into X_next (one (token, stream) item each), which then becomes X: a
    // buffer swap instead of copying w * 16 KB back after every sublayer.
    par_items(pool_.get(), w * hc, [&](int item) {
        const int j = item / hc, i = item % hc;
        hc_post_stream(c, &sc.X[size_t(j) * hc * d], &sc.o[size_t(j) * d], &sc.post[size_t(j) * hc],
                       &sc.M[size_t(j) * hc * hc], i, &sc.X_next[(size_t(j) * hc + i) * d]);
    }, 2 * hc);
    sc.X.swap(sc.X_next);
}

void Model::attention_sublayer(State& st, int l, int w, const Matmul& mm, Scratch& sc,
                               StepStats& stats) const {
    const ModelConfig& c = cfg_;
    const LayerWeights& L = w_.layers[l];
    LayerState& ls = st.layers[l];
    const int d = c.d_model, hd = c.head_dim, qd = c.q_dim(), pr = c.proj_rows();
    const size_t half = size_t(c.rope_dim / 2);
    ThreadPool* pool = pool_.get();
    {
        OpTimer t(stats, kOpHC);
        hc_pre_step(L.hc_attn, L.attn_norm, w, sc, stats, read_ahead_of(L.w_proj));
    }
    {
        OpTimer t(stats, kOpPerToken);
        par_quantize_rows(pool, sc.xn.data(), sc.xq.data(), w, d);
    }
    mm(L.w_proj, sc.xq.data(), w, sc.proj.data(), read_ahead_of(L.w_o));  // [w, q | kv | ckv | cscore]
    {
        OpTimer t(stats, kOpPerToken);
        par_items(pool, w, [&](int j) {
            const int pos = st.pos + j;
            const float* cs = &rope_cos_[size_t(pos) * half];
            const float* sn = &rope_sin_[size_t(pos) * half];
            float* p = &sc.proj[size_t(j) * pr];
            for (int h = 0; h < c.n_heads; ++h) {
                float* qh = p + size_t(h) * hd;
                rms_norm(qh, L.q_norm.data(), qh, hd, c.norm_eps);
                rope_apply(qh, hd, c.rope_dim, cs, sn);
            }
            float* kv = p + qd;
            rms_norm(kv, L.kv_norm.data(), kv, hd, c.norm_eps);
            rope_apply(kv, hd, c.rope_dim, cs, sn);
        });
    }
    // Causal per-token section, split into segments that end at compressor boundaries: write the
    // segment's rows, attend each token (it only reads positions <= itself), then pool.
    for (int j0 = 0; j0 < w;) {
        int j1 = j0;
        while (j1 < w - 1 && !is_boundary(ls.ratio, st.pos + j1)) ++j1;
        {
            OpTimer t(stats, kOpCompressor);
            for (int j = j0; j <= j1; ++j) {
                const float* p = &sc.proj[size_t(j) * pr];
                attn_write_token(c, ls, st.pos + j, p + qd, p + qd + hd, p + qd + 2 * hd);
            }
        }
        {
            OpTimer t(stats, kOpAttention);
            const int nh = c.n_heads;
            par_items(pool, (j1 - j0 + 1) * nh, [&](int item) {
                const int j = j0 + item / nh, h = item % nh;
                attn_head(c, ls, &sc.proj[size_t(j) * pr], st.pos + j, h, &sc.attn[size_t(j) * qd],
                          sc.att_scores(item));
            });
        }
        if (is_boundary(ls.ratio, st.pos + j1)) {
            OpTimer t(stats, kOpCompressor);
            compressor_pool(c, L, ls, st.pos + j1, rope_cos_.data(), rope_sin_.data(), sc.tmp.data());
        }
        j0 = j1 + 1;
    }
    {
        OpTimer t(stats, kOpPerToken);
        par_quantize_rows(pool, sc.attn.data(), sc.attn_q.data(), w, qd);
    }
    mm(L.w_o, sc.attn_q.data(), w, sc.o.data(), read_ahead_of(L.hc_ffn.w_dyn));
    OpTimer t(stats, kOpHC);
    hc_post_step(w, sc);
}

void Model::ffn_sublayer(State& st, int l, const int32_t* tokens, int w, const Matmul& mm, Scratch& sc,
                         int32_t* rid, float* rw, size_t route_stride, StepStats& stats) const {
    const ModelConfig& c = cfg_;
    const LayerWeights& L = w_.layers[l];
    const int d = c.d_model, K = c.top_k;
    ThreadPool* pool = pool_.get();
    {
        OpTimer t(stats, kOpHC);
        hc_pre_step(L.hc_ffn, L.ffn_norm, w, sc, stats, read_ahead_of(L.router));
    }
    {
        OpTimer t(stats, kOpPerToken);
        par_quantize_rows(pool, sc.xn.data(), sc.xq.data(), w, d);
    }
    {
        OpTimer t(stats, kOpRouter);
        const bool hash = l < c.n_hash_layers;
        const int E = c.n_experts;
        const float* xs[kMaxStep];
        for (int j = 0; j < w; ++j) xs[j] = &sc.xn[size_t(j) * d];
        // Router logits: one expert row for all w tokens; split over threads even for one
        // token, as the HC dyn rows (the F32 rows come from DRAM each step).
        const ReadAhead next = read_ahead_of(L.shared_w13);
        stats.f32_weight_bytes += uint64_t(E) * d * sizeof(float);
        par_items(pool, E, [&](int e) {
            float out[kMaxStep];
            prefetch_part(next, e, E);
            dot_f32_cols(&L.router[size_t(e) * d], xs, w, d, out);
            for (int j = 0; j < w; ++j) sc.tok_tmp(j)[e] = out[j];
        });
        for (int j = 0; j < w; ++j)
            route_from_logits(c, L, hash, sc.tok_tmp(j), tokens[j], &sc.ids[size_t(j) * K],
                              &sc.wts[size_t(j) * K], sc.tmp.data());
    }
    if (rid) {
        for (int j = 0; j < w; ++j)
            for (int k = 0; k < K; ++k) {
                rid[size_t(l) * route_stride + size_t(j) * K + k] = sc.ids[size_t(j) * K + k];
                rw[size_t(l) * route_stride + size_t(j) * K + k] = sc.wts[size_t(j) * K + k];
            }
    }
    MoeScratch ms{sc.xg.data(), sc.gu.data(), sc.h.data(), sc.hq.data(), sc.y.data(),
                  sc.moe_up.data(), sc.moe_down.data(), sc.moe_col_of.data()};
    moe_step(c, L, mm, sc.xq.data(), w, sc.ids.data(), sc.wts.data(), sc.o.data(), ms, stats, read_ahead_after(l));
    OpTimer t(stats, kOpHC);
    hc_post_step(w, sc);
}

void Model::forward(State& st, const int32_t* tokens, int w, const StepMode& mode, Scratch& sc,
                    float* logits, int32_t* rid, float* rw, size_t route_stride, StepStats& stats) const {
    const ModelConfig& c = cfg_;
    if (w < 1 || w > kMaxStep) throw std::invalid_argument("step width must be 1..32");
    if (st.pos + w > c.ctx) throw std::invalid_argument("step runs past the context");
    for (int j = 0; j < w; ++j)
        if (tokens[j] < 0 || tokens[j] >= c.vocab) throw std::invalid_argument("token id out of range");
    const int d = c.d_model, hc = c.hc_mult;
    const Matmul mm{pool_.get(), mode, &stats};
    {
        OpTimer t(stats, kOpPerToken);
        for (int j = 0; j < w; ++j)
            for (int i = 0; i < hc; ++i)
                std::memcpy(&sc.X[(size_t(j) * hc + i) * d], &w_.embed[size_t(tokens[j]) * d], sizeof(float) * d);
    }
    for (int l = 0; l < c.n_layers; ++l) {
        attention_sublayer(st, l, w, mm, sc, stats);
        if (sc.trace) sc.trace->on_sublayer(l, 0, st, sc, w);
        ffn_sublayer(st, l, tokens, w, mm, sc, rid ? rid + 0 : nullptr, rw, route_stride, stats);
        if (sc.trace) sc.trace->on_sublayer(l, 1, st, sc, w);
    }
    {
        OpTimer t(stats, kOpPerToken);
        par_items(pool_.get(), w, [&](int j) {
            const float* X = &sc.X[size_t(j) * hc * d];
            float* hrow = &sc.xin[size_t(j) * d];
            for (int k = 0; k < d; ++k) hrow[k] = 0.0f;
            for (int i = 0; i < hc; ++i) {
                const float wi = w_.hc_final[i];
                for (int k = 0; k < d; ++k) hrow[k] += wi * X[size_t(i) * d + k];
            }
            rms_norm(hrow, w_.final_norm.data(), hrow, d, c.norm_eps);
        });
        par_quantize_rows(pool_.get(), sc.xin.data(), sc.xq.data(), w, d);
    }
    mm(w_.lm_head, sc.xq.data(), w, logits, read_ahead_after(-1));
    std::memcpy(st.hc_streams.data(), &sc.X[size_t(w - 1) * hc * d], sizeof(float) * hc * d);
    std::memcpy(st.last_logits.data(), logits + size_t(w - 1) * c.vocab, sizeof(float) * c.vocab);
    st.has_logits = true;
    st.pos += w;
}

}  // namespace dq
