// DLPack out: a TensorView owned by a C++ object becomes a Python array that keeps the owner alive.
//  - CPU memory: a NumPy array; bf16 and fp8 e4m3 get the ml_dtypes dtypes (bfloat16,
//    float8_e4m3fn: the ones JAX uses), which NumPy has no DLPack code for.
//  - GPU memory: an attnserve.ArrayView, a reusable DLPack producer (__dlpack__ / __dlpack_device__)
//    that torch.from_dlpack, cupy.from_dlpack and jax.dlpack.from_dlpack accept as often as needed
//    (fp8 as uint8 there: DLPack v0.6 consumers have no fp8 code).
#pragma once
#include <string>

#include "convert.h"

namespace attnserve::py {

nb::object to_python(const TensorView& v, nb::handle owner);
Device parse_device(const std::string& s);  // "cpu", "cuda", "cuda:1"
DType parse_dtype(const std::string& s);    // "bf16", "f16", "fp8_e4m3", ...

void bind_array_view(nb::module_& m);
void bind_kv(nb::module_& m);
void bind_plan(nb::module_& m);
void bind_backend(nb::module_& m);
void bind_index_k_gather(nb::module_& m);
void bind_context_parallel(nb::module_& m);  // bind_cp.cpp

}  // namespace attnserve::py
