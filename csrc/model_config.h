// DS4-mini hyper-parameters (the C++ view of a config validated in Python) and derived sizes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dq {

constexpr int kVocab = 258;   // 256 byte tokens + BOS + EOS
constexpr int kBos = 256;
constexpr int kEos = 257;
constexpr int kMaxStep = 32;  // widest step any mode issues (approximate prefill)
constexpr int kMaxBandChunk = 4;  // exact bands: chunk 1..4
constexpr int kMaxMmvqCols = 8;   // narrow MMVQ handles 1..8 columns

struct ModelConfig {
    std::string name;
    int vocab = kVocab;
    int d_model = 0;
    int n_layers = 0;
    int n_heads = 0;
    int head_dim = 0;
    int rope_dim = 0;
    int n_swa = 0;
    int n_experts = 0;
    int top_k = 0;
    int d_ff = 0;
    int n_hash_layers = 0;
    int hc_mult = 0;
    int sinkhorn_iters = 0;
    int ctx = 0;
    std::vector<int> ratios;  // per layer: 0 (window only), 4 (overlapping), or R > 4
    float rope_theta = 10000.0f;
    float norm_eps = 1e-6f;
    float routed_scale = 1.0f;
    float swiglu_limit = 7.0f;
    uint64_t seed = 0;

    int q_dim() const { return n_heads * head_dim; }
    // Fused attention projection rows: q (n_heads*head_dim) | kv | compressor kv | compressor score.
    int proj_rows() const { return q_dim() + 3 * head_dim; }
    // Raw KV ring: n_swa rows plus room for one step, so a step never overwrites a row that
    // an earlier token of the same step still attends to.
    int window_cap() const { return n_swa + kMaxStep; }
    // Compressor state rows: ratio-4 layers keep previous + current block (overlapping window).
    static int comp_rows(int ratio) { return ratio == 4 ? 2 * ratio : ratio; }
    int max_compressed(int ratio) const { return ratio > 0 ? ctx / ratio : 0; }
    int hc_dyn_rows() const { return 2 * hc_mult + hc_mult * hc_mult; }

    // Throws std::invalid_argument naming the field (defensive; Python validates first).
    void validate() const;
    // 64-bit fingerprint of every field (guards snapshot restore across models).
    uint64_t fingerprint() const;
};

// splitmix64: counter-based PRNG step used for weights and fingerprints.
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace dq
