// The DS4-mini forward on the GPU: weights uploaded once (SoA Q8_0), state resident on the
// device, one step of w tokens mirroring Model::forward (model_forward.cpp) op by op. Matmuls go
// through narrow MMVQ (ncols <= mmvq_max_ncols) or MMQ (q8_kernels.cuh), exactly the CPU's
// Matmul rule; MoE experts run grouped on only their routed columns after one host readback
// of the route ids per layer.
#include "gpu_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

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
};

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
    if (m.cfg.hc_mult > 16) throw std::invalid_argument("hc_mult above 16 is not supported on the GPU");
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
        w = build_weights(c, &pool);
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

GpuModel::~GpuModel() {
    if (impl_ && impl_->stream) cudaStreamDestroy(impl_->stream);
}

const ModelConfig& GpuModel::config() const { return impl_->cfg; }
double GpuModel::build_seconds() const { return impl_->build_s; }
double GpuModel::upload_seconds() const { return impl_->upload_s; }
size_t GpuModel::weight_bytes_total() const { return impl_->q8_bytes; }
std::string GpuModel::device_name() const { return impl_->device; }

struct DevLayerState {
    int ratio = 0;
    float *window = nullptr, *comp_kv = nullptr, *comp_score = nullptr, *compressed = nullptr;
    int n_compressed = 0;
};

struct GpuSessionImpl;

// With DQ_GPU_OP_TIMING=1 (profiling only: it serializes the stream), each op synchronizes at
// its end and adds its elapsed host time to stats.op_ns[op]; otherwise free.
struct OpSpan {
    bool on;
    cudaStream_t s;
    StepStats& st;
    int op;
    int64_t t0;
    OpSpan(bool enabled, cudaStream_t stream, StepStats& stats, int family)
        : on(enabled), s(stream), st(stats), op(family), t0(enabled ? now_ns() : 0) {}
    ~OpSpan() {
        if (!on) return;
        cudaStreamSynchronize(s);
        st.op_ns[op] += now_ns() - t0;
    }
    OpSpan(const OpSpan&) = delete;
    OpSpan& operator=(const OpSpan&) = delete;
};

struct GpuSessionImpl {
    const GpuModelImpl& m;
    Arena arena;
    const bool op_timing = [] {
        const char* v = std::getenv("DQ_GPU_OP_TIMING");
        return v != nullptr && std::string(v) == "1";
    }();
    // State.
    int pos = 0;
    bool has_logits = false;
    std::vector<DevLayerState> layers;
    float *hc_streams, *last_logits;
    std::vector<float> last_logits_h;
    // Step scratch (kMaxStep tokens; MoE rows: w shared + w*top_k routed).
    int max_rows;
    int32_t* tokens;  // [ctx]
    float *X, *mean, *dyn, *rlogits, *xin, *xn, *post, *M, *proj, *attn, *o, *wts, *gu, *h, *y, *scores, *step_logits;
    int8_t *xq, *aq, *xg, *hq;
    float *xd, *ad, *xgd, *hqd;
    int32_t *ids, *tok_of_row, *rowmap;
    size_t score_stride;
    Pinned<int32_t> ids_h, rows_h;  // rows_h: tok_of_row [max_rows] then rowmap [kMaxStep*top_k]
    cudaEvent_t ids_ready = nullptr;
    // Prefill outputs (grown on demand).
    float* out_logits = nullptr;
    int32_t* out_rid = nullptr;
    float* out_rw = nullptr;
    size_t out_cap = 0;
    std::unique_ptr<Arena> out_arena;

    explicit GpuSessionImpl(const GpuModelImpl& model)
        : m(model),
          max_rows(kMaxStep * (model.cfg.top_k + 1)),
          ids_h(size_t(kMaxStep) * model.cfg.top_k),
          rows_h(size_t(kMaxStep) * (model.cfg.top_k + 1) + size_t(kMaxStep) * model.cfg.top_k) {
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
        hc_streams = arena.alloc<float>(hc * d);
        last_logits = arena.alloc<float>(c.vocab);
        last_logits_h.assign(c.vocab, 0.0f);
        tokens = arena.alloc<int32_t>(c.ctx);
        X = arena.alloc<float>(W * hc * d);
        mean = arena.alloc<float>(W * d);
        dyn = arena.alloc<float>(W * c.hc_dyn_rows());
        rlogits = arena.alloc<float>(W * c.n_experts);
        xin = arena.alloc<float>(W * d);
        xn = arena.alloc<float>(W * d);
        post = arena.alloc<float>(W * hc);
        M = arena.alloc<float>(W * hc * hc);
        proj = arena.alloc<float>(W * c.proj_rows());
        attn = arena.alloc<float>(W * c.q_dim());
        o = arena.alloc<float>(W * d);
        ids = arena.alloc<int32_t>(W * K);
        wts = arena.alloc<float>(W * K);
        gu = arena.alloc<float>(R * 2 * f);
        h = arena.alloc<float>(R * f);
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
        tok_of_row = arena.alloc<int32_t>(R + W * K);
        rowmap = tok_of_row + R;
        int max_comp = 0;
        for (int r : c.ratios) max_comp = std::max(max_comp, c.max_compressed(r));
        score_stride = size_t(max_comp + c.n_swa) + 4 * hd;  // scores, then the output partials
        scores = arena.alloc<float>(W * c.n_heads * score_stride);
        DQ_CUDA_CHECK(cudaEventCreateWithFlags(&ids_ready, cudaEventDisableTiming));
        reset();
    }
    ~GpuSessionImpl() {
        if (ids_ready) cudaEventDestroy(ids_ready);
    }
    GpuSessionImpl(const GpuSessionImpl&) = delete;
    GpuSessionImpl& operator=(const GpuSessionImpl&) = delete;

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
        // cudaMemset / pageable cudaMemcpy run on the legacy stream, which our non-blocking
        // stream does not wait for: finish them before any kernel of this session.
        DQ_CUDA_CHECK(cudaDeviceSynchronize());
    }

    void ensure_outputs(int n) {
        const ModelConfig& c = m.cfg;
        if (size_t(n) <= out_cap) return;
        out_arena.reset();  // free the smaller buffers first
        out_arena = std::make_unique<Arena>();
        Arena& a = *out_arena;
        out_logits = a.alloc<float>(size_t(n) * c.vocab);
        out_rid = a.alloc<int32_t>(size_t(c.n_layers) * n * c.top_k);
        out_rw = a.alloc<float>(size_t(c.n_layers) * n * c.top_k);
        out_cap = size_t(n);
    }

    void mm(const DevQ8& w, const int8_t* xq_, const float* xd_, int ncols, float* y_, const StepMode& mode,
            StepStats& st) const {
        const bool mmq = mode.approximate || ncols > mode.mmvq_max_ncols;
        OpSpan span(op_timing, m.stream, st, kOpMatmul);
        const cuda::Q8Acts x{xq_, xd_, ncols, w.cols};
        if (mmq) cuda::mmq(w.view(), x, y_, m.stream);
        else cuda::mmvq(w.view(), x, y_, m.stream);
        st.weight_bytes += w.bytes;
        st.matmul_calls += 1;
        st.used_mmq = st.used_mmq || mmq;
    }

    void attention_sublayer(int l, int w, const StepMode& mode, StepStats& st) {
        const ModelConfig& c = m.cfg;
        const DevLayer& L = m.layers[l];
        DevLayerState& ls = layers[l];
        const int d = c.d_model, hd = c.head_dim, qd = c.q_dim(), pr = c.proj_rows();
        cudaStream_t s = m.stream;
        {
            OpSpan span(op_timing, m.stream, st, kOpHC);
            launch_hc_pre(L.hc_attn, L.attn_norm, X, mean, dyn, xin, xn, post, M, xq, xd, w, c.hc_mult, d, c.sinkhorn_iters,
                          c.norm_eps, s);
        }
        mm(L.w_proj, xq, xd, w, proj, mode, st);
        {
            OpSpan span(op_timing, m.stream, st, kOpPerToken);
            launch_qk_rope(QkRopeArgs{proj, pr, qd, c.n_heads, hd, c.rope_dim, L.q_norm, L.kv_norm, m.rope_cos,
                                      m.rope_sin, pos, c.norm_eps, ls.window, c.window_cap()},
                           w, s);
        }
        // Causal per-token section split at compressor boundaries, as on the CPU.
        for (int j0 = 0; j0 < w;) {
            int j1 = j0;
            while (j1 < w - 1 && !is_boundary(ls.ratio, pos + j1)) ++j1;
            {
                OpSpan span(op_timing, m.stream, st, kOpAttention);
                launch_attend(AttendArgs{proj, pr, qd, c.n_heads, hd, ls.window, c.window_cap(), c.n_swa,
                                         ls.compressed, ls.n_compressed, ls.comp_kv, ls.comp_score,
                                         ls.ratio > 0 ? ModelConfig::comp_rows(ls.ratio) : 1, ls.ratio, pos, j0,
                                         scores, score_stride, attn, aq, ad},
                              j1 - j0 + 1, s);
            }
            if (is_boundary(ls.ratio, pos + j1)) {
                if (ls.n_compressed >= c.max_compressed(ls.ratio)) throw std::logic_error("compressed rows exceed context");
                {
                    OpSpan span(op_timing, m.stream, st, kOpCompressor);
                    launch_pool(PoolArgs{ls.comp_kv, ls.comp_score, L.comp_ape, L.comp_norm, ls.compressed,
                                         ls.n_compressed, ls.ratio, hd, c.rope_dim, pos + j1, c.norm_eps, m.rope_cos,
                                         m.rope_sin},
                                s);
                }
                ls.n_compressed += 1;
            }
            j0 = j1 + 1;
        }
        mm(L.w_o, aq, ad, w, o, mode, st);
        {
            OpSpan span(op_timing, m.stream, st, kOpHC);
            launch_hc_post(X, o, post, M, w, c.hc_mult, d, s);
        }
    }

    void ffn_sublayer(int l, const int32_t* tok_dev, int w, const StepMode& mode, int32_t* rid, float* rw,
                      size_t route_off, StepStats& st) {
        const ModelConfig& c = m.cfg;
        const DevLayer& L = m.layers[l];
        const int d = c.d_model, K = c.top_k, f = c.d_ff;
        cudaStream_t s = m.stream;
        {
            OpSpan span(op_timing, m.stream, st, kOpHC);
            launch_hc_pre(L.hc_ffn, L.ffn_norm, X, mean, dyn, xin, xn, post, M, xq, xd, w, c.hc_mult, d, c.sinkhorn_iters,
                          c.norm_eps, s);
        }
        {
            OpSpan span(op_timing, m.stream, st, kOpRouter);
            launch_router(RouterArgs{xn, L.router, L.router_bias, L.tid2eid, tok_dev, d, c.n_experts, K,
                                     l < c.n_hash_layers, c.routed_scale, ids, wts, rid, rw, route_off},
                          rlogits, w, s);
        }
        DQ_CUDA_CHECK(cudaMemcpyAsync(ids_h.p, ids, sizeof(int32_t) * w * K, cudaMemcpyDeviceToHost, s));
        DQ_CUDA_CHECK(cudaEventRecord(ids_ready, s));
        // The shared expert needs no routing: queue it on every column while the host waits.
        // MoE rows: 0..w-1 the shared expert's (token order), then each routed expert's
        // columns in expert order (gu/h/hq/y rows; xg rows likewise).
        const size_t nbd = size_t(d / QK8_0), nbf = size_t(f / QK8_0);
        mm(L.shared_w13, xq, xd, w, gu, mode, st);
        {
            OpSpan span(op_timing, m.stream, st, kOpPerToken);
            launch_swiglu(gu, h, hq, hqd, w, f, c.swiglu_limit, s);
        }
        mm(L.shared_w2, hq, hqd, w, y, mode, st);
        {
            OpSpan span(op_timing, m.stream, st, kOpRouter);
            DQ_CUDA_CHECK(cudaEventSynchronize(ids_ready));
        }  // one readback of the route ids per layer
        int32_t* tor = rows_h.p;
        int32_t* rmap = rows_h.p + max_rows;
        int nrows = 0;
        for (int t = 0; t < w; ++t) tor[nrows++] = t;
        int base[256], count[256];
        for (int e = 0; e < c.n_experts; ++e) {
            base[e] = nrows;
            for (int t = 0; t < w; ++t)
                for (int k = 0; k < K; ++k)
                    if (ids_h.p[t * K + k] == e) {
                        rmap[t * K + k] = nrows;
                        tor[nrows++] = t;
                    }
            count[e] = nrows - base[e];
        }
        const int nr = nrows - w;  // routed rows (w * top_k)
        // tok_of_row [max_rows] and rowmap [w*K] are adjacent on both sides: one copy.
        DQ_CUDA_CHECK(cudaMemcpyAsync(tok_of_row, tor, sizeof(int32_t) * (size_t(max_rows) + w * K),
                                      cudaMemcpyHostToDevice, s));
        {
            OpSpan span(op_timing, m.stream, st, kOpPerToken);
            launch_gather(xq, xd, tok_of_row + w, nr, d, xg + size_t(w) * d, xgd + size_t(w) * nbd, s);
        }
        for (int e = 0; e < c.n_experts; ++e)
            if (count[e])
                mm(L.exp_w13[e], xg + size_t(base[e]) * d, xgd + size_t(base[e]) * nbd, count[e],
                   gu + size_t(base[e]) * 2 * f, mode, st);
        {
            OpSpan span(op_timing, m.stream, st, kOpPerToken);
            launch_swiglu(gu + size_t(w) * 2 * f, h + size_t(w) * f, hq + size_t(w) * f, hqd + size_t(w) * nbf, nr, f,
                          c.swiglu_limit, s);
        }
        for (int e = 0; e < c.n_experts; ++e)
            if (count[e])
                mm(L.exp_w2[e], hq + size_t(base[e]) * f, hqd + size_t(base[e]) * nbf, count[e],
                   y + size_t(base[e]) * d, mode, st);
        {
            OpSpan span(op_timing, m.stream, st, kOpPerToken);
            launch_combine_post(y, rowmap, wts, X, post, M, w, c.hc_mult, K, d, s);
        }
    }

    // One step of w tokens (tok_dev: device ids) at pos; logits_dev [w, vocab]; rid/rw device
    // outputs at [l * route_stride + (tok0 + j) * top_k + k] when non-null.
    void forward(const int32_t* tok_dev, int w, const StepMode& mode, float* logits_dev, int32_t* rid, float* rw,
                 size_t route_stride, size_t tok0, StepStats& st) {
        const ModelConfig& c = m.cfg;
        if (w < 1 || w > kMaxStep) throw std::invalid_argument("step width must be 1..32");
        if (pos + w > c.ctx) throw std::invalid_argument("step runs past the context");
        const int d = c.d_model, hc = c.hc_mult;
        cudaStream_t s = m.stream;
        {
            OpSpan span(op_timing, m.stream, st, kOpPerToken);
            launch_embed(tok_dev, m.embed, X, w, hc, d, s);
        }
        for (int l = 0; l < c.n_layers; ++l) {
            attention_sublayer(l, w, mode, st);
            ffn_sublayer(l, tok_dev, w, mode, rid, rw, size_t(l) * route_stride + tok0 * c.top_k, st);
        }
        {
            OpSpan span(op_timing, m.stream, st, kOpPerToken);
            launch_final(X, m.hc_final, m.final_norm, xin, xq, xd, w, hc, d, c.norm_eps, s);
        }
        mm(m.lm_head, xq, xd, w, logits_dev, mode, st);
        DQ_CUDA_CHECK(cudaMemcpyAsync(hc_streams, X + size_t(w - 1) * hc * d, sizeof(float) * hc * d,
                                      cudaMemcpyDeviceToDevice, s));
        DQ_CUDA_CHECK(cudaMemcpyAsync(last_logits, logits_dev + size_t(w - 1) * c.vocab, sizeof(float) * c.vocab,
                                      cudaMemcpyDeviceToDevice, s));
        has_logits = true;
        pos += w;
    }

    void fetch_last_logits() {
        DQ_CUDA_CHECK(cudaMemcpyAsync(last_logits_h.data(), last_logits, sizeof(float) * m.cfg.vocab,
                                      cudaMemcpyDeviceToHost, m.stream));
        DQ_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    }

    // Feeds one token (q1, narrow MMVQ).
    void feed(int32_t tok, StepStats& st) {
        DQ_CUDA_CHECK(cudaMemcpyAsync(tokens, &tok, sizeof tok, cudaMemcpyHostToDevice, m.stream));
        forward(tokens, 1, StepMode{1, false}, step_logits, nullptr, nullptr, 0, 0, st);
        fetch_last_logits();
    }
};

GpuSession::GpuSession(const GpuModel& m) : m_(m), impl_(std::make_unique<GpuSessionImpl>(m.impl())) {}
GpuSession::~GpuSession() = default;

int GpuSession::pos() const { return impl_->pos; }

PrefillOutcome GpuSession::prefill(const int32_t* tokens, int n, const PrefillOptions& opt, float* logits,
                                   int32_t* rid, float* rw) {
    GpuSessionImpl& S = *impl_;
    const ModelConfig& c = m_.config();
    if (n < 1) throw std::invalid_argument("prefill needs at least one token");
    if (S.pos + n > c.ctx) throw std::invalid_argument("prompt longer than the context");
    if (opt.chunk < 1 || opt.chunk > kMaxBandChunk) throw std::invalid_argument("chunk must be 1..4");
    if (opt.mmvq_max_ncols < 1 || opt.mmvq_max_ncols > kMaxMmvqCols)
        throw std::invalid_argument("mmvq_max_ncols must be 1..8");
    if (opt.approx_width < 1 || opt.approx_width > kMaxStep) throw std::invalid_argument("approx_width must be 1..32");
    for (int i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= c.vocab) throw std::invalid_argument("token id out of range");
    std::lock_guard<std::mutex> lock(S.m.mu);
    PrefillOutcome out;
    out.widths = opt.approximate ? schedule_approximate(n, opt.approx_width)
                                 : schedule_bands(S.pos, n, opt.chunk, c.ratios);
    const StepMode mode{opt.mmvq_max_ncols, opt.approximate};
    S.ensure_outputs(n);
    cudaStream_t s = S.m.stream;
    DQ_CUDA_CHECK(cudaMemcpyAsync(S.tokens, tokens, sizeof(int32_t) * n, cudaMemcpyHostToDevice, s));
    DQ_CUDA_CHECK(cudaStreamSynchronize(s));
    const size_t stride = size_t(n) * c.top_k;
    const int64_t t0 = now_ns();
    int off = 0;
    for (int w : out.widths) {
        StepStats step;
        S.forward(S.tokens + off, w, mode, S.out_logits + size_t(off) * c.vocab, rid ? S.out_rid : nullptr,
                  rw ? S.out_rw : nullptr, stride, size_t(off), step);
        out.step_mmq.push_back(step.used_mmq ? 1 : 0);
        out.stats.weight_bytes += step.weight_bytes;
        out.stats.matmul_calls += step.matmul_calls;
        out.stats.used_mmq = out.stats.used_mmq || step.used_mmq;
        for (int k = 0; k < kOpCount; ++k) out.stats.op_ns[k] += step.op_ns[k];
        off += w;
    }
    DQ_CUDA_CHECK(cudaStreamSynchronize(s));
    out.ns = now_ns() - t0;
    if (logits)
        DQ_CUDA_CHECK(cudaMemcpy(logits, S.out_logits, sizeof(float) * size_t(n) * c.vocab, cudaMemcpyDeviceToHost));
    if (rid) DQ_CUDA_CHECK(cudaMemcpy(rid, S.out_rid, sizeof(int32_t) * c.n_layers * stride, cudaMemcpyDeviceToHost));
    if (rw) DQ_CUDA_CHECK(cudaMemcpy(rw, S.out_rw, sizeof(float) * c.n_layers * stride, cudaMemcpyDeviceToHost));
    S.fetch_last_logits();
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
    DQ_CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream copies done before our stream runs
    S.pos = st.pos;
    S.has_logits = st.has_logits;
    S.last_logits_h = st.last_logits;
}

}}  // namespace dq::gpu
