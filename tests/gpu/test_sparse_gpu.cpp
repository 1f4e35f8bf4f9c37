// Sparse MLA on CUDA (bf16 q/out; bf16 and FP8-656 caches) against the CPU oracle and brute force:
// head counts 16 / 32 / 64 / 128 and odd ones, top-k 1 .. 2048 (not multiples of the tile), top-k
// lengths, the attention sink, invalid / out-of-range / duplicate slots, empty rows, strided views,
// optional outputs. Tolerance rule against the fp64 brute force, base = the larger error of the CPU
// oracle and of a float32 brute force; lse / max_logits (f32) get an allowance of 1e-5 for the
// 576-term dot products accumulated by tensor cores (whose additions truncate). -inf positions match
// exactly, nothing is left unwritten, two GPU runs give identical bits. These run the public op with
// the workspace it asks for, so their few rows take the split-K path the selector picks (forced split
// counts: test_sparse_gpu_splits.cpp).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <string>

#include "sparse_mla_gpu_check.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;

namespace {

void run_case(const SparseMlaCase& c, std::mt19937_64& g) {
  SCOPED_TRACE(name_of(c));
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  check_case(p);
}

}  // namespace

TEST(SparseMlaGpu, HeadCountsBf16Cache) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32, 64, 128, 1, 8, 20, 48, 96}) {
    run_case(base_case(h_q, false), g);
    if (HasFailure()) return;
  }
}

TEST(SparseMlaGpu, HeadCountsFp8Cache) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32, 64, 128, 1, 8, 20, 48, 96}) {
    run_case(base_case(h_q, true), g);
    if (HasFailure()) return;
  }
}

TEST(SparseMlaGpu, TopkNotMultipleOfTheTile) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t topk : {1, 31, 33, 100}) {
      SparseMlaCase c = base_case(32, fp8);
      c.topk = topk;
      c.rows = 5;
      run_case(c, g);
      if (HasFailure()) return;
    }
}

// The decode shape: topk 2048 over a large pool, h_q 16 (DeepSeek-V3.2 at TP 8) and 128.
TEST(SparseMlaGpu, Topk2048DecodeRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {true, false})
    for (int64_t h_q : {16, 128}) {
      SparseMlaCase c = base_case(h_q, fp8);
      c.rows = 2;
      c.topk = 2048;
      c.num_slots = 20000;
      c.invalid_fraction = 0.02;
      run_case(c, g);
      if (HasFailure()) return;
    }
}

// Prefill rows use the same contract: one row per query token, each with its own indices.
TEST(SparseMlaGpu, ManyPrefillRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(64, false);
  c.rows = 48;
  c.topk = 96;
  c.num_slots = 500;
  run_case(c, g);
}

TEST(SparseMlaGpu, TopkLengthAndSink) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {16, 32, 64, 128}) {
      SparseMlaCase c = base_case(h_q, fp8);
      c.rows = 6;
      c.topk = 200;
      c.with_topk_length = true;
      c.with_sink = true;
      run_case(c, g);
      if (HasFailure()) return;
    }
}

// A large softmax scale: the running max moves by large steps between tiles (rescaling exercised).
TEST(SparseMlaGpu, SharpSoftmax) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(64, fp8);
    c.softmax_scale = 1.5f;
    run_case(c, g);
    if (HasFailure()) return;
  }
}

// ---- named edge cases -------------------------------------------------------------------------

TEST(SparseMlaGpuEdges, AllIndicesInvalidAndEmptyPool) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(32, fp8);
    c.invalid_fraction = 1.0;  // all_indices_invalid: out 0, lse = max_logits = -inf
    c.with_sink = true;        // the sink does not make an empty row non-empty
    run_case(c, g);
    c.num_slots = 0;  // empty pool: every index is out of range
    c.invalid_fraction = 0.0;
    run_case(c, g);
    if (HasFailure()) return;
  }
}

TEST(SparseMlaGpuEdges, TopkLenZeroAndPartial) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(16, fp8);
    c.rows = 6;
    c.with_topk_length = true;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    const int32_t lens[6] = {0, 1, 31, 32, 33, 256};  // topk_len_zero, tile edges, full
    for (int r = 0; r < 6; ++r) p.topk_length.ptr<int32_t>()[r] = lens[r];
    check_case(p);
    if (HasFailure()) return;
  }
}

// Device-side topk_length outside [0, topk] is clamped by the kernel (the dispatcher cannot read it).
TEST(SparseMlaGpuEdges, DeviceTopkLengthIsClamped) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(32, true);
  c.rows = 3;
  c.with_topk_length = true;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  const int32_t wild[3] = {-5, 100000, 40};
  const int32_t clamped[3] = {0, 256, 40};
  for (int r = 0; r < 3; ++r) p.topk_length.ptr<int32_t>()[r] = wild[r];
  GpuResult got = run_gpu(p.args(), p.out, p.lse, p.max_logits);
  for (int r = 0; r < 3; ++r) p.topk_length.ptr<int32_t>()[r] = clamped[r];
  GpuResult want = run_gpu(p.args(), p.out, p.lse, p.max_logits);
  EXPECT_TRUE(got.out.bytes == want.out.bytes && got.lse.bytes == want.lse.bytes &&
              got.max_logits.bytes == want.max_logits.bytes);
  check_case(p);
}

TEST(SparseMlaGpuEdges, OutOfRangeAndDuplicateSlots) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(64, fp8);
    c.rows = 3;
    c.topk = 130;
    c.invalid_fraction = 0.0;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    int32_t* idx = p.index_ptr();
    const int32_t bad[6] = {-1, -5, int32_t(c.num_slots), INT_MAX, INT_MIN, int32_t(c.num_slots) + 7};
    for (int i = 0; i < 6; ++i) idx[i * 11] = bad[i];                // row 0: scattered invalid slots
    for (int i = 0; i < 130; ++i) idx[130 + i] = 17 + (i % 3);       // row 1: three slots, many times
    for (int i = 0; i < 130; ++i) idx[260 + i] = i % 2 ? -1 : 1999;  // row 2: one slot, 65 times
    check_case(p);
    if (HasFailure()) return;
  }
}

TEST(SparseMlaGpuEdges, OptionalOutputsAbsentSameOut) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(64, true);
  c.with_sink = true;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  const GpuResult full = check_case(p);
  SparseMlaArgs a = p.args();
  a.lse = TensorView{};
  a.max_logits = TensorView{};
  const GpuResult bare = run_gpu(a, p.out, p.lse, p.max_logits);
  EXPECT_TRUE(full.out.bytes == bare.out.bytes) << "out depends on whether lse / max_logits are requested";
}

// q and out padded per head and per row, kv rows wider than a token, indices rows wider than topk;
// the bits must equal those of the contiguous run, and the padding must stay untouched.
TEST(SparseMlaGpuEdges, StridedViews) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(20, true);
  c.rows = 3;
  c.topk = 50;
  c.num_slots = 120;
  c.with_topk_length = true;
  c.with_sink = true;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  const GpuResult contiguous = check_case(p);
  if (HasFailure()) return;

  HostTensor q_big(DType::bf16, {3, 22, 600}), out_big(DType::bf16, {3, 21, 520}), kv_big(DType::u8, {120, 704});
  HostTensor idx_big(DType::i32, {3, 64}), lse_big(DType::f32, {3, 24});
  fill_uniform(q_big, g);
  for (auto& b : kv_big.bytes) b = uint8_t(g());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t h = 0; h < 20; ++h)
      for (int64_t d = 0; d < 576; ++d) q_big.set((r * 22 + h) * 600 + d, p.q.get((r * 20 + h) * 576 + d));
  for (int64_t s = 0; s < 120; ++s) std::memcpy(kv_big.ptr<uint8_t>() + s * 704, p.kv.ptr<uint8_t>() + s * 656, 656);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < 50; ++i) idx_big.ptr<int32_t>()[r * 64 + i] = p.index_ptr()[r * 50 + i];
  poison(out_big);
  poison(lse_big);
  SparseMlaArgs a = p.args();
  a.q = q_big.view.slice(1, 0, 20).slice(2, 0, 576);
  a.kv = kv_big.view.slice(1, 0, 656);
  a.indices = idx_big.view.slice(1, 0, 50);
  a.out = out_big.view.slice(1, 1, 21).slice(2, 0, 512);
  a.lse = lse_big.view.slice(1, 2, 22);
  a.max_logits = TensorView{};

  DeviceMirror dq(a.q), dkv(a.kv), didx(a.indices), dtl(a.topk_length), dsink(a.attn_sink);
  DeviceMirror dout_big(out_big.view), dlse_big(lse_big.view);  // whole buffers: padding included
  SparseMlaArgs d = a;
  d.q = dq.view, d.kv = dkv.view, d.indices = didx.view, d.topk_length = dtl.view, d.attn_sink = dsink.view;
  d.out = dout_big.view.slice(1, 1, 21).slice(2, 0, 512);
  d.lse = dlse_big.view.slice(1, 2, 22);
  const std::size_t ws_bytes = sparse_mla_workspace_size(d, query_device_caps(Device::cuda()));
  Buffer ws(std::max<std::size_t>(ws_bytes, 16), Device::cuda());
  sparse_mla(d, Workspace{ws.data(), ws.bytes()}, {});
  stream_synchronize({});
  dout_big.download(out_big.view);
  dlse_big.download(lse_big.view);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t h = 0; h < 20; ++h) {
      ASSERT_EQ(0, std::memcmp(out_big.ptr<uint16_t>() + (r * 21 + h + 1) * 520,
                               contiguous.out.view.ptr<uint16_t>() + (r * 20 + h) * 512, 512 * 2))
          << "row " << r << " head " << h;
      ASSERT_EQ(0,
                std::memcmp(lse_big.ptr<float>() + r * 24 + h + 2, contiguous.lse.view.ptr<float>() + r * 20 + h, 4));
    }
  for (int64_t r = 0; r < 3; ++r) {  // padding: head 0 of out, the tail of every head, lse columns 0, 1, 22, 23
    EXPECT_EQ(out_big.ptr<uint16_t>()[r * 21 * 520], 0xffff);
    EXPECT_EQ(out_big.ptr<uint16_t>()[(r * 21 + 5) * 520 + 515], 0xffff);
    for (int col : {0, 1, 22, 23}) EXPECT_TRUE(std::isnan(lse_big.ptr<float>()[r * 24 + col]));
  }
}

TEST(SparseMlaGpuEdges, ZeroRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(16, false);
  c.rows = 0;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  EXPECT_NO_THROW(run_gpu(p.args(), p.out, p.lse, p.max_logits));
}
