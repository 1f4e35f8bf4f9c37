// The extension module attnserve._attnserve.
#include "attnserve/version.h"
#include "convert.h"
#include "metadata_dict.h"
#include "views.h"

namespace attnserve::py {

void bind_core(nb::module_& m) {
  // attnserve::Error (bad arguments, exhausted pools, ...) -> attnserve.Error, a ValueError.
  nb::exception<Error>(m, "Error", PyExc_ValueError);
  m.def("cuda_available", &cuda_available, "Built with CUDA and a GPU is present.");
  m.def(
      "built_with_cuda",
      [] {
#ifdef ATTNSERVE_WITH_CUDA
        return true;
#else
        return false;
#endif
      },
      "Whether this build contains the CUDA kernels.");
}

}  // namespace attnserve::py

NB_MODULE(_attnserve, m) {
  m.doc() = "attnserve: attention layer of an LLM serving engine (C++ core)";
  m.attr("__version__") = ATTNSERVE_VERSION_STRING;  // attnserve/version.h, from CMakeLists.txt's VERSION
  attnserve::py::bind_core(m);
  attnserve::py::bind_array_view(m);
  attnserve::py::bind_ops(m);
  attnserve::py::bind_kv(m);
  attnserve::py::bind_metadata_copy(m);
  attnserve::py::bind_plan(m);
  attnserve::py::bind_backend(m);
  attnserve::py::bind_index_k_gather(m);
  attnserve::py::bind_context_parallel(m);
}
