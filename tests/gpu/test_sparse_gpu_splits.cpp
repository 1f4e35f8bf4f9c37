// Sparse MLA split-K (the top-k list of a row cut across CTAs, partial states merged by the combine):
// forced split counts 1 / 2 / 3 / 4 / 8 against the CPU oracle for bf16 and FP8-656 caches and h_q
// 16 / 32 / 64 / 128; chunks left empty by topk_length, chunks whose indices are all invalid, rows with
// no valid slot, the sink on and off (applied once, in the combine), lse / max_logits, top-k not a
// multiple of the chunk. Every GPU run is made twice and must give identical bits (run_gpu). The
// selector tests need no GPU: the split choice is a pure function of shapes and device caps.
#include <gtest/gtest.h>

#include <string>

#include "sparse_mla_gpu_check.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;
using cuda::sparse_mla_op::SparseMlaConfig;

namespace {

constexpr int kForcedSplits[] = {1, 2, 3, 4, 8};

void check_splits(SparseMlaProblem& p, const std::string& what) {
  const SparseRefs refs = compute_refs(p);
  for (int s : kForcedSplits) {
    SCOPED_TRACE(what + " forced splits " + std::to_string(s));
    check_gpu(p, refs, SparseTuning{.num_splits = s});
    if (::testing::Test::HasFailure()) return;
  }
}

// An H200's caps (132 SMs, 227 KB of opt-in shared memory per block).
DeviceCaps h200_caps() { return DeviceCaps{132, 232448, 90}; }

SparseMlaArgs shape_args(int64_t rows, int64_t h_q, int64_t topk, bool fp8) {
  const Device dev = Device::cuda();
  static char anchor[256];  // never read: the selector and the size query look at shapes only
  auto view = [&](DType t, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(anchor, t, shape, dev);
  };
  return SparseMlaArgs{.q = view(DType::bf16, {rows, h_q, 576}),
                       .kv = fp8 ? view(DType::u8, {1000, 656}) : view(DType::bf16, {1000, 576}),
                       .indices = view(DType::i32, {rows, topk}),
                       .out = view(DType::bf16, {rows, h_q, 512}),
                       .softmax_scale = 0.1f};
}

}  // namespace

// topk 500: 16 tiles, so 3 splits cut 6 / 6 / 4 and 8 splits cut 2 each; random topk_length leaves
// later chunks empty in some rows.
TEST(SparseMlaGpuSplits, ForcedSplitsMatchOracle) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {16, 32, 64, 128})
      for (bool sink : {false, true}) {
        SparseMlaCase c = base_case(h_q, fp8);
        c.rows = 3;
        c.topk = 500;
        c.with_topk_length = true;
        c.with_sink = sink;
        SparseMlaProblem p = make_sparse_mla_problem(c, g);
        check_splits(p, name_of(c) + (sink ? " sink" : " no sink"));
        if (HasFailure()) return;
      }
}

// topk_length below, at and past the chunk boundaries of 8 splits of 64 keys: empty chunks, chunks
// with one key, a chunk ending exactly at the length.
TEST(SparseMlaGpuSplits, TopkLengthAtChunkEdges) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {16, 64}) {
      SparseMlaCase c = base_case(h_q, fp8);
      c.rows = 9;
      c.topk = 512;
      c.with_topk_length = true;
      c.with_sink = true;
      c.invalid_fraction = 0.05;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      const int32_t lens[9] = {0, 1, 63, 64, 65, 128, 200, 511, 512};
      for (int r = 0; r < 9; ++r) p.topk_length.ptr<int32_t>()[r] = lens[r];
      check_splits(p, name_of(c));
      if (HasFailure()) return;
    }
}

// 4 splits of 64 keys over topk 256: a chunk of only invalid slots (-1, out of range) contributes
// nothing; a row with no valid slot at all is out 0, lse = max_logits = -inf even with the sink.
TEST(SparseMlaGpuSplits, AllIndicesInvalidInAChunk) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (bool sink : {false, true}) {
      SparseMlaCase c = base_case(32, fp8);
      c.rows = 5;
      c.topk = 256;
      c.invalid_fraction = 0.0;
      c.with_sink = sink;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      int32_t* idx = p.index_ptr();
      for (int i = 64; i < 128; ++i) idx[0 * 256 + i] = -1;  // row 0: chunk 1 empty
      for (int i = 0; i < 256; ++i)
        if (i / 64 != 2) idx[1 * 256 + i] = i % 2 ? -7 : int32_t(c.num_slots);    // row 1: chunk 2 only
      for (int i = 0; i < 256; ++i) idx[2 * 256 + i] = -1;                        // row 2: nothing valid
      for (int i = 0; i < 255; ++i) idx[3 * 256 + i] = -1;                        // row 3: the last key only
      for (int i = 0; i < 192; ++i) idx[4 * 256 + i] = int32_t(c.num_slots) + i;  // row 4: the last chunk only
      check_splits(p, name_of(c) + (sink ? " sink" : " no sink"));
      if (HasFailure()) return;
    }
}

// The decode shape of DeepSeek-V3.2 at TP 8 (h_q 16, topk 2048) and h_q 128 with a sharp softmax
// (the running max jumps between chunks), top-k not a multiple of the chunk.
TEST(SparseMlaGpuSplits, DecodeShapesSharpSoftmax) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {true, false})
    for (int64_t h_q : {16, 128}) {
      SparseMlaCase c = base_case(h_q, fp8);
      c.rows = 2;
      c.topk = 2000;
      c.num_slots = 20000;
      c.invalid_fraction = 0.02;
      c.softmax_scale = 1.0f;
      c.with_sink = true;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      check_splits(p, name_of(c));
      if (HasFailure()) return;
    }
}

// A split run with the deep ring of the unsplit kernel (one CTA per SM) and with the 2-stage ring of
// the split default: the same function, and the same bits (the ring depth changes no arithmetic).
TEST(SparseMlaGpuSplits, RingDepthDoesNotChangeBits) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(16, true);
  c.rows = 3;
  c.topk = 700;
  c.with_topk_length = true;
  c.with_sink = true;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  const SparseRefs refs = compute_refs(p);
  const GpuResult two = check_gpu(p, refs, SparseTuning{.num_splits = 4, .stages = 2});
  const GpuResult five = check_gpu(p, refs, SparseTuning{.num_splits = 4, .stages = 5});
  EXPECT_TRUE(two.out.bytes == five.out.bytes && two.lse.bytes == five.lse.bytes &&
              two.max_logits.bytes == five.max_logits.bytes);
}

// ---- the selector (no GPU needed) ---------------------------------------------------------------

TEST(SparseMlaSplitSelector, SplitsOnlyWhenTheGridIsUnderfilled) {
  const DeviceCaps caps = h200_caps();
  // 128 rows x h_q 16: 128 CTAs for 264 slots (two HB-16 CTAs per SM) -> split, 2-stage ring.
  const SparseMlaConfig d16 = cuda::sparse_mla_op::select(shape_args(128, 16, 2048, true), caps);
  EXPECT_EQ(d16.head_block, 16);
  EXPECT_GE(d16.num_splits, 2);
  EXPECT_EQ(d16.ctas_per_sm, 2);
  EXPECT_GT(d16.ws_bytes, 0u);
  // 128 rows x h_q 128: 256 CTAs of HB 64 fill the GPU -> the unsplit kernel, no workspace.
  const SparseMlaConfig d128 = cuda::sparse_mla_op::select(shape_args(128, 128, 2048, true), caps);
  EXPECT_EQ(d128.num_splits, 1);
  EXPECT_EQ(d128.ws_bytes, 0u);
  // 32 rows x h_q 128: 64 CTAs -> split.
  EXPECT_GE(cuda::sparse_mla_op::select(shape_args(32, 128, 2048, true), caps).num_splits, 2);
  // Prefill-sized batches never split.
  EXPECT_EQ(cuda::sparse_mla_op::select(shape_args(4096, 16, 2048, false), caps).num_splits, 1);
  // Short top-k lists: at least 4 tiles per split, so 3 tiles never split.
  EXPECT_EQ(cuda::sparse_mla_op::select(shape_args(1, 16, 96, true), caps).num_splits, 1);
}

TEST(SparseMlaSplitSelector, ShapesOnlyAndOverrides) {
  const DeviceCaps caps = h200_caps();
  SparseMlaArgs a = shape_args(16, 16, 2048, true);
  const SparseMlaConfig base = cuda::sparse_mla_op::select(a, caps);
  // Optional tensors (device-side lengths, sink, stats) never change the launch (CUDA graphs).
  static int32_t lens[16];
  static float sink[16];
  a.topk_length = TensorView::contiguous(lens, DType::i32, {16}, Device::cuda());
  a.attn_sink = TensorView::contiguous(sink, DType::f32, {16}, Device::cuda());
  const SparseMlaConfig with = cuda::sparse_mla_op::select(a, caps);
  EXPECT_EQ(with.num_splits, base.num_splits);
  EXPECT_EQ(with.stages, base.stages);
  EXPECT_EQ(with.ws_bytes, base.ws_bytes);
  // The public size query answers with the selector's workspace.
  EXPECT_EQ(sparse_mla_workspace_size(a, caps), base.ws_bytes);
  // Deterministic: a split count that does not depend on the batch (the portable kernel runs one CTA per
  // row; the small-head Hopper kernel splits by the top-k length alone).
  a.deterministic = true;
  SparseMlaArgs big = shape_args(4096, 16, 2048, true);
  big.deterministic = true;
  const SparseMlaConfig det = cuda::sparse_mla_op::select(a, caps);
  EXPECT_EQ(det.num_splits, cuda::sparse_mla_op::select(big, caps).num_splits);
  EXPECT_EQ(sparse_mla_workspace_size(a, caps) > 0, det.num_splits > 1);
  a.deterministic = false;
  // Forced counts: clamped to the tiles and recut so that no split is empty by construction (the tile
  // size is the chosen kernel's: 32 keys portable, 64 on the Hopper kernels).
  const auto tiles_of = [&](int topk) { return (topk + base.tile_keys - 1) / base.tile_keys; };
  for (int s : {1, 2, 3, 4, 8}) {
    const SparseMlaConfig f = cuda::sparse_mla_op::select(a, caps, {.num_splits = s});
    EXPECT_EQ(f.num_splits, s);
    EXPECT_EQ(f.split_tiles, (tiles_of(2048) + s - 1) / s);
    EXPECT_EQ(f.ws_bytes > 0, s > 1);
  }
  const SparseMlaConfig many = cuda::sparse_mla_op::select(shape_args(2, 16, 100, true), caps, {.num_splits = 8});
  EXPECT_EQ(many.num_splits, tiles_of(100));  // 100 keys: 4 tiles of 32 or 2 of 64
  EXPECT_EQ(many.split_tiles, 1);
  const SparseMlaConfig cut = cuda::sparse_mla_op::select(shape_args(2, 16, 500, true), caps, {.num_splits = 3});
  EXPECT_EQ(cut.num_splits, 3);
  EXPECT_EQ(cut.split_tiles, (tiles_of(500) + 2) / 3);  // 16 tiles: 6 / 6 / 4, or 8: 3 / 3 / 2
}
