// Validation and fingerprint of ModelConfig.
#include "model_config.h"

#include <cstring>
#include <stdexcept>

namespace dq {

namespace {
void require(bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("invalid model config: ") + what);
}
uint64_t mix(uint64_t h, uint64_t v) { return splitmix64(h ^ splitmix64(v)); }
uint64_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
}  // namespace

void ModelConfig::validate() const {
    require(vocab == kVocab, "vocab must be 258");
    require(d_model > 0 && d_model % 32 == 0, "d_model must be a positive multiple of 32");
    require(n_layers > 0, "n_layers must be positive");
    require(n_heads > 0, "n_heads must be positive");
    require(head_dim > 0 && head_dim % 32 == 0, "head_dim must be a positive multiple of 32");
    require(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim, "rope_dim must be even, 2..head_dim");
    require(n_swa > 0, "n_swa must be positive");
    require(n_experts > 0, "n_experts must be positive");
    require(top_k > 0 && top_k <= n_experts, "top_k must be 1..n_experts");
    require(d_ff > 0 && d_ff % 32 == 0, "d_ff must be a positive multiple of 32");
    require(n_hash_layers >= 0 && n_hash_layers <= n_layers, "n_hash_layers must be 0..n_layers");
    require(hc_mult > 0 && hc_mult <= 16, "hc_mult must be 1..16");
    require(sinkhorn_iters >= 0, "sinkhorn_iters must be >= 0");
    require(ctx > 0, "ctx must be positive");
    require(int(ratios.size()) == n_layers, "ratios must have n_layers entries");
    for (int r : ratios) require(r == 0 || r >= 4, "ratios must be 0, 4 or > 4");
}

uint64_t ModelConfig::fingerprint() const {
    uint64_t h = 0x4453342D6D696E69ull;  // "DS4-mini"
    for (int v : {vocab, d_model, n_layers, n_heads, head_dim, rope_dim, n_swa, n_experts, top_k,
                  d_ff, n_hash_layers, hc_mult, sinkhorn_iters, ctx})
        h = mix(h, uint64_t(v));
    for (int r : ratios) h = mix(h, uint64_t(r) + 0x100);
    for (float f : {rope_theta, norm_eps, routed_scale, swiglu_limit}) h = mix(h, fbits(f));
    return mix(h, seed);
}

}  // namespace dq
