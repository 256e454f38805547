// Registers the kernel-level test/bench entry points on the _core module (submodule `kernels`).
#pragma once
#include <pybind11/pybind11.h>

namespace dq {
void bind_kernels(pybind11::module_& m);
}
