// Host side of paged attention on CUDA: CUDA-specific argument checks, the selector (tile rows,
// pipeline depth, split-KV count), workspace layout, kernel dispatch and the split combine.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention_api.h"
#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/merge/merge.cuh"
#include "cuda/attention/sm90/config.h"
#ifdef ATTNSERVE_HAVE_SM90
#include "cuda/attention/sm90/attention_sm90.h"
#endif

namespace attnserve::cuda::attn {
namespace {

constexpr const char* kOp = "paged_attention";

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

// Deepest pipeline worth having; the selector then takes the deepest that fits two CTAs per SM.
int max_stages_for(int d, bool fp8, int /*mt*/) {
  return std::min(4, (d <= 64 ? 4 : d <= 128 ? 3 : 2) + (fp8 ? 1 : 0));
}

void check_args(const PagedAttentionArgs& a) {
  ATTNSERVE_CHECK(a.q.dtype == DType::bf16 || a.q.dtype == DType::f16, kOp, ": q must be bf16 or f16 on CUDA, got ",
                  dtype_name(a.q.dtype));
  ATTNSERVE_CHECK(a.k_cache.dtype == a.q.dtype || a.k_cache.dtype == DType::fp8_e4m3, kOp,
                  ": k_cache must have q's dtype or fp8_e4m3 on CUDA, got ", dtype_name(a.k_cache.dtype));
  ATTNSERVE_CHECK(a.v_cache.dtype == a.k_cache.dtype, kOp, ": v_cache must have k_cache's dtype");
  const int d = int(a.q.size(2));
  ATTNSERVE_CHECK(d == 64 || d == 128 || d == 256, kOp, ": CUDA supports head dims 64, 128, 256; q has ", d);
  ATTNSERVE_CHECK(a.k_cache.size(3) == d && a.v_cache.size(3) == d, kOp,
                  ": CUDA needs k_cache and v_cache head dims equal to q's (", d, ")");
  ATTNSERVE_CHECK(a.out.dtype == a.q.dtype, kOp, ": out must have q's dtype");
  require_rows16(kOp, "q", a.q);
  require_rows16(kOp, "out", a.out);
  require_rows16(kOp, "k_cache", a.k_cache);
  require_rows16(kOp, "v_cache", a.v_cache);
  const int64_t ps = a.k_cache.size(1);
  ATTNSERVE_CHECK(a.k_cache.stride(0) == ps * a.k_cache.stride(1) && a.v_cache.stride(0) == ps * a.v_cache.stride(1),
                  kOp, ": on CUDA the pages of k_cache/v_cache must be contiguous runs of token slots "
                  "(stride(0) == page_size * stride(1))");
  ATTNSERVE_CHECK(a.k_cache.size(0) * ps < (int64_t(1) << 31), kOp, ": pool too large for 32-bit slot indices");
  ATTNSERVE_CHECK(a.page_table.stride(1) == 1 || a.page_table.size(1) <= 1, kOp,
                  ": page_table rows must be contiguous on CUDA");
  ATTNSERVE_CHECK(a.q.size(0) == 0 || a.max_seqlen_q > 0, kOp, ": max_seqlen_q must be > 0 on CUDA (got ",
                  a.max_seqlen_q, ")");
  ATTNSERVE_CHECK(a.q.size(1) % a.k_cache.size(2) == 0, kOp, ": h_q (", a.q.size(1), ") must be a multiple of h_kv (",
                  a.k_cache.size(2), ")");
}

template <typename T, int D>
void dispatch_fp8_mt(const Params& p, const Config& c, int b, bool fp8, cudaStream_t s) {
  if (fp8) {
    if (c.mt == 1) launch<T, D, true, 1>(p, c, b, s); else launch<T, D, true, 4>(p, c, b, s);
  } else {
    if (c.mt == 1) launch<T, D, false, 1>(p, c, b, s); else launch<T, D, false, 4>(p, c, b, s);
  }
}

template <typename T>
void dispatch_d(const Params& p, const Config& c, int b, int d, bool fp8, cudaStream_t s) {
  switch (d) {
    case 64: return dispatch_fp8_mt<T, 64>(p, c, b, fp8, s);
    case 128: return dispatch_fp8_mt<T, 128>(p, c, b, fp8, s);
    default: return dispatch_fp8_mt<T, 256>(p, c, b, fp8, s);
  }
}

// ATTNSERVE_ATTN_SM90=0 in the environment keeps the auto choice on the portable kernel (read once).
bool sm90_env_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("ATTNSERVE_ATTN_SM90");
    return !(v && v[0] == '0');
  }();
  return allowed;
}

// The Hopper kernel supports the call: built, sm_90 device, bf16/f16 K/V of q's dtype, d 64/128,
// no descale, not deterministic (its row blocks differ from the portable MT = 1 order).
bool sm90_supports(const PagedAttentionArgs& a, const DeviceCaps& caps, int variant) {
  const int d = int(a.q.size(2));
  return attn90::kBuilt && caps.arch == 90 && a.k_cache.dtype == a.q.dtype && (d == 64 || d == 128) &&
         a.k_descale.empty_view() && a.v_descale.empty_view() && !a.deterministic &&
         attn90::smem_bytes(d, variant) <= caps.smem_per_block;
}

}  // namespace

Config select(const PagedAttentionArgs& a, const DeviceCaps& caps, const Tuning& tune) {
  Config c;
  const int d = int(a.q.size(2));
  const bool fp8 = a.k_cache.dtype == DType::fp8_e4m3;
  const int h_q = int(a.q.size(1)), h_kv = int(a.k_cache.size(2)), group = h_q / std::max(1, h_kv);
  const int b = int(a.cache_seqlens.size(0));
  const int64_t rows_max = int64_t(std::max(1, a.max_seqlen_q)) * group;
  // Deterministic mode always uses MT = 1 (16-row blocks, 4 warps splitting each key tile), so a
  // row's summation order never depends on the other requests of the batch.
  c.mt = a.deterministic ? 1 : (rows_max <= 16 ? 1 : 4);
  if (!a.deterministic && (tune.mt == 1 || tune.mt == 4)) c.mt = tune.mt;
  c.m_blocks = ceil_div(rows_max, 16 * c.mt);

  // Pipeline depth: the deepest that still lets two CTAs share an SM, else the deepest that fits.
  const std::size_t per_block = caps.smem_per_block;
  const std::size_t two_ctas = (per_block + 1024) / 2 - 1024;
  const int smax = max_stages_for(d, fp8, c.mt);
  c.stages = 0;
  for (int s = smax; s >= 2 && !c.stages; --s)
    if (smem_bytes(d, fp8, c.mt, s) <= two_ctas) c.stages = s;
  for (int s = smax; s >= 2 && !c.stages; --s)
    if (smem_bytes(d, fp8, c.mt, s) <= per_block) c.stages = s;
  if (tune.stages >= 2 && tune.stages <= kMaxStages) c.stages = tune.stages;
  ATTNSERVE_CHECK(c.stages >= 2, kOp, ": head dim ", d, " needs ", smem_bytes(d, fp8, c.mt, 2),
                  " bytes of shared memory per block, the device allows ", per_block);
  c.smem = smem_bytes(d, fp8, c.mt, c.stages);
  const int ctas_per_sm = c.smem <= two_ctas ? 2 : 1;

  const int64_t max_keys = a.page_table.size(1) * a.k_cache.size(1);
  const int max_tiles = ceil_div(std::max<int64_t>(max_keys, 1), tile_keys(c.mt));
  if (a.deterministic) {
    c.split_keys = kDeterministicSplitKeys;
    c.num_splits = std::max(1, ceil_div(max_keys, kDeterministicSplitKeys));
  } else {
    c.split_keys = 0;
    c.num_splits = heuristic_splits(int64_t(b) * h_kv * c.m_blocks, caps.num_sms * ctas_per_sm, max_tiles / 2);  // >= 2 key tiles per split
    if (tune.num_splits > 0) c.num_splits = std::min(tune.num_splits, std::max(1, max_tiles));
  }
  c.page_shifts = tune.page_shifts == 0 ? 0 : 1;  // on unless a benchmark turns it off
  ATTNSERVE_CHECK(int64_t(h_kv) * c.num_splits < 65536, kOp, ": h_kv * splits exceeds the grid limit");
  c.ws_bytes = 0;
  // Hopper: prefill/extend shapes (MT = 4, one split) in auto mode; any supported call when forced.
  // The auto mode leaves the portable kernel every call a Tuning field pins (tests, benchmarks).
  const bool tuned = tune.mt != 0 || tune.stages != 0 || tune.num_splits != 0;
  // Auto picks kCoop until the warp-specialized kernel has been measured on the device.
  const int variant = tune.sm90 == attn90::kWarpSpecialized || tune.sm90 == attn90::kPingPong ? tune.sm90 : attn90::kCoop;
  const bool want90 = tune.sm90 > 0 ||
                      (tune.sm90 < 0 && sm90_env_allowed() && !tuned && c.mt == 4 && c.num_splits == 1);
  if (want90 && sm90_supports(a, caps, variant)) {
    c.sm90 = variant;
    c.num_splits = 1;
    c.split_keys = 0;
    c.m_blocks = ceil_div(rows_max, attn90::kRows);
    c.smem = attn90::smem_bytes(d, variant);
    return c;
  }
  if (c.num_splits > 1) {
    const int64_t rows = a.q.size(0) * h_q;
    c.ws_bytes = align256(std::size_t(c.num_splits) * rows * d * 4) + align256(std::size_t(c.num_splits) * rows * 4);
  }
  return c;
}

void run(const PagedAttentionArgs& a, Workspace ws, Stream stream, const Tuning& tune) {
  check_args(a);
  const int total_q = int(a.q.size(0));
  const int b = int(a.cache_seqlens.size(0));
  if (total_q == 0 || b == 0) return;
  const Config c = select(a, current_device_caps(), tune);
  ATTNSERVE_CHECK(ws.bytes >= c.ws_bytes, kOp, ": workspace of ", ws.bytes, " bytes is too small, need ", c.ws_bytes,
                  " (paged_attention_workspace_size)");
  const int d = int(a.q.size(2));
  const int h_q = int(a.q.size(1)), h_kv = int(a.k_cache.size(2));
  const int64_t kes = int64_t(dtype_size(a.k_cache.dtype));

  Params p{};
  p.q = static_cast<const char*>(a.q.data);
  p.q_st = a.q.stride(0);
  p.q_sh = a.q.stride(1);
  p.k = static_cast<const char*>(a.k_cache.data);
  p.v = static_cast<const char*>(a.v_cache.data);
  p.k_stok = a.k_cache.stride(1) * kes;
  p.k_sh = a.k_cache.stride(2) * kes;
  p.v_stok = a.v_cache.stride(1) * kes;
  p.v_sh = a.v_cache.stride(2) * kes;
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
  if (!a.k_descale.empty_view()) {
    p.k_descale = static_cast<const float*>(a.k_descale.data);
    p.kds_sb = a.k_descale.stride(0);
    p.kds_sh = a.k_descale.stride(1);
  }
  if (!a.v_descale.empty_view()) {
    p.v_descale = static_cast<const float*>(a.v_descale.data);
    p.vds_sb = a.v_descale.stride(0);
    p.vds_sh = a.v_descale.stride(1);
  }
  p.total_q = total_q;
  p.h_q = h_q;
  p.h_kv = h_kv;
  p.group = h_q / h_kv;
  p.page_size = int(a.k_cache.size(1));
  p.num_pages = int(a.k_cache.size(0));
  p.max_pages = int(a.page_table.size(1));
  p.num_splits = c.num_splits;
  p.split_keys = c.split_keys;
  p.stages = c.stages;
  p.page_shift = -1;
  for (int sh = 0; sh < 31 && c.page_shifts; ++sh)
    if ((1 << sh) == p.page_size) p.page_shift = sh;
  p.scale_log2 = a.softmax_scale * 1.4426950408889634f;
  p.softcap = a.softcap;
  p.causal = a.causal ? 1 : 0;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  if (c.num_splits > 1) {
    const std::size_t rows = std::size_t(total_q) * h_q;
    p.part_o = static_cast<float*>(ws.data);
    p.part_lse = reinterpret_cast<float*>(static_cast<char*>(ws.data) + align256(c.num_splits * rows * d * 4));
  }
  cudaStream_t s = to_cuda(stream);
#ifdef ATTNSERVE_HAVE_SM90
  if (c.sm90) {
    attn90::launch_paged_attention(p, a.q.dtype, d, c.sm90, c.m_blocks, b, s);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
    return;
  }
#endif
  const bool fp8 = a.k_cache.dtype == DType::fp8_e4m3;
  if (a.q.dtype == DType::bf16) dispatch_d<__nv_bfloat16>(p, c, b, d, fp8, s);
  else dispatch_d<__half>(p, c, b, d, fp8, s);
  ATTNSERVE_CUDA_CHECK_LAUNCH();

  if (c.num_splits > 1) {
    const int64_t rows = int64_t(total_q) * h_q;
    MergeInput in{p.part_o, rows * d, int64_t(h_q) * d, d, p.part_lse, rows, h_q, 1, c.num_splits, p.cu_seqlens_q, b};
    MergeOutput out{a.out.data, a.out.stride(0), a.out.stride(1), p.lse, p.lse_st, p.lse_sh};
    launch_merge_states(in, DType::f32, out, a.out.dtype, total_q, h_q, d, s);
  }
}

}  // namespace attnserve::cuda::attn

namespace attnserve::cuda {

std::size_t paged_attention_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps) {
  return attn::select(a, caps).ws_bytes;
}

void paged_attention(const PagedAttentionArgs& a, Workspace ws, Stream stream) { attn::run(a, ws, stream, {}); }

}  // namespace attnserve::cuda
