#include "views.h"

#include <nanobind/stl/string.h>

#include <sstream>

namespace attnserve::py {
namespace {

// The DLPack dtype an exported view carries: fp8 as uint8 (no fp8 code in DLPack v0.6).
nb::dlpack::dtype dlpack_dtype(DType t) {
  nb::dlpack::dtype dt{};
  dt.lanes = 1;
  dt.bits = uint8_t(dtype_size(t) * 8);
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::f64: dt.code = uint8_t(nb::dlpack::dtype_code::Float); break;
    case DType::bf16: dt.code = uint8_t(nb::dlpack::dtype_code::Bfloat); break;
    case DType::i32:
    case DType::i64: dt.code = uint8_t(nb::dlpack::dtype_code::Int); break;
    case DType::u8:
    case DType::fp8_e4m3: dt.code = uint8_t(nb::dlpack::dtype_code::UInt); break;
  }
  return dt;
}

nb::ndarray<> as_ndarray(const TensorView& v, nb::handle owner, nb::dlpack::dtype dt) {
  size_t shape[kMaxDims];
  for (int d = 0; d < v.ndim; ++d) shape[d] = size_t(v.shape[d]);
  const int dev = v.device.is_cpu() ? nb::device::cpu::value : nb::device::cuda::value;
  return nb::ndarray<>(v.data, size_t(v.ndim), shape, owner, v.strides.data(), dt, dev, v.device.index);
}

// A view of memory that C++ owns (or re-typed caller memory), exported through DLPack on demand.
// Each __dlpack__ call makes a fresh capsule, so the object can be consumed any number of times.
struct ArrayView {
  TensorView view;
  nb::object owner;  // keeps the memory alive
};

nb::object dlpack_capsule(nb::handle self) {
  const ArrayView& a = nb::cast<const ArrayView&>(self);
  nb::dlpack::dtype dt = dlpack_dtype(a.view.dtype);
  if (a.view.dtype == DType::fp8_e4m3 && a.view.device.is_cpu()) dt.code = 10;  // kDLFloat8_e4m3fn (ours only)
  return nb::cast(as_ndarray(a.view, self, dt), nb::rv_policy::reference);
}

std::string repr(const ArrayView& a) {
  std::ostringstream os;
  os << "attnserve.ArrayView(shape=" << a.view.shape_string() << ", dtype=" << dtype_name(a.view.dtype)
     << ", device=" << to_string(a.view.device) << ")";
  return os.str();
}

nb::tuple int_tuple(const int64_t* p, int n) {
  nb::list l;
  for (int i = 0; i < n; ++i) l.append(p[i]);
  return nb::tuple(l);
}

}  // namespace

nb::object to_python(const TensorView& v, nb::handle owner) {
  if (v.device.is_cpu()) {
    const bool ml = v.dtype == DType::bf16 || v.dtype == DType::fp8_e4m3;
    nb::dlpack::dtype dt = dlpack_dtype(v.dtype);
    if (v.dtype == DType::bf16) dt.code = uint8_t(nb::dlpack::dtype_code::UInt);  // uint16, then viewed
    nb::object a = nb::cast(nb::ndarray<nb::numpy>(as_ndarray(v, owner, dt)), nb::rv_policy::reference);
    if (!ml) return a;
    nb::object ml_dtypes = nb::module_::import_("ml_dtypes");
    return a.attr("view")(ml_dtypes.attr(v.dtype == DType::bf16 ? "bfloat16" : "float8_e4m3fn"));
  }
  return nb::cast(ArrayView{v, nb::borrow(owner)});
}

void bind_array_view(nb::module_& m) {
  nb::class_<ArrayView>(m, "ArrayView",
                        "A view of GPU memory that attnserve owns (a pool layer, planner metadata) or of re-typed\n"
                        "caller memory. It holds no data of its own and keeps the owner alive. Pass it to\n"
                        "torch.from_dlpack, cupy.from_dlpack or jax.dlpack.from_dlpack, as often as needed.")
      .def(
          "__dlpack__", [](nb::handle self, nb::kwargs) { return dlpack_capsule(self); },
          "A fresh DLPack capsule of the view (keyword arguments of the DLPack protocol are accepted and ignored).")
      .def("__dlpack_device__",
           [](const ArrayView& a) {
             return nb::make_tuple(a.view.device.is_cpu() ? int(nb::device::cpu::value) : int(nb::device::cuda::value),
                                   a.view.device.is_cpu() ? 0 : a.view.device.index);
           })
      .def_prop_ro("shape", [](const ArrayView& a) { return int_tuple(a.view.shape.data(), a.view.ndim); })
      .def_prop_ro(
          "strides", [](const ArrayView& a) { return int_tuple(a.view.strides.data(), a.view.ndim); },
          "Strides in elements (not bytes).")
      .def_prop_ro("ndim", [](const ArrayView& a) { return a.view.ndim; })
      .def_prop_ro(
          "dtype", [](const ArrayView& a) { return std::string(dtype_name(a.view.dtype)); },
          "attnserve dtype name: bf16, f16, f32, fp8_e4m3, i32, ...")
      .def_prop_ro("device", [](const ArrayView& a) { return to_string(a.view.device); })
      .def_prop_ro("data_ptr", [](const ArrayView& a) { return reinterpret_cast<uintptr_t>(a.view.data); })
      .def("__repr__", &repr);

  // Diagnosis of a failed op call (attnserve/_ops.py): which argument nanobind or to_view refused, and why.
  m.def(
      "_probe_input", [](RoArray a) { return std::string(dtype_name(to_view(a).dtype)); }, nb::arg("array"),
      "Internal: the attnserve dtype of an input array (TypeError: not an array; attnserve.Error: unsupported).");
  m.def(
      "_probe_output", [](Array a) { return std::string(dtype_name(to_view(a).dtype)); }, nb::arg("array"),
      "Internal: as _probe_input, for an output (TypeError also when the array is read-only).");

  m.def(
      "_retyped",
      [](nb::handle array, RoArray a, const std::string& dtype) {
        return nb::cast(ArrayView{to_view_retyped(fields_of(a), parse_dtype(dtype)), nb::borrow(array)});
      },
      nb::arg("array"), nb::arg("raw"), nb::arg("dtype"),
      "Internal: `raw` (uint16 / uint8 bytes of `array`) seen as bf16 / fp8_e4m3, for ml_dtypes inputs.");
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) return Device::cuda(std::stoi(s.substr(5)));
  ATTNSERVE_FAIL("unknown device '", s, "' (expected cpu, cuda or cuda:N)");
}

DType parse_dtype(const std::string& s) {
  for (DType t : {DType::bf16, DType::f16, DType::f32, DType::f64, DType::fp8_e4m3, DType::i32, DType::i64, DType::u8})
    if (dtype_name(t) == s) return t;
  ATTNSERVE_FAIL("unknown dtype '", s, "' (expected bf16, f16, f32, fp8_e4m3, ...)");
}

}  // namespace attnserve::py
