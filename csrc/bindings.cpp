// pybind11 glue for dflash_qualify.engine._core: argument marshalling only, no math.
#include <pybind11/pybind11.h>

#include "bind_kernels.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
    m.doc() = "DS4-mini engine core (private; use dflash_qualify.engine)";
    m.def("build_type", [] { return std::string(DQ_BUILD_TYPE); });
    dq::bind_kernels(m);
}
