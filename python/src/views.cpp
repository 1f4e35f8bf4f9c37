#include "views.h"

namespace attnserve::py {

nb::object to_python(const TensorView& v, nb::handle owner) {
  nb::dlpack::dtype dt{};
  dt.lanes = 1;
  dt.bits = uint8_t(dtype_size(v.dtype) * 8);
  switch (v.dtype) {
    case DType::f32: case DType::f16: case DType::f64: dt.code = uint8_t(nb::dlpack::dtype_code::Float); break;
    case DType::bf16: dt.code = uint8_t(nb::dlpack::dtype_code::Bfloat); break;
    case DType::i32: case DType::i64: dt.code = uint8_t(nb::dlpack::dtype_code::Int); break;
    case DType::u8: case DType::fp8_e4m3: dt.code = uint8_t(nb::dlpack::dtype_code::UInt); break;
  }
  size_t shape[kMaxDims];
  for (int d = 0; d < v.ndim; ++d) shape[d] = size_t(v.shape[d]);
  const int dev = v.device.is_cpu() ? nb::device::cpu::value : nb::device::cuda::value;
  if (v.device.is_cpu() && v.dtype != DType::bf16) {
    nb::ndarray<nb::numpy> a(v.data, size_t(v.ndim), shape, owner, v.strides.data(), dt, dev, v.device.index);
    return nb::cast(a, nb::rv_policy::reference);
  }
  nb::ndarray<> a(v.data, size_t(v.ndim), shape, owner, v.strides.data(), dt, dev, v.device.index);
  return nb::cast(a, nb::rv_policy::reference);
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) return Device::cuda(std::stoi(s.substr(5)));
  ATTNSERVE_FAIL("unknown device '", s, "' (expected cpu, cuda or cuda:N)");
}

DType parse_dtype(const std::string& s) {
  for (DType t : {DType::bf16, DType::f16, DType::f32, DType::f64, DType::fp8_e4m3, DType::i32, DType::i64,
                  DType::u8})
    if (dtype_name(t) == s) return t;
  ATTNSERVE_FAIL("unknown dtype '", s, "' (expected bf16, f16, f32, fp8_e4m3, ...)");
}

}  // namespace attnserve::py
