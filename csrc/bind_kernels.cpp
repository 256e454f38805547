// pybind11 glue for kernel-level tests and benches (placeholder until the kernels land).
#include "bind_kernels.h"

namespace dq {
void bind_kernels(pybind11::module_& m) { m.def_submodule("kernels", "quantized kernels"); }
}  // namespace dq
