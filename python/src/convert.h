// DLPack in: any framework's array (NumPy, PyTorch, JAX, CuPy) arrives as a nanobind ndarray and
// becomes a TensorView over the same memory (no copies).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <optional>

#include "attnserve/runtime.h"

namespace attnserve::py {

namespace nb = nanobind;
using OptArray = std::optional<nb::ndarray<>>;

TensorView to_view(const nb::ndarray<>& a);
inline TensorView to_view(const OptArray& a) { return a ? to_view(*a) : TensorView{}; }

// Reinterpret a uint8 (or fp8) array as fp8 e4m3 (DLPack v0.6 has no fp8 code).
TensorView to_view_as(const nb::ndarray<>& a, DType t);

inline Stream to_stream(uintptr_t handle) { return Stream{reinterpret_cast<void*>(handle)}; }

void bind_core(nb::module_& m);
void bind_ops(nb::module_& m);

}  // namespace attnserve::py
