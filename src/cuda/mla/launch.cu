// Host side of MLA (absorbed) attention on CUDA: checks, selector, workspace, launch, combine.
#include <algorithm>
#include <cmath>

#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/attention/attention_api.h"
#include "cuda/merge/merge.cuh"
#include "mla_api.h"
#include "cuda/mla/sm80/kernel.cuh"

namespace attnserve::cuda::mla {
namespace {

constexpr const char* kOp = "mla_attention";

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

void check_args(const MlaAttentionArgs& a) {
  ATTNSERVE_CHECK(a.q_nope.dtype == DType::bf16 && a.q_rope.dtype == DType::bf16 && a.kv_cache.dtype == DType::bf16,
                  kOp, ": CUDA supports bf16 q_nope, q_rope and kv_cache");
  ATTNSERVE_CHECK(a.q_nope.size(2) == kDv && a.q_rope.size(2) == kDr && a.kv_cache.size(3) == kDqk, kOp,
                  ": CUDA supports d_v 512 and d_rope 64 (kv_cache rows of 576)");
  ATTNSERVE_CHECK(a.kv_cache.size(2) == 1, kOp, ": kv_cache must have one latent head");
  ATTNSERVE_CHECK(a.out.dtype == DType::bf16, kOp, ": out must be bf16 on CUDA");
  require_rows16(kOp, "q_nope", a.q_nope);
  require_rows16(kOp, "q_rope", a.q_rope);
  require_rows16(kOp, "kv_cache", a.kv_cache);
  require_rows16(kOp, "out", a.out);
  const int64_t ps = a.kv_cache.size(1);
  ATTNSERVE_CHECK(a.kv_cache.stride(0) == ps * a.kv_cache.stride(1), kOp,
                  ": on CUDA the pages of kv_cache must be contiguous runs of token slots");
  ATTNSERVE_CHECK(a.kv_cache.size(0) * ps < (int64_t(1) << 31), kOp, ": pool too large for 32-bit slot indices");
  ATTNSERVE_CHECK(a.page_table.stride(1) == 1 || a.page_table.size(1) <= 1, kOp,
                  ": page_table rows must be contiguous on CUDA");
  ATTNSERVE_CHECK(a.q_nope.size(0) == 0 || a.max_seqlen_q > 0, kOp, ": max_seqlen_q must be > 0 on CUDA");
}

template <int HB>
void launch(const Params& p, dim3 grid, std::size_t smem, cudaStream_t s) {
  static const bool configured = [] {  // once per instantiation: the opt-in shared-memory limit
    int dev = 0, optin = 0;
    ATTNSERVE_CUDA_CHECK(cudaGetDevice(&dev));
    ATTNSERVE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(mla_kernel<HB>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    return true;
  }();
  (void)configured;
  mla_kernel<HB><<<grid, kThreads, smem, s>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace

MlaConfig select(const MlaAttentionArgs& a, const DeviceCaps& caps, const MlaTuning& tune) {
  MlaConfig c;
  const int h_q = int(a.q_nope.size(1));
  const int b = int(a.cache_seqlens.size(0));
  // The block covers every packed row of a request up to 64 (each K/V byte read once per 64 rows);
  // the batch's longest query picks it, which the bits do not depend on (mla_kernel.cuh).
  const int64_t rows_max = int64_t(std::max(1, a.max_seqlen_q)) * h_q;
  c.rows_per_block = rows_max <= 16 ? 16 : rows_max <= 32 ? 32 : 64;
  if (tune.rows_per_block == 16 || tune.rows_per_block == 32 || tune.rows_per_block == 64)
    c.rows_per_block = tune.rows_per_block;
  // A100 (163 KB per block) cannot hold HB 64 with two tiles: fall back to HB 32 (same bits).
  while (c.rows_per_block > 16 && smem_bytes(c.rows_per_block, 2) > caps.smem_per_block) c.rows_per_block /= 2;
  const int hb = c.rows_per_block;
  c.m_blocks = ceil_div(rows_max, hb);
  // Deepest ring that fits one CTA per SM (H100/H200: HB 64 3 tiles, HB 32 4). HB 16 (memory bound)
  // takes the deepest ring that lets two CTAs share an SM (H200: 2 tiles; the kernel is capped at 128
  // registers for it): one 8-warp CTA per SM measured 1779 GB/s at b128 x h_q 16 (session 2).
  const std::size_t two_ctas = (caps.smem_per_block + 1024) / 2 - 1024;
  c.stages = 0;
  if (hb == 16)
    for (int s = 5; s >= 2 && !c.stages; --s)
      if (smem_bytes(hb, s) <= two_ctas) c.stages = s;
  for (int s = 5; s >= 2 && !c.stages; --s)
    if (smem_bytes(hb, s) <= caps.smem_per_block) c.stages = s;
  if (tune.stages >= 2 && tune.stages <= kMaxStages && smem_bytes(hb, tune.stages) <= caps.smem_per_block)
    c.stages = tune.stages;
  ATTNSERVE_CHECK(c.stages >= 2, kOp, ": needs ", smem_bytes(hb, 2), " bytes of shared memory per block, the device allows ",
                  caps.smem_per_block);
  c.smem = smem_bytes(hb, c.stages);
  const int64_t max_keys = a.page_table.size(1) * a.kv_cache.size(1);
  const int max_tiles = ceil_div(std::max<int64_t>(max_keys, 1), kTileKeys);
  if (a.deterministic) {
    c.split_keys = kDeterministicSplitKeys;
    c.num_splits = std::max(1, ceil_div(max_keys, kDeterministicSplitKeys));
  } else {
    const int ctas_per_sm = hb == 16 && c.smem <= two_ctas ? 2 : 1;
    c.num_splits = heuristic_splits(int64_t(b) * c.m_blocks, caps.num_sms * ctas_per_sm, max_tiles / 4);  // >= 4 key tiles per split
    if (tune.num_splits > 0) c.num_splits = std::min(tune.num_splits, std::max(1, max_tiles));
  }
  ATTNSERVE_CHECK(c.num_splits < 65536, kOp, ": too many splits");
  if (c.num_splits > 1) {
    const std::size_t rows = std::size_t(a.q_nope.size(0)) * h_q;
    c.ws_bytes = align256(std::size_t(c.num_splits) * rows * kDv * 4) + align256(std::size_t(c.num_splits) * rows * 4);
  }
  return c;
}

void run(const MlaAttentionArgs& a, Workspace ws, Stream stream, const MlaTuning& tune) {
  check_args(a);
  const int total_q = int(a.q_nope.size(0));
  const int b = int(a.cache_seqlens.size(0));
  if (total_q == 0 || b == 0) return;
  const MlaConfig c = select(a, attn::current_device_caps(), tune);
  ATTNSERVE_CHECK(ws.bytes >= c.ws_bytes, kOp, ": workspace of ", ws.bytes, " bytes is too small, need ", c.ws_bytes,
                  " (mla_attention_workspace_size)");
  const int h_q = int(a.q_nope.size(1));
  Params p{};
  p.q_nope = static_cast<const char*>(a.q_nope.data);
  p.qn_st = a.q_nope.stride(0);
  p.qn_sh = a.q_nope.stride(1);
  p.q_rope = static_cast<const char*>(a.q_rope.data);
  p.qr_st = a.q_rope.stride(0);
  p.qr_sh = a.q_rope.stride(1);
  p.kv = static_cast<const char*>(a.kv_cache.data);
  p.kv_stok = a.kv_cache.stride(1) * 2;
  p.page_table = static_cast<const int*>(a.page_table.data);
  p.pt_st = a.page_table.stride(0);
  p.cache_seqlens = static_cast<const int*>(a.cache_seqlens.data);
  p.cu_seqlens_q = static_cast<const int*>(a.cu_seqlens_q.data);
  p.out = static_cast<char*>(a.out.data);
  p.o_st = a.out.stride(0);
  p.o_sh = a.out.stride(1);
  if (!a.lse.empty_view()) {
    p.lse = static_cast<float*>(a.lse.data);
    p.lse_st = a.lse.stride(0);
    p.lse_sh = a.lse.stride(1);
  }
  p.total_q = total_q;
  p.h_q = h_q;
  p.page_size = int(a.kv_cache.size(1));
  p.num_pages = int(a.kv_cache.size(0));
  p.max_pages = int(a.page_table.size(1));
  p.num_splits = c.num_splits;
  p.split_keys = c.split_keys;
  p.stages = c.stages;
  p.scale_log2 = a.softmax_scale * 1.4426950408889634f;
  p.softcap = a.softcap;
  p.causal = a.causal ? 1 : 0;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  const int64_t rows = int64_t(total_q) * h_q;
  if (c.num_splits > 1) {
    p.part_o = static_cast<float*>(ws.data);
    p.part_lse = reinterpret_cast<float*>(static_cast<char*>(ws.data) + align256(std::size_t(c.num_splits) * rows * kDv * 4));
  }
  cudaStream_t s = to_cuda(stream);
  const dim3 grid(unsigned(c.m_blocks), unsigned(c.num_splits), unsigned(b));
  switch (c.rows_per_block) {
    case 16: launch<16>(p, grid, c.smem, s); break;
    case 32: launch<32>(p, grid, c.smem, s); break;
    default: launch<64>(p, grid, c.smem, s); break;
  }
  if (c.num_splits > 1) {
    MergeInput in{p.part_o, rows * kDv, int64_t(h_q) * kDv, kDv, p.part_lse, rows, h_q, 1, c.num_splits, p.cu_seqlens_q, b};
    MergeOutput out{a.out.data, a.out.stride(0), a.out.stride(1), p.lse, p.lse_st, p.lse_sh};
    launch_merge_states(in, DType::f32, out, DType::bf16, total_q, h_q, kDv, s);
  }
}

}  // namespace attnserve::cuda::mla

namespace attnserve::cuda {

std::size_t mla_attention_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps) {
  return mla::select(a, caps, {}).ws_bytes;
}

void mla_attention(const MlaAttentionArgs& a, Workspace ws, Stream stream) { mla::run(a, ws, stream, {}); }

}  // namespace attnserve::cuda
