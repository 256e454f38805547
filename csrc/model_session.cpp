// Session: prefill loop over scheduled steps, greedy decode, snapshot serialization.
#include "model_session.h"

#include <cstring>
#include <stdexcept>

#include "common/engine_rules.h"
#include "model_ops.h"
#include "model_scheduler.h"
#include "model_trace.h"

namespace dq {

Session::Session(const Model& m) : m_(m), st_(m.new_state()), sc_(m.config()) {}

PrefillOutcome Session::prefill(const int32_t* tokens, int n, const PrefillOptions& opt, float* logits,
                                int32_t* rid, float* rw) {
    const ModelConfig& c = m_.config();
    if (const char* why = rules::prefill_arg_error(c, st_.pos, tokens, n, opt.chunk, opt.mmvq_max_ncols,
                                                   opt.approx_width))
        throw std::invalid_argument(why);
    std::lock_guard<std::mutex> lock(m_.mutex());
    PrefillOutcome out;
    out.widths = opt.approximate ? schedule_approximate(n, opt.approx_width)
                                 : schedule_bands(st_.pos, n, opt.chunk, c.ratios);
    const StepMode mode{opt.mmvq_max_ncols, opt.approximate};
    const size_t stride = size_t(n) * c.top_k;
    struct TraceOn {  // the forward hooks see the capture during this prefill only
        Scratch& sc;
        ~TraceOn() { sc.trace = nullptr; }
    } trace_on{sc_};
    sc_.trace = trace_;
    const int64_t t0 = now_ns();
    int off = 0;
    for (int w : out.widths) {
        StepStats step;
        float* lg = logits ? logits + size_t(off) * c.vocab : sc_.logits.data();
        if (trace_) trace_->begin_step(st_.pos, tokens + off, w);
        m_.forward(st_, tokens + off, w, mode, sc_, lg, rid ? rid + size_t(off) * c.top_k : nullptr,
                   rw ? rw + size_t(off) * c.top_k : nullptr, stride, step);
        out.step_mmq.push_back(step.used_mmq ? 1 : 0);
        if (trace_) trace_->end_step(lg, step.used_mmq);
        out.stats.weight_bytes += step.weight_bytes;
        out.stats.f32_weight_bytes += step.f32_weight_bytes;
        out.stats.matmul_calls += step.matmul_calls;
        out.stats.used_mmq = out.stats.used_mmq || step.used_mmq;
        for (int k = 0; k < kOpCount; ++k) out.stats.op_ns[k] += step.op_ns[k];
        off += w;
    }
    out.ns = now_ns() - t0;
    return out;
}

int32_t Session::decode_step(StepStats& stats) {
    const ModelConfig& c = m_.config();
    if (!st_.has_logits) throw std::invalid_argument("decode needs a prefilled session");
    if (st_.pos >= c.ctx) throw std::invalid_argument("context is full");
    const int32_t tok = argmax_f32(st_.last_logits.data(), c.vocab);
    std::lock_guard<std::mutex> lock(m_.mutex());
    m_.forward(st_, &tok, 1, StepMode{1, false}, sc_, sc_.logits.data(), nullptr, nullptr, 0, stats);
    return tok;
}

DecodeOutcome Session::decode(int max_tokens) {
    const ModelConfig& c = m_.config();
    if (!st_.has_logits) throw std::invalid_argument("decode needs a prefilled session");
    if (max_tokens < 0) throw std::invalid_argument("max_tokens must be >= 0");
    std::lock_guard<std::mutex> lock(m_.mutex());
    return greedy_decode(
        c, max_tokens, [&] { return st_.last_logits.data(); }, [&] { return st_.pos; },
        [&](int32_t tok, StepStats& stats) {
            m_.forward(st_, &tok, 1, StepMode{1, false}, sc_, sc_.logits.data(), nullptr, nullptr, 0, stats);
        });
}

namespace {
constexpr uint32_t kSnapMagic = 0x53345344u;  // "DS4S"
constexpr uint32_t kSnapVersion = 1;

struct Writer {
    std::vector<uint8_t>& buf;
    void raw(const void* p, size_t n) {
        if (n == 0) return;  // empty state arrays (window-only layers) have no storage
        const auto* b = static_cast<const uint8_t*>(p);
        buf.insert(buf.end(), b, b + n);
    }
    template <class T> void pod(T v) { raw(&v, sizeof v); }
    void floats(const std::vector<float>& v, size_t n) { raw(v.data(), n * sizeof(float)); }
};

struct Reader {
    const uint8_t* p;
    size_t left;
    void raw(void* dst, size_t n) {
        if (n > left) throw std::invalid_argument("snapshot is truncated");
        if (n == 0) return;
        std::memcpy(dst, p, n);
        p += n;
        left -= n;
    }
    template <class T> T pod() {
        T v;
        raw(&v, sizeof v);
        return v;
    }
    void floats(std::vector<float>& v, size_t n) { raw(v.data(), n * sizeof(float)); }
};
}  // namespace

std::vector<uint8_t> Session::snapshot() const { return snapshot_state(m_.config(), st_); }

void Session::restore(const uint8_t* data, size_t size) { st_ = restore_state(m_.config(), data, size); }

std::vector<uint8_t> snapshot_state(const ModelConfig& c, const State& st) {
    std::vector<uint8_t> buf;
    Writer w{buf};
    w.pod(kSnapMagic);
    w.pod(kSnapVersion);
    w.pod(c.fingerprint());
    w.pod(int32_t(st.pos));
    w.pod(uint8_t(st.has_logits));
    w.floats(st.last_logits, st.last_logits.size());
    w.floats(st.hc_streams, st.hc_streams.size());
    for (const LayerState& ls : st.layers) {
        w.floats(ls.window, ls.window.size());
        w.floats(ls.comp_kv, ls.comp_kv.size());
        w.floats(ls.comp_score, ls.comp_score.size());
        w.pod(int32_t(ls.n_compressed));
        w.floats(ls.compressed, size_t(ls.n_compressed) * c.head_dim);
    }
    return buf;
}

State restore_state(const ModelConfig& c, const uint8_t* data, size_t size) {
    Reader r{data, size};
    if (r.pod<uint32_t>() != kSnapMagic) throw std::invalid_argument("not a DS4-mini session snapshot");
    if (r.pod<uint32_t>() != kSnapVersion) throw std::invalid_argument("unsupported snapshot version");
    if (r.pod<uint64_t>() != c.fingerprint()) throw std::invalid_argument("snapshot belongs to a different model or seed");
    State st = make_state(c);
    st.pos = r.pod<int32_t>();
    st.has_logits = r.pod<uint8_t>() != 0;
    if (st.pos < 0 || st.pos > c.ctx) throw std::invalid_argument("snapshot position out of range");
    r.floats(st.last_logits, st.last_logits.size());
    r.floats(st.hc_streams, st.hc_streams.size());
    for (LayerState& ls : st.layers) {
        r.floats(ls.window, ls.window.size());
        r.floats(ls.comp_kv, ls.comp_kv.size());
        r.floats(ls.comp_score, ls.comp_score.size());
        const int32_t nc = r.pod<int32_t>();
        if (nc < 0 || nc > c.max_compressed(ls.ratio)) throw std::invalid_argument("snapshot compressed-row count out of range");
        ls.n_compressed = nc;
        r.floats(ls.compressed, size_t(nc) * c.head_dim);
    }
    if (r.left != 0) throw std::invalid_argument("snapshot has trailing bytes");
    return st;
}

}  // namespace dq
