// The lightning-indexer GPU test cases (tests/gpu/test_indexer_gpu*.cpp): a paged or ragged problem on
// random inputs, run by the CPU oracle and twice on the GPU (poisoned logits, identical bits required),
// checked against fp64 brute force by the tolerance rule (base: the larger error of the CPU oracle and of a
// plain float32 loop; for the Hopper FP8 tensor-core kernel also that of a model of its accumulation,
// fp8_mma_score); -inf positions match exactly; nothing is left unwritten.
// Math picks the kernel the GPU runs: the portable one (fp32 products and sums) or the Hopper one; a list of
// forms (WsForm: the Hopper ragged kernel, the ws kernel's column span and mode) runs the GPU in each of them
// against one oracle run, and requires the batched epilogue (mode bit kWsBatched) to give its per-row twin's bits.
#pragma once
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "attnserve/ops/indexer.h"
#include "cpu/test_indexer_util.h"
#include "cuda/indexer/plan.h"
#include "cuda/indexer/sm90/config.h"
#include "test_sparse_gpu_util.h"

namespace attnserve::test::indexer_gpu {

using namespace attnserve::test::dsa_gpu;

enum class Math {
  fp32,     // the portable kernel (f16 mma.sync with exact fp8 products, fp32 sums)
  fp8_mma,  // the Hopper kernel (FP8 wgmma)
};

// Forces the kernel of `math` for the indexer calls in its scope (op_tuning), restoring the choice after.
struct ForceKernel {
  int saved;
  explicit ForceKernel(Math math) : saved(cuda::indexer::op_tuning().sm90) {
    cuda::indexer::op_tuning().sm90 = math == Math::fp8_mma ? 1 : 0;
  }
  ~ForceKernel() { cuda::indexer::op_tuning().sm90 = saved; }
  ForceKernel(const ForceKernel&) = delete;
  ForceKernel& operator=(const ForceKernel&) = delete;
};

// A form of the Hopper kernels (op_tuning): the ragged kernel (sm90_ws: 0 the session-4 one, 1 the ws one,
// -1 the plan's), the ws kernel's column span (0: the plan's) and its mode (-1: the plan's default).
struct WsForm {
  int sm90_ws = -1;
  int64_t span = 0;
  int mode = -1;
  std::string name() const {
    return "sm90_ws " + std::to_string(sm90_ws) + " span " + std::to_string(span) + " ws_mode " + std::to_string(mode);
  }
  // `batched` is this form with the batched epilogue: the same per-row arithmetic, so the same bits.
  bool is_batched_twin(const WsForm& batched) const {
    return mode >= 0 && (mode & cuda::indexer90::kWsBatched) == 0 && batched.sm90_ws == sm90_ws &&
           batched.span == span && batched.mode == (mode | cuda::indexer90::kWsBatched);
  }
  // `quad` is the four-math-warpgroup kernel at this form's span, and this form the two-warpgroup mode whose banks
  // compute what a quad warpgroup does for groups of `rows` rows (config.h ws_quad_twin): the same bits.
  bool is_quad_twin(const WsForm& quad, int rows) const {
    return rows > 0 && quad.mode == cuda::indexer90::kWsQuadMode && quad.sm90_ws == sm90_ws && quad.span == span &&
           mode == cuda::indexer90::ws_quad_twin(rows);
  }
};

// Sets a WsForm for the indexer calls in its scope (op_tuning), restoring the tuning after.
struct ForceForm {
  cuda::indexer::Tuning saved;
  explicit ForceForm(const WsForm& f) : saved(cuda::indexer::op_tuning()) {
    cuda::indexer::op_tuning().sm90_ws = f.sm90_ws;
    cuda::indexer::op_tuning().ws_cols_per_cta = f.span;
    cuda::indexer::op_tuning().ws_mode = f.mode;
  }
  ForceForm(int sm90_ws, int64_t span, int mode = -1) : ForceForm(WsForm{sm90_ws, span, mode}) {}
  ~ForceForm() { cuda::indexer::op_tuning() = saved; }
  ForceForm(const ForceForm&) = delete;
  ForceForm& operator=(const ForceForm&) = delete;
};

// The Hopper kernel can run here: an sm_90a build on an sm_90 device.
inline bool sm90_indexer_available() {
  return cuda_available() && cuda::indexer::Targets::built().sm90a && query_device_caps(Device::cuda()).arch == 90;
}
#define INDEXER_REQUIRE_SM90()                                     \
  do {                                                             \
    if (!::attnserve::test::indexer_gpu::sm90_indexer_available()) \
      GTEST_SKIP() << "needs the sm_90a build on an sm_90 GPU";    \
  } while (0)

// The plan under the forced choice runs the kernel of `math` (a silent fallback would test the wrong kernel).
inline void expect_kernel(const cuda::indexer::Problem& p, Math math) {
  const auto plan = cuda::indexer::make_plan(p, query_device_caps(Device::cuda()), cuda::indexer::op_tuning());
  EXPECT_EQ(cuda::indexer::is_sm90(plan.kernel), math == Math::fp8_mma)
      << "plan chose " << cuda::indexer::kernel_name(plan.kernel);
  // A forced batched epilogue runs (every form of the ws kernel has it).
  const int forced = cuda::indexer::op_tuning().ws_mode;
  if (cuda::indexer::is_sm90_ws(plan.kernel) && forced >= 0)
    EXPECT_EQ(plan.ws_mode & cuda::indexer90::kWsBatched, forced & cuda::indexer90::kWsBatched)
        << "plan's ws_mode " << plan.ws_mode << ", forced " << forced;
  // The tests force the quad kernel only where it exists: it runs.
  if (cuda::indexer::is_sm90_ws(plan.kernel) && forced >= 0 && (forced & cuda::indexer90::kWsQuad) != 0) {
    EXPECT_EQ(plan.ws_mode, cuda::indexer90::kWsQuadMode) << "forced " << forced;
  }
}

// Runs `gpu()` (returns the GPU's logits) in each form (none: once, under the current op_tuning) and checks
// each with `check`; then the batched epilogue's bits against its per-row twin's, and the quad kernel's against
// its two-warpgroup twin's (groups of `rows` rows: paged next_n, ragged kWsRaggedRows).
template <typename Gpu, typename Check>
void run_forms(const std::vector<WsForm>& forms, int rows, Gpu&& gpu, Check&& check) {
  if (forms.empty()) {
    const HostTensor got = gpu();
    if (!::testing::Test::HasFailure()) check(got);
    return;
  }
  std::vector<std::vector<uint8_t>> bits;
  for (const WsForm& f : forms) {
    SCOPED_TRACE(f.name());
    const ForceForm force(f);
    const HostTensor got = gpu();
    if (::testing::Test::HasFailure()) return;
    check(got);
    bits.push_back(got.bytes);
  }
  for (size_t i = 0; i < forms.size(); ++i)
    for (size_t j = 0; j < forms.size(); ++j)
      if (forms[i].is_batched_twin(forms[j]) || forms[i].is_quad_twin(forms[j], rows)) {
        EXPECT_TRUE(bits[i] == bits[j]) << forms[j].name() << " (the batched epilogue or the quad kernel) gives other "
                                        << "bits than its twin " << forms[i].name();
      }
}

// A model of Hopper's FP8 wgmma dot q . k over 128 dims (4 instructions of k32): products are exact; each
// instruction adds its 32 products and the running accumulator after aligning them to the largest one's
// exponent, keeping 13 fraction bits (truncated toward zero: the e8m13 adder reported for FP8 QGMMA).
// The Hopper kernel's same-precision reference; the rest of the score is in fp64.
inline double fp8_mma_dot(const float* q, const float* k) {
  double acc = 0;
  for (int s = 0; s < kIdxDim / 32; ++s) {
    double t[33];
    t[0] = acc;
    for (int i = 0; i < 32; ++i) t[i + 1] = double(q[32 * s + i]) * double(k[32 * s + i]);
    int emax = INT_MIN;
    for (double v : t)
      if (v != 0 && std::isfinite(v)) emax = std::max(emax, std::ilogb(v));
    if (emax == INT_MIN) {  // all zero (or non-finite: plain sum)
      acc = 0;
      for (double v : t) acc += v;
      continue;
    }
    const double quantum = std::ldexp(1.0, emax - 13);
    double sum = 0;
    for (double v : t) sum += std::isfinite(v) ? std::trunc(v / quantum) * quantum : v;
    acc = sum;
  }
  return acc;
}
inline double fp8_mma_score(const float* q_row, const float* w_row, int64_t n_heads, const float* k, float k_scale) {
  double acc = 0;
  for (int64_t h = 0; h < n_heads; ++h) acc += std::max(fp8_mma_dot(q_row + h * kIdxDim, k), 0.0) * double(w_row[h]);
  return acc * double(k_scale);
}

inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// GPU logits against brute force (ref64, ref32; refmma for the FP8 tensor-core kernel) and the CPU
// oracle's logits.
inline void expect_logits(const HostTensor& gpu, const HostTensor& cpu, const std::vector<double>& ref64,
                          const std::vector<double>& ref32, const std::vector<double>* refmma = nullptr) {
  const std::vector<double> got = to_doubles(gpu), oracle = to_doubles(cpu);
  ASSERT_EQ(count_nan(got), 0) << "logits left unwritten (poison) or NaN";
  ASSERT_EQ(nonfinite_mismatches(got, ref64), 0) << "-inf positions differ from the reference";
  ASSERT_EQ(nonfinite_mismatches(oracle, ref64), 0) << "CPU oracle: -inf positions differ";
  double base = same_precision_error(oracle, ref32, ref64);
  const double mma = refmma ? rel_l2(*refmma, ref64) : 0.0;
  base = std::max(base, mma);
  const double err = rel_l2(got, ref64);
  if (refmma)
    std::printf("[indexer fp8 mma] GPU rel_l2 %.3g, FP8-MMA model %.3g, CPU oracle %.3g\n", err, mma,
                rel_l2(oracle, ref64));
  EXPECT_LE(err, tolerance_by_rule(base, DType::f32))
      << "GPU rel_l2 " << err << ", CPU oracle " << rel_l2(oracle, ref64) << ", float32 loop " << rel_l2(ref32, ref64)
      << ", FP8-MMA model " << mma;
}

// Runs the paged indexer on the GPU twice (poisoned logits), requires identical bits, returns the logits.
inline HostTensor run_paged_gpu(const IndexerPagedArgs& h, const HostTensor& logits_like,
                                const TensorView* page_table_override = nullptr, Math math = Math::fp32) {
  DeviceMirror q(h.q), w(h.weights), pool(h.index_k_cache),
      pt(page_table_override ? *page_table_override : h.page_table), sl(h.seqlens), out(h.logits), qs(h.q_scale);
  IndexerPagedArgs d = h;
  d.q = q.view, d.weights = w.view, d.index_k_cache = pool.view, d.page_table = pt.view, d.seqlens = sl.view,
  d.logits = out.view;
  d.q_scale = qs.view;
  const ForceKernel force(math);
  expect_kernel(cuda::indexer::problem_of(d), math);
  std::vector<uint8_t> first;
  for (int run = 0; run < 2; ++run) {
    out.poison();
    indexer_paged(d);
    stream_synchronize({});
    if (run == 0) first = out.bytes();
    else EXPECT_TRUE(first == out.bytes()) << "two GPU runs differ";
  }
  HostTensor got = logits_like;
  std::memcpy(got.bytes.data(), first.data(), first.size());
  return got;
}

struct PagedCase {
  std::vector<int> seqlens;
  int next_n = 1, page_size = 64;
  int64_t heads = 64;
  int extra_cols = 9;  // logits columns past the longest request (-inf)
};

inline void run_paged_case(const PagedCase& c, std::mt19937_64& g, int corrupt_page_of_request0 = -1,
                           Math math = Math::fp32, const std::vector<WsForm>& forms = {}) {
  SCOPED_TRACE("next_n " + std::to_string(c.next_n) + " page_size " + std::to_string(c.page_size) + " heads " +
               std::to_string(c.heads));
  const int64_t b = int64_t(c.seqlens.size()), rows = b * c.next_n;
  const int max_context = *std::max_element(c.seqlens.begin(), c.seqlens.end()) + c.extra_cols;
  const int max_pages = (max_context + c.page_size - 1) / c.page_size + 1;
  IndexKeyPool kp(c.seqlens, c.page_size, max_pages, g);
  HostTensor q = random_fp8_q(rows, c.heads, g), w = random_weights(rows, c.heads, g);
  HostTensor sl(DType::i32, {b}), logits(DType::f32, {rows, max_context});
  for (int64_t r = 0; r < b; ++r) sl.ptr<int32_t>()[r] = c.seqlens[size_t(r)];
  const IndexerPagedArgs args{.q = q.view,
                              .weights = w.view,
                              .index_k_cache = kp.pool.view,
                              .page_table = kp.page_table.view,
                              .seqlens = sl.view,
                              .logits = logits.view,
                              .page_size = c.page_size,
                              .next_n = c.next_n};
  poison(logits);
  indexer_paged(args);  // CPU oracle
  const HostTensor cpu = logits;

  HostTensor table = kp.page_table;  // (a corrupted copy for the GPU when asked)
  if (corrupt_page_of_request0 >= 0)
    table.ptr<int32_t>()[corrupt_page_of_request0] = corrupt_page_of_request0 % 2 ? -1 : 1 << 30;
  const std::vector<float> qf = to_floats(q), wf = to_floats(w);
  std::vector<double> ref64(size_t(rows * max_context), kNegInf), ref32(ref64.size(), kNegInf),
      refmma(math == Math::fp8_mma ? ref64.size() : 0, kNegInf);
  for (int64_t r = 0; r < b; ++r)
    for (int t = 0; t < c.next_n; ++t) {
      const int64_t row = r * c.next_n + t;
      const int64_t visible = std::max<int64_t>(0, c.seqlens[size_t(r)] - c.next_n + t + 1);
      for (int64_t j = 0; j < visible; ++j) {
        if (r == 0 && j / c.page_size == corrupt_page_of_request0) continue;  // skipped by the kernel: -inf
        const QuantizedKey& key = kp.keys[size_t(r)][size_t(j)];
        const std::vector<float> k = decode_key(key.bytes);
        const float* qr = qf.data() + row * c.heads * kIdxDim;
        const float* wr = wf.data() + row * c.heads;
        ref64[size_t(row * max_context + j)] = reference_score<double>(qr, wr, c.heads, k.data(), key.scale);
        ref32[size_t(row * max_context + j)] = reference_score<float>(qr, wr, c.heads, k.data(), key.scale);
        if (!refmma.empty())
          refmma[size_t(row * max_context + j)] = fp8_mma_score(qr, wr, c.heads, k.data(), key.scale);
      }
    }
  HostTensor expected = cpu;
  if (corrupt_page_of_request0 >= 0) {  // the oracle ran on the intact table: blank the same columns
    for (int t = 0; t < c.next_n; ++t)
      for (int64_t j = 0; j < max_context; ++j)
        if (j / c.page_size == corrupt_page_of_request0) expected.ptr<float>()[t * max_context + j] = -INFINITY;
  }
  run_forms(
      forms, c.next_n, [&] { return run_paged_gpu(args, logits, &table.view, math); },
      [&](const HostTensor& gpu) { expect_logits(gpu, expected, ref64, ref32, refmma.empty() ? nullptr : &refmma); });
}

// A contiguous key buffer for the ragged form.
struct KeyBuffer {
  HostTensor k, k_scale;
  KeyBuffer(int64_t num_keys, std::mt19937_64& g)
      : k(DType::fp8_e4m3, {num_keys, kIdxDim}), k_scale(DType::f32, {num_keys}) {
    for (int64_t j = 0; j < num_keys; ++j) {
      QuantizedKey qk = random_key(g);
      std::memcpy(k.bytes.data() + j * kIdxDim, qk.bytes, kIdxDim);
      k_scale.ptr<float>()[j] = qk.scale;
    }
  }
};

// windows: per row [ks, ke); empty = all random.
inline void run_ragged_case(int64_t rows, int64_t heads, int64_t num_keys, std::mt19937_64& g,
                            const std::vector<std::pair<int, int>>& windows = {}, Math math = Math::fp32,
                            const std::vector<WsForm>& forms = {}) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " heads " + std::to_string(heads) + " keys " +
               std::to_string(num_keys));
  HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g);
  KeyBuffer kb(num_keys, g);
  HostTensor ks(DType::i32, {rows}), ke(DType::i32, {rows}), logits(DType::f32, {rows, num_keys});
  std::uniform_int_distribution<int32_t> pos(0, int32_t(num_keys));
  for (int64_t i = 0; i < rows; ++i) {
    int32_t a = pos(g), b = pos(g);
    if (!windows.empty()) a = windows[size_t(i)].first, b = windows[size_t(i)].second;
    ks.ptr<int32_t>()[i] = std::min(a, b);
    ke.ptr<int32_t>()[i] = std::max(a, b);
  }
  const IndexerRaggedArgs args{.q = q.view,
                               .weights = w.view,
                               .k = kb.k.view,
                               .k_scale = kb.k_scale.view,
                               .ks = ks.view,
                               .ke = ke.view,
                               .logits = logits.view};
  poison(logits);
  indexer_ragged(args);
  const HostTensor cpu = logits;

  DeviceMirror dq(q.view), dw(w.view), dk(kb.k.view), dks(kb.k_scale.view), dlo(ks.view), dhi(ke.view),
      dout(logits.view);
  IndexerRaggedArgs d{.q = dq.view,
                      .weights = dw.view,
                      .k = dk.view,
                      .k_scale = dks.view,
                      .ks = dlo.view,
                      .ke = dhi.view,
                      .logits = dout.view};
  // The GPU logits: two runs on poisoned logits, the same bits required.
  auto run_gpu = [&] {
    const ForceKernel force(math);
    expect_kernel(cuda::indexer::problem_of(d), math);
    std::vector<uint8_t> first;
    for (int run = 0; run < 2; ++run) {
      dout.poison();
      indexer_ragged(d);
      stream_synchronize({});
      if (run == 0) first = dout.bytes();
      else EXPECT_TRUE(first == dout.bytes()) << "two GPU runs differ";
    }
    HostTensor gpu = logits;
    std::memcpy(gpu.bytes.data(), first.data(), first.size());
    return gpu;
  };

  const std::vector<float> qf = to_floats(q), wf = to_floats(w);
  std::vector<double> ref64(size_t(rows * num_keys), kNegInf), ref32(ref64.size(), kNegInf),
      refmma(math == Math::fp8_mma ? ref64.size() : 0, kNegInf);
  for (int64_t j = 0; j < num_keys; ++j) {
    const std::vector<float> k = decode_key(kb.k.bytes.data() + j * kIdxDim);
    const float scale = kb.k_scale.ptr<float>()[j];
    for (int64_t i = 0; i < rows; ++i) {
      if (j < ks.ptr<int32_t>()[i] || j >= ke.ptr<int32_t>()[i]) continue;
      const size_t o = size_t(i * num_keys + j);
      ref64[o] =
          reference_score<double>(qf.data() + i * heads * kIdxDim, wf.data() + i * heads, heads, k.data(), scale);
      ref32[o] = reference_score<float>(qf.data() + i * heads * kIdxDim, wf.data() + i * heads, heads, k.data(), scale);
      if (!refmma.empty())
        refmma[o] = fp8_mma_score(qf.data() + i * heads * kIdxDim, wf.data() + i * heads, heads, k.data(), scale);
    }
  }
  run_forms(forms, cuda::indexer90::kWsRaggedRows, run_gpu,
            [&](const HostTensor& gpu) { expect_logits(gpu, cpu, ref64, ref32, refmma.empty() ? nullptr : &refmma); });
}

}  // namespace attnserve::test::indexer_gpu
