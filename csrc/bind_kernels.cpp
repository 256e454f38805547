// pybind11 glue for kernel-level tests and benches (submodule `_core.kernels`): shape/dtype
// validation and marshalling only; all math lives in q8_0.cpp, kernels_*.cpp and csrc/simd/.
#include "bind_kernels.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bandwidth.h"
#include "cpu_features.h"
#include "kernels.h"
#include "model_ops.h"
#include "model_weights.h"
#include "q8_0.h"
#include "threadpool.h"

namespace py = pybind11;

namespace dq {

namespace {

constexpr int kBlockBytes = int(sizeof(BlockQ8_0));
using U8Array = py::array_t<uint8_t, py::array::c_style>;
using F32Array = py::array_t<float, py::array::c_style>;

// Strict dtype check: no silent casts from float64/int arrays.
template <class T>
void require_dtype(const py::array& a, const char* what) {
    if (!a.dtype().is(py::dtype::of<T>())) {
        throw py::value_error(std::string(what) + ": expected dtype " +
                              std::string(py::str(py::dtype::of<T>())) + ", got " +
                              std::string(py::str(a.dtype())));
    }
}

// A 2-D uint8 array of Q8_0 blocks, [rows, k/32*34]; checks shape and the [-127, 127] quant
// range the SIMD kernels rely on. Returns k.
int check_blocks(const U8Array& a, const char* what) {
    if (a.ndim() != 2) throw py::value_error(std::string(what) + ": expected a 2-D uint8 array");
    if (a.shape(1) == 0 || a.shape(1) % kBlockBytes != 0) {
        throw py::value_error(std::string(what) + ": row length " + std::to_string(a.shape(1)) +
                              " is not a positive multiple of 34 (Q8_0 block bytes)");
    }
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(a.data());
    const size_t n = size_t(a.shape(0)) * size_t(a.shape(1) / kBlockBytes);
    for (size_t i = 0; i < n; ++i) {
        for (int j = 0; j < QK8_0; ++j) {
            if (blocks[i].qs[j] == -128) {
                throw py::value_error(std::string(what) +
                                      ": quant -128 found; Q8_0 quants must be in [-127, 127]");
            }
        }
    }
    return int(a.shape(1) / kBlockBytes) * QK8_0;
}

U8Array as_blocks(const py::array& a, const char* what) {
    require_dtype<uint8_t>(a, what);
    return U8Array::ensure(a);
}

MatKernel parse_kernel(const std::string& name) {
    if (name == "mmvq") return MatKernel::kMMVQ;
    if (name == "mmq") return MatKernel::kMMQ;
    throw py::value_error("kernel must be 'mmvq' or 'mmq', got '" + name + "'");
}

U8Array quantize(const py::array& xin) {
    require_dtype<float>(xin, "x");
    const F32Array x = F32Array::ensure(xin);
    if (x.ndim() != 2) throw py::value_error("x: expected a 2-D float32 array [n, k]");
    const int n = int(x.shape(0)), k = int(x.shape(1));
    if (k == 0 || k % QK8_0 != 0) throw py::value_error("x: k must be a positive multiple of 32");
    U8Array out({py::ssize_t(n), py::ssize_t(k / QK8_0 * kBlockBytes)});
    auto* blocks = reinterpret_cast<BlockQ8_0*>(out.mutable_data());
    for (int r = 0; r < n; ++r) {
        quantize_row_q8_0(x.data() + size_t(r) * k, blocks + size_t(r) * (k / QK8_0), k);
    }
    return out;
}

F32Array dequantize(const py::array& bin, int k) {
    const U8Array b = as_blocks(bin, "blocks");
    if (b.ndim() != 2 || k <= 0 || k % QK8_0 != 0 || b.shape(1) != k / QK8_0 * kBlockBytes) {
        throw py::value_error("blocks: expected shape [n, k/32*34] with k a positive multiple of 32");
    }
    const int n = int(b.shape(0));
    F32Array out({py::ssize_t(n), py::ssize_t(k)});
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(b.data());
    float* y = out.mutable_data();
    for (size_t i = 0; i < size_t(n) * (k / QK8_0); ++i) {
        const float d = fp16_to_fp32(blocks[i].d);
        for (int j = 0; j < QK8_0; ++j) y[i * QK8_0 + j] = d * float(blocks[i].qs[j]);
    }
    return out;
}

// One validated product for mul_mat / mul_mat_batch: its arrays (kept alive and contiguous for
// the call), the output, and the task that points into them.
struct BoundProduct {
    U8Array w, x;
    F32Array y;
    MatTask task;
    std::shared_ptr<WeightArena> packed;  // W's x16 copy for narrow MMVQ (as the model's matrices)
};

BoundProduct bind_product(const py::array& win, const py::array& xin, const std::string& kernel_name) {
    const MatKernel kernel = parse_kernel(kernel_name);
    BoundProduct p{as_blocks(win, "w"), as_blocks(xin, "x"), F32Array(), {}, nullptr};
    const int k = check_blocks(p.w, "w");
    if (check_blocks(p.x, "x") != k) throw py::value_error("w and x must have the same k");
    const int rows = int(p.w.shape(0)), ncols = int(p.x.shape(0));
    if (rows < 1 || ncols < 1) throw py::value_error("w and x need at least one row each");
    if (kernel == MatKernel::kMMVQ && ncols > 8) {
        throw py::value_error("mmvq takes 1..8 columns, got " + std::to_string(ncols));
    }
    p.y = F32Array({py::ssize_t(ncols), py::ssize_t(rows)});
    const auto* wb = reinterpret_cast<const BlockQ8_0*>(p.w.data());
    const uint8_t* packed = nullptr;
    if (kernel == MatKernel::kMMVQ) {
        p.packed = std::make_shared<WeightArena>(packed_bytes(rows, k));
        pack_q8_0_x16(wb, rows, k, static_cast<uint8_t*>(p.packed->data()));
        packed = static_cast<const uint8_t*>(p.packed->data());
    }
    p.task = MatTask{QMatrixView{wb, rows, k, packed}, reinterpret_cast<const BlockQ8_0*>(p.x.data()), ncols,
                     p.y.mutable_data(), kernel};
    return p;
}

F32Array mul_mat(const py::array& win, const py::array& xin, const std::string& kernel_name,
                 int threads) {
    const BoundProduct p = bind_product(win, xin, kernel_name);
    if (threads < 1) throw py::value_error("threads must be >= 1");
    {
        py::gil_scoped_release release;
        std::unique_ptr<ThreadPool> pool;
        if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
        mul_mat_q8_0(p.task.w, p.task.x, p.task.ncols, p.task.y, p.task.kernel, pool.get());
    }
    return p.y;
}

// Several products in one dispatch (the grouped MoE path): [(w, x, kernel), ...] -> [y, ...].
py::list mul_mat_batch(const py::list& items, int threads) {
    if (threads < 1) throw py::value_error("threads must be >= 1");
    std::vector<BoundProduct> products;
    std::vector<MatTask> tasks;
    for (const py::handle& it : items) {
        const auto t = it.cast<py::tuple>();
        if (t.size() != 3) throw py::value_error("each item is (w, x, kernel)");
        products.push_back(bind_product(t[0].cast<py::array>(), t[1].cast<py::array>(), t[2].cast<std::string>()));
        tasks.push_back(products.back().task);
    }
    {
        py::gil_scoped_release release;
        std::unique_ptr<ThreadPool> pool;
        if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
        mul_mat_q8_0_batch(tasks.data(), int(tasks.size()), pool.get());
    }
    py::list out;
    for (const auto& p : products) out.append(p.y);
    return out;
}

float vec_dot_ref(const py::array& win, const py::array& xin) {
    const U8Array w = as_blocks(win, "w");
    const U8Array x = as_blocks(xin, "x");
    if (w.ndim() != 1 || x.ndim() != 1 || w.shape(0) != x.shape(0) || w.shape(0) == 0 ||
        w.shape(0) % kBlockBytes != 0) {
        throw py::value_error("w, x: expected equal-length 1-D uint8 arrays of Q8_0 blocks");
    }
    return vec_dot_q8_0_q8_0_ref(reinterpret_cast<const BlockQ8_0*>(w.data()),
                                 reinterpret_cast<const BlockQ8_0*>(x.data()),
                                 int(w.shape(0) / kBlockBytes));
}

py::array_t<uint16_t> to_fp16(const py::array& xin) {
    require_dtype<float>(xin, "x");
    const F32Array x = F32Array::ensure(xin);
    py::array_t<uint16_t> out(x.size());
    for (py::ssize_t i = 0; i < x.size(); ++i) out.mutable_data()[i] = fp32_to_fp16(x.data()[i]);
    return out;
}

F32Array from_fp16(const py::array& hin) {
    require_dtype<uint16_t>(hin, "h");
    const auto h = py::array_t<uint16_t, py::array::c_style>::ensure(hin);
    F32Array out(h.size());
    for (py::ssize_t i = 0; i < h.size(); ++i) out.mutable_data()[i] = fp16_to_fp32(h.data()[i]);
    return out;
}

py::dict features_dict() {
    const CpuFeatures& f = cpu_features();
    py::dict d;
    d["avx2"] = f.avx2;
    d["fma"] = f.fma;
    d["f16c"] = f.f16c;
    d["avx512f"] = f.avx512f;
    d["avx512bw"] = f.avx512bw;
    d["avx512vl"] = f.avx512vl;
    d["avx512vnni"] = f.avx512vnni;
    d["amx_tile"] = f.amx_tile;
    d["amx_int8"] = f.amx_int8;
    d["amx_permitted"] = f.amx_permitted;
    py::list paths;
    paths.append("scalar");
    if (f.avx2_path()) paths.append("avx2");
    if (f.avx512vnni_path()) paths.append("avx512vnni");
    if (f.amx_path()) paths.append("amx");
    d["paths"] = paths;
    return d;
}

}  // namespace

void bind_kernels(py::module_& m) {
    py::module_ k = m.def_submodule("kernels", "Q8_0 kernels: test and bench entry points");
    k.def("quantize_q8_0", &quantize, py::arg("x"),
          "float32[n, k] -> uint8[n, k/32*34] raw Q8_0 blocks");
    k.def("dequantize_q8_0", &dequantize, py::arg("blocks"), py::arg("k"),
          "uint8[n, k/32*34] -> float32[n, k]");
    k.def("mul_mat", &mul_mat, py::arg("w"), py::arg("x"), py::arg("kernel") = "mmvq",
          py::arg("threads") = 1, "Y[ncols, rows] = W[rows, k] @ X[ncols, k]^T on Q8_0 blocks");
    k.def("mul_mat_batch", &mul_mat_batch, py::arg("items"), py::arg("threads") = 1,
          "[(w, x, kernel), ...] -> [y, ...], all products in one parallel dispatch");
    k.def("vec_dot_ref", &vec_dot_ref, py::arg("w"), py::arg("x"),
          "scalar reference dot of two 1-D Q8_0 block rows (canonical order)");
    k.def("fp32_to_fp16", &to_fp16, py::arg("x"), "float32 array -> uint16 fp16 bits (flat)");
    k.def("fp16_to_fp32", &from_fp16, py::arg("h"), "uint16 fp16 bits -> float32 (flat)");
    k.def("swiglu",
          [](const py::array& gin, const py::array& uin, float limit) {
              require_dtype<float>(gin, "gate");
              require_dtype<float>(uin, "up");
              const F32Array gate = F32Array::ensure(gin), up = F32Array::ensure(uin);
              if (gate.ndim() != 1 || up.ndim() != 1 || gate.size() != up.size()) {
                  throw py::value_error("gate and up: expected 1-D float32 arrays of one length");
              }
              F32Array h(gate.size());
              swiglu_clamped(gate.data(), up.data(), h.mutable_data(), int(gate.size()), limit);
              return h;
          },
          py::arg("gate"), py::arg("up"), py::arg("limit"),
          "the engine's clamped SwiGLU: min(g, limit) / (1 + exp(-min(g, limit))) * clamp(u, +-limit)");
    k.def("simd_path", [] { return std::string(simd_path()); });
    k.def("set_simd_path", [](const std::string& name) { return set_simd_path(name.c_str()); },
          py::arg("name"));
    k.def("simd_path_env_error", [] { return std::string(simd_path_env_error()); },
          "why DQ_SIMD_PATH was not taken at start-up ('' when it was, or is unset)");
    k.def("cpu_features", &features_dict);
    k.def("read_bandwidth_gbs",
          [](size_t bytes, int threads, int repeats) {
              if (threads < 1 || repeats < 1 || bytes < 4096) {
                  throw py::value_error("need bytes >= 4096, threads >= 1, repeats >= 1");
              }
              py::gil_scoped_release release;
              return read_bandwidth_gbs(bytes, threads, repeats);
          },
          py::arg("bytes") = size_t(1) << 30, py::arg("threads") = 1, py::arg("repeats") = 3);
    k.def("bench_mul_mat",
          [](int rows, int kdim, int ncols, const std::string& kernel, int threads, int repeats,
             uint64_t seed, int mats) {
              const MatKernel kk = parse_kernel(kernel);
              if (rows < 1 || ncols < 1 || kdim < QK8_0 || kdim % QK8_0 != 0 || threads < 1 ||
                  repeats < 1 || mats < 1) {
                  throw py::value_error("need rows, ncols, threads, repeats, mats >= 1 and k a positive multiple of 32");
              }
              if (kk == MatKernel::kMMVQ && ncols > 8) {
                  throw py::value_error("mmvq takes 1..8 columns");
              }
              MatBenchResult r;
              {
                  py::gil_scoped_release release;
                  r = bench_mul_mat(rows, kdim, ncols, kk, threads, repeats, seed, mats);
              }
              py::dict d;
              d["best_ns"] = r.best_ns;
              d["median_ns"] = r.median_ns;
              d["weight_bytes"] = r.weight_bytes;
              d["checksum"] = r.checksum;
              return d;
          },
          py::arg("rows"), py::arg("k"), py::arg("ncols"), py::arg("kernel") = "mmvq",
          py::arg("threads") = 1, py::arg("repeats") = 5, py::arg("seed") = 1, py::arg("mats") = 1);
}

}  // namespace dq
