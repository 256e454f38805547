// Synthetic weight generation: splitmix64 keyed by (seed, tensor, block) so results never
// depend on the thread count; scales keep activations O(1) through the layers.
#include "model_weights.h"

#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <new>

#include "threadpool.h"

namespace dq {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kLine = 64;
}  // namespace

WeightArena::WeightArena(size_t bytes) {
    // Below one huge page there is nothing to advise: map whole 4 KiB pages, unaligned.
    const size_t align = bytes >= kHugePage ? kHugePage : 4096;
    size_ = (bytes + align - 1) / align * align;
    if (size_ == 0) size_ = align;
    // Over-map by one alignment unit so the used range can start aligned.
    const size_t mapped = align == kHugePage ? size_ + kHugePage : size_;
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (raw + align - 1) & ~uintptr_t(align - 1);
    // Return the unaligned head and the unused tail, keep [aligned, aligned + size_).
    if (aligned > raw) munmap(p, aligned - raw);
    const size_t tail = (raw + mapped) - (aligned + size_);
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size_), tail);
    base_ = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
    // Advice only: where THP is off (or never) the range keeps 4 KiB pages.
    if (align == kHugePage) madvise(base_, size_, MADV_HUGEPAGE);
#endif
}

WeightArena::~WeightArena() {
    if (base_) munmap(base_, size_);
}

size_t WeightArena::footprint(size_t nblocks) {
    return (nblocks * sizeof(BlockQ8_0) + kLine - 1) / kLine * kLine;
}

size_t WeightArena::footprint_floats(size_t n) { return (n * sizeof(float) + kLine - 1) / kLine * kLine; }

namespace {
void* bump(void* base, size_t size, size_t& used, size_t need) {
    if (used + need > size) throw std::bad_alloc();  // callers size the arena first
    void* p = static_cast<char*>(base) + used;
    used += need;
    return p;
}
}  // namespace

BlockQ8_0* WeightArena::take(size_t nblocks) {
    return static_cast<BlockQ8_0*>(bump(base_, size_, used_, footprint(nblocks)));
}

float* WeightArena::take_floats(size_t n) {
    return static_cast<float*>(bump(base_, size_, used_, footprint_floats(n)));
}

namespace {

// Tensor stream ids (combined with the layer and expert index).
enum Tensor : uint64_t {
    kEmbed = 1, kLmHead, kFinalNorm, kHcFinal, kAttnNorm, kFfnNorm, kQNorm, kKvNorm, kCompNorm,
    kCompApe, kProj, kWo, kRouter, kRouterBias, kTid2Eid, kW13, kW2, kHcAttn, kHcFfn,
};

uint64_t stream_id(uint64_t seed, uint64_t tensor, uint64_t layer, uint64_t expert) {
    uint64_t h = splitmix64(seed ^ 0x5EEDull);
    h = splitmix64(h ^ (tensor << 48));
    h = splitmix64(h ^ (layer << 24));
    return splitmix64(h ^ expert);
}

// Uniform in [-1, 1).
float uniform(uint64_t stream, uint64_t counter) {
    uint64_t r = splitmix64(stream + counter * 0xD1B54A32D192ED03ull);
    return float(double(r >> 40) / double(1ull << 23) - 1.0);
}

std::vector<float> gen_f32(size_t n, uint64_t stream, float center, float amp) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = center + amp * uniform(stream, i);
    return v;
}

// W (rows, cols): int8 uniform in [-127, 127], per-block scale std*sqrt(3)/127 * (0.75..1.25),
// so each weight has standard deviation ~std.
// Bytes an arena needs for a matrix of (rows, cols).
// With the x16 copy: its padded rows' blocks too (packed_bytes = 34 bytes per padded row block).
size_t q8_footprint(int rows, int cols, bool packed) {
    const size_t nb = size_t(cols / QK8_0);
    return WeightArena::footprint(size_t(rows) * nb) +
           (packed ? WeightArena::footprint(size_t(pack_groups(rows)) * kPackRows * nb) : 0);
}

QMatrix gen_q8(int rows, int cols, uint64_t stream, float std, ThreadPool* pool,
               const std::shared_ptr<WeightArena>& arena, bool packed) {
    QMatrix m;
    m.rows = rows;
    m.cols = cols;
    const int nb = cols / QK8_0;
    m.arena = arena;
    m.blocks = arena->take(m.nblocks());
    const float base = std * std::sqrt(3.0f) / 127.0f;
    auto fill = [&](int r0, int r1) {
        for (int r = r0; r < r1; ++r) {
            for (int b = 0; b < nb; ++b) {
                const uint64_t idx = uint64_t(r) * nb + b;
                BlockQ8_0& blk = m.blocks[idx];
                uint64_t key = splitmix64(stream ^ (idx * 0x9E3779B97F4A7C15ull));
                for (int w = 0; w < 4; ++w) {
                    key = splitmix64(key);
                    for (int i = 0; i < 8; ++i) {
                        int v = int(int8_t(uint8_t(key >> (8 * i))));
                        blk.qs[w * 8 + i] = int8_t(v == -128 ? -127 : v);
                    }
                }
                const float jitter = 0.75f + 0.5f * float(double(splitmix64(key) >> 40) / double(1ull << 24));
                blk.d = fp32_to_fp16(base * jitter);
            }
        }
    };
    if (pool) pool->parallel_for(rows, 16, fill);
    else fill(0, rows);
    if (packed) {
        m.packed = reinterpret_cast<uint8_t*>(arena->take(size_t(pack_groups(rows)) * kPackRows * nb));
        pack_q8_0_x16(m.blocks, rows, cols, m.packed);
    }
    return m;
}

// Generated values copied into the arena (same values as gen_f32 alone).
F32Rows arena_rows(const std::vector<float>& v, const std::shared_ptr<WeightArena>& arena) {
    F32Rows r{arena, arena->take_floats(v.size()), v.size()};
    std::memcpy(r.ptr, v.data(), v.size() * sizeof(float));
    return r;
}

HCParams gen_hc(const ModelConfig& c, uint64_t seed, uint64_t tensor, int layer,
                const std::shared_ptr<WeightArena>& arena) {
    const int hc = c.hc_mult;
    HCParams p;
    p.static_pre = gen_f32(hc, stream_id(seed, tensor, layer, 1), 0.0f, 0.5f);
    p.static_post = gen_f32(hc, stream_id(seed, tensor, layer, 2), 0.0f, 0.5f);
    p.static_res = gen_f32(size_t(hc) * hc, stream_id(seed, tensor, layer, 3), 0.0f, 0.5f);
    for (int i = 0; i < hc; ++i) p.static_res[size_t(i) * hc + i] += 2.0f;  // near-identity mixing
    p.w_dyn = arena_rows(gen_f32(size_t(c.hc_dyn_rows()) * c.d_model, stream_id(seed, tensor, layer, 4), 0.0f,
                                 1.0f / std::sqrt(float(c.d_model))),
                         arena);
    p.dyn_scale = 0.5f;
    return p;
}

}  // namespace

Weights build_weights(const ModelConfig& c, ThreadPool* pool, bool packed) {
    c.validate();
    const uint64_t s = c.seed;
    const int d = c.d_model, hd = c.head_dim, f = c.d_ff;
    const float inv_sqrt_d = 1.0f / std::sqrt(float(d));
    Weights w;
    w.embed = gen_f32(size_t(c.vocab) * d, stream_id(s, kEmbed, 0, 0), 0.0f, 1.7f);
    w.final_norm = gen_f32(d, stream_id(s, kFinalNorm, 0, 0), 1.0f, 0.1f);
    w.hc_final = gen_f32(c.hc_mult, stream_id(s, kHcFinal, 0, 0), 1.0f / c.hc_mult, 0.1f / c.hc_mult);
    w.lm_head = gen_q8(c.vocab, d, stream_id(s, kLmHead, 0, 0), 3.0f * inv_sqrt_d, pool,
                       std::make_shared<WeightArena>(q8_footprint(c.vocab, d, packed)), packed);
    // One arena per layer holds its attention, shared-expert and expert matrices, then its
    // per-step F32 rows (router, the two HC dyn projections).
    const size_t layer_bytes = q8_footprint(c.proj_rows(), d, packed) + q8_footprint(d, c.q_dim(), packed) +
                               size_t(c.n_experts + 1) * (q8_footprint(2 * f, d, packed) + q8_footprint(d, f, packed)) +
                               WeightArena::footprint_floats(size_t(c.n_experts) * d) +
                               2 * WeightArena::footprint_floats(size_t(c.hc_dyn_rows()) * d);
    w.q8_bytes += w.lm_head.bytes();
    w.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; ++l) {
        LayerWeights& L = w.layers[l];
        const int ratio = c.ratios[l];
        L.attn_norm = gen_f32(d, stream_id(s, kAttnNorm, l, 0), 1.0f, 0.1f);
        L.ffn_norm = gen_f32(d, stream_id(s, kFfnNorm, l, 0), 1.0f, 0.1f);
        L.q_norm = gen_f32(hd, stream_id(s, kQNorm, l, 0), 1.0f, 0.1f);
        L.kv_norm = gen_f32(hd, stream_id(s, kKvNorm, l, 0), 1.0f, 0.1f);
        L.comp_norm = gen_f32(hd, stream_id(s, kCompNorm, l, 0), 1.0f, 0.1f);
        L.comp_ape = gen_f32(size_t(ModelConfig::comp_rows(ratio)) * hd, stream_id(s, kCompApe, l, 0), 0.0f, 0.5f);
        const auto arena = std::make_shared<WeightArena>(layer_bytes);
        L.w_proj = gen_q8(c.proj_rows(), d, stream_id(s, kProj, l, 0), inv_sqrt_d, pool, arena, packed);
        L.w_o = gen_q8(d, c.q_dim(), stream_id(s, kWo, l, 0), 1.0f / std::sqrt(float(c.q_dim())), pool, arena, packed);
        L.router = arena_rows(gen_f32(size_t(c.n_experts) * d, stream_id(s, kRouter, l, 0), 0.0f, 2.0f * inv_sqrt_d),
                              arena);
        L.router_bias = gen_f32(c.n_experts, stream_id(s, kRouterBias, l, 0), 0.0f, 0.2f);
        if (l < c.n_hash_layers) {
            L.tid2eid.resize(size_t(c.vocab) * c.top_k);
            const uint64_t st = stream_id(s, kTid2Eid, l, 0);
            for (int t = 0; t < c.vocab; ++t) {
                int32_t* ids = &L.tid2eid[size_t(t) * c.top_k];
                uint64_t key = st ^ (uint64_t(t) << 20);
                for (int k = 0; k < c.top_k; ++k) {
                    for (;;) {  // k distinct experts per token
                        key = splitmix64(key);
                        const int32_t e = int32_t(key % uint64_t(c.n_experts));
                        bool dup = false;
                        for (int j = 0; j < k; ++j) dup = dup || ids[j] == e;
                        if (!dup) { ids[k] = e; break; }
                    }
                }
            }
        }
        L.shared_w13 = gen_q8(2 * f, d, stream_id(s, kW13, l, 0xFFFF), inv_sqrt_d, pool, arena, packed);
        L.shared_w2 = gen_q8(d, f, stream_id(s, kW2, l, 0xFFFF), 0.5f / std::sqrt(float(f)), pool, arena, packed);
        w.q8_bytes += L.w_proj.bytes() + L.w_o.bytes() + L.shared_w13.bytes() + L.shared_w2.bytes();
        L.exp_w13.resize(c.n_experts);
        L.exp_w2.resize(c.n_experts);
        for (int e = 0; e < c.n_experts; ++e) {
            L.exp_w13[e] = gen_q8(2 * f, d, stream_id(s, kW13, l, e), inv_sqrt_d, pool, arena, packed);
            L.exp_w2[e] = gen_q8(d, f, stream_id(s, kW2, l, e), 0.5f / std::sqrt(float(f)), pool, arena, packed);
            w.q8_bytes += L.exp_w13[e].bytes() + L.exp_w2[e].bytes();
        }
        L.hc_attn = gen_hc(c, s, kHcAttn, l, arena);
        L.hc_ffn = gen_hc(c, s, kHcFfn, l, arena);
    }
    return w;
}

}  // namespace dq
