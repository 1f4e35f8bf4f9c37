// Top-k's plan (src/cuda/topk/plan.h) on fabricated devices: the algorithm (sampled when its shared
// memory fits, else global; a forced choice), the threads per row, the CTAs per row (clusters for lone
// long rows on sm_90), the sampled kernel's emit (the lean kept masks unless forced), its L2 prefetch, lean
// select and offset digit (on unless forced off), the shared-memory count.
// Host code.
#include <gtest/gtest.h>

#include <string>

#include "cuda/topk/plan.h"

namespace attnserve {
namespace {

using cuda::topk_op::Emit;
using cuda::topk_op::make_plan;
using cuda::topk_op::Select;
using cuda::topk_op::Tuning;

const DeviceCaps kH200{.num_sms = 132, .smem_per_block = 227 * 1024, .arch = 90};
const DeviceCaps kA100{.num_sms = 108, .smem_per_block = 163 * 1024, .arch = 80};
const DeviceCaps kSmall{.num_sms = 40, .smem_per_block = 100 * 1024, .arch = 86};  // 256 fits, 1024 not
const DeviceCaps kTiny{.num_sms = 20, .smem_per_block = 48 * 1024, .arch = 80};

const cuda::topk_op::Problem kShort{.rows = 8192, .width = 4096, .k = 2048};  // 256 threads
const cuda::topk_op::Problem kLong{.rows = 128, .width = 65536, .k = 2048};   // 1024 threads

TEST(TopkPlan, SharedMemoryOfTheSampledKernels) {
  // 8 warps: 8 * 528 * 8 + 16384 + 8 * 12 + 12 = 50284 -> 50288; 32 warps: 151948 -> 151952
  EXPECT_EQ(cuda::topk_op::sampled_smem_bytes(256), 50288u);
  EXPECT_EQ(cuda::topk_op::sampled_smem_bytes(1024), 151952u);
}

TEST(TopkPlan, DefaultIsTheSampledKernelWhereItsSharedMemoryFits) {
  for (const DeviceCaps& caps : {kH200, kA100})
    for (const auto& prob : {kShort, kLong}) {
      const auto plan = make_plan(prob, caps);
      EXPECT_EQ(plan.select, Select::sampled) << caps.arch << " width " << prob.width;
      EXPECT_EQ(plan.smem, cuda::topk_op::sampled_smem_bytes(plan.threads));
    }
  EXPECT_EQ(make_plan(kShort, kSmall).select, Select::sampled);
  // Lone whole rows would take 1024 threads, whose 152 KB do not fit: 256 threads keep the sampled kernel.
  const auto small_lone = make_plan({.rows = 8, .width = 4096, .k = 2048}, kSmall);
  EXPECT_EQ(small_lone.select, Select::sampled);
  EXPECT_EQ(small_lone.threads, 256);
  const auto small_long = make_plan(kLong, kSmall);  // 152 KB > 100 KB
  EXPECT_EQ(small_long.select, Select::global);
  EXPECT_EQ(small_long.smem, 0u);
  EXPECT_EQ(small_long.threads, 1024);
  for (const auto& prob : {kShort, kLong}) EXPECT_EQ(make_plan(prob, kTiny).select, Select::global);
}

TEST(TopkPlan, ForcedChoiceAndItsFallback) {
  for (const Select s : {Select::global, Select::sampled})
    for (const auto& prob : {kShort, kLong}) {
      const auto plan = make_plan(prob, kH200, Tuning{.select = s});
      EXPECT_EQ(plan.select, s) << select_name(s);
      EXPECT_EQ(plan.smem, s == Select::global ? 0u : cuda::topk_op::sampled_smem_bytes(plan.threads));
    }
  // A sampled kernel forced where its shared memory does not fit still runs (the global kernel).
  EXPECT_EQ(make_plan(kLong, kTiny, Tuning{.select = Select::sampled}).select, Select::global);
  EXPECT_EQ(make_plan(kShort, kTiny, Tuning{.select = Select::sampled}).select, Select::global);
  EXPECT_EQ(make_plan(kShort, kSmall, Tuning{.select = Select::sampled}).select, Select::sampled);
}

TEST(TopkPlan, ThreadsFollowTheShapeNotTheAlgorithm) {
  for (const Select s : {Select::automatic, Select::global, Select::sampled}) {
    EXPECT_EQ(make_plan({.rows = 1, .width = 8192, .k = 16}, kH200, {.select = s}).threads, 256);
    EXPECT_EQ(make_plan({.rows = 1, .width = 8193, .k = 16}, kH200, {.select = s}).threads, 1024);
    // Whole rows that each get an SM: 1024 threads; more rows than SMs: 256, several per SM.
    EXPECT_EQ(make_plan({.rows = 1, .width = 4096, .k = 2048}, kH200, {.select = s}).threads, 1024);
    EXPECT_EQ(make_plan({.rows = 132, .width = 4096, .k = 2048}, kH200, {.select = s}).threads, 1024);
    EXPECT_EQ(make_plan({.rows = 133, .width = 4096, .k = 2048}, kH200, {.select = s}).threads, 256);
    EXPECT_EQ(make_plan({.rows = 108, .width = 4096, .k = 2048}, kA100, {.select = s}).threads, 1024);
    EXPECT_EQ(make_plan({.rows = 109, .width = 4096, .k = 2048}, kA100, {.select = s}).threads, 256);
    EXPECT_EQ(make_plan({.rows = 1, .width = 4097, .k = 2048}, kH200, {.select = s}).threads, 256);
  }
  EXPECT_EQ(make_plan(kShort, kH200).threads, 256);  // 8192 prefill rows
  EXPECT_EQ(workspace_size(make_plan(kLong, kH200)), 0u);
}

TEST(TopkPlan, ForcedThreadsAndTheirSharedMemory) {
  const auto wide_short = make_plan(kShort, kH200, {.threads = 1024});
  EXPECT_EQ(wide_short.threads, 1024);
  EXPECT_EQ(wide_short.kernel, cuda::topk_op::Kernel::rows_1024);
  EXPECT_EQ(wide_short.smem, cuda::topk_op::sampled_smem_bytes(1024));
  EXPECT_EQ(make_plan(kLong, kH200, {.threads = 256}).threads, 256);
  EXPECT_EQ(make_plan(kLong, kH200, {.threads = 512}).threads, 1024);              // not a kernel size: the plan's
  EXPECT_EQ(make_plan(kShort, kSmall, {.threads = 1024}).select, Select::global);  // 152 KB > 100 KB
}

TEST(TopkPlan, ClustersForLoneLongRowsOnHopper) {
  // The largest of 8, 4, 2 CTAs per row with rows * ctas <= 66 (half the SMs), rows longer than 32K.
  EXPECT_EQ(make_plan({.rows = 1, .width = 65536, .k = 2048}, kH200).cluster, 8);
  EXPECT_EQ(make_plan({.rows = 8, .width = 65536, .k = 2048}, kH200).cluster, 8);
  EXPECT_EQ(make_plan({.rows = 9, .width = 65536, .k = 2048}, kH200).cluster, 4);
  EXPECT_EQ(make_plan({.rows = 16, .width = 65536, .k = 2048}, kH200).cluster, 4);
  EXPECT_EQ(make_plan({.rows = 17, .width = 65536, .k = 2048}, kH200).cluster, 2);
  EXPECT_EQ(make_plan({.rows = 32, .width = 262144, .k = 2048}, kH200).cluster, 2);
  EXPECT_EQ(make_plan({.rows = 33, .width = 65536, .k = 2048}, kH200).cluster, 2);
  EXPECT_EQ(make_plan({.rows = 34, .width = 65536, .k = 2048}, kH200).cluster, 1);
  EXPECT_EQ(make_plan(kLong, kH200).cluster, 1);  // 128 rows: one CTA each already fills the SMs
  EXPECT_EQ(make_plan({.rows = 1, .width = 32768, .k = 2048}, kH200).cluster, 1);  // short rows: one CTA
  EXPECT_EQ(make_plan({.rows = 1, .width = 16384, .k = 2048}, kH200).cluster, 1);
  EXPECT_EQ(make_plan({.rows = 1, .width = 32769, .k = 2048}, kH200).cluster, 8);
  EXPECT_EQ(make_plan({.rows = 1, .width = 65536, .k = 2048}, kA100).cluster, 1);  // no clusters before sm_90
  EXPECT_EQ(make_plan({.rows = 1, .width = 65536, .k = 2048}, kH200).threads, 1024);
  // Forced: 1, 2, 4, 8 only, sampled kernel on sm_90 only.
  for (const int c : {1, 2, 4, 8}) EXPECT_EQ(make_plan(kShort, kH200, {.cluster = c}).cluster, c);
  EXPECT_EQ(make_plan(kShort, kH200, {.cluster = 3}).cluster, 1);  // not a size: the plan's
  EXPECT_EQ(make_plan(kShort, kA100, {.cluster = 8}).cluster, 1);
  EXPECT_EQ(make_plan(kLong, kH200, {.select = Select::global, .cluster = 8}).cluster, 1);
  EXPECT_EQ(make_plan(kLong, kTiny, {.cluster = 8}).cluster, 1);  // the global kernel (no shared memory)
  EXPECT_EQ(workspace_size(make_plan({.rows = 1, .width = 65536, .k = 2048}, kH200)), 0u);
}

// The sampled kernel's emit: the lean kept masks unless forced (recount, kept_masks); the global kernel recounts.
TEST(TopkPlan, EmitIsTheLeanKeptMasksUnlessForced) {
  for (const DeviceCaps& caps : {kH200, kA100, kSmall})
    for (const auto& prob : {kShort, kLong, cuda::topk_op::Problem{.rows = 1, .width = 65536, .k = 2048}}) {
      const auto plan = make_plan(prob, caps);
      EXPECT_EQ(plan.emit, plan.select == Select::sampled ? Emit::kept_masks_lean : Emit::recount)
          << caps.arch << " width " << prob.width;
      EXPECT_EQ(make_plan(prob, caps, {.emit = Emit::recount}).emit, Emit::recount);
      const auto forced = make_plan(prob, caps, {.emit = Emit::kept_masks});
      if (forced.select == Select::sampled) EXPECT_EQ(forced.emit, Emit::kept_masks) << emit_name(forced.emit);
      else EXPECT_EQ(forced.emit, Emit::recount);  // the global kernel has no such emit
    }
  // Forced with the other choices: the clusters and threads are the plan's.
  const auto masks_cluster = make_plan({.rows = 1, .width = 65536, .k = 2048}, kH200, {.emit = Emit::kept_masks});
  EXPECT_EQ(masks_cluster.cluster, 8);
  EXPECT_EQ(masks_cluster.threads, 1024);
  EXPECT_EQ(make_plan(kShort, kH200, {.cluster = 4, .emit = Emit::kept_masks}).cluster, 4);
  EXPECT_EQ(make_plan(kLong, kTiny, {.emit = Emit::kept_masks}).emit, Emit::recount);  // global: no shared memory
  EXPECT_STREQ(emit_name(Emit::kept_masks), "kept_masks");
}

// Session 7's lean kept-masks emit: the sampled kernel's default, forced or not; the global kernel recounts.
TEST(TopkPlan, LeanEmitOnTheSampledKernel) {
  for (const DeviceCaps& caps : {kH200, kA100, kSmall, kTiny})
    for (const auto& prob : {kShort, kLong, cuda::topk_op::Problem{.rows = 1, .width = 65536, .k = 2048}}) {
      const auto plan = make_plan(prob, caps);
      EXPECT_EQ(plan.emit, plan.select == Select::sampled ? Emit::kept_masks_lean : Emit::recount);
      const auto forced = make_plan(prob, caps, {.emit = Emit::kept_masks_lean});
      EXPECT_EQ(forced.emit, forced.select == Select::sampled ? Emit::kept_masks_lean : Emit::recount)
          << caps.arch << " width " << prob.width;
      EXPECT_EQ(forced.threads, plan.threads);
      EXPECT_EQ(forced.cluster, plan.cluster);
      EXPECT_EQ(forced.smem, plan.smem);
    }
  EXPECT_STREQ(emit_name(Emit::kept_masks_lean), "kept_masks_lean");
}

// Session 7's three switches of the sampled kernel (the L2 prefetch of long rows, the lean select's key-digit
// histograms, the offset digit of the sampled regime's candidates): each on unless forced off (measured:
// plan.cpp), never on the global kernel; forcing one changes nothing else of the plan.
TEST(TopkPlan, SampledKernelSwitchesOnUnlessForcedOff) {
  using cuda::topk_op::Plan;
  using cuda::topk_op::Tuning;
  struct Switch {
    const char* name;
    int Tuning::*tune;
    bool Plan::*plan;
  };
  for (const Switch sw : {Switch{"l2_prefetch", &Tuning::l2_prefetch, &Plan::l2_prefetch},
                          Switch{"lean_select", &Tuning::lean_select, &Plan::lean_select},
                          Switch{"offset_digit", &Tuning::offset_digit, &Plan::offset_digit}}) {
    SCOPED_TRACE(sw.name);
    for (const DeviceCaps& caps : {kH200, kA100, kSmall, kTiny})
      for (const auto& prob : {kShort, kLong, cuda::topk_op::Problem{.rows = 1, .width = 65536, .k = 2048}}) {
        SCOPED_TRACE("arch " + std::to_string(caps.arch) + " width " + std::to_string(prob.width));
        const Plan plan = make_plan(prob, caps);
        // The L2 prefetch by default only up to kPrefetchMaxBytes of scores, and never beside the streaming filter.
        const bool prefetch = sw.plan != &Plan::l2_prefetch ||
                              (!plan.stream && prob.rows * prob.width * 4 <= cuda::topk_op::kPrefetchMaxBytes);
        EXPECT_EQ(plan.*sw.plan, plan.select == Select::sampled && prefetch);
        for (const int mode : {0, 1}) {
          Tuning t;
          t.*sw.tune = mode;
          const Plan forced = make_plan(prob, caps, t);
          const bool blocked = sw.plan == &Plan::l2_prefetch && forced.stream;
          EXPECT_EQ(forced.*sw.plan, mode == 1 && forced.select == Select::sampled && !blocked);
          EXPECT_EQ(forced.select, plan.select);
          EXPECT_EQ(forced.threads, plan.threads);
          EXPECT_EQ(forced.cluster, plan.cluster);
          EXPECT_EQ(forced.emit, plan.emit);
          EXPECT_EQ(forced.smem, plan.smem);
          for (const Switch other : {Switch{"", &Tuning::l2_prefetch, &Plan::l2_prefetch},
                                     Switch{"", &Tuning::lean_select, &Plan::lean_select},
                                     Switch{"", &Tuning::offset_digit, &Plan::offset_digit}})
            if (other.plan != sw.plan) EXPECT_EQ(forced.*other.plan, plan.*other.plan);
        }
      }
    Tuning global{.select = Select::global};
    global.*sw.tune = 1;
    EXPECT_FALSE(make_plan(kLong, kH200, global).*sw.plan);
  }
}

// Session 8's streaming filter and its fused count: the stream by default for up to kStreamMaxRows rows, the fused
// count only when forced; either only on the 1024-thread sampled kernel with a kept-masks emit where its ring fits
// (the H200's 227 KB, not the A100's 163 KB), with the ring's shared memory and without the L2 prefetch; the fused
// count only with it and the offset digit.
TEST(TopkPlan, StreamFilterForFewRowsOrWhenForced) {
  using cuda::topk_op::Plan;
  const cuda::topk_op::Problem kLone{.rows = 1, .width = 65536, .k = 2048};
  const cuda::topk_op::Problem kFew{.rows = 32, .width = 262144, .k = 2048};
  for (const DeviceCaps& caps : {kH200, kA100, kSmall, kTiny})
    for (const auto& prob : {kShort, kLong, kLone, kFew}) {
      SCOPED_TRACE("arch " + std::to_string(caps.arch) + " rows " + std::to_string(prob.rows) + " width " +
                   std::to_string(prob.width));
      const Plan off = make_plan(prob, caps, {.stream = 0});
      const bool fits = caps.smem_per_block >= 217488;
      const bool can = off.select == Select::sampled && off.threads == 1024 && fits;
      EXPECT_FALSE(off.stream);
      const Plan plan = make_plan(prob, caps);
      EXPECT_EQ(plan.stream, can && prob.rows <= cuda::topk_op::kStreamMaxRows);
      EXPECT_FALSE(plan.fused_count);
      EXPECT_FALSE(make_plan(prob, caps, {.stream = 0, .fused_count = 1}).fused_count);  // not without the stream
      const Plan forced = make_plan(prob, caps, {.stream = 1});
      EXPECT_EQ(forced.stream, can);
      EXPECT_FALSE(forced.fused_count);
      for (const Plan* q : {&plan, &forced}) {  // the stream changes its shared memory and the prefetch, nothing else
        EXPECT_EQ(q->select, off.select);
        EXPECT_EQ(q->threads, off.threads);
        EXPECT_EQ(q->cluster, off.cluster);
        EXPECT_EQ(q->emit, off.emit);
        EXPECT_EQ(q->lean_select, off.lean_select);
        EXPECT_EQ(q->offset_digit, off.offset_digit);
        EXPECT_EQ(q->l2_prefetch, off.l2_prefetch && !q->stream);
        EXPECT_EQ(q->smem, q->stream ? cuda::topk_op::sampled_stream_smem_bytes(1024) : off.smem);
      }
      EXPECT_EQ(make_plan(prob, caps, {.stream = 1, .fused_count = 1}).fused_count, forced.stream);
      EXPECT_FALSE(make_plan(prob, caps, {.offset_digit = 0, .stream = 1, .fused_count = 1}).fused_count);
      EXPECT_FALSE(make_plan(prob, caps, {.emit = Emit::recount, .stream = 1}).stream);  // the kernel keeps masks
      EXPECT_EQ(make_plan(prob, caps, {.emit = Emit::kept_masks, .stream = 1}).stream, forced.stream);
    }
  EXPECT_EQ(cuda::topk_op::sampled_stream_smem_bytes(1024), 217488u);
  EXPECT_TRUE(make_plan(kLong, kH200, {.stream = 1, .fused_count = 1}).fused_count);
  EXPECT_FALSE(make_plan(kLong, kH200, {.select = Select::global, .stream = 1}).stream);
}

// s8-topk2's bin-list select: by default on rows up to kBinListMaxWidth, forced on longer ones; either way only on
// the 1024-thread sampled kernel with the offset digit and a kept-masks emit (either filter); it changes nothing else
// of the plan.
TEST(TopkPlan, BinListOnShortRowsOrWhenForced) {
  using cuda::topk_op::Plan;
  const cuda::topk_op::Problem kLone{.rows = 1, .width = 65536, .k = 2048};
  const cuda::topk_op::Problem kWide{.rows = 128, .width = 131072, .k = 2048};  // past kBinListMaxWidth
  for (const DeviceCaps& caps : {kH200, kA100, kSmall, kTiny})
    for (const auto& prob : {kShort, kLong, kLone, kWide}) {
      SCOPED_TRACE("arch " + std::to_string(caps.arch) + " rows " + std::to_string(prob.rows));
      const Plan plan = make_plan(prob, caps);
      const Plan forced = make_plan(prob, caps, {.bin_list = 1});
      EXPECT_EQ(plan.bin_list, forced.bin_list && prob.width <= cuda::topk_op::kBinListMaxWidth);
      EXPECT_FALSE(make_plan(prob, caps, {.bin_list = 0}).bin_list);
      EXPECT_EQ(forced.bin_list, plan.select == Select::sampled && plan.threads == 1024);
      EXPECT_EQ(forced.select, plan.select);
      EXPECT_EQ(forced.threads, plan.threads);
      EXPECT_EQ(forced.cluster, plan.cluster);
      EXPECT_EQ(forced.emit, plan.emit);
      EXPECT_EQ(forced.stream, plan.stream);
      EXPECT_EQ(forced.l2_prefetch, plan.l2_prefetch);
      EXPECT_EQ(forced.smem, plan.smem);
      EXPECT_FALSE(make_plan(prob, caps, {.offset_digit = 0, .bin_list = 1}).bin_list);
      EXPECT_FALSE(make_plan(prob, caps, {.emit = Emit::recount, .bin_list = 1}).bin_list);
      EXPECT_EQ(make_plan(prob, caps, {.stream = 1, .bin_list = 1}).bin_list, forced.bin_list);
    }
  EXPECT_TRUE(make_plan(kLong, kH200, {.bin_list = 1}).bin_list);
  EXPECT_TRUE(make_plan(kLong, kH200).bin_list);
  EXPECT_FALSE(make_plan(kWide, kH200).bin_list);
  EXPECT_TRUE(make_plan(kWide, kH200, {.bin_list = 1}).bin_list);
}

}  // namespace
}  // namespace attnserve
