// FP8 paged prefill/extend (q, K, V fp8_e4m3 with per-(request, kv head) descales, out bf16/f16)
// against the CPU oracle on the dequantized values: the Hopper FP8 kernel (Kernel::sm90_fp8, forced
// and auto) and the portable kernel (fp8 q widened, Tuning::sm90 = 0).
//
// Tolerance (DESIGN.md's rule, with the FP8 kernel's same-precision reference): the Hopper kernel
// rounds P to e4m3 before O += P V (FP8 wgmma), so an f32 reference is not same-precision. The
// reference is a model of that rounding (fp8_model below: exact scores, exact row max, P = e4m3(exp(s -
// max)), O = v_descale * sum P V / sum exp(s - max)); the kernel's P are scaled by a running max <=
// the row max, i.e. never more rounded than the model's. out: rel_l2 vs fp64 <= 2 max(model, f32
// oracle) + bf16/f16 rounding. LSE: 2 x the f32 oracle's + 2^-12 (the FP8 wgmma adds in e8m13,
// truncated: the indexer's notes in bench/NOTES.md; a wrong LSE is off by O(1)). The portable
// kernel widens q exactly and computes P in bf16/f16: the plain rule against the f32 oracle.
// Also: -inf / zero rows exact, rows outside the batch untouched, two runs bit-identical.
#include <cmath>

#include "attnserve/numeric.h"
#include "cpu/parallel.h"
#include "gpu_attention_case.h"
#include "gpu_sm90_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Fp8Spec {
  AttnSpec base;  // base.dtype: out's dtype; q_lens, k_lens, heads, page size, mask...
  float descale_lo = 0.5f, descale_hi = 1.5f;
  bool descale = true;
};

// The case of AttnCase (shuffled pages, NaN in unowned slots, garbage table columns, rows outside
// the batch) with q quantized to e4m3 and q/k/v descales of the given range.
struct Fp8Case {
  AttnCase c;
  HostTensor q8, qds, kds, vds;
  Fp8Case(const Fp8Spec& s, std::mt19937_64& g) : c(with_fp8(s.base), g) {
    q8 = HostTensor(DType::fp8_e4m3, {c.total_q, s.base.h_q, s.base.d});
    for (int64_t i = 0; i < q8.numel(); ++i) q8.set(i, c.q.get(i));  // c.q is not strided (with_fp8)
    if (s.descale) {
      for (HostTensor* t : {&qds, &kds, &vds}) {
        *t = HostTensor(DType::f32, {c.b, s.base.h_kv});
        fill_uniform(*t, g, s.descale_lo, s.descale_hi);
      }
    }
  }
  static AttnSpec with_fp8(AttnSpec a) {
    a.fp8 = true;
    a.strided = false;
    return a;
  }
  PagedAttentionArgs args(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& p,
                          const TensorView& sl, const TensorView& cu, const TensorView& out, const TensorView& lse,
                          const TensorView& qd, const TensorView& kd, const TensorView& vd) const {
    PagedAttentionArgs a = c.args(q, k, v, p, sl, cu, out, lse, kd, vd);
    a.q_descale = qd;
    return a;
  }
  static TensorView view_or_empty(const HostTensor& t) { return t.bytes.size() > 1 ? t.view : TensorView{}; }
};

double descale_at(const HostTensor& t, int r, int hk, int h_kv) {
  return t.bytes.size() > 1 ? double(t.get(int64_t(r) * h_kv + hk)) : 1.0;
}

// The model of the FP8 kernel's rounding of P (see the header): out [total_q, h_q, d] in double.
std::vector<double> fp8_model(const Fp8Case& fc, const AttnSpec& s) {
  const AttnCase& c = fc.c;
  const int d = s.d, group = s.h_q / s.h_kv;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> out(size_t(c.total_q) * s.h_q * d, 0.0);
  std::vector<std::pair<int, int>> work;  // (request, row in request)
  for (int r = 0; r < c.b; ++r)
    for (int i = 0; i < s.q_lens[size_t(r)]; ++i) work.emplace_back(r, i);
  cpu::parallel_for(int64_t(work.size()), [&](int64_t item) {
    const int r = work[size_t(item)].first, i = work[size_t(item)].second;
    const int q0 = int(c.cu.get(r)), q_len = s.q_lens[size_t(r)], k_len = s.k_lens[size_t(r)];
    {
      const int64_t pos = int64_t(k_len) - q_len + i;
      int64_t lo = 0, hi = k_len;  // [lo, hi)
      if (s.causal) hi = std::min<int64_t>(hi, pos + 1);
      if (s.window_left >= 0) lo = std::max<int64_t>(lo, pos - s.window_left);
      if (s.window_right >= 0) hi = std::min<int64_t>(hi, pos + s.window_right + 1);
      for (int h = 0; h < s.h_q; ++h) {
        const int hk = h / group;
        if (hi <= lo) continue;  // out = 0
        const double qd = descale_at(fc.qds, r, hk, s.h_kv), kd = descale_at(fc.kds, r, hk, s.h_kv),
                     vd = descale_at(fc.vds, r, hk, s.h_kv);
        std::vector<double> sc(size_t(hi - lo));
        double mx = -INFINITY;
        for (int64_t j = lo; j < hi; ++j) {
          const int64_t page = int64_t(c.pt.get(int64_t(r) * c.max_pages + j / s.page_size));
          const int64_t slot = page * s.page_size + j % s.page_size;
          double dot = 0;
          for (int e = 0; e < d; ++e)
            dot += double(fc.q8.get((int64_t(q0 + i) * s.h_q + h) * d + e)) *
                   double(c.kc.get((slot * s.h_kv + hk) * d + e));
          double x = scale * qd * kd * dot;
          if (s.softcap > 0) x = s.softcap * std::tanh(x / s.softcap);
          sc[size_t(j - lo)] = x;
          mx = std::max(mx, x);
        }
        double l = 0;
        std::vector<double> acc(size_t(d), 0.0);
        for (int64_t j = lo; j < hi; ++j) {
          const double pj = std::exp(sc[size_t(j - lo)] - mx);
          l += pj;
          const double pq = to_float(to_fp8_e4m3(float(pj)));
          const int64_t page = int64_t(c.pt.get(int64_t(r) * c.max_pages + j / s.page_size));
          const int64_t slot = page * s.page_size + j % s.page_size;
          for (int e = 0; e < d; ++e) acc[size_t(e)] += pq * double(c.vc.get((slot * s.h_kv + hk) * d + e));
        }
        for (int e = 0; e < d; ++e) out[(size_t(q0 + i) * s.h_q + h) * d + e] = vd * acc[size_t(e)] / l;
      }
    }
  });
  return out;
}

struct Run {
  HostTensor out, lse;
  cuda::attn::Plan plan;
};

Run run_gpu(const Fp8Case& fc, const AttnSpec& s, const cuda::attn::Tuning& tune) {
  const AttnCase& c = fc.c;
  DeviceTensor dq(fc.q8), dk(c.kc), dv(c.vc), dp(c.pt), ds(c.seqlens), dc(c.cu);
  HostTensor out_h(s.dtype, {c.total_q, s.h_q, s.d}), lse_h(DType::f32, {c.total_q, s.h_q});
  set_nan(out_h);
  set_nan(lse_h);
  DeviceTensor dout(out_h), dlse(lse_h), dqd, dkd, dvd;
  TensorView qdv{}, kdv{}, vdv{};
  if (fc.qds.bytes.size() > 1) {
    dqd = DeviceTensor(fc.qds);
    dkd = DeviceTensor(fc.kds);
    dvd = DeviceTensor(fc.vds);
    qdv = dqd.view;
    kdv = dkd.view;
    vdv = dvd.view;
  }
  const PagedAttentionArgs a = fc.args(dq.view, dk.view, dv.view, dp.view, ds.view, dc.view, dout.view,
                                       s.with_lse ? dlse.view : TensorView{}, qdv, kdv, vdv);
  Run res;
  res.plan = cuda::attn::select(a, cuda::attn::current_device_caps(), tune);
  Buffer ws(std::max<std::size_t>(res.plan.ws_bytes, 256), Device::cuda());
  dout.poison();
  dlse.poison();
  cuda::attn::run(a, res.plan, Workspace{ws.data(), ws.bytes()}, {});
  stream_synchronize({});
  res.out = dout.download(out_h);
  res.lse = dlse.download(lse_h);
  return res;
}

// The references of one case: fp64 oracle, f32 oracle, the P-rounding model.
struct Refs {
  std::vector<double> out, lse;
  double err_f32 = 0, err_model = 0, err_f32_lse = 0;
};

// Checks each kernel of `kernels` (Tuning::sm90 value, the plan's kernel it must run) on one case; fp8_direct:
// Tuning::fp8_direct of every run (1: the plan must take the direct FP8 operands).
void check_fp8(const Fp8Spec& fs, std::mt19937_64& g, std::initializer_list<std::pair<int, cuda::attn::Kernel>> kernels,
               int fp8_direct = -1) {
  const AttnSpec& s = fs.base;
  Fp8Case fc(fs, g);
  const AttnCase& c = fc.c;
  const TensorView qd = Fp8Case::view_or_empty(fc.qds), kd = Fp8Case::view_or_empty(fc.kds),
                   vd = Fp8Case::view_or_empty(fc.vds);
  // fp64 oracle (fp8 tensors read natively, descales applied by the oracle).
  HostTensor out64(DType::f32, {c.total_q, s.h_q, s.d}), lse64(DType::f32, {c.total_q, s.h_q});
  set_nan(out64);
  set_nan(lse64);
  cpu::paged_attention(fc.args(fc.q8.view, c.kc.view, c.vc.view, c.pt.view, c.seqlens.view, c.cu.view, out64.view,
                               lse64.view, qd, kd, vd),
                       /*fp64=*/true);
  HostTensor out32(s.dtype, {c.total_q, s.h_q, s.d}), lse32(DType::f32, {c.total_q, s.h_q});
  set_nan(out32);
  set_nan(lse32);
  paged_attention(fc.args(fc.q8.view, c.kc.view, c.vc.view, c.pt.view, c.seqlens.view, c.cu.view, out32.view,
                          lse32.view, qd, kd, vd));

  auto batch_rows = [&](const std::vector<double>& all) {
    return std::vector<double>(all.begin() + int64_t(c.row_begin()) * s.h_q * s.d,
                               all.begin() + int64_t(c.row_end()) * s.h_q * s.d);
  };
  auto rows_of = [&](const HostTensor& t) { return batch_rows(to_doubles(t)); };
  Refs ref;
  ref.out = rows_of(out64);
  ref.lse = rows_as_doubles(lse64, c.row_begin(), c.row_end());
  ref.err_f32 = rel_l2(rows_of(out32), ref.out);
  ref.err_model = rel_l2(batch_rows(fp8_model(fc, s)), ref.out);
  ref.err_f32_lse = rel_l2(rows_as_doubles(lse32, c.row_begin(), c.row_end()), ref.lse);

  for (const auto& [sm90, expect_kernel] : kernels) {
    SCOPED_TRACE(std::string("Tuning::sm90 = ") + std::to_string(sm90) + ", expected kernel " +
                 cuda::attn::kernel_name(expect_kernel));
    const bool hopper = expect_kernel == cuda::attn::Kernel::sm90_fp8;
    const double tol = hopper ? 2 * std::max(ref.err_model, ref.err_f32) + unit_roundoff(s.dtype)
                              : tolerance_by_rule(ref.err_f32, s.dtype);
    const double tol_lse = 2 * ref.err_f32_lse + (hopper ? 1.0 / 4096 : 1e-5);
    cuda::attn::Tuning tune;
    tune.sm90 = sm90;
    tune.fp8_direct = fp8_direct;
    const Run first = run_gpu(fc, s, tune);
    ASSERT_EQ(int(first.plan.kernel), int(expect_kernel))
        << "the plan runs " << cuda::attn::kernel_name(first.plan.kernel);
    if (fp8_direct > 0) EXPECT_EQ(first.plan.fp8_direct, 1) << "the direct FP8 operands do not run";
    const double err = rel_l2(rows_of(first.out), ref.out);
    EXPECT_LE(err, tol) << "out: rel_l2 " << err << " vs tolerance " << tol << " (P-rounding model " << ref.err_model
                        << ", f32 oracle " << ref.err_f32 << ")";
    double err_lse = 0;
    if (s.with_lse) {
      err_lse = rel_l2(rows_as_doubles(first.lse, c.row_begin(), c.row_end()), ref.lse);
      EXPECT_LE(err_lse, tol_lse) << "lse: rel_l2 " << err_lse << " (f32 oracle " << ref.err_f32_lse << ")";
    }
    std::printf("    [%s] out rel_l2 %.3e (tol %.3e; model %.3e, f32 %.3e)  lse %.3e (tol %.3e)\n",
                cuda::attn::kernel_name(first.plan.kernel), err, tol, ref.err_model, ref.err_f32, err_lse, tol_lse);
    // Rows outside the batch are never written (still the poison's 0xff bytes).
    for (int row = 0; row < c.total_q; ++row) {
      if (row >= c.row_begin() && row < c.row_end()) continue;
      for (int64_t i = int64_t(row) * s.h_q * s.d * 2; i < int64_t(row + 1) * s.h_q * s.d * 2; ++i)
        if (first.out.bytes[size_t(i)] != 0xff) {
          ADD_FAILURE() << "out row " << row << " written outside the batch";
          break;
        }
    }
    const Run second = run_gpu(fc, s, tune);
    EXPECT_TRUE(same_bytes(first.out, second.out)) << "two runs differ (out)";
    if (s.with_lse) EXPECT_TRUE(same_bytes(first.lse, second.lse)) << "two runs differ (lse)";
  }
}

// Each spec through the FP8 Hopper kernel (forced) and the portable kernel with an fp8 q.
void check_both(const Fp8Spec& fs, std::mt19937_64& g) {
  check_fp8(fs, g, {{8, cuda::attn::Kernel::sm90_fp8}, {0, cuda::attn::Kernel::sm80}});
}

Fp8Spec prefill(int len, int h_q, int h_kv, int page) {
  Fp8Spec f;
  f.base.q_lens = {len};
  f.base.k_lens = {len};
  f.base.h_q = h_q;
  f.base.h_kv = h_kv;
  f.base.page_size = page;
  return f;
}

}  // namespace

TEST(GpuAttentionFp8, AutoPicksHopperFp8ForPrefill) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  check_fp8(prefill(700, 32, 8, 16), g, {{-1, cuda::attn::Kernel::sm90_fp8}});
}

TEST(GpuAttentionFp8, PrefillLongCausalGqa32x8) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  check_both(prefill(1337, 32, 8, 16), g);  // not a multiple of the 128-row or 128-key tile
}

TEST(GpuAttentionFp8, PageSizesAndGqa) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  const int pages[] = {1, 16, 64, 128};
  const int groups[][2] = {{8, 8}, {16, 4}, {32, 4}, {8, 1}};  // GQA 1, 4, 8, 8 (MQA)
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("page " + std::to_string(pages[i]) + " h " + std::to_string(groups[i][0]) + "/" +
                 std::to_string(groups[i][1]));
    Fp8Spec f = prefill(300 + 37 * i, groups[i][0], groups[i][1], pages[i]);
    check_both(f, g);
  }
}

TEST(GpuAttentionFp8, ExtendWithPrefixEmptyAndOneTokenRequests) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  Fp8Spec f;
  f.base.q_lens = {200, 0, 1, 333, 1, 129};
  f.base.k_lens = {200 + 700, 50, 1, 333 + 1000, 400, 129 + 5};
  f.base.h_q = 16;
  f.base.h_kv = 4;
  f.base.page_size = 16;
  check_both(f, g);
  Fp8Spec z = f;  // k_len 0 rows see no key: out 0, lse -inf
  z.base.q_lens = {3, 130};
  z.base.k_lens = {0, 200};
  z.base.causal = false;
  check_both(z, g);
}

TEST(GpuAttentionFp8, NonCausalWindowsSoftcapNoLse) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  Fp8Spec f = prefill(517, 16, 4, 16);
  f.base.causal = false;
  check_both(f, g);
  Fp8Spec w = prefill(600, 16, 4, 64);
  w.base.window_left = 100;
  check_both(w, g);
  Fp8Spec w2 = prefill(400, 8, 2, 16);
  w2.base.causal = false;
  w2.base.window_left = 50;
  w2.base.window_right = 30;
  check_both(w2, g);
  Fp8Spec cap = prefill(450, 16, 4, 16);
  cap.base.softcap = 5.f;
  check_both(cap, g);
  Fp8Spec nolse = prefill(300, 16, 4, 16);
  nolse.base.with_lse = false;
  check_both(nolse, g);
}

// The Hopper FP8 kernel on pages of 16 / 48 / 64 / 128 slots with prefill and extend lengths off the tile, and
// invalid page ids inside the keys (read as zeros; the oracle reads a page of zeros there).
TEST(GpuAttentionFp8, PagesAndInvalidPageIds) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (int page : {16, 48, 64, 128}) {
    SCOPED_TRACE("page " + std::to_string(page));
    Fp8Spec f;
    f.base.q_lens = {300, 1, 77};
    f.base.k_lens = {300 + 400, 260, 77 + 130};
    f.base.h_q = 16;
    f.base.h_kv = 4;
    f.base.page_size = page;
    check_fp8(f, g, {{8, cuda::attn::Kernel::sm90_fp8}});
  }
  Fp8Spec bad = prefill(600, 16, 4, 64);
  bad.base.invalid_page_every = 3;
  SCOPED_TRACE("invalid page ids, page 64");
  check_fp8(bad, g, {{8, cuda::attn::Kernel::sm90_fp8}});
}

TEST(GpuAttentionFp8, DescalesAndF16Out) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  Fp8Spec none = prefill(400, 16, 4, 16);  // no descales at all (all 1)
  none.descale = false;
  check_both(none, g);
  Fp8Spec wide = prefill(400, 16, 4, 16);  // descales far from 1, sharper softmax
  wide.descale_lo = 0.05f;
  wide.descale_hi = 3.f;
  check_both(wide, g);
  Fp8Spec f16 = prefill(400, 16, 4, 16);
  f16.base.dtype = DType::f16;
  check_both(f16, g);
}

// Decode and verify with an fp8 q on the portable kernel (q widened exactly to out's dtype): the widening kernel
// and the direct FP8 operands (Tuning::fp8_direct, 16-row tiles, d 64 / 128), GQA 1 / 4 / 8, pages 1 / 16 / 64,
// bf16 and f16 out, forced splits, zero-length and one-token requests.
TEST(GpuAttentionFp8, DecodeVerifyPortableDirectOperands) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Case {
    int ps, d, hq, hkv, q_len;
    DType out;
  };
  for (const Case k : {Case{16, 128, 32, 8, 1, DType::bf16}, Case{1, 128, 8, 8, 1, DType::f16},
                       Case{64, 64, 16, 4, 4, DType::bf16}, Case{16, 64, 32, 4, 1, DType::f16}}) {
    SCOPED_TRACE("page " + std::to_string(k.ps) + " d " + std::to_string(k.d) + " h " + std::to_string(k.hq) + "/" +
                 std::to_string(k.hkv) + " q_len " + std::to_string(k.q_len));
    Fp8Spec f;
    f.base.dtype = k.out;
    f.base.q_lens = {k.q_len, k.q_len, 1, 1};
    f.base.k_lens = {1200, 333, 0, 1};
    f.base.h_q = k.hq;
    f.base.h_kv = k.hkv;
    f.base.d = k.d;
    f.base.page_size = k.ps;
    for (int direct : {0, 1}) {
      SCOPED_TRACE(direct ? "fp8_direct" : "widening");
      check_fp8(f, g, {{0, cuda::attn::Kernel::sm80}}, direct);
    }
  }
}
