#include "convert.h"

namespace attnserve::py {
namespace {

DType dtype_of(const nb::dlpack::dtype& t) {
  using nb::dlpack::dtype_code;
  ATTNSERVE_CHECK(t.lanes == 1, "attnserve: vector dtypes are not supported");
  const auto code = static_cast<dtype_code>(t.code);
  if (code == dtype_code::Float && t.bits == 32) return DType::f32;
  if (code == dtype_code::Float && t.bits == 16) return DType::f16;
  if (code == dtype_code::Float && t.bits == 64) return DType::f64;
  if (code == dtype_code::Bfloat && t.bits == 16) return DType::bf16;
  if (code == dtype_code::Int && t.bits == 32) return DType::i32;
  if (code == dtype_code::Int && t.bits == 64) return DType::i64;
  if (code == dtype_code::UInt && t.bits == 8) return DType::u8;
  if (t.code == 10 && t.bits == 8) return DType::fp8_e4m3;  // DLPack >= 1.1 kDLFloat8_e4m3fn
  ATTNSERVE_FAIL("attnserve: unsupported array dtype (DLPack code ", int(t.code), ", ", int(t.bits), " bits)");
}

}  // namespace

TensorView to_view(const nb::ndarray<>& a) {
  TensorView v;
  v.dtype = dtype_of(a.dtype());
  const int dev = a.device_type();
  if (dev == nb::device::cpu::value || dev == nb::device::cuda_host::value) v.device = Device::cpu();
  else if (dev == nb::device::cuda::value || dev == nb::device::cuda_managed::value) v.device = Device::cuda(a.device_id());
  else ATTNSERVE_FAIL("attnserve: unsupported array device type ", dev);
  ATTNSERVE_CHECK(a.ndim() <= size_t(kMaxDims), "attnserve: arrays of at most ", kMaxDims, " dims");
  v.ndim = int(a.ndim());
  v.data = const_cast<void*>(a.data());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = int64_t(a.shape(d));
    v.strides[d] = int64_t(a.stride(d));
  }
  return v;
}

TensorView to_view_as(const nb::ndarray<>& a, DType t) { return to_view(a).with_dtype(t); }

}  // namespace attnserve::py
