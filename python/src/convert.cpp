#include "convert.h"

#include <string>

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
  static const char* kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const char* kind = t.code < 7 ? kCodes[t.code] : "code ";
  ATTNSERVE_FAIL("attnserve: unsupported array dtype ", kind, t.code < 7 ? "" : std::to_string(int(t.code)),
                 int(t.bits), " (attnserve takes f32, f16, bf16, f64, i32, i64, u8 and fp8 e4m3)");
}

TensorView view_of(const ArrayFields& f, DType t) {
  TensorView v;
  v.dtype = t;
  const int dev = f.device_type;
  if (dev == nb::device::cpu::value || dev == nb::device::cuda_host::value) v.device = Device::cpu();
  else if (dev == nb::device::cuda::value || dev == nb::device::cuda_managed::value)
    v.device = Device::cuda(f.device_id);
  else ATTNSERVE_FAIL("attnserve: unsupported array device type ", dev);
  ATTNSERVE_CHECK(f.ndim <= size_t(kMaxDims), "attnserve: arrays of at most ", kMaxDims, " dims");
  v.ndim = int(f.ndim);
  v.data = f.data;
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = f.shape[d];
    v.strides[d] = f.strides[d];
  }
  return v;
}

}  // namespace

TensorView to_view(const ArrayFields& f) { return view_of(f, dtype_of(f.dtype)); }

TensorView to_view_retyped(const ArrayFields& f, DType t) {
  ATTNSERVE_CHECK(f.dtype.lanes == 1 && f.dtype.bits == dtype_size(t) * 8, "attnserve: cannot view ", int(f.dtype.bits),
                  "-bit elements as ", dtype_name(t));
  return view_of(f, t);
}

}  // namespace attnserve::py
