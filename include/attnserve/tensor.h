// TensorView: a non-owning view (data, dtype, device, shape, strides in elements), plus the
// argument checks every op runs at its edge, and DLPack import/export.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <dlpack/dlpack.h>  // DLPack v0.6 ABI (Debian libdlpack-dev)

#include "attnserve/dtype.h"
#include "attnserve/error.h"

namespace attnserve {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
};
std::string to_string(Device d);

constexpr int kMaxDims = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements

  // Contiguous (row-major) view over `data`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cpu());
  static TensorView contiguous(void* data, DType dtype, const int64_t* shape, int ndim, Device device = Device::cpu());

  bool empty_view() const { return ndim == 0 && data == nullptr; }  // "not given"
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  int64_t numel() const;
  bool is_contiguous() const;
  std::size_t nbytes() const { return std::size_t(numel()) * dtype_size(dtype); }
  std::string shape_string() const;  // "[2, 3, 4]"

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }

  // New views (no copies). reshape requires a contiguous view.
  TensorView reshape(std::initializer_list<int64_t> new_shape) const;
  TensorView slice(int dim, int64_t begin, int64_t end) const;  // [begin, end) along dim
  TensorView select(int dim, int64_t index) const;              // drops dim
  TensorView with_dtype(DType t) const;                         // same bytes, same element size
};

// ---- Argument checks at the API edge. Messages name the op, the argument, expected and actual.
// In `dims`, -1 is a wildcard. Returns normally or throws attnserve::Error.
void check_tensor(std::string_view op, std::string_view arg, const TensorView& t, std::initializer_list<DType> dtypes,
                  std::initializer_list<int64_t> dims);
// Same, but an absent (default-constructed) view passes.
void check_optional_tensor(std::string_view op, std::string_view arg, const TensorView& t,
                           std::initializer_list<DType> dtypes, std::initializer_list<int64_t> dims);
void check_same_device(std::string_view op, std::initializer_list<const TensorView*> ts);
void check_last_dim_contiguous(std::string_view op, std::string_view arg, const TensorView& t);
// An output (absent views pass): no dim of size > 1 may have stride 0, or its rows would overwrite
// each other (a broadcast view passed as an output).
void check_output(std::string_view op, std::string_view arg, const TensorView& t);

// int64 -> int32 narrowing goes through here (checked).
int32_t narrow_i32(int64_t v, std::string_view what);

// ---- DLPack (v0.6 ABI). fp8 tensors travel as uint8; pass the dtype to reinterpret.
TensorView from_dlpack(const DLTensor& t);
TensorView from_dlpack(const DLTensor& t, DType reinterpret_as);
// Fills `out` (shape/strides point into `view`, which must outlive `out`).
void to_dlpack(const TensorView& view, DLTensor& out);

}  // namespace attnserve
