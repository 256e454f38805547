// Trace capture (opt-in, off by default): per step its width and positions; per layer the
// hyper-connection streams after each sublayer, route ids/weights, and the layer's attention
// state (raw KV window, compressor kv/score rows, compressed rows); every position's logits.
// The forward pass and the session call these hooks only when a TraceCapture is attached
// (one null-pointer check per sublayer / step when off). Records are raw bytes; digests and
// the file format live in Python (engine/trace.py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model_config.h"

namespace dq {

struct State;
struct Scratch;

// One captured tensor. Per-token tensors carry the token's position; state tensors carry the
// last position the step consumed (the state "after pos"); logits are per token (layer -1).
struct TraceTensor {
    std::string tensor;          // hc_attn, hc_ffn, route_ids, route_weights, kv_window,
                                 // comp_kv, comp_score, compressed, logits
    int step = 0;                // prefill step index within this capture
    int layer = -1;              // -1: not per layer
    int pos = 0;
    char dtype = 'f';            // 'f' float32, 'i' int32
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;   // little-endian bytes, C order
};

struct TraceStep {
    int step = 0, pos0 = 0, width = 0;
    bool mmq = false;
    std::vector<int32_t> tokens;
};

// TEST ONLY: add one ULP (toward +inf) to element `index` of the traced copy of `tensor` at
// (step, layer, token j of the step; state tensors have one copy per step and ignore j). The
// computation itself is untouched; this exists so tests can check that the trace diff
// localizes a known one-ULP change.
struct TracePerturb {
    bool on = false;
    int step = 0, layer = -1, token = 0;
    std::string tensor;
    int64_t index = 0;
};

class TraceCapture {
public:
    explicit TraceCapture(const ModelConfig& c) : c_(c) {}

    // Session hooks around one prefill step.
    void begin_step(int pos0, const int32_t* tokens, int w);
    void end_step(const float* logits, bool mmq);
    // Forward hook after sublayer `sub` (0 attention, 1 FFN) of layer l.
    void on_sublayer(int l, int sub, const State& st, const Scratch& sc, int w);

    std::vector<TraceStep> steps;
    std::vector<TraceTensor> records;
    TracePerturb perturb;

private:
    void add(const char* tensor, int layer, int pos, char dtype, std::vector<int64_t> shape,
             const void* src, size_t bytes, int token);
    const ModelConfig& c_;
    int step_ = -1, pos0_ = 0, w_ = 0;
};

}  // namespace dq
