// The backends' "workspace for this capacity" (src/backend/op_plans.h) on fabricated CUDA devices:
// monotone in the batch size, and at least what any batch within the capacity needs. Host code only:
// the configs name a CUDA device and the layer views have shapes only (nothing is launched).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "attnserve/error.h"

#include "backend/op_plans.h"

namespace attnserve {
namespace {

using backend_detail::DenseCall;

const DeviceCaps kH200{.num_sms = 132, .smem_per_block = 227 * 1024, .arch = 90};
const DeviceCaps kA100{.num_sms = 108, .smem_per_block = 163 * 1024, .arch = 80};

DenseBackendConfig dense(AttentionArch arch, DType kv = DType::bf16, bool deterministic = false) {
  const bool mha = arch == AttentionArch::mha;
  DenseBackendConfig c{.arch = arch,
                       .num_q_heads = mha ? 32 : 16,
                       .num_kv_heads = mha ? 8 : 1,
                       .head_dim = mha ? 128 : 576,
                       .v_head_dim = mha ? 128 : 512,
                       .kv_dtype = kv,
                       .page_size = 16,
                       .deterministic = deterministic,
                       .capacity = {.max_bs = 48, .max_num_tokens = 2048, .max_context_len = 16384},
                       .device = Device::cuda()};
  c.kv_buffers.push_back({.k = TensorView::contiguous(nullptr, kv, {1 << 16, mha ? 8 : 576}, Device::cuda())});
  return c;
}

std::size_t batch_need(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseCall& call) {
  if (c.arch == AttentionArch::mha)
    return cuda::attn::workspace_size(cuda::attn::make_plan(backend_detail::mha_problem(c, call), caps));
  return cuda::mla::workspace_size(cuda::mla::make_plan(backend_detail::mla_problem(c, call), caps));
}

void expect_capacity_bounds_every_batch(const DenseBackendConfig& c, const DeviceCaps& caps) {
  const int T = c.capacity.max_num_tokens, W = c.capacity.max_context_len / c.page_size;
  std::size_t prev = 0;
  for (int max_bs = 1; max_bs <= c.capacity.max_bs; ++max_bs) {
    const std::size_t cap = backend_detail::dense_workspace_for_capacity(c, caps, max_bs);
    EXPECT_GE(cap, prev) << "max_bs " << max_bs;  // monotone in the batch size
    prev = cap;
  }
  EXPECT_GT(prev, 0u);  // small batches split the keys
  const std::size_t cap = prev;
  int checked = 0;
  for (int64_t b : {1, 2, 3, 5, 8, 13, 31, 48})
    for (int q : {1, 2, 4, 5, 16, 33, 64, 100, 513, 2048}) {
      if (b > T) continue;
      for (int64_t total : {b, std::min<int64_t>(T, b * q), std::min<int64_t>(T, (b * q + 1) / 2)})
        for (int64_t width : {int64_t(W), int64_t(W / 3), int64_t(1)}) {
          if (total < b || total > T || q > total) continue;
          EXPECT_LE(batch_need(c, caps, {b, total, width, q}), cap) << "b " << b << " q " << q << " total " << total;
          ++checked;
        }
    }
  EXPECT_GT(checked, 100);
}

TEST(BackendWorkspace, DenseCapacityBoundsEveryBatchMha) {
  expect_capacity_bounds_every_batch(dense(AttentionArch::mha), kH200);
  expect_capacity_bounds_every_batch(dense(AttentionArch::mha), kA100);
  expect_capacity_bounds_every_batch(dense(AttentionArch::mha, DType::fp8_e4m3), kH200);
  expect_capacity_bounds_every_batch(dense(AttentionArch::mha, DType::bf16, true), kH200);
}

TEST(BackendWorkspace, DenseCapacityBoundsEveryBatchMla) {
  expect_capacity_bounds_every_batch(dense(AttentionArch::mla), kH200);
  expect_capacity_bounds_every_batch(dense(AttentionArch::mla), kA100);
  expect_capacity_bounds_every_batch(dense(AttentionArch::mla, DType::bf16, true), kH200);
}

// Every batch of a small capacity on a small device (where most batches split the keys), brute force.
TEST(BackendWorkspace, DenseCapacityBoundsEveryBatchExhaustive) {
  const DeviceCaps small{.num_sms = 16, .smem_per_block = 227 * 1024, .arch = 90};
  for (AttentionArch arch : {AttentionArch::mha, AttentionArch::mla}) {
    DenseBackendConfig c = dense(arch);
    c.capacity = {.max_bs = 6, .max_num_tokens = 64, .max_context_len = 1024};
    const std::size_t cap = backend_detail::dense_workspace_for_capacity(c, small, 6);
    const int64_t W = 1024 / 16;
    std::size_t most = 0;
    int batches = 0;
    for (int64_t b = 1; b <= 6; ++b)
      for (int q = 1; q <= 64; ++q)
        for (int64_t total = std::max<int64_t>(b, q); total <= std::min<int64_t>(64, b * q); ++total)
          for (int64_t width : {int64_t(1), W / 2, W}) {
            most = std::max(most, batch_need(c, small, {b, total, width, q}));
            ++batches;
          }
    EXPECT_GT(batches, 10000);
    EXPECT_GE(cap, most);
    EXPECT_GT(most, 0u);
  }
}

// The config check asks the op plans what CUDA supports (one support list), before any device is touched.
TEST(BackendWorkspace, CudaConfigCheckUsesThePlansSupportLists) {
  auto message = [](DenseBackendConfig c) {
    try {
      backend_detail::checked_dense_config(c, kH200);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  DenseBackendConfig mha = dense(AttentionArch::mha);
  mha.head_dim = mha.v_head_dim = 80;
  EXPECT_NE(message(mha).find("CUDA supports head dims 64, 96, 128, 192, 192/128, 256; q has 80"), std::string::npos)
      << message(mha);
  DenseBackendConfig dv = dense(AttentionArch::mha);
  dv.v_head_dim = 64;
  EXPECT_NE(message(dv).find("q and k_cache have 128, v_cache 64"), std::string::npos) << message(dv);
  DenseBackendConfig mla = dense(AttentionArch::mla);
  mla.head_dim = 320;
  mla.v_head_dim = 256;
  EXPECT_NE(message(mla).find("d_v 512 and d_rope 64"), std::string::npos) << message(mla);
}

TEST(BackendWorkspace, CpuNeedsNone) {
  DenseBackendConfig c = dense(AttentionArch::mha);
  c.device = Device::cpu();
  EXPECT_EQ(backend_detail::dense_workspace_for_capacity(c, DeviceCaps::cpu(), 48), 0u);
}

TEST(BackendWorkspace, SparseCapacityBoundsEveryBatch) {
  for (NsaImpl impl : {NsaImpl::sparse_bf16, NsaImpl::sparse_fp8, NsaImpl::gather}) {
    SparseBackendConfig c{.num_q_heads = 16,
                          .index_topk = 2048,
                          .page_size = 64,
                          .capacity = {.max_bs = 32, .max_num_tokens = 1024, .max_context_len = 8192},
                          .device = Device::cuda()};
    c.kv_buffers.push_back({.k = TensorView::contiguous(nullptr, DType::bf16, {1 << 16, 576}, Device::cuda())});
    const backend_detail::NsaImpls impls{.prefill = impl, .decode = impl};
    std::size_t prev = 0;
    for (int max_bs = 1; max_bs <= 32; ++max_bs) {
      const std::size_t cap = backend_detail::sparse_workspace_for_capacity(c, kH200, impls, max_bs);
      EXPECT_GE(cap, prev);
      prev = cap;
    }
    EXPECT_GT(prev, 0u) << to_string(impl);
    for (int64_t rows = 1; rows <= 1024; rows += 7) {
      std::size_t need = 0;
      if (impl == NsaImpl::gather)
        need = cuda::mla::workspace_size(cuda::mla::make_plan(backend_detail::sparse_gather_problem(c, rows), kH200));
      else
        need = cuda::sparse_mla_op::workspace_size(
            cuda::sparse_mla_op::make_plan(backend_detail::sparse_mla_problem(c, impl, rows), kH200));
      EXPECT_LE(need, prev) << to_string(impl) << " rows " << rows;
    }
  }
}

}  // namespace
}  // namespace attnserve
