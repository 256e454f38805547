// A session: one sequence's state over a Model; prefill (q1 / exact bands / approximate),
// greedy decode, and snapshot/restore of the whole state.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model_forward.h"
#include "model_ops.h"

namespace dq {

struct PrefillOptions {
    int chunk = 1;            // max exact band width, 1..4 (1 = q1)
    int mmvq_max_ncols = 4;   // narrow-MMVQ cap, 1..8; wider calls use MMQ
    bool approximate = false; // wide MMQ steps (non-exact)
    int approx_width = kMaxStep;
};

struct PrefillOutcome {
    std::vector<int> widths;        // step widths in order
    std::vector<uint8_t> step_mmq;  // per step: 1 if any call used MMQ
    int64_t ns = 0;                 // steady_clock, whole prefill
    StepStats stats;
};

struct DecodeOutcome {
    std::vector<int32_t> tokens;  // generated (EOS excluded)
    std::string stop;             // "eos", "max_tokens" or "ctx"
    int64_t ns = 0;
    StepStats stats;
};

// The greedy decode loop shared by the CPU and CUDA sessions: emit argmax(last logits) until
// EOS, max_tokens, or a full context (pos() >= c.ctx), feeding each emitted token but the last.
// last_logits() -> const float* [vocab]; pos() -> int; feed(token, stats) runs one q1 step.
template <class LastLogits, class Pos, class Feed>
DecodeOutcome greedy_decode(const ModelConfig& c, int max_tokens, LastLogits last_logits, Pos pos,
                            Feed feed) {
    DecodeOutcome out;
    out.stop = "max_tokens";
    const int64_t t0 = now_ns();
    while (int(out.tokens.size()) < max_tokens) {
        const int32_t tok = argmax_f32(last_logits(), c.vocab);
        if (tok == kEos) {
            out.stop = "eos";
            break;
        }
        out.tokens.push_back(tok);
        if (int(out.tokens.size()) == max_tokens) break;
        if (pos() >= c.ctx) {
            out.stop = "ctx";
            break;
        }
        feed(tok, out.stats);
    }
    out.ns = now_ns() - t0;
    return out;
}

// Snapshot bytes of a State (magic, version, config fingerprint, then every array) and back;
// shared by the CPU Session and the CUDA session (csrc/cuda), so snapshots move between them.
std::vector<uint8_t> snapshot_state(const ModelConfig& c, const State& st);
State restore_state(const ModelConfig& c, const uint8_t* data, size_t size);  // throws std::invalid_argument

class Session {
public:
    explicit Session(const Model& m);

    int pos() const { return st_.pos; }
    const State& state() const { return st_; }
    const Model& model() const { return m_; }

    // Appends n tokens. logits: [n, vocab] or null; rid/rw: [n_layers, n, top_k] or null.
    PrefillOutcome prefill(const int32_t* tokens, int n, const PrefillOptions& opt, float* logits,
                           int32_t* rid, float* rw);
    // Greedy decode from the last logits: emits up to max_tokens (stops at EOS or the context);
    // every emitted token but the last is fed back. Steps are q1 (narrow MMVQ, one column).
    DecodeOutcome decode(int max_tokens);
    // Emits argmax(last logits) and feeds it (one q1 step). Returns the token.
    int32_t decode_step(StepStats& stats);

    // Attaches (or with null detaches) a trace capture to later prefill steps; decode is not traced.
    void set_trace(TraceCapture* t) { trace_ = t; }

    std::vector<uint8_t> snapshot() const;
    void restore(const uint8_t* data, size_t size);  // throws std::invalid_argument if foreign

private:
    const Model& m_;
    State st_;
    Scratch sc_;
    TraceCapture* trace_ = nullptr;
};

}  // namespace dq
