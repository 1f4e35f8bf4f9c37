// FP8 query (FlashAttention-3's FP8 contract: q, K, V fp8_e4m3, q_descale / k_descale / v_descale
// [b, h_kv], out bf16/f16): the CPU oracle dequantizes q by q_descale, argument errors name what is
// wrong, and the plan picks the Hopper FP8 kernel (or the portable kernel with q widened).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attnserve/error.h"
#include "cpu/attention_cases.h"
#include "cuda/attention/plan.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

PagedSpec fp8_spec() {
  PagedSpec s;
  s.q_lens = {5, 0, 3};
  s.k_lens = {40, 9, 21};
  s.page_size = 4;
  s.h_q = 4;
  s.h_kv = 2;
  s.d = 32;
  s.kv_fp8 = true;
  s.descale = true;
  return s;
}

HostTensor fp8_copy(const TensorView& v) {
  HostTensor t(DType::fp8_e4m3, {v.size(0), v.size(1), v.size(2)});
  for (int64_t r = 0; r < v.size(0); ++r)
    for (int64_t h = 0; h < v.size(1); ++h)
      for (int64_t c = 0; c < v.size(2); ++c)
        t.set((r * v.size(1) + h) * v.size(2) + c, cpu::load_as_float(v.data, v.dtype, cpu::offset_of(v, r, h, c)));
  return t;
}

void expect_error(const std::function<void()>& f, const std::string& needle, const std::string& label) {
  try {
    f();
    ADD_FAILURE() << label << ": expected an attnserve::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << label << ": " << e.what();
  }
}

}  // namespace

// fp8 q with q_descale = the same values dequantized into an f32 q without q_descale, bit for bit
// (the oracle multiplies in float either way).
TEST(AttentionFp8Q, OracleDequantizesQByItsDescale) {
  auto g = rng_for_test();
  PagedCase c = make_paged_case(fp8_spec(), g);
  const PagedAttentionArgs& a = c.args;
  HostTensor q8 = fp8_copy(a.q);
  const int64_t b = a.cache_seqlens.size(0), h_kv = a.k_cache.size(2), group = a.q.size(1) / h_kv;
  HostTensor qds(DType::f32, {b, h_kv});
  fill_uniform(qds, g, 0.25f, 2.f);
  // Dequantized q: row i of request r, head h -> q8 * qds[r, h / group]; rows outside the batch 0.
  HostTensor qf(DType::f32, {a.q.size(0), a.q.size(1), a.q.size(2)});
  for (int64_t r = 0; r < b; ++r) {
    const int64_t q0 = cpu::load_index(a.cu_seqlens_q.data, a.cu_seqlens_q.dtype, r),
                  q1 = cpu::load_index(a.cu_seqlens_q.data, a.cu_seqlens_q.dtype, r + 1);
    for (int64_t i = q0; i < q1; ++i)
      for (int64_t h = 0; h < a.q.size(1); ++h)
        for (int64_t e = 0; e < a.q.size(2); ++e) {
          const int64_t k = (i * a.q.size(1) + h) * a.q.size(2) + e;
          qf.set(k, float(qds.get(r * h_kv + h / group)) * q8.get(k));
        }
  }
  HostTensor out8(DType::f32, {a.out.size(0), a.out.size(1), a.out.size(2)}), outf = out8;
  HostTensor lse8(DType::f32, {a.q.size(0), a.q.size(1)}), lsef = lse8;
  PagedAttentionArgs a8 = a, af = a;
  a8.q = q8.view;
  a8.q_descale = qds.view;
  a8.out = out8.view;
  a8.lse = lse8.view;
  af.q = qf.view;
  af.out = outf.view;
  af.lse = lsef.view;
  paged_attention(a8);
  paged_attention(af);
  EXPECT_EQ(out8.bytes, outf.bytes);
  EXPECT_EQ(lse8.bytes, lsef.bytes);
  // q_descale matters: 2x the descale changes the result.
  for (int64_t i = 0; i < qds.numel(); ++i) qds.set(i, 2.f * qds.get(i));
  paged_attention(a8);
  EXPECT_NE(out8.bytes, outf.bytes);
}

TEST(AttentionFp8Q, ArgumentErrors) {
  auto g = rng_for_test();
  PagedSpec s = fp8_spec();
  PagedCase c = make_paged_case(s, g);
  HostTensor q8 = fp8_copy(c.args.q);
  HostTensor qds(DType::f32, {3, 2}), qds_bad(DType::f32, {3, 1});
  fill_uniform(qds, g, 0.5f, 1.f);
  {
    PagedAttentionArgs a = c.args;  // f32 q with q_descale
    a.q_descale = qds.view;
    expect_error([&] { paged_attention(a); }, "'q_descale'", "q_descale without an fp8 q");
  }
  {
    PagedAttentionArgs a = c.args;
    a.q = q8.view;
    a.q_descale = qds_bad.view;
    expect_error([&] { paged_attention(a); }, "'q_descale'", "q_descale shape");
  }
  {
    PagedSpec bf = s;  // fp8 q over an f32 cache
    bf.kv_fp8 = false;
    bf.descale = false;
    PagedCase cb = make_paged_case(bf, g);
    PagedAttentionArgs a = cb.args;
    a.q = q8.view;
    expect_error([&] { paged_attention(a); }, "'k_cache'", "fp8 q over a non-fp8 cache");
  }
  {
    PagedAttentionArgs a = c.args;  // fp8 out
    HostTensor out8(DType::fp8_e4m3, {a.out.size(0), a.out.size(1), a.out.size(2)});
    a.q = q8.view;
    a.out = out8.view;
    expect_error([&] { paged_attention(a); }, "'out'", "fp8 out");
  }
}

namespace {
using cuda::attn::Kernel;
const DeviceCaps kH200{.num_sms = 132, .smem_per_block = 227 * 1024, .arch = 90};
const DeviceCaps kA100{.num_sms = 108, .smem_per_block = 163 * 1024, .arch = 80};
cuda::attn::Problem fp8_problem(int64_t b, int q_len, int64_t ctx, int d = 128) {
  return cuda::attn::Problem{.b = b,
                             .total_q = b * q_len,
                             .h_q = 32,
                             .h_kv = 8,
                             .d = d,
                             .d_v = d,
                             .num_pages = 1 << 16,
                             .page_size = 16,
                             .max_pages = (ctx + 15) / 16,
                             .kv_token_stride = 8 * d,
                             .max_seqlen_q = q_len,
                             .dtype = DType::fp8_e4m3,
                             .out_dtype = DType::bf16,
                             .kv_dtype = DType::fp8_e4m3,
                             .descale = true};
}
}  // namespace

TEST(AttentionFp8Q, PlanPicksHopperFp8OrWidensForThePortableKernel) {
  const cuda::attn::Targets with90{.sm90a = true}, no90{.sm90a = false};
  const cuda::attn::Plan pre = cuda::attn::make_plan(fp8_problem(1, 8192, 8192), kH200, {}, with90);
  EXPECT_EQ(pre.kernel, Kernel::sm90_fp8);
  EXPECT_EQ(pre.m_blocks, 8192 * 4 / 128);
  EXPECT_EQ(pre.ws_bytes, 0u);
  EXPECT_STREQ(cuda::attn::kernel_name(pre.kernel), "sm90_fp8");
  cuda::attn::Tuning forced;
  forced.sm90 = 3;  // any Hopper request runs the FP8 kernel for an fp8 q
  EXPECT_EQ(cuda::attn::make_plan(fp8_problem(2, 300, 900), kH200, forced, with90).kernel, Kernel::sm90_fp8);
  // Portable: A100, a build without sm_90a, Tuning::sm90 = 0, d 64, deterministic, decode shapes.
  cuda::attn::Tuning off;
  off.sm90 = 0;
  cuda::attn::Problem det = fp8_problem(1, 8192, 8192);
  det.deterministic = true;
  for (const auto& [p, caps, tune, targets, label] :
       {std::tuple{fp8_problem(1, 8192, 8192), kA100, cuda::attn::Tuning{}, with90, "A100"},
        std::tuple{fp8_problem(1, 8192, 8192), kH200, cuda::attn::Tuning{}, no90, "no sm_90a build"},
        std::tuple{fp8_problem(1, 8192, 8192), kH200, off, with90, "Tuning::sm90 = 0"},
        std::tuple{fp8_problem(1, 8192, 8192, 64), kH200, cuda::attn::Tuning{}, with90, "d 64"},
        std::tuple{det, kH200, cuda::attn::Tuning{}, with90, "deterministic"},
        std::tuple{fp8_problem(64, 1, 8192), kH200, cuda::attn::Tuning{}, with90, "decode"}}) {
    SCOPED_TRACE(label);
    const cuda::attn::Plan pl = cuda::attn::make_plan(p, caps, tune, targets);
    EXPECT_EQ(pl.kernel, Kernel::sm80);
    // q widened to bf16 in the workspace, after any split-KV partials.
    const std::size_t q_wide = cuda::align_up(std::size_t(p.total_q) * 32 * std::size_t(p.d) * 2);
    const cuda::attn::WorkspaceLayout l = cuda::attn::workspace_layout(pl, reinterpret_cast<void*>(4096));
    EXPECT_EQ(pl.ws_bytes, l.bytes);
    EXPECT_GE(pl.ws_bytes, q_wide);
    EXPECT_EQ(reinterpret_cast<char*>(l.q_wide) - reinterpret_cast<char*>(4096), std::ptrdiff_t(pl.ws_bytes - q_wide));
  }
  // The FP8 Hopper kernel loads K and V by cp.async: no TMA maps whatever Tuning::sm90_tma asks.
  for (int kv : {-1, 0, 1, 2}) {
    cuda::attn::Tuning t;
    t.sm90_tma = kv;
    const cuda::attn::Plan pl = cuda::attn::make_plan(fp8_problem(1, 8192, 8192), kH200, t, with90);
    EXPECT_EQ(pl.kernel, Kernel::sm90_fp8) << kv;
    EXPECT_FALSE(pl.sm90_tma) << kv;
    EXPECT_EQ(pl.sm90_kv_load, 0) << kv;
  }
  // Unsupported: fp8 q over a bf16 cache, or fp8 out.
  cuda::attn::Problem bad = fp8_problem(1, 100, 100);
  bad.kv_dtype = DType::bf16;
  EXPECT_FALSE(cuda::attn::can_implement(bad, kH200).ok());
  bad = fp8_problem(1, 100, 100);
  bad.out_dtype = DType::fp8_e4m3;
  EXPECT_FALSE(cuda::attn::can_implement(bad, kH200).ok());
}
