// Top-k's plan (plan.h).
#include "cuda/topk/plan.h"

#include "attnserve/error.h"

namespace attnserve::cuda::topk_op {

Problem problem_of(const TopkArgs& a) {
  return Problem{.rows = a.scores.size(0), .width = a.scores.size(1), .k = a.topk};
}

const char* select_name(Select s) {
  switch (s) {
    case Select::automatic: return "automatic";
    case Select::global: return "global";
    case Select::sampled: return "sampled";
  }
  return "?";
}

const char* emit_name(Emit e) {
  switch (e) {
    case Emit::automatic: return "automatic";
    case Emit::recount: return "recount";
    case Emit::kept_masks: return "kept_masks";
    case Emit::kept_masks_lean: return "kept_masks_lean";
  }
  return "?";
}

Support can_implement(const Problem& p, const DeviceCaps&) {
  if (p.rows > int64_t(0x7fffffff))
    return unsupported("topk: 'scores' has ", p.rows, " rows, more than a CUDA grid holds");
  return {};
}

int cluster_ctas_for(const Problem& p, const DeviceCaps& caps) {
  if (caps.arch < 90 || p.width <= kClusterRow) return 1;
  for (int c = kClusterMax; c >= 2; c /= 2)
    if (p.rows * c <= int64_t(caps.num_sms / 2)) return c;
  return 1;
}

Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  Plan c;
  c.problem = p;
  // Long rows: 1024 threads stream the row; short rows: 256 threads, so several rows share an SM. Whole
  // rows (<= kWholeRow) that each get an SM anyway (rows <= SMs) take 1024 threads: 4x shorter per-warp
  // chains in the shared-memory select and emit (4d5707c, v4: 1 x 4K 12.6 -> 10.0 us, 128 x 4K 13.2 -> 10.6;
  // rows of 8K with k 512 gained nothing, 15.2 -> 15.5, so the sampled regime keeps 256).
  // (Only where the 1024-thread sampled kernel's shared memory fits: else 256 keeps the sampled kernel.)
  const bool lone_whole_rows = p.width <= kWholeRow && p.rows <= int64_t(caps.num_sms) &&
                               std::size_t(caps.smem_per_block) >= sampled_smem_bytes(1024);
  c.kernel = p.width > kLongRow || lone_whole_rows ? Kernel::rows_1024 : Kernel::rows_256;
  if (tune.threads == 256 || tune.threads == 1024)
    c.kernel = tune.threads == 1024 ? Kernel::rows_1024 : Kernel::rows_256;
  c.threads = c.kernel == Kernel::rows_1024 ? 1024 : 256;
  // The sampled kernels read the row once (the global one up to 5 times) but need their candidates'
  // shared memory; a device without it gets the global kernel.
  c.select = tune.select == Select::automatic ? Select::sampled : tune.select;
  if (c.select != Select::global) {
    c.smem = sampled_smem_bytes(c.threads);
    if (std::size_t(caps.smem_per_block) < c.smem) {
      c.select = Select::global;
      c.smem = 0;
    }
  }
  // Long lone rows: a cluster of CTAs per row (sm_90), each streaming a share of the row.
  if (c.select == Select::sampled) {
    c.cluster = tune.cluster == 1 || tune.cluster == 2 || tune.cluster == 4 || tune.cluster == 8
                    ? tune.cluster
                    : cluster_ctas_for(p, caps);
    if (caps.arch < 90) c.cluster = 1;
    // Session 7's four variants together by default (26d4201, H200, "s7 A/B" rows against the kept-masks emit
    // alone: 8192 x 4K 163.0 -> 133.9 us (lean emit + lean select; rows of 4K take no prefetch or offset
    // digit), 4096 x 8K 140.4 -> 120.0, 128 x 16K 17.2 -> 15.3, 1 x 64K 15.8 -> 14.7-15.0, 128 x 128K
    // 33.1-33.3 -> 32.4-32.5, 128 x 64K 23.7-24.8 -> 23.7-23.9; bench/NOTES.md session 7). Each one can be
    // forced off (or the emit to kept_masks / recount).
    c.emit = tune.emit == Emit::automatic ? Emit::kept_masks_lean : tune.emit;
    // The L2 prefetch up to kPrefetchMaxBytes of scores a call (session 8, 184302e, H200 "s8 A/B" rows, with /
    // without: 128 x 16K 15.2 / 15.9 us, 16 x 64K 16.5-16.9 / 17.0; beyond it costs: 128 x 64K 23.4-24.4 /
    // 22.0-22.2, 128 x 128K 32.7 / 31.5-31.6, 32 x 256K 29.6-30.0 / 29.3-29.5).
    const bool prefetch_fits = double(p.rows) * double(p.width) * 4.0 <= double(kPrefetchMaxBytes);
    c.l2_prefetch = tune.l2_prefetch > 0 || (tune.l2_prefetch < 0 && prefetch_fits);
    c.lean_select = tune.lean_select != 0;
    c.offset_digit = tune.offset_digit != 0;
    // The streaming filter (session 8): its kernel exists for 1024 threads with the kept masks. By default for
    // up to kStreamMaxRows rows (184302e, stream / the sampled kernel: 1 x 64K 14.4 / 14.9 us, 1 x 4K 8.7 /
    // 9.0-9.2, 32 x 256K 29.2-29.3 / 29.6-30.0, 16 x 64K 16.5-16.7 / 16.5-16.9, 1 x 128K 16.4 / 16.4); more
    // rows keep the sampled kernel (128 x 16K 15.9-16.0 / 15.2, 128 x 128K 32.7 / 31.5 without the prefetch).
    const bool masks = c.emit == Emit::kept_masks || c.emit == Emit::kept_masks_lean;
    const bool stream_wanted = tune.stream > 0 || (tune.stream < 0 && p.rows <= kStreamMaxRows);
    c.stream = stream_wanted && c.threads == 1024 && masks &&
               std::size_t(caps.smem_per_block) >= sampled_stream_smem_bytes(1024);
    if (c.stream) {
      c.smem = sampled_stream_smem_bytes(1024);
      c.l2_prefetch = false;
    }
    c.fused_count = c.stream && c.offset_digit && tune.fused_count == 1;
    // The bin-list select on rows up to kBinListMaxWidth (session 9, ea573db, H200 "s8 bin A/B" rows, without /
    // with, two rounds: 128 x 64K 23.5 / 21.7, 22.5 / 21.9 us; 128 x 16K 16.3 / 14.9, 15.8 / 15.2; 1 x 64K streamed
    // 14.8 / 14.4, 14.6 / 14.5; longer rows lose: 128 x 128K 30.7 / 30.9, 30.7 / 31.4; 32 x 256K streamed 30.1 /
    // 30.7, 30.0 / 30.8; 8192 x 4K 134.0 both).
    const bool bin_list_wanted = tune.bin_list > 0 || (tune.bin_list < 0 && p.width <= kBinListMaxWidth);
    c.bin_list = bin_list_wanted && c.offset_digit && c.threads == 1024 && masks;
  }
  return c;
}

}  // namespace attnserve::cuda::topk_op
