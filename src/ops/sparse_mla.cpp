// sparse_mla dispatcher: validates every argument (messages name the argument), then runs the CPU
// oracle or the CUDA kernel on the device the tensors live on.
#include "attnserve/ops/sparse_mla.h"

#include <cmath>

#include "attnserve/cache_formats.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "ops/planned_ops.h"

namespace attnserve {
namespace {

constexpr const char* kOp = "sparse_mla";
constexpr int64_t kDimQk = 576, kDimV = 512;

// Like check_same_device, but the message names the argument that differs.
void check_on_device(const TensorView& t, const char* arg, Device device) {
  if (t.empty_view()) return;
  ATTNSERVE_CHECK(t.device == device, kOp, ": argument '", arg, "' is on ", to_string(t.device), ", expected ",
                  to_string(device), " (the device of 'q')");
}

void check_contiguous_last(const TensorView& t, const char* arg) {
  if (!t.empty_view()) check_last_dim_contiguous(kOp, arg, t);
}

// Shapes, dtypes, devices, layout and the scale: everything that does not read tensor contents.
void validate_shapes(const SparseMlaArgs& a) {
  const bool on_cpu = a.q.device.is_cpu();
  if (on_cpu) {
    check_tensor(kOp, "q", a.q, {DType::bf16, DType::f16, DType::f32, DType::f64}, {-1, -1, kDimQk});
  } else {
    check_tensor(kOp, "q", a.q, {DType::bf16}, {-1, -1, kDimQk});
  }
  const int64_t rows = a.q.size(0), h_q = a.q.size(1);

  check_tensor(kOp, "kv", a.kv, {DType::bf16, DType::u8}, {-1, -1});
  const int64_t kv_width = a.kv.dtype == DType::u8 ? int64_t(Fp8MlaLayout::kBytes) : kDimQk;
  ATTNSERVE_CHECK(a.kv.size(1) == kv_width, kOp, ": argument 'kv' has shape ", a.kv.shape_string(), ", expected [*, ",
                  kv_width, "] for a ", dtype_name(a.kv.dtype),
                  " cache (bf16: 576 values per slot; u8: FP8-656 bytes)");

  check_tensor(kOp, "indices", a.indices, {DType::i32}, {rows, -1});
  check_tensor(kOp, "out", a.out, {a.q.dtype}, {rows, h_q, kDimV});
  check_output(kOp, "out", a.out);
  check_optional_tensor(kOp, "topk_length", a.topk_length, {DType::i32}, {rows});
  check_optional_tensor(kOp, "attn_sink", a.attn_sink, {DType::f32}, {h_q});
  check_optional_tensor(kOp, "lse", a.lse, {DType::f32}, {rows, h_q});
  check_output(kOp, "lse", a.lse);
  check_optional_tensor(kOp, "max_logits", a.max_logits, {DType::f32}, {rows, h_q});
  check_output(kOp, "max_logits", a.max_logits);

  const Device device = a.q.device;
  check_on_device(a.kv, "kv", device);
  check_on_device(a.indices, "indices", device);
  check_on_device(a.out, "out", device);
  check_on_device(a.topk_length, "topk_length", device);
  check_on_device(a.attn_sink, "attn_sink", device);
  check_on_device(a.lse, "lse", device);
  check_on_device(a.max_logits, "max_logits", device);

  check_contiguous_last(a.q, "q");
  check_contiguous_last(a.kv, "kv");
  check_contiguous_last(a.indices, "indices");
  check_contiguous_last(a.out, "out");
  check_contiguous_last(a.topk_length, "topk_length");
  check_contiguous_last(a.attn_sink, "attn_sink");
  check_contiguous_last(a.lse, "lse");
  check_contiguous_last(a.max_logits, "max_logits");

  ATTNSERVE_CHECK(a.softmax_scale > 0.f && std::isfinite(a.softmax_scale), kOp, ": argument 'softmax_scale' is ",
                  a.softmax_scale, ", expected a finite value > 0 (DeepSeek-V3.2: 192^-0.5 * mscale^2)");
}

// topk_length values can only be read on the host; a CUDA kernel clamps them to [0, topk].
void validate_topk_length_values(const SparseMlaArgs& a) {
  if (a.topk_length.empty_view() || !a.topk_length.device.is_cpu()) return;
  const int64_t topk = a.indices.size(1);
  const int32_t* len = a.topk_length.ptr<const int32_t>();
  for (int64_t r = 0; r < a.topk_length.size(0); ++r) {
    const int64_t v = len[r * a.topk_length.strides[0]];
    ATTNSERVE_CHECK(v >= 0 && v <= topk, kOp, ": argument 'topk_length' has value ", v, " at row ", r,
                    ", expected 0 <= topk_length <= topk = ", topk);
  }
}

}  // namespace

std::size_t sparse_mla_workspace_size(const SparseMlaArgs& a, const DeviceCaps& caps) {
  validate_shapes(a);
  if (a.q.device.is_cpu()) return 0;
  return cuda::sparse_mla_workspace_size(a, caps);
}

void sparse_mla(const SparseMlaArgs& a, Workspace ws, Stream stream) {
  validate_shapes(a);
  if (a.q.device.is_cpu()) {
    validate_topk_length_values(a);
    cpu::sparse_mla(a);
  } else {
    require_cuda_device("sparse_mla");
    cuda::sparse_mla(a, ws, stream);
  }
}

void sparse_mla(const SparseMlaArgs& a, const cuda::sparse_mla_op::Plan& plan, Workspace ws, Stream stream) {
  if (a.q.device.is_cpu()) return sparse_mla(a, ws, stream);
  validate_shapes(a);
  require_cuda_device("sparse_mla");
  cuda::sparse_mla(a, plan, ws, stream);
}

}  // namespace attnserve
