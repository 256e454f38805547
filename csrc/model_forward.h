// The DS4-mini model (config, weights, thread pool, RoPE tables) and its forward pass for one
// step of w consecutive tokens (w = 1 is q1; w = 2..4 an exact band; wider only approximate).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "model_attention.h"
#include "model_config.h"
#include "model_matmul.h"
#include "model_weights.h"
#include "threadpool.h"

namespace dq { class TraceCapture; }

namespace dq {

// Everything a session carries between steps.
struct State {
    int pos = 0;                      // tokens consumed so far
    std::vector<LayerState> layers;
    std::vector<float> hc_streams;    // [hc, d] residual streams of the last token (after the last layer)
    std::vector<float> last_logits;   // [vocab] logits of the last token
    bool has_logits = false;
};

// A fresh (empty) state for config c.
State make_state(const ModelConfig& c);

// Per-step scratch buffers sized for kMaxStep tokens.
struct Scratch {
    explicit Scratch(const ModelConfig& c);
    std::vector<float> X;            // [w, hc, d] residual streams
    std::vector<float> X_next;       // [w, hc, d] hc_post's output, swapped with X
    std::vector<float> xin, xn;      // [w, d]
    std::vector<BlockQ8_0> xq;       // [w, d/32]
    std::vector<float> post, M;      // [w, hc], [w, hc*hc]
    std::vector<float> proj;         // [w, proj_rows]
    std::vector<float> attn;         // [w, q_dim]
    std::vector<BlockQ8_0> attn_q;   // [w, q_dim/32]
    std::vector<float> o;            // [w, d]
    std::vector<int32_t> ids;        // [w, top_k]
    std::vector<float> wts;          // [w, top_k]
    std::vector<BlockQ8_0> xg, hq;   // MoE gathers
    std::vector<float> gu, h, y;     // MoE buffers (shared expert columns, then routed)
    std::vector<MatTask> moe_up, moe_down;  // [n_experts + 1] MoE products of a step
    std::vector<int> moe_col_of;     // [w * top_k] (token, slot) -> MoE column
    std::vector<float> tmp;          // per-token scratch (hc, attention scores, pooling)
    std::vector<float> logits;       // [w, vocab]
    TraceCapture* trace = nullptr;   // opt-in trace capture (model_trace.h); null = off
    // Per-token scratch for ops that run in parallel over tokens / (token, head) items.
    size_t tok_stride = 0, score_stride = 0;
    std::vector<float> tok_tmp_buf;  // [kMaxStep, max(d + dyn_rows, n_experts)]
    std::vector<float> score_buf;    // [kMaxStep * n_heads, max_compressed + n_swa]
    float* tok_tmp(int j) { return tok_tmp_buf.data() + size_t(j) * tok_stride; }
    float* att_scores(int item) { return score_buf.data() + size_t(item) * score_stride; }
};

class Model {
public:
    Model(const ModelConfig& cfg, int threads);
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const ModelConfig& config() const { return cfg_; }
    const Weights& weights() const { return w_; }
    int threads() const { return pool_->size(); }
    double build_seconds() const { return build_seconds_; }
    State new_state() const;

    // Runs tokens[0..w) at positions st.pos.. and advances st. Writes logits [w, vocab];
    // route ids/weights (if non-null) at rid[l * route_stride + t * top_k + k].
    // Serialized per model (one step at a time uses the shared thread pool).
    void forward(State& st, const int32_t* tokens, int w, const StepMode& mode, Scratch& sc,
                 float* logits, int32_t* rid, float* rw, size_t route_stride, StepStats& stats) const;

    std::mutex& mutex() const { return mu_; }

private:
    // HC pre-mix + sublayer input norm for w tokens: sc.X -> sc.xin (mixed), sc.xn (normed),
    // sc.post / sc.M (per-token mixing for hc_post).
    // (next: the weights read after it, prefetched while its F32 rows are read.)
    void hc_pre_step(const HCParams& p, const std::vector<float>& norm, int w, Scratch& sc, StepStats& stats,
                     ReadAhead next = {}) const;
    // The weights read first after layer l's last product (the next layer's, or the LM head's after
    // the last layer; l = -1: layer 0, which the next step starts with): a prefetch hint.
    ReadAhead read_ahead_after(int l) const;
    // HC post-mix for w tokens: X[j] <- M_j X[j] + post_j * o[j].
    void hc_post_step(int w, Scratch& sc) const;
    void attention_sublayer(State& st, int l, int w, const Matmul& mm, Scratch& sc, StepStats& stats) const;
    void ffn_sublayer(State& st, int l, const int32_t* tokens, int w, const Matmul& mm, Scratch& sc,
                      int32_t* rid, float* rw, size_t route_stride, StepStats& stats) const;

    ModelConfig cfg_;
    std::unique_ptr<ThreadPool> pool_;
    Weights w_;
    std::vector<float> rope_cos_, rope_sin_;  // [ctx, rope_dim/2]
    double build_seconds_ = 0.0;
    mutable std::mutex mu_;
};

}  // namespace dq
