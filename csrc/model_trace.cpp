// Trace capture: copies of per-token and per-layer tensors at the points the forward pass
// finishes them (see model_trace.h). Only reached when a TraceCapture is attached.
#include "model_trace.h"

#include <cmath>
#include <cstring>

#include "model_forward.h"

namespace dq {

void TraceCapture::begin_step(int pos0, const int32_t* tokens, int w) {
    ++step_;
    pos0_ = pos0;
    w_ = w;
    TraceStep s;
    s.step = step_;
    s.pos0 = pos0;
    s.width = w;
    s.tokens.assign(tokens, tokens + w);
    steps.push_back(std::move(s));
}

void TraceCapture::end_step(const float* logits, bool mmq) {
    const size_t V = size_t(c_.vocab);
    for (int j = 0; j < w_; ++j)
        add("logits", -1, pos0_ + j, 'f', {int64_t(V)}, logits + size_t(j) * V, V * sizeof(float), j);
    if (!steps.empty()) steps.back().mmq = mmq;
}

void TraceCapture::add(const char* tensor, int layer, int pos, char dtype, std::vector<int64_t> shape,
                       const void* src, size_t bytes, int token) {
    TraceTensor t;
    t.tensor = tensor;
    t.step = step_;
    t.layer = layer;
    t.pos = pos;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data.resize(bytes);
    if (bytes) std::memcpy(t.data.data(), src, bytes);
    const TracePerturb& p = perturb;
    if (p.on && p.step == step_ && p.layer == layer && (token < 0 || p.token == token) && p.tensor == t.tensor &&
        dtype == 'f' && p.index >= 0 && size_t(p.index) * 4 < bytes) {
        float v;
        std::memcpy(&v, t.data.data() + size_t(p.index) * 4, 4);
        v = std::nextafter(v, INFINITY);
        std::memcpy(t.data.data() + size_t(p.index) * 4, &v, 4);
    }
    records.push_back(std::move(t));
}

void TraceCapture::on_sublayer(int l, int sub, const State& st, const Scratch& sc, int w) {
    const int64_t hc = c_.hc_mult, d = c_.d_model, hd = c_.head_dim, K = c_.top_k;
    const int last = pos0_ + w - 1;
    if (sub == 0) {  // the layer's attention state is final for this step once attention ran
        const LayerState& ls = st.layers[l];
        const int64_t rows = ls.ratio ? ModelConfig::comp_rows(ls.ratio) : 0;
        add("kv_window", l, last, 'f', {int64_t(c_.window_cap()), hd}, ls.window.data(),
            ls.window.size() * sizeof(float), -1);
        if (ls.ratio) {
            add("comp_kv", l, last, 'f', {rows, hd}, ls.comp_kv.data(), ls.comp_kv.size() * sizeof(float), -1);
            add("comp_score", l, last, 'f', {rows, hd}, ls.comp_score.data(),
                ls.comp_score.size() * sizeof(float), -1);
            add("compressed", l, last, 'f', {int64_t(ls.n_compressed), hd}, ls.compressed.data(),
                size_t(ls.n_compressed) * hd * sizeof(float), -1);
        }
    }
    const char* hc_name = sub == 0 ? "hc_attn" : "hc_ffn";
    for (int j = 0; j < w; ++j) {
        if (sub == 1) {
            add("route_ids", l, pos0_ + j, 'i', {K}, &sc.ids[size_t(j) * K], size_t(K) * 4, j);
            add("route_weights", l, pos0_ + j, 'f', {K}, &sc.wts[size_t(j) * K], size_t(K) * 4, j);
        }
        add(hc_name, l, pos0_ + j, 'f', {hc, d}, &sc.X[size_t(j) * hc * d], size_t(hc * d) * 4, j);
    }
}

}  // namespace dq
