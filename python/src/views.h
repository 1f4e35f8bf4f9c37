// DLPack out: a TensorView owned by a C++ object becomes a Python array that keeps the owner alive
// (a NumPy array for CPU memory NumPy can represent, else a DLPack-capable nanobind ndarray that
// torch.from_dlpack / cupy.from_dlpack / jax.dlpack accept).
#pragma once
#include <string>

#include "convert.h"

namespace attnserve::py {

nb::object to_python(const TensorView& v, nb::handle owner);
Device parse_device(const std::string& s);  // "cpu", "cuda", "cuda:1"
DType parse_dtype(const std::string& s);    // "bf16", "f16", "fp8_e4m3", ...

void bind_kv(nb::module_& m);
void bind_plan(nb::module_& m);
void bind_backend(nb::module_& m);
void bind_index_k_gather(nb::module_& m);

}  // namespace attnserve::py
