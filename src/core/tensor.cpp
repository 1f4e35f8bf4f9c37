#include "attnserve/tensor.h"

#include <sstream>

namespace attnserve {

std::string to_string(Device d) { return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index); }

TensorView TensorView::contiguous(void* data, DType dtype, const int64_t* shape, int ndim, Device device) {
  ATTNSERVE_CHECK(ndim >= 0 && ndim <= kMaxDims, "TensorView: ndim ", ndim, " out of range [0, ", kMaxDims, "]");
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    ATTNSERVE_CHECK(shape[d] >= 0, "TensorView: negative extent ", shape[d], " in dim ", d);
    t.shape[d] = shape[d];
    t.strides[d] = s;
    s *= shape[d];
  }
  return t;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  return contiguous(data, dtype, shape.begin(), int(shape.size()), device);
}

int64_t TensorView::numel() const {
  if (ndim == 0) return data ? 1 : 0;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != s) return false;
    s *= shape[d];
  }
  return true;
}

std::string TensorView::shape_string() const {
  std::ostringstream os;
  os << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "]";
  return os.str();
}

TensorView TensorView::reshape(std::initializer_list<int64_t> new_shape) const {
  ATTNSERVE_CHECK(is_contiguous(), "reshape needs a contiguous view, got shape ", shape_string());
  int64_t known = 1, infer = -1, i = 0;
  std::array<int64_t, kMaxDims> dims{};
  ATTNSERVE_CHECK(new_shape.size() <= kMaxDims, "reshape: too many dims");
  for (int64_t v : new_shape) {
    if (v == -1) {
      ATTNSERVE_CHECK(infer < 0, "reshape: more than one -1");
      infer = i;
    } else {
      known *= v;
    }
    dims[i++] = v;
  }
  if (infer >= 0) dims[infer] = known ? numel() / known : 0;
  int64_t total = 1;
  for (int64_t d = 0; d < i; ++d) total *= dims[d];
  ATTNSERVE_CHECK(total == numel(), "reshape: ", shape_string(), " has ", numel(), " elements, target has ", total);
  TensorView t = contiguous(data, dtype, dims.data(), int(i), device);
  return t;
}

TensorView TensorView::slice(int dim, int64_t begin, int64_t end) const {
  if (dim < 0) dim += ndim;
  ATTNSERVE_CHECK(dim >= 0 && dim < ndim, "slice: dim ", dim, " out of range for ", shape_string());
  ATTNSERVE_CHECK(0 <= begin && begin <= end && end <= shape[dim], "slice: [", begin, ", ", end,
                  ") out of range for extent ", shape[dim]);
  TensorView t = *this;
  t.shape[dim] = end - begin;
  if (data) t.data = static_cast<char*>(data) + begin * strides[dim] * int64_t(dtype_size(dtype));
  return t;
}

TensorView TensorView::select(int dim, int64_t index) const {
  if (dim < 0) dim += ndim;
  TensorView t = slice(dim, index, index + 1);
  for (int d = dim; d + 1 < ndim; ++d) {
    t.shape[d] = t.shape[d + 1];
    t.strides[d] = t.strides[d + 1];
  }
  t.ndim = ndim - 1;
  return t;
}

TensorView TensorView::with_dtype(DType t) const {
  ATTNSERVE_CHECK(dtype_size(t) == dtype_size(dtype), "with_dtype: ", dtype_name(dtype), " -> ", dtype_name(t),
                  " changes the element size");
  TensorView v = *this;
  v.dtype = t;
  return v;
}

static std::string dims_string(std::initializer_list<int64_t> dims) {
  std::ostringstream os;
  os << "[";
  int i = 0;
  for (int64_t d : dims) {
    os << (i++ ? ", " : "");
    if (d < 0) os << "*";
    else os << d;
  }
  os << "]";
  return os.str();
}

void check_tensor(std::string_view op, std::string_view arg, const TensorView& t, std::initializer_list<DType> dtypes,
                  std::initializer_list<int64_t> dims) {
  ATTNSERVE_CHECK(!t.empty_view(), op, ": argument '", arg, "' is required (expected shape ", dims_string(dims), ")");
  bool ok_dtype = dtypes.size() == 0;
  for (DType d : dtypes) ok_dtype |= (d == t.dtype);
  if (!ok_dtype) {
    std::ostringstream os;
    int i = 0;
    for (DType d : dtypes) os << (i++ ? " | " : "") << dtype_name(d);
    ATTNSERVE_FAIL(op, ": argument '", arg, "' has dtype ", dtype_name(t.dtype), ", expected ", os.str());
  }
  bool ok_shape = int(dims.size()) == t.ndim;
  if (ok_shape) {
    int d = 0;
    for (int64_t e : dims) {
      ok_shape &= (e < 0 || e == t.shape[d]);
      ++d;
    }
  }
  ATTNSERVE_CHECK(ok_shape, op, ": argument '", arg, "' has shape ", t.shape_string(), ", expected ",
                  dims_string(dims));
  ATTNSERVE_CHECK(t.data != nullptr || t.numel() == 0, op, ": argument '", arg, "' has no data");
}

void check_optional_tensor(std::string_view op, std::string_view arg, const TensorView& t,
                           std::initializer_list<DType> dtypes, std::initializer_list<int64_t> dims) {
  if (t.empty_view()) return;
  check_tensor(op, arg, t, dtypes, dims);
}

void check_same_device(std::string_view op, std::initializer_list<const TensorView*> ts) {
  const TensorView* first = nullptr;
  for (const TensorView* t : ts) {
    if (t->empty_view()) continue;
    if (!first) {
      first = t;
      continue;
    }
    ATTNSERVE_CHECK(t->device == first->device, op, ": tensors are on different devices (", to_string(first->device),
                    " and ", to_string(t->device), ")");
  }
}

void check_last_dim_contiguous(std::string_view op, std::string_view arg, const TensorView& t) {
  ATTNSERVE_CHECK(t.ndim == 0 || t.strides[t.ndim - 1] == 1 || t.shape[t.ndim - 1] <= 1, op, ": argument '", arg,
                  "' must be contiguous in its last dim (stride ", t.ndim ? t.strides[t.ndim - 1] : 0, ")");
}

void check_output(std::string_view op, std::string_view arg, const TensorView& t) {
  for (int d = 0; d < t.ndim; ++d)
    ATTNSERVE_CHECK(t.shape[d] <= 1 || t.strides[d] != 0, op, ": output '", arg, "' has stride 0 in dim ", d, " (size ",
                    t.shape[d],
                    "): its elements would overwrite each other; pass a writable array "
                    "that is not a broadcast view");
}

int32_t narrow_i32(int64_t v, std::string_view what) {
  ATTNSERVE_CHECK(v >= INT32_MIN && v <= INT32_MAX, what, " = ", v, " does not fit in int32");
  return int32_t(v);
}

}  // namespace attnserve
