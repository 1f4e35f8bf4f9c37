// DLPack in: any framework's array (NumPy, PyTorch, JAX, CuPy) arrives as a nanobind ndarray and
// becomes a TensorView over the same memory (no copies). Inputs are bound as RoArray (read-only
// arrays such as np.broadcast_to results are accepted); outputs as Array (writable only).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <optional>

#include "attnserve/runtime.h"

namespace attnserve::py {

namespace nb = nanobind;
using Array = nb::ndarray<>;          // an output: nanobind refuses read-only arrays
using RoArray = nb::ndarray<nb::ro>;  // an input: read-only arrays welcome
using OptArray = std::optional<Array>;
using OptRoArray = std::optional<RoArray>;

// The raw fields of any nanobind ndarray (the read-only flag only changes the pointer's constness).
struct ArrayFields {
  nb::dlpack::dtype dtype;
  int device_type, device_id;
  size_t ndim;
  void* data;
  const int64_t* shape;
  const int64_t* strides;
};
template <class... Ts>
ArrayFields fields_of(const nb::ndarray<Ts...>& a) {
  return {
      a.dtype(),     a.device_type(), a.device_id(), a.ndim(), const_cast<void*>(static_cast<const void*>(a.data())),
      a.shape_ptr(), a.stride_ptr()};
}

TensorView to_view(const ArrayFields& f);
// Same memory, dtype given by the caller (same element size): for bf16/fp8 that travel as uint16/uint8.
TensorView to_view_retyped(const ArrayFields& f, DType t);

template <class... Ts>
TensorView to_view(const nb::ndarray<Ts...>& a) {
  return to_view(fields_of(a));
}
template <class... Ts>
TensorView to_view(const std::optional<nb::ndarray<Ts...>>& a) {
  return a ? to_view(*a) : TensorView{};
}

inline Stream to_stream(uintptr_t handle) { return Stream{reinterpret_cast<void*>(handle)}; }

void bind_core(nb::module_& m);
void bind_ops(nb::module_& m);

}  // namespace attnserve::py
