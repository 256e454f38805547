// pybind11 glue for dflash_qualify.engine._core: argument marshalling only, no math.
// Validation with user-facing messages lives in engine/ (Python); C++ errors surface as ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bind_kernels.h"
#include "kernels.h"
#include "model_forward.h"
#include "model_scheduler.h"
#include "model_session.h"
#include "model_trace.h"
#ifdef DQ_HAVE_CUDA
#include "cuda/gpu_engine.h"
#endif

namespace py = pybind11;
using namespace dq;

namespace {

ModelConfig config_from_dict(const py::dict& d) {
    ModelConfig c;
    auto geti = [&](const char* k) { return d[k].cast<int>(); };
    auto getf = [&](const char* k) { return d[k].cast<float>(); };
    c.name = d["name"].cast<std::string>();
    c.vocab = geti("vocab");
    c.d_model = geti("d_model");
    c.n_layers = geti("n_layers");
    c.n_heads = geti("n_heads");
    c.head_dim = geti("head_dim");
    c.rope_dim = geti("rope_dim");
    c.n_swa = geti("n_swa");
    c.n_experts = geti("n_experts");
    c.top_k = geti("top_k");
    c.d_ff = geti("d_ff");
    c.n_hash_layers = geti("n_hash_layers");
    c.hc_mult = geti("hc_mult");
    c.sinkhorn_iters = geti("sinkhorn_iters");
    c.ctx = geti("ctx");
    c.ratios = d["ratios"].cast<std::vector<int>>();
    c.rope_theta = getf("rope_theta");
    c.norm_eps = getf("norm_eps");
    c.routed_scale = getf("routed_scale");
    c.swiglu_limit = getf("swiglu_limit");
    c.seed = d["seed"].cast<uint64_t>();
    return c;
}

py::dict stats_dict(const StepStats& s) {
    py::dict ops;
    for (int k = 0; k < kOpCount; ++k) ops[op_family_name(k)] = s.op_ns[k];
    py::dict out;
    out["weight_bytes"] = s.weight_bytes;
    out["f32_weight_bytes"] = s.f32_weight_bytes;
    out["matmul_calls"] = s.matmul_calls;
    out["used_mmq"] = s.used_mmq;
    out["op_ns"] = ops;
    return out;
}

template <class T>
py::array_t<T> copy_array(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
    py::array_t<T> a(shape);
    std::copy(v.begin(), v.begin() + a.size(), a.mutable_data());
    return a;
}

py::dict state_dict(const State& st, const ModelConfig& c) {
    const py::ssize_t hd = c.head_dim;
    py::dict out;
    out["pos"] = py::array_t<int32_t>(std::vector<py::ssize_t>{1}, &st.pos);
    out["hc_streams"] = copy_array(st.hc_streams, {c.hc_mult, c.d_model});
    out["last_logits"] = copy_array(st.last_logits, {c.vocab});
    for (size_t l = 0; l < st.layers.size(); ++l) {
        const LayerState& ls = st.layers[l];
        const std::string p = "layer" + std::to_string(l) + ".";
        out[py::str(p + "kv_window")] = copy_array(ls.window, {c.window_cap(), hd});
        const py::ssize_t rows = ls.ratio ? ModelConfig::comp_rows(ls.ratio) : 0;
        out[py::str(p + "comp_kv")] = copy_array(ls.comp_kv, {rows, hd});
        out[py::str(p + "comp_score")] = copy_array(ls.comp_score, {rows, hd});
        out[py::str(p + "compressed")] = copy_array(ls.compressed, {py::ssize_t(ls.n_compressed), hd});
    }
    return out;
}

py::dict session_state(const Session& s) { return state_dict(s.state(), s.model().config()); }

using Tokens = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// prefill / decode / decode_step for a CPU Session or a CUDA GpuSession (same contract).
template <class S, class Cls>
void bind_steps(Cls& cls) {
    cls.def("prefill",
            [](S& s, Tokens tokens, int chunk, int mmvq_max_ncols, bool approximate, int approx_width) {
                const ModelConfig& c = s.model().config();
                const py::ssize_t n = tokens.size();
                py::array_t<float> logits({n, py::ssize_t(c.vocab)});
                py::array_t<int32_t> rid({py::ssize_t(c.n_layers), n, py::ssize_t(c.top_k)});
                py::array_t<float> rw({py::ssize_t(c.n_layers), n, py::ssize_t(c.top_k)});
                PrefillOptions opt{chunk, mmvq_max_ncols, approximate, approx_width};
                PrefillOutcome out;
                {
                    py::gil_scoped_release nogil;
                    out = s.prefill(tokens.data(), int(n), opt, logits.mutable_data(), rid.mutable_data(),
                                    rw.mutable_data());
                }
                py::dict d = stats_dict(out.stats);
                d["logits"] = logits;
                d["route_ids"] = rid;
                d["route_weights"] = rw;
                d["widths"] = out.widths;
                d["step_mmq"] = out.step_mmq;
                d["ns"] = out.ns;
                return d;
            },
            py::arg("tokens"), py::arg("chunk"), py::arg("mmvq_max_ncols"), py::arg("approximate"),
            py::arg("approx_width"))
        .def("decode",
             [](S& s, int max_tokens) {
                 DecodeOutcome out;
                 {
                     py::gil_scoped_release nogil;
                     out = s.decode(max_tokens);
                 }
                 py::dict d = stats_dict(out.stats);
                 d["tokens"] = out.tokens;
                 d["stop"] = out.stop;
                 d["ns"] = out.ns;
                 return d;
             },
             py::arg("max_tokens"))
        .def("decode_step", [](S& s) {
            StepStats st;
            int32_t tok;
            {
                py::gil_scoped_release nogil;
                tok = s.decode_step(st);
            }
            return tok;
        });
}

std::string cuda_unavailable_reason() {
#ifdef DQ_HAVE_CUDA
    return gpu::unavailable_reason();
#else
    return "this build has no CUDA backend (no CUDA compiler was found when it was built, or DQ_CUDA=OFF)";
#endif
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "DS4-mini engine core (private; use dflash_qualify.engine)";
    m.def("build_type", [] { return std::string(DQ_BUILD_TYPE); });
    m.def("sanitize", [] { return bool(DQ_SANITIZE); });
    m.attr("MAX_STEP") = kMaxStep;
    m.def("schedule_bands", &schedule_bands, py::arg("start"), py::arg("n_tokens"), py::arg("chunk"), py::arg("ratios"));
    m.def("schedule_approximate", &schedule_approximate, py::arg("n_tokens"), py::arg("width"));
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const std::invalid_argument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        } catch (const std::logic_error& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        }
    });

    py::class_<Model>(m, "Model")
        .def(py::init([](const py::dict& cfg, int threads) {
                 ModelConfig c = config_from_dict(cfg);
                 py::gil_scoped_release nogil;
                 return std::make_unique<Model>(c, threads);
             }),
             py::arg("config"), py::arg("threads"))
        .def_property_readonly("threads", &Model::threads)
        .def_property_readonly("build_seconds", &Model::build_seconds)
        .def_property_readonly("weight_bytes_total", [](const Model& mdl) { return mdl.weights().q8_bytes; })
        .def_property_readonly("fingerprint", [](const Model& mdl) { return mdl.config().fingerprint(); });

    py::class_<Session> session(m, "Session");
    session.def(py::init<const Model&>(), py::arg("model"), py::keep_alive<1, 2>())
        .def_property_readonly("pos", &Session::pos);
    bind_steps<Session>(session);
    session
        .def("snapshot",
             [](const Session& s) {
                 std::vector<uint8_t> b = s.snapshot();
                 return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
             })
        .def("restore",
             [](Session& s, const py::bytes& b) {
                 std::string_view v = b;
                 s.restore(reinterpret_cast<const uint8_t*>(v.data()), v.size());
             })
        .def("state", &session_state)
        .def("set_trace", [](Session& s, TraceCapture* t) { s.set_trace(t); }, py::arg("trace").none(true),
             py::keep_alive<1, 2>());

    py::class_<TraceCapture>(m, "TraceCapture")
        .def(py::init([](const Model& mdl) { return std::make_unique<TraceCapture>(mdl.config()); }),
             py::arg("model"), py::keep_alive<1, 2>())
        .def("set_perturb",
             [](TraceCapture& t, int step, int layer, int token, const std::string& tensor, int64_t index) {
                 t.perturb = TracePerturb{true, step, layer, token, tensor, index};
             },
             py::arg("step"), py::arg("layer"), py::arg("token"), py::arg("tensor"), py::arg("index"))
        .def("take", [](TraceCapture& t) {  // moves the captured steps and tensors out
            py::list steps, recs;
            for (const TraceStep& s : t.steps)
                steps.append(py::make_tuple(s.step, s.pos0, s.width, s.mmq, s.tokens));
            for (const TraceTensor& r : t.records)
                recs.append(py::make_tuple(r.tensor, r.step, r.layer, r.pos, std::string(1, r.dtype), r.shape,
                                           py::bytes(reinterpret_cast<const char*>(r.data.data()), r.data.size())));
            t.steps.clear();
            t.records.clear();
            return py::make_tuple(steps, recs);
        });

    m.def("cuda_built", [] {
#ifdef DQ_HAVE_CUDA
        return true;
#else
        return false;
#endif
    });
    m.def("cuda_unavailable_reason", &cuda_unavailable_reason);  // "" when device="cuda" can run
#ifdef DQ_HAVE_CUDA
    py::class_<gpu::GpuModel>(m, "GpuModel")
        .def(py::init([](const py::dict& cfg, int threads) {
                 ModelConfig c = config_from_dict(cfg);
                 py::gil_scoped_release nogil;
                 return std::make_unique<gpu::GpuModel>(c, threads);
             }),
             py::arg("config"), py::arg("threads"))
        .def_property_readonly("build_seconds", &gpu::GpuModel::build_seconds)
        .def_property_readonly("upload_seconds", &gpu::GpuModel::upload_seconds)
        .def_property_readonly("weight_bytes_total", &gpu::GpuModel::weight_bytes_total)
        .def_property_readonly("device_name", &gpu::GpuModel::device_name)
        .def_property_readonly("fingerprint", [](const gpu::GpuModel& g) { return g.config().fingerprint(); })
        .def_property_readonly("last_prefill_counts", [](const gpu::GpuModel& g) {
            const gpu::GpuPrefillCounts c = g.last_prefill_counts();
            py::dict d;
            d["steps"] = c.steps;
            d["graph_steps"] = c.graph_steps;
            d["kernels"] = c.kernels;
            d["host_launches"] = c.host_launches;
            d["host_syncs"] = c.host_syncs;
            py::dict ops;
            for (const auto& [name, us] : c.op_us) ops[py::str(name)] = us;
            d["op_us"] = ops;
            return d;
        });

    py::class_<gpu::GpuSession> gsession(m, "GpuSession");
    gsession.def(py::init<const gpu::GpuModel&>(), py::arg("model"), py::keep_alive<1, 2>())
        .def_property_readonly("pos", &gpu::GpuSession::pos);
    bind_steps<gpu::GpuSession>(gsession);
    gsession
        .def("snapshot",
             [](const gpu::GpuSession& s) {
                 std::vector<uint8_t> b = snapshot_state(s.model().config(), s.download_state());
                 return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
             })
        .def("restore",
             [](gpu::GpuSession& s, const py::bytes& b) {
                 std::string_view v = b;
                 s.upload_state(restore_state(s.model().config(), reinterpret_cast<const uint8_t*>(v.data()), v.size()));
             })
        .def("state", [](const gpu::GpuSession& s) { return state_dict(s.download_state(), s.model().config()); });
#endif

    dq::bind_kernels(m);
}
