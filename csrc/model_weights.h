// DS4-mini weights: layout of every tensor and their synthetic, seed-deterministic generation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels.h"
#include "model_config.h"
#include "q8_0.h"

namespace dq {

// Storage for Q8_0 weight blocks: one anonymous mapping, 2 MiB aligned and advised for
// transparent huge pages (MADV_HUGEPAGE; plain 4 KiB pages where THP is off). Streaming ~60 MB
// of weights per token through 4 KiB pages cost the 1-column mat-vec ~25% of its bandwidth on
// Zen 3 (a page walk and a prefetcher restart every 4 KiB). Zero-filled, unmapped when the last
// matrix holding it is released.
class WeightArena {
public:
    explicit WeightArena(size_t bytes);
    ~WeightArena();
    WeightArena(const WeightArena&) = delete;
    WeightArena& operator=(const WeightArena&) = delete;
    // n blocks from the bump pointer, 64-byte aligned (each matrix starts on a cache line).
    BlockQ8_0* take(size_t nblocks);
    // n floats from the bump pointer, 64-byte aligned.
    float* take_floats(size_t n);
    // Bytes a matrix of nblocks (or n floats) takes from an arena (its 64-byte rounding included).
    static size_t footprint(size_t nblocks);
    static size_t footprint_floats(size_t n);
    // The whole zero-filled range (at least the bytes asked for), for raw users (probes).
    void* data() const { return base_; }

private:
    void* base_ = nullptr;
    size_t size_ = 0;
    size_t used_ = 0;
};

// A Q8_0 weight matrix W (rows, cols) row-major, blocks of 32 along cols (K): contiguous
// row-major blocks inside a shared WeightArena (one per layer, so assigning QMatrix{} to
// every matrix of a layer hands that layer's memory back).
struct QMatrix {
    std::shared_ptr<WeightArena> arena;  // keeps `blocks` alive
    BlockQ8_0* blocks = nullptr;         // rows * (cols / 32) blocks
    uint8_t* packed = nullptr;           // the x16 streaming copy (q8_0.h), or null
    int rows = 0;
    int cols = 0;
    QMatrixView view() const { return QMatrixView{blocks, rows, cols, packed}; }
    size_t nblocks() const { return size_t(rows) * size_t(cols / QK8_0); }
    size_t bytes() const { return nblocks() * sizeof(BlockQ8_0); }
};

// F32 rows that every step reads whole (the HC dyn projections and the router, ~256 KB per
// layer of ds4-mini), stored in the layer's WeightArena beside its Q8_0 matrices. The Q8_0 stream
// evicts them from the caches every step, so they come from DRAM each time; on huge pages that
// costs no page walk per 4 KiB row (q1, 2 threads: hc + router ~265 -> ~230 us/token).
struct F32Rows {
    std::shared_ptr<WeightArena> arena;  // keeps `ptr` alive
    float* ptr = nullptr;
    size_t n = 0;
    const float* data() const { return ptr; }
    size_t size() const { return n; }
    const float& operator[](size_t i) const { return ptr[i]; }
};

// Hyper-connection parameters of one sublayer (F32, per-token ops).
struct HCParams {
    std::vector<float> static_pre;   // [hc]
    std::vector<float> static_post;  // [hc]
    std::vector<float> static_res;   // [hc*hc]
    F32Rows w_dyn;                   // [(2*hc + hc*hc), d] dynamic coefficients from the mean stream
    float dyn_scale = 1.0f;
};

struct LayerWeights {
    std::vector<float> attn_norm;  // [d]
    std::vector<float> ffn_norm;   // [d]
    std::vector<float> q_norm;     // [head_dim], shared by all q heads
    std::vector<float> kv_norm;    // [head_dim]
    std::vector<float> comp_norm;  // [head_dim]
    std::vector<float> comp_ape;   // [comp_rows(ratio), head_dim] additive score bias per window slot
    QMatrix w_proj;                // [q_dim + 3*head_dim, d]: q | kv | compressor kv | compressor score
    QMatrix w_o;                   // [d, q_dim]
    F32Rows router;                  // [n_experts, d]
    std::vector<float> router_bias;  // [n_experts] selection-only bias
    std::vector<int32_t> tid2eid;    // [vocab, top_k] for hash-routed layers, else empty
    QMatrix shared_w13;              // [2*d_ff, d]: gate rows then up rows
    QMatrix shared_w2;               // [d, d_ff]
    std::vector<QMatrix> exp_w13;    // n_experts x [2*d_ff, d]
    std::vector<QMatrix> exp_w2;     // n_experts x [d, d_ff]
    HCParams hc_attn, hc_ffn;
};

struct Weights {
    std::vector<float> embed;       // [vocab, d]
    std::vector<LayerWeights> layers;
    std::vector<float> final_norm;  // [d]
    std::vector<float> hc_final;    // [hc] static weights combining the streams before the head
    QMatrix lm_head;                // [vocab, d]
    size_t q8_bytes = 0;            // total bytes of all Q8_0 matrices
};

// Generates every tensor from cfg.seed. Independent of the thread count (counter-based PRNG
// keyed by tensor and block index); `pool` only spreads the work. With `packed` every Q8_0
// matrix also gets its x16 streaming copy (QMatrix::packed, what the CPU kernels read); the GPU
// backend, which converts the row-major blocks, builds without it.
Weights build_weights(const ModelConfig& cfg, ThreadPool* pool, bool packed = true);

}  // namespace dq
