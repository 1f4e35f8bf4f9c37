// CUDA entry of sparse MLA (sparse_mla.h): picks the head block, the split-K count and the pipeline
// depth (one selector for the workspace query and the launch), checks what only CUDA needs
// (alignment, shared memory, workspace), launches the sm80 mma.sync kernel (sparse_mla_kernel.cuh)
// for the bf16 or the FP8-656 cache and, when the top-k list is split, the combine
// (sparse_mla_combine.cu). The dispatcher (src/ops/sparse_mla.cpp) validated shapes and dtypes; index
// values live in device memory and are clamped by the kernel (slots outside [0, num_slots) skipped,
// topk_length clamped).
#include <algorithm>

#include "attnserve/cache_formats.h"
#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/sparse_mla/sparse_mla_api.h"
#include "cuda/sparse_mla/sm80/config.h"

namespace attnserve::cuda::sparse_mla_sm80 {
namespace {

constexpr const char* kOp = "sparse_mla";
// A split covers at least 4 tiles (128 keys): below that the partial state (2 KB per head) and the
// pipeline fill cost more than the split saves.
constexpr int kMinTilesPerSplit = 4;

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

std::size_t partial_o_bytes(int splits, int64_t rows, int64_t h_q) {
  return align256(std::size_t(splits) * std::size_t(rows) * std::size_t(h_q) * kDimV * sizeof(float));
}

}  // namespace

// Heads per CTA: the smallest of 16 / 32 / 64 that holds h_q (larger h_q: several blocks of 64).
// Unsplit (the grid fills the GPU, e.g. 128 rows x h_q 128 = 256 CTAs): as many tiles in flight as one
// CTA's shared memory allows. Split-K when rows x head blocks leave the GPU underfilled
// (heuristic_splits over SMs x CTAs per SM): each row's top-k list is cut into num_splits runs of
// split_tiles tiles; HB 16 then takes the deepest ring that lets two CTAs share an SM (H200: 2 stages,
// 106 KB), since one 8-warp CTA per SM is latency-bound on its gathers (128 rows x h_q 16: 175 us
// against a 41 us memory floor, NOTES.md) and splitting only helps when the extra CTAs run side by side.
SparseMlaConfig select(const SparseMlaArgs& a, const DeviceCaps& caps, const SparseMlaTuning& tune) {
  SparseMlaConfig c;
  const int64_t rows = a.q.size(0), h_q = a.q.size(1);
  const bool fp8 = a.kv.dtype == DType::u8;
  c.head_block = h_q <= 16 ? 16 : (h_q <= 32 ? 32 : 64);
  c.head_blocks = int(ceil_div(std::max<int64_t>(h_q, 1), c.head_block));
  const std::size_t per_block = caps.smem_per_block;
  const std::size_t two_ctas = (per_block + 1024) / 2 - 1024;  // each CTA also reserves 1 KB
  auto bytes = [&](int s) { return smem_layout(c.head_block, fp8, s).total; };
  int deep = 0, shared2 = 0;
  for (int s = 2; s <= kMaxStages; ++s) {
    if (bytes(s) <= per_block) deep = s;
    if (c.head_block == 16 && bytes(s) <= two_ctas) shared2 = s;  // HB 16 alone is capped at 128 registers
  }
  ATTNSERVE_CHECK(deep >= 2, kOp, ": the CUDA kernel needs ", bytes(2), " bytes of shared memory per block (head block ",
                  c.head_block, ", ", fp8 ? "FP8-656" : "bf16", " cache); the device offers ", per_block,
                  " (sm_80 / sm_90 class GPUs are supported)");

  const int tiles = int(std::max<int64_t>(1, ceil_div(a.indices.size(1), kTileKeys)));
  int splits = 1;
  if (!a.deterministic) {  // deterministic: one CTA per row whatever the batch (bits independent of it)
    const int slots = caps.num_sms * (shared2 ? 2 : 1);
    splits = heuristic_splits(rows * c.head_blocks, slots, tiles / kMinTilesPerSplit);
  }
  if (tune.num_splits > 0) splits = std::min(tune.num_splits, tiles);
  c.split_tiles = int(ceil_div(tiles, splits));
  c.num_splits = int(ceil_div(tiles, c.split_tiles));  // no split left without tiles by the cut
  ATTNSERVE_CHECK(c.num_splits < 65536, kOp, ": too many splits");

  // HB 16 always takes the two-CTA ring (H200, session 2: 256 rows x h_q 16 unsplit ran 365 us on the deep
  // ring, 253 us on the two-CTA ring; 128 rows, 1 split: 188 vs 192 us).
  c.stages = shared2 ? shared2 : deep;
  if (tune.stages >= 2 && tune.stages <= kMaxStages && bytes(tune.stages) <= per_block) c.stages = tune.stages;
  c.smem = bytes(c.stages);
  c.ctas_per_sm = c.head_block == 16 && c.smem <= two_ctas ? 2 : 1;
  if (c.num_splits > 1)
    c.ws_bytes = partial_o_bytes(c.num_splits, rows, h_q) + align256(std::size_t(c.num_splits) * rows * h_q * sizeof(float) * 2);
  return c;
}

void run(const SparseMlaArgs& a, Workspace ws, Stream stream, const SparseMlaTuning& tune) {
  const int64_t rows = a.q.size(0), h_q = a.q.size(1);
  if (rows == 0 || h_q == 0) return;
  require_rows_aligned(kOp, "q", a.q, 16);
  require_rows_aligned(kOp, "kv", a.kv, 16);
  require_rows_aligned(kOp, "out", a.out, 4);
  DeviceGuard guard(a.q.device);
  const SparseMlaConfig c = select(a, current_device_caps(), tune);
  ATTNSERVE_CHECK(ws.bytes >= c.ws_bytes, kOp, ": workspace of ", ws.bytes, " bytes is too small, need ", c.ws_bytes,
                  " (sparse_mla_workspace_size: ", c.num_splits, " splits of the top-k list for ", rows, " rows x ",
                  c.head_blocks, " head blocks)");
  if (c.ws_bytes) ATTNSERVE_CHECK(aligned_to(ws.data, 16), kOp, ": the workspace must be 16-byte aligned");

  Params p{};
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
  p.head_blocks = c.head_blocks;
  p.scale_log2 = a.softmax_scale * 1.4426950408889634f;
  p.stages = c.stages;
  p.num_splits = c.num_splits;
  p.split_tiles = c.split_tiles;
  if (c.num_splits > 1) {
    p.part_o = static_cast<float*>(ws.data);
    p.part_ml = reinterpret_cast<float2*>(static_cast<char*>(ws.data) + partial_o_bytes(c.num_splits, rows, h_q));
  }
  ATTNSERVE_CHECK(rows * p.head_blocks <= int64_t(0x7fffffff), kOp, ": ", rows, " rows x ", p.head_blocks,
                  " head blocks need more CTAs than a CUDA grid holds");
  if (a.kv.dtype == DType::u8) launch_fp8(p, c.head_block, c.smem, stream.handle);
  else launch_bf16(p, c.head_block, c.smem, stream.handle);
  if (c.num_splits > 1) launch_combine(p, stream.handle);
}

}  // namespace attnserve::cuda::sparse_mla_sm80

namespace attnserve::cuda {

std::size_t sparse_mla_workspace_size(const SparseMlaArgs& a, const DeviceCaps& caps) {
  if (a.q.size(0) == 0 || a.q.size(1) == 0) return 0;
  return sparse_mla_sm80::select(a, caps).ws_bytes;
}

void sparse_mla(const SparseMlaArgs& a, Workspace ws, Stream stream) { sparse_mla_sm80::run(a, ws, stream); }

}  // namespace attnserve::cuda
