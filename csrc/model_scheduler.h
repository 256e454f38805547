// Band scheduler: splits a prompt into steps so no exact band crosses a compressor boundary.
#pragma once
#include <vector>

namespace dq {

// Exact bands (DESIGN.md): w = min(chunk, tokens_left, min over ratio>0 of (ratio - pos % ratio)),
// at least 1, starting at absolute position `start`. A boundary can only be a band's last token.
std::vector<int> schedule_bands(int start, int n_tokens, int chunk, const std::vector<int>& ratios);

// Approximate prefill: fixed steps of `width` tokens (the tail may be shorter); steps may
// cross compressor boundaries (the forward pass splits its per-token section at boundaries).
std::vector<int> schedule_approximate(int n_tokens, int width);

}  // namespace dq
