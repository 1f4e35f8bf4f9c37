// DLPack v0.6 conversion. fp8 has no code in v0.6: it travels as uint8 and is reinterpreted.
#include <dlpack/dlpack.h>

#include "attnserve/tensor.h"

namespace attnserve {
namespace {

DType dtype_from_dl(DLDataType t) {
  ATTNSERVE_CHECK(t.lanes == 1, "from_dlpack: vector lanes (", int(t.lanes), ") are not supported");
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::f32;
      if (t.bits == 16) return DType::f16;
      if (t.bits == 64) return DType::f64;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::bf16;
      break;
    case kDLInt:
      if (t.bits == 32) return DType::i32;
      if (t.bits == 64) return DType::i64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::u8;
      break;
    default: break;
  }
  ATTNSERVE_FAIL("from_dlpack: unsupported dtype code ", int(t.code), " bits ", int(t.bits));
}

DLDataType dtype_to_dl(DType t) {
  switch (t) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
    case DType::u8:
    case DType::fp8_e4m3: return {kDLUInt, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

}  // namespace

TensorView from_dlpack(const DLTensor& t) {
  ATTNSERVE_CHECK(t.ndim <= kMaxDims, "from_dlpack: ", t.ndim, " dims, at most ", kMaxDims, " supported");
  TensorView v;
  v.dtype = dtype_from_dl(t.dtype);
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: v.device = Device::cpu(); break;
    case kDLCUDA:
    case kDLCUDAManaged: v.device = Device::cuda(t.device.device_id); break;
    default: ATTNSERVE_FAIL("from_dlpack: unsupported device type ", int(t.device.device_type));
  }
  v.ndim = t.ndim;
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  int64_t s = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    v.shape[d] = t.shape[d];
    v.strides[d] = t.strides ? t.strides[d] : s;
    s *= t.shape[d];
  }
  return v;
}

TensorView from_dlpack(const DLTensor& t, DType reinterpret_as) { return from_dlpack(t).with_dtype(reinterpret_as); }

void to_dlpack(const TensorView& view, DLTensor& out) {
  out.data = view.data;
  out.device = view.device.is_cpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, view.device.index};
  out.ndim = view.ndim;
  out.dtype = dtype_to_dl(view.dtype);
  out.shape = const_cast<int64_t*>(view.shape.data());
  out.strides = const_cast<int64_t*>(view.strides.data());
  out.byte_offset = 0;
}

}  // namespace attnserve
