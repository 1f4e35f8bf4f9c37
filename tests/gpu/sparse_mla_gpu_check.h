// Shared by the sparse MLA GPU tests (test_sparse_gpu.cpp, test_sparse_gpu_splits.cpp): run a problem on
// the GPU twice with poisoned outputs (identical bits required), optionally with forced kernel choices
// (split count, pipeline depth), and compare every output with the CPU oracle and brute force by the
// tolerance rule. -inf positions must match exactly; nothing may be left unwritten.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "attnserve/ops/sparse_mla.h"
#include "cpu/sparse_mla_problem.h"
#include "cuda/sparse_mla/sparse_mla_api.h"
#include "test_sparse_gpu_util.h"

namespace attnserve::test::dsa_gpu {

// lse / max_logits (f32) get 1e-5 on top of the rule for the 576-term dot products accumulated by
// tensor cores (whose additions truncate).
constexpr double kTensorCoreStatAllowance = 1e-5;

struct GpuResult {
  HostTensor out, lse, max_logits;
};

using SparseTuning = cuda::sparse_mla_op::SparseMlaTuning;

// Runs `h` (views into host memory) on the GPU twice with poisoned outputs; requires identical bits.
// Without `tune`: the public op with the workspace it asks for. With `tune`: the CUDA launcher with
// those overrides and the workspace its selector asks for (the public query validates the arguments).
// Returns copies of the given host outputs holding the GPU's values.
inline GpuResult run_gpu(const SparseMlaArgs& h, const HostTensor& out_like, const HostTensor& lse_like,
                         const HostTensor& ml_like, std::optional<SparseTuning> tune = std::nullopt) {
  DeviceMirror q(h.q), kv(h.kv), idx(h.indices), out(h.out), tl(h.topk_length), sink(h.attn_sink), lse(h.lse),
      ml(h.max_logits);
  SparseMlaArgs d = h;
  d.q = q.view, d.kv = kv.view, d.indices = idx.view, d.out = out.view, d.topk_length = tl.view;
  d.attn_sink = sink.view, d.lse = lse.view, d.max_logits = ml.view;
  const DeviceCaps caps = query_device_caps(Device::cuda());
  std::size_t ws_bytes = sparse_mla_workspace_size(d, caps);
  if (tune && d.q.size(0) > 0) ws_bytes = cuda::sparse_mla_op::select(d, caps, *tune).ws_bytes;
  Buffer ws(std::max<std::size_t>(ws_bytes, 16), Device::cuda());
  std::vector<uint8_t> first[3];
  for (int run = 0; run < 2; ++run) {
    out.poison(), lse.poison(), ml.poison();
    if (tune) cuda::sparse_mla_op::run(d, Workspace{ws.data(), ws.bytes()}, {}, *tune);
    else sparse_mla(d, Workspace{ws.data(), ws.bytes()}, {});
    stream_synchronize({});
    std::vector<uint8_t> now[3] = {out.bytes(), lse.bytes(), ml.bytes()};
    for (int i = 0; i < 3; ++i) {
      if (run == 0) first[i] = now[i];
      else EXPECT_TRUE(first[i] == now[i]) << "two GPU runs differ (output " << i << ")";
    }
  }
  GpuResult r{out_like, lse_like, ml_like};
  auto put = [](HostTensor& t, const std::vector<uint8_t>& b) {
    std::memcpy(t.bytes.data(), b.data(), std::min(b.size(), t.bytes.size()));
  };
  put(r.out, first[0]);
  put(r.lse, first[1]);
  put(r.max_logits, first[2]);
  return r;
}

inline void expect_close(const char* what, const std::vector<double>& got, const std::vector<double>& cpu,
                         const std::vector<double>& ref32, const std::vector<double>& ref64, double tol_extra,
                         DType out_dtype) {
  SCOPED_TRACE(what);
  ASSERT_EQ(count_nan(got), 0) << "unwritten (poisoned) or NaN elements";
  ASSERT_EQ(nonfinite_mismatches(got, ref64), 0) << "-inf positions differ from the reference";
  const double base = same_precision_error(cpu, ref32, ref64);
  const double err = rel_l2(got, ref64);
  EXPECT_LE(err, tolerance_by_rule(base, out_dtype) + tol_extra)
      << "GPU rel_l2 " << err << ", CPU oracle " << rel_l2(cpu, ref64) << ", float32 brute force "
      << rel_l2(ref32, ref64);
}

// The references of one problem: brute force in fp64 and float32, and the CPU oracle's outputs (in p).
struct SparseRefs {
  SparseMlaReference ref64, ref32;
};
inline SparseRefs compute_refs(SparseMlaProblem& p) {
  SparseRefs r{reference_sparse_mla<double>(p.args()), reference_sparse_mla<float>(p.args())};
  run_sparse_mla(p);  // the CPU oracle (poisons first)
  expect_all_written(p);
  return r;
}

// The GPU against references computed once (several kernel configurations of one problem).
inline GpuResult check_gpu(SparseMlaProblem& p, const SparseRefs& refs,
                           std::optional<SparseTuning> tune = std::nullopt) {
  const SparseMlaReference& ref64 = refs.ref64;
  const SparseMlaReference& ref32 = refs.ref32;
  GpuResult g = run_gpu(p.args(), p.out, p.lse, p.max_logits, tune);
  if (::testing::Test::HasFailure()) return g;
  expect_close("out", to_doubles(g.out), to_doubles(p.out), ref32.out, ref64.out, 0.0, DType::bf16);
  expect_close("lse", to_doubles(g.lse), to_doubles(p.lse), ref32.lse, ref64.lse, kTensorCoreStatAllowance, DType::f32);
  expect_close("max_logits", to_doubles(g.max_logits), to_doubles(p.max_logits), ref32.max_logits, ref64.max_logits,
               kTensorCoreStatAllowance, DType::f32);
  return g;
}

// CPU oracle, brute force (fp64 and float32), GPU; every output compared.
inline GpuResult check_case(SparseMlaProblem& p, std::optional<SparseTuning> tune = std::nullopt) {
  const SparseRefs refs = compute_refs(p);
  return check_gpu(p, refs, tune);
}

inline SparseMlaCase base_case(int64_t h_q, bool fp8) {
  SparseMlaCase c;
  c.rows = 4;
  c.h_q = h_q;
  c.num_slots = 2000;
  c.topk = 256;
  c.fp8 = fp8;
  c.dtype = DType::bf16;
  return c;
}

inline std::string name_of(const SparseMlaCase& c) {
  return std::string(c.fp8 ? "fp8" : "bf16") + " h_q " + std::to_string(c.h_q) + " topk " + std::to_string(c.topk) +
         " rows " + std::to_string(c.rows);
}

}  // namespace attnserve::test::dsa_gpu
