// Per-layer attention state (raw KV window, compressor state, compressed rows) and the
// per-token attention / compressor ops that read and write it.
#pragma once
#include <cstdint>
#include <vector>

#include "model_config.h"
#include "model_weights.h"

namespace dq {

struct LayerState {
    int ratio = 0;
    std::vector<float> window;      // [window_cap, head_dim] ring; slot = pos % window_cap
    std::vector<float> comp_kv;     // [comp_rows(ratio), head_dim] ring; slot = pos % comp_rows
    std::vector<float> comp_score;  // [comp_rows(ratio), head_dim]
    std::vector<float> compressed;  // [max_compressed, head_dim]; first n_compressed rows valid
    int n_compressed = 0;
};

LayerState make_layer_state(const ModelConfig& c, int layer);

// Writes one token's kv row (normed, roped) into the window and its compressor kv/score rows
// (raw projections) into the compressor state. Shapes: kv, ckv, cscore: [head_dim].
void attn_write_token(const ModelConfig& c, LayerState& s, int pos, const float* kv,
                      const float* ckv, const float* cscore);

// Attention of one query token at `pos` (all heads): keys/values are the compressed rows
// produced so far (in order), then window rows for positions max(0, pos-n_swa+1)..pos.
// Shared KV: one kv row serves as key and value for every head. q: [n_heads, head_dim]
// (normed, roped); out: [n_heads, head_dim]; scores: scratch [n_compressed + n_swa].
void attn_one(const ModelConfig& c, const LayerState& s, const float* q, int pos, float* out,
              float* scores);
// One head h of attn_one (the same code path; heads are independent outputs).
void attn_head(const ModelConfig& c, const LayerState& s, const float* q, int pos, int h, float* out,
               float* scores);

// True when `pos` closes a compressor block of this layer: (pos + 1) % ratio == 0.
inline bool is_boundary(int ratio, int pos) { return ratio > 0 && (pos + 1) % ratio == 0; }

// Pools the block ending at boundary `pos`: per channel softmax over the window positions of
// (score + ape), weighted sum of kv rows; ratio-4 layers pool previous + current block. The
// result is RMS-normed, rotated at the block start position and appended as one compressed row.
// rope_cos/rope_sin: tables [ctx, rope_dim/2]; scratch: [2 * comp_rows * head_dim].
void compressor_pool(const ModelConfig& c, const LayerWeights& w, LayerState& s, int pos,
                     const float* rope_cos, const float* rope_sin, float* scratch);

}  // namespace dq
