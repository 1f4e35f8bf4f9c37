// Internal: element access for the attention oracle in its accumulator type. f64 tensors (accepted by
// the CPU entry points so the fp64 mode can be checked exactly) are read and written without going
// through float; every other dtype goes through load.h.
#pragma once
#include <cstdint>

#include "cpu/load.h"

namespace attnserve::cpu {

template <typename T>
inline T load_as(const void* base, DType t, int64_t i) {
  if (t == DType::f64) return T(static_cast<const double*>(base)[i]);
  return T(load_as_float(base, t, i));
}

template <typename T>
inline void store_as(void* base, DType t, int64_t i, T v) {
  if (t == DType::f64) {
    static_cast<double*>(base)[i] = double(v);
  } else {
    store_from_float(base, t, i, float(v));
  }
}

// Element (i0, i1) of an i32/i64 index tensor, through its strides.
inline int64_t load_index_at(const TensorView& t, int64_t i0) { return load_index(t.data, t.dtype, offset_of(t, i0)); }
inline int64_t load_index_at(const TensorView& t, int64_t i0, int64_t i1) {
  return load_index(t.data, t.dtype, offset_of(t, i0, i1));
}

}  // namespace attnserve::cpu
