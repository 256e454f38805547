// The DS4-mini forward on the GPU: weights uploaded once (SoA Q8_0), state resident on the
// device, one step of w tokens mirroring Model::forward (model_forward.cpp) op by op. Matmuls go
// through narrow MMVQ (ncols <= mmvq_max_ncols) or MMQ (q8_kernels.cuh), exactly the CPU's
// Matmul rule. Routing, the MoE dispatch, positions and counts live in device memory, so an
// exact MMVQ step (q1 or a band) is one CUDA graph per step width, captured once and replayed
// at every position with no host read-back; other steps (approximate, MMQ fallback, op timing)
// are launched one by one, reading the MoE table back once per layer.
#include "gpu_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "common/engine_rules.h"
#include "gpu_hc.cuh"
#include "gpu_ops.cuh"
#include "model_attention.h"
#include "model_ops.h"
#include "model_scheduler.h"
#include "model_weights.h"
#include "q8_kernels.cuh"
#include "threadpool.h"

namespace dq { namespace gpu {

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
#define DQ_CUDA_CHECK(x) check((x), #x)

// Owns device allocations (freed together).
struct Arena {
    std::vector<void*> ptrs;
    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena() {
        for (void* p : ptrs) cudaFree(p);
    }
    template <class T> T* alloc(size_t n) {
        void* p = nullptr;
        DQ_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
        ptrs.push_back(p);
        return static_cast<T*>(p);
    }
    template <class T> T* upload(const T* host, size_t n) {
        T* p = alloc<T>(n);
        if (n) DQ_CUDA_CHECK(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice));
        return p;
    }
    template <class T> T* upload(const std::vector<T>& v) { return upload(v.data(), v.size()); }
};

// Pinned host buffer.
template <class T> struct Pinned {
    T* p = nullptr;
    explicit Pinned(size_t n) { DQ_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T))); }
    ~Pinned() { cudaFreeHost(p); }
    Pinned(const Pinned&) = delete;
    Pinned& operator=(const Pinned&) = delete;
};

}  // namespace

// One Q8_0 matrix on the device; bytes is the CPU count (34 per block) so weight bytes match.
struct DevQ8 {
    int8_t* qs = nullptr;
    uint16_t* d = nullptr;
    int rows = 0, cols = 0;
    size_t bytes = 0;
    cuda::Q8Weights view() const { return cuda::Q8Weights{qs, d, rows, cols}; }
};

struct DevLayer {
    float *attn_norm, *ffn_norm, *q_norm, *kv_norm, *comp_norm, *comp_ape, *router, *router_bias;
    int32_t* tid2eid = nullptr;
    DevQ8 w_proj, w_o, shared_w13, shared_w2;
    std::vector<DevQ8> exp_w13, exp_w2;
    DevHC hc_attn, hc_ffn;
    // The grouped MoE products' matrix tables (device arrays; 0 the shared expert, 1 + e expert e).
    cuda::Q8Group up{}, down{};
};

struct GpuSessionImpl;

struct GpuModelImpl {
    ModelConfig cfg;
    cudaStream_t stream = nullptr;
    mutable std::mutex mu;
    Arena arena;
    float *embed, *final_norm, *hc_final, *rope_cos, *rope_sin;
    DevQ8 lm_head;
    std::vector<DevLayer> layers;
    size_t q8_bytes = 0;
    double build_s = 0, upload_s = 0;
    std::string device;
    // Buffers (and captured graphs) of ended sessions, for the next sessions; freed with the model.
    std::mutex spare_mu;
    std::vector<GpuSessionImpl*> spare;
    mutable GpuPrefillCounts last_counts;  // guarded by mu

    DevQ8 upload_q8(const QMatrix& m) {
        const QMatrixView v = m.view();
        DevQ8 out;
        out.rows = v.rows;
        out.cols = v.cols;
        out.bytes = m.bytes();
        const size_t nq = size_t(v.rows) * v.cols, nd = nq / QK8_0;
        std::vector<int8_t> qs(nq);
        std::vector<uint16_t> d(nd);
        cuda::split_q8_blocks(v.blocks, v.rows, v.cols, qs.data(), d.data());
        out.qs = arena.upload(qs);
        out.d = arena.upload(d);
        return out;
    }
    DevHC upload_hc(const HCParams& p) {
        return DevHC{arena.upload(p.static_pre), arena.upload(p.static_post), arena.upload(p.static_res),
                     arena.upload(p.w_dyn.data(), p.w_dyn.size()), p.dyn_scale};
    }
};

std::string unavailable_reason() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
        return std::string("no usable CUDA driver or GPU (") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")";
    }
    if (n == 0) return "no CUDA GPU is visible";
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cannot query CUDA device 0";
    if (prop.major != 9)
        return std::string("GPU 0 (") + prop.name + ") is sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
               "; this build targets sm_90a (Hopper) only";
    return "";
}

GpuModel::GpuModel(const ModelConfig& cfg, int threads) : impl_(std::make_unique<GpuModelImpl>()) {
    GpuModelImpl& m = *impl_;
    m.cfg = cfg;
    m.cfg.validate();
    if (threads < 1) throw std::invalid_argument("threads must be >= 1");
    const std::string why = unavailable_reason();
    if (!why.empty()) throw std::invalid_argument("device='cuda' is not available: " + why);
    if (const std::string shape = hc_shape_error(m.cfg.hc_mult, m.cfg.n_experts, m.cfg.top_k); !shape.empty())
        throw std::invalid_argument(shape);
    DQ_CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop{};
    DQ_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    m.device = prop.name;
    DQ_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    const ModelConfig& c = m.cfg;
    int64_t t0 = now_ns();
    Weights w;
    {
        ThreadPool pool(threads);
        w = build_weights(c, &pool, false);  // row-major only: converted to the device layout
    }
    m.build_s = double(now_ns() - t0) * 1e-9;
    size_t free_b = 0, total_b = 0;
    DQ_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (w.q8_bytes + (size_t(256) << 20) > free_b)
        throw std::invalid_argument("the model needs " + std::to_string(w.q8_bytes >> 20) + " MiB of GPU memory but only " +
                                    std::to_string(free_b >> 20) + " MiB is free");
    t0 = now_ns();
    m.q8_bytes = w.q8_bytes;
    m.embed = m.arena.upload(w.embed);
    m.final_norm = m.arena.upload(w.final_norm);
    m.hc_final = m.arena.upload(w.hc_final);
    m.lm_head = m.upload_q8(w.lm_head);
    m.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; ++l) {
        LayerWeights& L = w.layers[l];
        DevLayer& D = m.layers[l];
        D.attn_norm = m.arena.upload(L.attn_norm);
        D.ffn_norm = m.arena.upload(L.ffn_norm);
        D.q_norm = m.arena.upload(L.q_norm);
        D.kv_norm = m.arena.upload(L.kv_norm);
        D.comp_norm = m.arena.upload(L.comp_norm);
        D.comp_ape = m.arena.upload(L.comp_ape);
        D.router = m.arena.upload(L.router.data(), L.router.size());
        D.router_bias = m.arena.upload(L.router_bias);
        if (!L.tid2eid.empty()) D.tid2eid = m.arena.upload(L.tid2eid);
        D.w_proj = m.upload_q8(L.w_proj);
        D.w_o = m.upload_q8(L.w_o);
        D.shared_w13 = m.upload_q8(L.shared_w13);
        D.shared_w2 = m.upload_q8(L.shared_w2);
        for (int e = 0; e < c.n_experts; ++e) {
            D.exp_w13.push_back(m.upload_q8(L.exp_w13[e]));
            D.exp_w2.push_back(m.upload_q8(L.exp_w2[e]));
            L.exp_w13[e] = QMatrix{};  // release host copies as we go (peak host memory)
            L.exp_w2[e] = QMatrix{};
        }
        D.hc_attn = m.upload_hc(L.hc_attn);
        D.hc_ffn = m.upload_hc(L.hc_ffn);
        auto table = [&](const DevQ8& shared, const std::vector<DevQ8>& ex) {
            std::vector<const int8_t*> qs{shared.qs};
            std::vector<const uint16_t*> d{shared.d};
            for (const DevQ8& e : ex) {
                if (e.rows != shared.rows || e.cols != shared.cols)
                    throw std::invalid_argument("the experts and the shared expert must have one shape");
                qs.push_back(e.qs);
                d.push_back(e.d);
            }
            return cuda::Q8Group{m.arena.upload(qs), m.arena.upload(d), shared.rows, shared.cols};
        };
        D.up = table(D.shared_w13, D.exp_w13);
        D.down = table(D.shared_w2, D.exp_w2);
    }
    // RoPE tables exactly as Model::Model computes them.
    const int half = c.rope_dim / 2;
    std::vector<float> cs(size_t(c.ctx) * half), sn(size_t(c.ctx) * half);
    for (int p = 0; p < c.ctx; ++p)
        for (int i = 0; i < half; ++i) {
            const double inv_freq = std::pow(double(c.rope_theta), -2.0 * i / c.rope_dim);
            const double a = double(p) * inv_freq;
            cs[size_t(p) * half + i] = float(std::cos(a));
            sn[size_t(p) * half + i] = float(std::sin(a));
        }
    m.rope_cos = m.arena.upload(cs);
    m.rope_sin = m.arena.upload(sn);
    DQ_CUDA_CHECK(cudaDeviceSynchronize());
    m.upload_s = double(now_ns() - t0) * 1e-9;
}

const ModelConfig& GpuModel::config() const { return impl_->cfg; }
double GpuModel::build_seconds() const { return impl_->build_s; }
double GpuModel::upload_seconds() const { return impl_->upload_s; }
size_t GpuModel::weight_bytes_total() const { return impl_->q8_bytes; }
std::string GpuModel::device_name() const { return impl_->device; }
GpuPrefillCounts GpuModel::last_prefill_counts() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->last_counts;
}

struct DevLayerState {
    int ratio = 0;
    float *window = nullptr, *comp_kv = nullptr, *comp_score = nullptr, *compressed = nullptr;
    int n_compressed = 0;  // host mirror of the device count (ctl[1 + l])
};

// With DQ_GPU_OP_TIMING=1 (profiling only): CUDA events around each op on the stream; after one
// synchronize at the end of the step, each op's GPU time goes to stats.op_ns[family] and to the
// prefill counts by launch site. Those steps are launched, not replayed (the events sit between
// the launches), so the sum is close to, not equal to, a graph step's time.
struct OpTimer {
    cudaStream_t s = nullptr;
    std::vector<cudaEvent_t> pool;
    size_t next = 0;
    struct Rec {
        int op;
        const char* name;
        cudaEvent_t a, b;
    };
    std::vector<Rec> recs;
    cudaEvent_t get() {
        if (next == pool.size()) {
            cudaEvent_t e = nullptr;
            DQ_CUDA_CHECK(cudaEventCreate(&e));
            pool.push_back(e);
        }
        return pool[next++];
    }
    void flush(StepStats& st, std::map<std::string, double>& op_us) {
        DQ_CUDA_CHECK(cudaStreamSynchronize(s));
        for (const Rec& r : recs) {
            float ms = 0.0f;
            DQ_CUDA_CHECK(cudaEventElapsedTime(&ms, r.a, r.b));
            st.op_ns[r.op] += int64_t(double(ms) * 1e6);
            op_us[r.name] += double(ms) * 1e3;
        }
        recs.clear();
        next = 0;
    }
    ~OpTimer() {
        for (cudaEvent_t e : pool) cudaEventDestroy(e);
    }
};

struct OpSpan {
    OpTimer* t;
    int op;
    const char* name;
    cudaEvent_t a = nullptr;
    OpSpan(OpTimer* timer, StepStats&, int family, const char* label) : t(timer), op(family), name(label) {
        if (t) {
            a = t->get();
            DQ_CUDA_CHECK(cudaEventRecord(a, t->s));
        }
    }
    ~OpSpan() {
        if (!t) return;
        cudaEvent_t b = t->get();
        cudaEventRecord(b, t->s);
        t->recs.push_back(OpTimer::Rec{op, name, a, b});
    }
    OpSpan(const OpSpan&) = delete;
    OpSpan& operator=(const OpSpan&) = delete;
};

// One captured step: the graph of an exact MMVQ step of width w and what its replay adds to
// the host-side stats (the routed experts' bytes and calls are counted on the device).
struct StepGraph {
    cudaGraphExec_t exec = nullptr;
    long long kernels = 0;
    uint64_t fixed_bytes = 0, fixed_calls = 0;
};

struct GpuSessionImpl {
    const GpuModelImpl& m;
    Arena arena;
    bool op_timing = false;  // DQ_GPU_OP_TIMING=1, read when the session starts (reset)
    OpTimer op_timer;
    OpTimer* timer() { return op_timing ? &op_timer : nullptr; }
    // State (host mirrors of pos and the compressed counts; the device copies are in ctl).
    int pos = 0;
    bool has_logits = false;
    std::vector<DevLayerState> layers;
    float *hc_streams, *last_logits;
    std::vector<float> last_logits_h;
    DevCtl ctl{};
    // Step scratch (kMaxStep tokens; MoE rows: w shared + w*top_k routed).
    int max_rows;
    int32_t* tokens;  // [ctx] ids by position
    // post/M: [2][w, hc] / [2][w, hc, hc], the attention's pre (0) and the FFN's (1).
    float *X, *post, *M, *proj, *attn, *o, *wts, *gu, *y, *scores, *step_logits;
    int8_t *xq, *aq, *xg, *hq;
    float *xd, *ad, *xgd, *hqd;
    int32_t* ids;
    DevMoe moe{};
    size_t score_stride;
    // Outputs by position: logits [ctx, vocab], routes [n_layers, ctx, top_k].
    float* out_logits;
    int32_t* out_rid;
    float* out_rw;
    Pinned<int32_t> slots_h;            // the MoE slot table read back by launched (ungraphed) steps
    Pinned<unsigned long long> counters_h;
    Pinned<int32_t> tok_h;              // decode's token
    StepGraph graphs[kMaxBandChunk + 1];
    GpuPrefillCounts counts;            // of the current prefill

    explicit GpuSessionImpl(const GpuModelImpl& model)
        : m(model),
          max_rows(kMaxStep * (model.cfg.top_k + 1)),
          slots_h(size_t(1) + 3 * size_t(1 + model.cfg.n_experts)),
          counters_h(2),
          tok_h(1) {
        const ModelConfig& c = m.cfg;
        const size_t W = kMaxStep, d = c.d_model, hc = c.hc_mult, f = c.d_ff, K = c.top_k, hd = c.head_dim;
        const size_t R = size_t(max_rows);
        for (int l = 0; l < c.n_layers; ++l) {
            DevLayerState s;
            s.ratio = c.ratios[l];
            s.window = arena.alloc<float>(size_t(c.window_cap()) * hd);
            if (s.ratio > 0) {
                const size_t rows = size_t(ModelConfig::comp_rows(s.ratio));
                s.comp_kv = arena.alloc<float>(rows * hd);
                s.comp_score = arena.alloc<float>(rows * hd);
                s.compressed = arena.alloc<float>(size_t(c.max_compressed(s.ratio)) * hd);
            }
            layers.push_back(s);
        }
        ctl.ctl = arena.alloc<int>(size_t(1) + c.n_layers);
        hc_streams = arena.alloc<float>(hc * d);
        last_logits = arena.alloc<float>(c.vocab);
        last_logits_h.assign(c.vocab, 0.0f);
        tokens = arena.alloc<int32_t>(c.ctx);
        X = arena.alloc<float>(W * hc * d);
        post = arena.alloc<float>(2 * W * hc);
        M = arena.alloc<float>(2 * W * hc * hc);
        proj = arena.alloc<float>(W * c.proj_rows());
        attn = arena.alloc<float>(W * c.q_dim());
        o = arena.alloc<float>(W * d);
        ids = arena.alloc<int32_t>(W * K);
        wts = arena.alloc<float>(W * K);
        gu = arena.alloc<float>(R * 2 * f);
        y = arena.alloc<float>(R * d);
        step_logits = arena.alloc<float>(W * c.vocab);
        xq = arena.alloc<int8_t>(W * d);
        xd = arena.alloc<float>(W * d / QK8_0);
        aq = arena.alloc<int8_t>(W * c.q_dim());
        ad = arena.alloc<float>(W * c.q_dim() / QK8_0);
        xg = arena.alloc<int8_t>(R * d);
        xgd = arena.alloc<float>(R * d / QK8_0);
        hq = arena.alloc<int8_t>(R * f);
        hqd = arena.alloc<float>(R * f / QK8_0);
        moe.max_slots = 1 + c.n_experts;
        moe.slots = arena.alloc<int32_t>(size_t(1) + 3 * size_t(moe.max_slots));
        moe.tok_of_col = arena.alloc<int32_t>(R);
        moe.col_of = arena.alloc<int32_t>(W * K);
        moe.counters = arena.alloc<unsigned long long>(2);
        moe.done = arena.alloc<unsigned int>(1);
        DQ_CUDA_CHECK(cudaMemset(moe.done, 0, sizeof(unsigned int)));
        moe.expert_bytes = m.layers.empty() ? 0 : m.layers[0].exp_w13[0].bytes + m.layers[0].exp_w2[0].bytes;
        int max_comp = 0;
        for (int r : c.ratios) max_comp = std::max(max_comp, c.max_compressed(r));
        score_stride = size_t(max_comp + c.n_swa) + size_t(kAttnGroups) * hd;  // scores, then the partials
        scores = arena.alloc<float>(W * c.n_heads * score_stride);
        out_logits = arena.alloc<float>(size_t(c.ctx) * c.vocab);
        out_rid = arena.alloc<int32_t>(size_t(c.n_layers) * c.ctx * K);
        out_rw = arena.alloc<float>(size_t(c.n_layers) * c.ctx * K);
        reset();
    }
    ~GpuSessionImpl() {
        for (StepGraph& g : graphs)
            if (g.exec) cudaGraphExecDestroy(g.exec);
    }
    GpuSessionImpl(const GpuSessionImpl&) = delete;
    GpuSessionImpl& operator=(const GpuSessionImpl&) = delete;

    // Writes the host mirrors of pos and the compressed counts to the device control block.
    void put_ctl() {
        std::vector<int> h(size_t(1) + layers.size());
        h[0] = pos;
        for (size_t l = 0; l < layers.size(); ++l) h[1 + l] = layers[l].n_compressed;
        DQ_CUDA_CHECK(cudaMemcpy(ctl.ctl, h.data(), sizeof(int) * h.size(), cudaMemcpyHostToDevice));
    }

    void reset() {
        const ModelConfig& c = m.cfg;
        for (DevLayerState& s : layers) {
            const size_t hd = size_t(c.head_dim);
            DQ_CUDA_CHECK(cudaMemset(s.window, 0, sizeof(float) * c.window_cap() * hd));
            if (s.ratio > 0) {
                const size_t rows = size_t(ModelConfig::comp_rows(s.ratio));
                DQ_CUDA_CHECK(cudaMemset(s.comp_kv, 0, sizeof(float) * rows * hd));
                DQ_CUDA_CHECK(cudaMemset(s.comp_score, 0, sizeof(float) * rows * hd));
                DQ_CUDA_CHECK(cudaMemset(s.compressed, 0, sizeof(float) * c.max_compressed(s.ratio) * hd));
            }
            s.n_compressed = 0;
        }
        DQ_CUDA_CHECK(cudaMemset(hc_streams, 0, sizeof(float) * c.hc_mult * c.d_model));
        DQ_CUDA_CHECK(cudaMemset(last_logits, 0, sizeof(float) * c.vocab));
        std::fill(last_logits_h.begin(), last_logits_h.end(), 0.0f);
        pos = 0;
        has_logits = false;
        const char* timing = std::getenv("DQ_GPU_OP_TIMING");
        op_timing = timing != nullptr && std::string(timing) == "1";
        op_timer.s = m.stream;
        put_ctl();
        // cudaMemset / pageable cudaMemcpy run on the legacy stream, which our non-blocking
        // stream does not wait for: finish them before any kernel of this session.
        DQ_CUDA_CHECK(cudaDeviceSynchronize());
    }

    // One matmul call; count = false for the routed experts of launched steps (their bytes and
    // calls are counted on the device, by the router, for every kind of step).
    void mm(const DevQ8& w, const int8_t* xq_, const float* xd_, int ncols, float* y_, const StepMode& mode,
            StepStats& st, const char* label, bool count = true) {
        const bool mmq = mode.approximate || ncols > mode.mmvq_max_ncols;
        OpSpan span(timer(), st, kOpMatmul, label);
        const cuda::Q8Acts x{xq_, xd_, ncols, w.cols};
        if (mmq) cuda::mmq(w.view(), x, y_, m.stream);
        else cuda::mmvq(w.view(), x, y_, m.stream);
        if (count) {
            st.weight_bytes += w.bytes;
            st.matmul_calls += 1;
        }
        st.used_mmq = st.used_mmq || mmq;
    }

    // An exact step whose matmuls are all narrow MMVQ and whose compressor boundaries (in every
    // layer) can only be its last token: the fixed launch sequence that a graph captures.
    bool graphable(int w, const StepMode& mode) const {
        if (mode.approximate || w > mode.mmvq_max_ncols || w > kMaxBandChunk) return false;
        for (const DevLayerState& ls : layers)
            for (int j = 0; j + 1 < w; ++j)
                if (is_boundary(ls.ratio, pos + j)) return false;
        return true;
    }

    void attention_sublayer(int l, int w, const StepMode& mode, bool fixed, StepStats& st) {
        const ModelConfig& c = m.cfg;
        const DevLayer& L = m.layers[l];
        DevLayerState& ls = layers[l];
        const int hd = c.head_dim, qd = c.q_dim(), pr = c.proj_rows();
        cudaStream_t s = m.stream;
        mm(L.w_proj, xq, xd, w, proj, mode, st, "proj");
        {
            OpSpan span(timer(), st, kOpPerToken, "qk_rope");
            launch_qk_rope(QkRopeArgs{proj, pr, qd, c.n_heads, hd, c.rope_dim, L.q_norm, L.kv_norm, m.rope_cos,
                                      m.rope_sin, ctl.pos(), c.norm_eps, ls.window, c.window_cap()},
                           w, s);
        }
        // Causal per-token section split at compressor boundaries, as on the CPU. A fixed step
        // has none before its last token: one attention launch, then the pool, which appends a
        // row only when the last token is a boundary (decided on the device).
        const int comp_rows = ls.ratio > 0 ? ModelConfig::comp_rows(ls.ratio) : 1;
        auto attend = [&](int j0, int ntok) {
            OpSpan span(timer(), st, kOpAttention, "attend");
            launch_attend(AttendArgs{proj, pr, qd, c.n_heads, hd, ls.window, c.window_cap(), c.n_swa, ls.compressed,
                                     ctl.n_compressed(l), ls.comp_kv, ls.comp_score, comp_rows, ls.ratio, ctl.pos(),
                                     j0, scores, score_stride, attn, aq, ad},
                          ntok, s);
        };
        auto pool = [&](int j) {
            OpSpan span(timer(), st, kOpCompressor, "pool");
            launch_pool(PoolArgs{ls.comp_kv, ls.comp_score, L.comp_ape, L.comp_norm, ls.compressed,
                                 ctl.n_compressed(l), ls.ratio, hd, c.rope_dim, ctl.pos(), j, c.norm_eps, m.rope_cos,
                                 m.rope_sin},
                        s);
        };
        if (fixed) {
            attend(0, w);
            if (ls.ratio > 0) pool(w - 1);
        } else {
            for (int j0 = 0; j0 < w;) {
                int j1 = j0;
                while (j1 < w - 1 && !is_boundary(ls.ratio, pos + j1)) ++j1;
                attend(j0, j1 - j0 + 1);
                if (is_boundary(ls.ratio, pos + j1)) pool(j1);
                j0 = j1 + 1;
            }
        }
        mm(L.w_o, aq, ad, w, o, mode, st, "w_o");
        {  // HC post of the attention + the FFN's HC pre + its router and MoE table
            OpSpan span(timer(), st, kOpHC, "hc_post_pre_route");
            const bool hash = l < c.n_hash_layers;
            HcStepArgs a = hc_args(HcIn::kPost, 0);
            a.o = o;
            a.p = L.hc_ffn;
            a.norm = L.ffn_norm;
            a.router = L.router;
            a.router_bias = L.router_bias;
            a.tid2eid = hash ? L.tid2eid : nullptr;
            a.route_off = size_t(l) * c.ctx * c.top_k;
            launch_hc_step(a, w, s);
        }
    }

    // The boundary kernel's arguments (gpu_hc.cuh) but the sublayer's: in from the pre of
    // post/M set `in_set` (the other set is written when the consumer is a pre).
    HcStepArgs hc_args(HcIn in, int in_set) const {
        const ModelConfig& c = m.cfg;
        const size_t W = kMaxStep, hc = size_t(c.hc_mult);
        HcStepArgs a{};
        a.in = in;
        a.out = HcOut::kPre;
        a.hc = c.hc_mult;
        a.d = c.d_model;
        a.eps = c.norm_eps;
        a.X = X;
        a.tokens = tokens;
        a.pos = ctl.pos();
        a.embed = m.embed;
        a.col_of = moe.col_of;
        a.wts = wts;
        a.top_k = c.top_k;
        a.post_in = post + size_t(in_set) * W * hc;
        a.M_in = M + size_t(in_set) * W * hc * hc;
        a.post_out = post + size_t(1 - in_set) * W * hc;
        a.M_out = M + size_t(1 - in_set) * W * hc * hc;
        a.sinkhorn_iters = c.sinkhorn_iters;
        a.hc_final = m.hc_final;
        a.hc_streams = hc_streams;
        a.xq = xq;
        a.xd = xd;
        a.n_experts = c.n_experts;
        a.routed_scale = c.routed_scale;
        a.ids = ids;
        a.rwts = wts;
        a.rid = out_rid;
        a.rw = out_rw;
        a.moe = moe;
        return a;
    }

    // The boundary after the FFN of layer l (MoE combine + HC post) and before the next
    // attention (its HC pre) or, after the last layer, the final norm.
    void hc_after_ffn(int l, int w, StepStats& st) {
        const ModelConfig& c = m.cfg;
        OpSpan span(timer(), st, kOpHC, l + 1 < c.n_layers ? "combine_post_pre" : "combine_post_final");
        HcStepArgs a = hc_args(HcIn::kCombine, 1);
        a.o = y;
        if (l + 1 < c.n_layers) {
            a.p = m.layers[l + 1].hc_attn;
            a.norm = m.layers[l + 1].attn_norm;
        } else {
            a.out = HcOut::kFinal;
            a.norm = m.final_norm;
        }
        launch_hc_step(a, w, m.stream);
    }

    void ffn_sublayer(int l, int w, const StepMode& mode, bool fixed, StepStats& st) {
        const ModelConfig& c = m.cfg;
        const DevLayer& L = m.layers[l];
        const int d = c.d_model, K = c.top_k, f = c.d_ff;
        cudaStream_t s = m.stream;
        // MoE columns (gu/h/hq/y rows): 0..w-1 the shared expert's, then each routed expert's in
        // expert order (rules::moe_columns); the table of slots is on the device.
        const size_t nbd = size_t(d / QK8_0), nbf = size_t(f / QK8_0);
        const int rows = w + w * K;
        const int run_slots = 1 + std::min(c.n_experts, w * K);  // slots a step can have
        if (fixed) {  // one grouped launch per product, dispatched from the device table
            {
                OpSpan span(timer(), st, kOpMatmul, "moe_up");
                cuda::mmvq_grouped(L.up, moe.slots, moe.max_slots, run_slots, w, moe.tok_of_col, xq, xd, gu, s, w);
            }
            {
                OpSpan span(timer(), st, kOpPerToken, "swiglu");
                launch_swiglu(gu, hq, hqd, rows, f, c.swiglu_limit, s);
            }
            {
                OpSpan span(timer(), st, kOpMatmul, "moe_down");
                cuda::mmvq_grouped(L.down, moe.slots, moe.max_slots, run_slots, w, nullptr, hq, hqd, y, s, w);
            }
            st.weight_bytes += L.shared_w13.bytes + L.shared_w2.bytes;  // routed experts: counted on the device
            st.matmul_calls += 2;
        } else {  // the table read back once (the shared expert runs meanwhile), then a call per slot
            DQ_CUDA_CHECK(cudaMemcpyAsync(slots_h.p, moe.slots, sizeof(int32_t) * (1 + 3 * size_t(moe.max_slots)),
                                          cudaMemcpyDeviceToHost, s));
            cudaEvent_t ready = nullptr;
            DQ_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
            DQ_CUDA_CHECK(cudaEventRecord(ready, s));
            mm(L.shared_w13, xq, xd, w, gu, mode, st, "moe_up");
            {
                OpSpan span(timer(), st, kOpRouter, "route_readback");
                const cudaError_t e = cudaEventSynchronize(ready);
                cudaEventDestroy(ready);
                DQ_CUDA_CHECK(e);
                counts.host_syncs += 1;
            }
            const int S = moe.max_slots, n = slots_h.p[0];
            const int32_t* mat = slots_h.p + 1;
            const int32_t* base = slots_h.p + 1 + S;
            const int32_t* cnt = slots_h.p + 1 + 2 * S;
            {
                OpSpan span(timer(), st, kOpPerToken, "gather");
                launch_gather(xq, xd, moe.tok_of_col + w, rows - w, d, xg + size_t(w) * d, xgd + size_t(w) * nbd, s);
            }
            for (int i = 1; i < n; ++i) {
                const DevQ8& e = L.exp_w13[mat[i] - 1];
                mm(e, xg + size_t(base[i]) * d, xgd + size_t(base[i]) * nbd, cnt[i], gu + size_t(base[i]) * 2 * f, mode,
                   st, "moe_up", false);
            }
            {
                OpSpan span(timer(), st, kOpPerToken, "swiglu");
                launch_swiglu(gu, hq, hqd, rows, f, c.swiglu_limit, s);
            }
            mm(L.shared_w2, hq, hqd, w, y, mode, st, "moe_down");
            for (int i = 1; i < n; ++i) {
                const DevQ8& e = L.exp_w2[mat[i] - 1];
                mm(e, hq + size_t(base[i]) * f, hqd + size_t(base[i]) * nbf, cnt[i], y + size_t(base[i]) * d, mode,
                   st, "moe_down", false);
            }
        }
        hc_after_ffn(l, w, st);
    }

    // The launches of one step of w tokens at the device position (tokens[pos..] already on the
    // device): logits to out_logits rows pos.., last_logits and hc_streams, then pos += w on the
    // device. fixed: the graph's sequence (see graphable); host mirrors are not touched here.
    void enqueue(int w, const StepMode& mode, bool fixed, StepStats& st) {
        const ModelConfig& c = m.cfg;
        cudaStream_t s = m.stream;
        {  // embed + the first attention's HC pre
            OpSpan span(timer(), st, kOpHC, "embed_pre");
            HcStepArgs a = hc_args(HcIn::kEmbed, 1);
            a.p = m.layers[0].hc_attn;
            a.norm = m.layers[0].attn_norm;
            launch_hc_step(a, w, s);
        }
        for (int l = 0; l < c.n_layers; ++l) {
            attention_sublayer(l, w, mode, fixed, st);
            ffn_sublayer(l, w, mode, fixed, st);
        }
        mm(m.lm_head, xq, xd, w, step_logits, mode, st, "lm_head");
        {
            OpSpan span(timer(), st, kOpPerToken, "step_end");
            launch_step_end(ctl, step_logits, out_logits, last_logits, w, c.vocab, s);
        }
    }

    // The graph of width w, captured on first use (its launches do not depend on the position).
    StepGraph& graph(int w, const StepMode& mode) {
        StepGraph& g = graphs[w];
        if (g.exec) return g;
        cudaStream_t s = m.stream;
        StepStats cap;
        const long long k0 = cuda::launch_count();
        DQ_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        cudaGraph_t graph = nullptr;
        try {
            enqueue(w, mode, true, cap);
        } catch (...) {
            cudaStreamEndCapture(s, &graph);
            if (graph) cudaGraphDestroy(graph);
            throw;
        }
        DQ_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        const cudaError_t e = cudaGraphInstantiate(&g.exec, graph, 0);
        cudaGraphDestroy(graph);
        DQ_CUDA_CHECK(e);
        g.kernels = cuda::launch_count() - k0;
        g.fixed_bytes = cap.weight_bytes;
        g.fixed_calls = cap.matmul_calls;
        return g;
    }

    // One step of w tokens at pos (their ids already at tokens[pos..] on the device).
    void forward(int w, const StepMode& mode, StepStats& st) {
        const ModelConfig& c = m.cfg;
        if (w < 1 || w > kMaxStep) throw std::invalid_argument("step width must be 1..32");
        if (pos + w > c.ctx) throw std::invalid_argument("step runs past the context");
        for (const DevLayerState& ls : layers) {
            int add = 0;
            for (int j = 0; j < w; ++j) add += is_boundary(ls.ratio, pos + j) ? 1 : 0;
            if (ls.n_compressed + add > c.max_compressed(ls.ratio)) throw std::logic_error("compressed rows exceed context");
        }
        const bool fixed = graphable(w, mode);
        if (fixed && !op_timing) {
            StepGraph& g = graph(w, mode);
            DQ_CUDA_CHECK(cudaGraphLaunch(g.exec, m.stream));
            st.weight_bytes += g.fixed_bytes;
            st.matmul_calls += g.fixed_calls;
            counts.graph_steps += 1;
            counts.kernels += g.kernels;
            counts.host_launches += 1;
        } else {
            const long long k0 = cuda::launch_count();
            enqueue(w, mode, fixed, st);
            const long long k = cuda::launch_count() - k0;
            if (op_timing) op_timer.flush(st, counts.op_us);
            counts.kernels += k;
            counts.host_launches += k;
        }
        counts.steps += 1;
        for (DevLayerState& ls : layers)
            for (int j = 0; j < w; ++j) ls.n_compressed += is_boundary(ls.ratio, pos + j) ? 1 : 0;
        has_logits = true;
        pos += w;
    }

    void fetch_last_logits() {
        DQ_CUDA_CHECK(cudaMemcpyAsync(last_logits_h.data(), last_logits, sizeof(float) * m.cfg.vocab,
                                      cudaMemcpyDeviceToHost, m.stream));
        DQ_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    }

    void zero_counters() {
        DQ_CUDA_CHECK(cudaMemsetAsync(moe.counters, 0, sizeof(unsigned long long) * 2, m.stream));
    }
    // Adds the device-counted routed bytes and calls (since zero_counters) to st; call after a
    // synchronize that follows the copy (fetch_last_logits).
    void queue_counters() {
        DQ_CUDA_CHECK(cudaMemcpyAsync(counters_h.p, moe.counters, sizeof(unsigned long long) * 2,
                                      cudaMemcpyDeviceToHost, m.stream));
    }
    void add_counters(StepStats& st) const {
        st.weight_bytes += counters_h.p[0];
        st.matmul_calls += counters_h.p[1];
    }

    // Feeds one token (q1, narrow MMVQ).
    void feed(int32_t tok, StepStats& st) {
        if (pos >= m.cfg.ctx) throw std::invalid_argument("context is full");
        tok_h.p[0] = tok;
        DQ_CUDA_CHECK(cudaMemcpyAsync(tokens + pos, tok_h.p, sizeof tok, cudaMemcpyHostToDevice, m.stream));
        zero_counters();
        forward(1, StepMode{1, false}, st);
        queue_counters();
        fetch_last_logits();
        add_counters(st);
    }
};

GpuModel::~GpuModel() {
    if (!impl_) return;
    for (GpuSessionImpl* s : impl_->spare) delete s;
    impl_->spare.clear();
    if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

// Sessions reuse the buffers (and captured graphs) of ended sessions of the same model.
GpuSession::GpuSession(const GpuModel& m) : m_(m) {
    GpuModelImpl& mi = m.impl();
    GpuSessionImpl* reuse = nullptr;
    {
        std::lock_guard<std::mutex> lock(mi.spare_mu);
        if (!mi.spare.empty()) {
            reuse = mi.spare.back();
            mi.spare.pop_back();
        }
    }
    if (reuse) {
        impl_.reset(reuse);
        std::lock_guard<std::mutex> lock(mi.mu);
        impl_->reset();
    } else {
        impl_ = std::make_unique<GpuSessionImpl>(mi);
    }
}

GpuSession::~GpuSession() {
    if (!impl_) return;
    GpuModelImpl& mi = m_.impl();
    std::lock_guard<std::mutex> lock(mi.spare_mu);
    if (mi.spare.size() < 4) mi.spare.push_back(impl_.release());
}

int GpuSession::pos() const { return impl_->pos; }

PrefillOutcome GpuSession::prefill(const int32_t* tokens, int n, const PrefillOptions& opt, float* logits,
                                   int32_t* rid, float* rw) {
    GpuSessionImpl& S = *impl_;
    const ModelConfig& c = m_.config();
    if (const char* why = rules::prefill_arg_error(c, S.pos, tokens, n, opt.chunk, opt.mmvq_max_ncols,
                                                   opt.approx_width))
        throw std::invalid_argument(why);
    std::lock_guard<std::mutex> lock(S.m.mu);
    PrefillOutcome out;
    out.widths = opt.approximate ? schedule_approximate(n, opt.approx_width)
                                 : schedule_bands(S.pos, n, opt.chunk, c.ratios);
    const StepMode mode{opt.mmvq_max_ncols, opt.approximate};
    cudaStream_t s = S.m.stream;
    const int pos0 = S.pos;
    DQ_CUDA_CHECK(cudaMemcpyAsync(S.tokens + pos0, tokens, sizeof(int32_t) * n, cudaMemcpyHostToDevice, s));
    S.zero_counters();
    DQ_CUDA_CHECK(cudaStreamSynchronize(s));
    S.counts = GpuPrefillCounts{};
    const int64_t t0 = now_ns();
    for (int w : out.widths) {
        StepStats step;
        S.forward(w, mode, step);
        out.step_mmq.push_back(step.used_mmq ? 1 : 0);
        out.stats.weight_bytes += step.weight_bytes;
        out.stats.matmul_calls += step.matmul_calls;
        out.stats.used_mmq = out.stats.used_mmq || step.used_mmq;
        for (int k = 0; k < kOpCount; ++k) out.stats.op_ns[k] += step.op_ns[k];
    }
    DQ_CUDA_CHECK(cudaStreamSynchronize(s));
    out.ns = now_ns() - t0;
    S.m.last_counts = S.counts;
    S.queue_counters();
    const size_t K = size_t(c.top_k);
    if (logits)
        DQ_CUDA_CHECK(cudaMemcpyAsync(logits, S.out_logits + size_t(pos0) * c.vocab, sizeof(float) * size_t(n) * c.vocab,
                                      cudaMemcpyDeviceToHost, s));
    // Routes by position [n_layers, ctx, K] -> [n_layers, n, K].
    if (rid)
        DQ_CUDA_CHECK(cudaMemcpy2DAsync(rid, sizeof(int32_t) * n * K, S.out_rid + size_t(pos0) * K,
                                        sizeof(int32_t) * c.ctx * K, sizeof(int32_t) * n * K, c.n_layers,
                                        cudaMemcpyDeviceToHost, s));
    if (rw)
        DQ_CUDA_CHECK(cudaMemcpy2DAsync(rw, sizeof(float) * n * K, S.out_rw + size_t(pos0) * K, sizeof(float) * c.ctx * K,
                                        sizeof(float) * n * K, c.n_layers, cudaMemcpyDeviceToHost, s));
    S.fetch_last_logits();
    S.add_counters(out.stats);
    return out;
}

int32_t GpuSession::decode_step(StepStats& stats) {
    GpuSessionImpl& S = *impl_;
    const ModelConfig& c = m_.config();
    if (!S.has_logits) throw std::invalid_argument("decode needs a prefilled session");
    if (S.pos >= c.ctx) throw std::invalid_argument("context is full");
    const int32_t tok = argmax_f32(S.last_logits_h.data(), c.vocab);
    std::lock_guard<std::mutex> lock(S.m.mu);
    S.feed(tok, stats);
    return tok;
}

DecodeOutcome GpuSession::decode(int max_tokens) {
    GpuSessionImpl& S = *impl_;
    if (!S.has_logits) throw std::invalid_argument("decode needs a prefilled session");
    if (max_tokens < 0) throw std::invalid_argument("max_tokens must be >= 0");
    std::lock_guard<std::mutex> lock(S.m.mu);
    return greedy_decode(
        m_.config(), max_tokens, [&] { return S.last_logits_h.data(); }, [&] { return S.pos; },
        [&](int32_t tok, StepStats& stats) { S.feed(tok, stats); });
}

State GpuSession::download_state() const {
    const GpuSessionImpl& S = *impl_;
    const ModelConfig& c = m_.config();
    std::lock_guard<std::mutex> lock(S.m.mu);
    DQ_CUDA_CHECK(cudaStreamSynchronize(S.m.stream));
    State st = make_state(c);
    st.pos = S.pos;
    st.has_logits = S.has_logits;
    auto get = [](std::vector<float>& dst, const float* src) {
        if (!dst.empty()) DQ_CUDA_CHECK(cudaMemcpy(dst.data(), src, sizeof(float) * dst.size(), cudaMemcpyDeviceToHost));
    };
    get(st.hc_streams, S.hc_streams);
    get(st.last_logits, S.last_logits);
    for (int l = 0; l < c.n_layers; ++l) {
        LayerState& ls = st.layers[l];
        const DevLayerState& ds = S.layers[l];
        get(ls.window, ds.window);
        get(ls.comp_kv, ds.comp_kv);
        get(ls.comp_score, ds.comp_score);
        get(ls.compressed, ds.compressed);
        ls.n_compressed = ds.n_compressed;
    }
    return st;
}

void GpuSession::upload_state(const State& st) {
    GpuSessionImpl& S = *impl_;
    const ModelConfig& c = m_.config();
    std::lock_guard<std::mutex> lock(S.m.mu);
    DQ_CUDA_CHECK(cudaStreamSynchronize(S.m.stream));
    auto put = [](float* dst, const std::vector<float>& src) {
        if (!src.empty()) DQ_CUDA_CHECK(cudaMemcpy(dst, src.data(), sizeof(float) * src.size(), cudaMemcpyHostToDevice));
    };
    if (int(st.layers.size()) != c.n_layers) throw std::invalid_argument("state has the wrong number of layers");
    put(S.hc_streams, st.hc_streams);
    put(S.last_logits, st.last_logits);
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerState& ls = st.layers[l];
        DevLayerState& ds = S.layers[l];
        put(ds.window, ls.window);
        put(ds.comp_kv, ls.comp_kv);
        put(ds.comp_score, ls.comp_score);
        put(ds.compressed, ls.compressed);
        ds.n_compressed = ls.n_compressed;
    }
    S.pos = st.pos;
    S.has_logits = st.has_logits;
    S.last_logits_h = st.last_logits;
    S.put_ctl();
    DQ_CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream copies done before our stream runs
}

}}  // namespace dq::gpu
