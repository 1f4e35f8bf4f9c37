// CUDA entry of sparse MLA (sparse_mla.h): picks the head block and the pipeline depth (one selector
// for the workspace query and the launch), checks what only CUDA needs (alignment, shared memory), and
// launches the sm80 mma.sync kernel (sparse_mla_kernel.cuh) for the bf16 or the FP8-656 cache.
// The dispatcher (src/ops/sparse_mla.cpp) validated shapes and dtypes; index values live in device
// memory and are clamped by the kernel (slots outside [0, num_slots) skipped, topk_length clamped).
#include "attnserve/cache_formats.h"
#include "cuda/cuda_ops.h"
#include "cuda/sm80/sparse_mla/dsa_host.cuh"
#include "cuda/sm80/sparse_mla/sparse_mla_config.h"

namespace attnserve::cuda {
namespace {

constexpr const char* kOp = "sparse_mla";

struct Choice {
  int head_block = 64;
  int stages = 2;
  std::size_t smem = 0;
};

// Heads per CTA: the smallest of 16 / 32 / 64 that holds h_q (larger h_q: several blocks of 64).
// Stages: as many 32-key tiles in flight as the device's shared memory per block allows.
Choice select(const SparseMlaArgs& a, int max_smem) {
  Choice c;
  const int64_t h_q = a.q.size(1);
  c.head_block = h_q <= 16 ? 16 : (h_q <= 32 ? 32 : 64);
  const bool fp8 = a.kv.dtype == DType::u8;
  c.stages = 0;
  for (int s = 2; s <= sparse_mla_sm80::kMaxStages; ++s)
    if (sparse_mla_sm80::smem_layout(c.head_block, fp8, s).total <= std::size_t(max_smem)) c.stages = s;
  ATTNSERVE_CHECK(c.stages >= 2, kOp, ": the CUDA kernel needs ", sparse_mla_sm80::smem_layout(c.head_block, fp8, 2).total,
                  " bytes of shared memory per block (head block ", c.head_block, ", ", fp8 ? "FP8-656" : "bf16",
                  " cache); the device offers ", max_smem, " (sm_80 / sm_90 class GPUs are supported)");
  c.smem = sparse_mla_sm80::smem_layout(c.head_block, fp8, c.stages).total;
  return c;
}

}  // namespace

std::size_t sparse_mla_workspace_size(const SparseMlaArgs&, const DeviceCaps&) { return 0; }

void sparse_mla(const SparseMlaArgs& a, Workspace, Stream stream) {
  const int64_t rows = a.q.size(0), h_q = a.q.size(1);
  if (rows == 0 || h_q == 0) return;
  dsa::require_rows_aligned(kOp, "q", a.q, 16);
  dsa::require_rows_aligned(kOp, "kv", a.kv, 16);
  dsa::require_rows_aligned(kOp, "out", a.out, 4);
  dsa::DeviceGuard guard(a.q.device);
  const Choice c = select(a, dsa::max_dynamic_smem(a.q.device.index));

  sparse_mla_sm80::Params p{};
  p.q = a.q.ptr<const uint16_t>();
  p.q_row_stride = a.q.stride(0);
  p.q_head_stride = a.q.stride(1);
  p.kv = a.kv.ptr<const uint8_t>();
  p.kv_row_bytes = a.kv.stride(0) * int64_t(dtype_size(a.kv.dtype));
  p.num_slots = a.kv.size(0);
  p.indices = a.indices.ptr<const int32_t>();
  p.idx_row_stride = a.indices.stride(0);
  p.idx_col_stride = a.indices.stride(1);
  p.topk = int(a.indices.size(1));
  if (!a.topk_length.empty_view()) {
    p.topk_length = a.topk_length.ptr<const int32_t>();
    p.topk_length_stride = a.topk_length.stride(0);
  }
  if (!a.attn_sink.empty_view()) {
    p.sink = a.attn_sink.ptr<const float>();
    p.sink_stride = a.attn_sink.stride(0);
  }
  p.out = a.out.ptr<uint16_t>();
  p.out_row_stride = a.out.stride(0);
  p.out_head_stride = a.out.stride(1);
  if (!a.lse.empty_view()) {
    p.lse = a.lse.ptr<float>();
    p.lse_row_stride = a.lse.stride(0);
    p.lse_head_stride = a.lse.stride(1);
  }
  if (!a.max_logits.empty_view()) {
    p.max_logits = a.max_logits.ptr<float>();
    p.ml_row_stride = a.max_logits.stride(0);
    p.ml_head_stride = a.max_logits.stride(1);
  }
  p.h_q = int(h_q);
  p.rows = rows;
  p.head_blocks = int(dsa::ceil_div(h_q, c.head_block));
  p.scale_log2 = a.softmax_scale * 1.4426950408889634f;
  p.stages = c.stages;
  ATTNSERVE_CHECK(rows * p.head_blocks <= int64_t(0x7fffffff), kOp, ": ", rows, " rows x ", p.head_blocks,
                  " head blocks need more CTAs than a CUDA grid holds");
  if (a.kv.dtype == DType::u8) sparse_mla_sm80::launch_fp8(p, c.head_block, c.smem, stream.handle);
  else sparse_mla_sm80::launch_bf16(p, c.head_block, c.smem, stream.handle);
}

}  // namespace attnserve::cuda
