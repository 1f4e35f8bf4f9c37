// Random paged-attention problems for the GPU tests, checked against the CPU oracle:
// shuffled page ids, page-table columns past the used pages filled with garbage, NaN in every
// cache slot no request owns, query rows outside the batch on both sides (must stay untouched).
// Check: fp64 oracle = reference; the f32 oracle on the same narrow tensors sets the tolerance
// (DESIGN.md rule); outputs poisoned before each launch; two launches give identical bits.
// Optional: invalid page ids inside the keys (AttnSpec::invalid_page_every), which the GPU kernels read as
// zeros, so the oracle reads a page of zeros there; twins (other tunings) against the same oracle and bit
// for bit against the spec's run.
#pragma once
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "attnserve/ops/attention.h"
#include "cpu/cpu_ops.h"
#include "cuda/attention/attention_api.h"
#include "gpu_test_util.h"

namespace attnserve::test {

struct AttnSpec {
  std::vector<int> q_lens{1}, k_lens{100};
  int h_q = 8, h_kv = 2, d = 128, page_size = 16;
  int d_v = 0;  // v (and out) head dim; 0: d
  DType dtype = DType::bf16;
  bool fp8 = false, descale = false;
  bool causal = true;
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool with_lse = true;
  bool deterministic = false;
  int rows_before = 1, rows_after = 2;
  int extra_table_cols = 2;
  bool strided = false;         // q and out as head-slices of wider tensors
  cuda::attn::Tuning tuning{};  // forced split count / stages / tile rows
  float q_range = 2.f;
  // > 0: every invalid_page_every-th page of each request (positions n - 1, 2n - 1, ...) has an invalid id
  // in the GPU's page table (alternately negative and >= num_pages), and the oracle's table points there to
  // a page of zeros (what the kernels read for an invalid id). The CUDA path does not check page ids.
  int invalid_page_every = 0;
  int dv() const { return d_v > 0 ? d_v : d; }
};

// n random lengths in [lo, hi].
inline std::vector<int> random_lens(std::mt19937_64& g, int n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

// Extend: k_len = prefix + q_len for each request.
inline std::vector<int> with_prefix(std::mt19937_64& g, const std::vector<int>& q_lens, int max_prefix) {
  std::uniform_int_distribution<int> d(0, max_prefix);
  std::vector<int> k(q_lens.size());
  for (size_t i = 0; i < q_lens.size(); ++i) k[i] = q_lens[i] + d(g);
  return k;
}

inline void set_nan(HostTensor& t) { std::memset(t.bytes.data(), 0xff, t.bytes.size()); }

struct AttnCase {
  AttnSpec spec;
  int b = 0, total_q = 0, num_pages = 0, max_pages = 0, max_q = 0;
  HostTensor q, kc, vc, pt, seqlens, cu, kds, vds;
  HostTensor pt_gpu;  // the GPU's page table where it differs from the oracle's (invalid_page_every)
  TensorView q_view;  // q (possibly strided)

  explicit AttnCase(const AttnSpec& s, std::mt19937_64& g) : spec(s) {
    b = int(s.q_lens.size());
    const int ps = s.page_size;
    std::vector<int> pages_of(static_cast<size_t>(b));
    for (int r = 0; r < b; ++r) {
      pages_of[size_t(r)] = (s.k_lens[size_t(r)] + ps - 1) / ps;
      max_pages = std::max(max_pages, pages_of[size_t(r)]);
      max_q = std::max(max_q, s.q_lens[size_t(r)]);
    }
    max_pages += s.extra_table_cols;
    int used = 0;
    for (int x : pages_of) used += x;
    num_pages = used + 3;
    total_q = s.rows_before + s.rows_after;
    for (int x : s.q_lens) total_q += x;

    const int hq_alloc = s.strided ? s.h_q + 1 : s.h_q;
    q = HostTensor(s.dtype, {total_q, hq_alloc, s.d});
    fill_uniform(q, g, -s.q_range, s.q_range);
    q_view = q.view.slice(1, 0, s.h_q);

    const DType kv_t = s.fp8 ? DType::fp8_e4m3 : s.dtype;
    kc = HostTensor(kv_t, {num_pages, ps, s.h_kv, s.d});
    vc = HostTensor(kv_t, {num_pages, ps, s.h_kv, s.dv()});
    set_nan(kc);
    set_nan(vc);
    std::vector<int> ids(static_cast<size_t>(num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), g);
    pt = HostTensor(DType::i32, {b, max_pages});
    std::uniform_int_distribution<int> garbage(-1000, 1000000);
    for (int64_t i = 0; i < pt.numel(); ++i) pt.ptr<int32_t>()[i] = garbage(g);
    const float kv_range = s.fp8 ? 4.f : 1.f;
    std::uniform_real_distribution<float> u(-kv_range, kv_range);
    int next = 0;
    for (int r = 0; r < b; ++r) {
      for (int i = 0; i < pages_of[size_t(r)]; ++i) pt.ptr<int32_t>()[r * max_pages + i] = ids[size_t(next++)];
      for (int j = 0; j < s.k_lens[size_t(r)]; ++j) {
        const int64_t page = pt.ptr<int32_t>()[r * max_pages + j / ps], slot = page * ps + j % ps;
        for (int h = 0; h < s.h_kv; ++h) {
          for (int c = 0; c < s.d; ++c) kc.set((slot * s.h_kv + h) * s.d + c, u(g));
          for (int c = 0; c < s.dv(); ++c) vc.set((slot * s.h_kv + h) * s.dv() + c, u(g));
        }
      }
    }
    if (s.invalid_page_every > 0) {
      // ids[used] is no request's page: zeros in K and V; the GPU's table gets invalid ids instead.
      const int zero_page = ids[size_t(used)];
      for (int64_t e = 0; e < int64_t(ps) * s.h_kv * s.d; ++e) kc.set(int64_t(zero_page) * ps * s.h_kv * s.d + e, 0.f);
      for (int64_t e = 0; e < int64_t(ps) * s.h_kv * s.dv(); ++e)
        vc.set(int64_t(zero_page) * ps * s.h_kv * s.dv() + e, 0.f);
      pt_gpu = pt;
      for (int r = 0; r < b; ++r)
        for (int i = s.invalid_page_every - 1; i < pages_of[size_t(r)]; i += s.invalid_page_every) {
          pt.ptr<int32_t>()[r * max_pages + i] = zero_page;
          pt_gpu.ptr<int32_t>()[r * max_pages + i] = (i / s.invalid_page_every) % 2 ? -1 - i : num_pages + i;
        }
    }
    seqlens = HostTensor(DType::i32, {b});
    cu = HostTensor(DType::i32, {b + 1});
    cu.ptr<int32_t>()[0] = s.rows_before;
    for (int r = 0; r < b; ++r) {
      seqlens.ptr<int32_t>()[r] = s.k_lens[size_t(r)];
      cu.ptr<int32_t>()[r + 1] = cu.ptr<int32_t>()[r] + s.q_lens[size_t(r)];
    }
    if (s.descale) {
      kds = HostTensor(DType::f32, {b, s.h_kv});
      vds = HostTensor(DType::f32, {b, s.h_kv});
      fill_uniform(kds, g, 0.1f, 0.6f);
      fill_uniform(vds, g, 0.1f, 0.6f);
    }
  }

  int row_begin() const { return spec.rows_before; }
  int row_end() const { return total_q - spec.rows_after; }

  PagedAttentionArgs args(const TensorView& qv, const TensorView& k, const TensorView& v, const TensorView& p,
                          const TensorView& sl, const TensorView& c, const TensorView& out, const TensorView& lse,
                          const TensorView& kd, const TensorView& vd) const {
    PagedAttentionArgs a{
        .q = qv, .k_cache = k, .v_cache = v, .page_table = p, .cache_seqlens = sl, .cu_seqlens_q = c, .out = out};
    a.lse = lse;
    a.k_descale = kd;
    a.v_descale = vd;
    a.max_seqlen_q = max_q;
    a.softmax_scale = 1.f / std::sqrt(float(spec.d));
    a.causal = spec.causal;
    a.window_left = spec.window_left;
    a.window_right = spec.window_right;
    a.softcap = spec.softcap;
    a.deterministic = spec.deterministic;
    return a;
  }
};

// Widens a narrow float tensor to f32 (exact); fp8 stays fp8 (the oracle reads it natively).
inline HostTensor widen(const HostTensor& t) {
  if (t.view.dtype == DType::fp8_e4m3 || t.view.dtype == DType::f32) return t;
  HostTensor w(DType::f32, {1});
  w.bytes.assign(size_t(t.numel()) * 4 + 1, 0);
  w.view = t.view;
  w.view.dtype = DType::f32;
  w.view.data = w.bytes.data();
  for (int64_t i = 0; i < t.numel(); ++i) w.set(i, t.get(i));
  return w;
}

struct GpuResult {
  HostTensor out, lse;
  cuda::attn::Kernel kernel = cuda::attn::Kernel::sm80;  // the kernel the plan chose
  int fp8_direct = 0;                                     // and its FP8 operand path (Plan::fp8_direct)
};

// Runs the case on the GPU (poisoned outputs, optional tuning) and returns the downloaded tensors.
inline GpuResult run_on_gpu(const AttnCase& c, const cuda::attn::Tuning& tune) {
  DeviceTensor dq(c.q), dk(c.kc), dv(c.vc), dp(c.pt_gpu.view.ndim > 0 ? c.pt_gpu : c.pt), ds(c.seqlens), dc(c.cu);
  const int hq_alloc = c.spec.strided ? c.spec.h_q + 1 : c.spec.h_q;
  HostTensor out_h(c.spec.dtype, {c.total_q, hq_alloc, c.spec.dv()}), lse_h(DType::f32, {c.total_q, c.spec.h_q});
  set_nan(out_h);
  set_nan(lse_h);
  DeviceTensor dout(out_h), dlse(lse_h);
  DeviceTensor dkd, dvd;
  TensorView kdv{}, vdv{};
  if (c.spec.descale) {
    dkd = DeviceTensor(c.kds);
    dvd = DeviceTensor(c.vds);
    kdv = dkd.view;
    vdv = dvd.view;
  }
  TensorView qv = dq.view.slice(1, 0, c.spec.h_q), ov = dout.view.slice(1, 0, c.spec.h_q);
  PagedAttentionArgs a =
      c.args(qv, dk.view, dv.view, dp.view, ds.view, dc.view, ov, c.spec.with_lse ? dlse.view : TensorView{}, kdv, vdv);
  const cuda::attn::Config cfg = cuda::attn::select(a, cuda::attn::current_device_caps(), tune);
  Buffer ws(std::max<std::size_t>(cfg.ws_bytes, 256), Device::cuda());
  dout.poison();
  dlse.poison();
  cuda::attn::run(a, Workspace{ws.data(), ws.bytes()}, {}, tune);
  stream_synchronize({});
  return {dout.download(out_h), dlse.download(lse_h), cfg.kernel, cfg.fp8_direct};
}

// Another tuning of the same case (check_case's twins).
struct TuningTwin {
  cuda::attn::Tuning tuning;
  std::string name;
};

// Full check of one spec; returns the GPU result of the first run (for cross-batch comparisons). Each twin
// then runs on the same case against the same oracle, and must give the first run's bits.
inline GpuResult check_case(const AttnSpec& spec, std::mt19937_64& g, const std::vector<TuningTwin>& twins = {}) {
  AttnCase c(spec, g);
  const int hq_alloc = spec.strided ? spec.h_q + 1 : spec.h_q;
  // fp64 oracle on exact f32 widenings.
  HostTensor q64 = widen(c.q), k64 = widen(c.kc), v64 = widen(c.vc);
  const int dv = spec.dv();
  HostTensor out64(DType::f32, {c.total_q, hq_alloc, dv}), lse64(DType::f32, {c.total_q, spec.h_q});
  set_nan(out64);
  set_nan(lse64);
  TensorView kd = spec.descale ? c.kds.view : TensorView{}, vd = spec.descale ? c.vds.view : TensorView{};
  {
    PagedAttentionArgs a = c.args(q64.view.slice(1, 0, spec.h_q), k64.view, v64.view, c.pt.view, c.seqlens.view,
                                  c.cu.view, out64.view.slice(1, 0, spec.h_q), lse64.view, kd, vd);
    cpu::paged_attention(a, /*fp64=*/true);
  }
  // Same-precision reference: the f32 oracle on the narrow tensors.
  HostTensor out32(spec.dtype, {c.total_q, hq_alloc, dv}), lse32(DType::f32, {c.total_q, spec.h_q});
  set_nan(out32);
  set_nan(lse32);
  paged_attention(c.args(c.q_view, c.kc.view, c.vc.view, c.pt.view, c.seqlens.view, c.cu.view,
                         out32.view.slice(1, 0, spec.h_q), lse32.view, kd, vd));

  auto batch_out = [&](const HostTensor& t) {
    std::vector<double> v;
    for (int row = c.row_begin(); row < c.row_end(); ++row)
      for (int h = 0; h < spec.h_q; ++h)
        for (int e = 0; e < dv; ++e) v.push_back(t.get((int64_t(row) * hq_alloc + h) * dv + e));
    return v;
  };
  const std::vector<double> ref = batch_out(out64), lse_ref = rows_as_doubles(lse64, c.row_begin(), c.row_end());
  const double err_ref = rel_l2(batch_out(out32), ref);
  const double err_ref_lse = rel_l2(rows_as_doubles(lse32, c.row_begin(), c.row_end()), lse_ref);
  const double tol = tolerance_by_rule(err_ref, spec.dtype);
  const double tol_lse = 2 * err_ref_lse + 1e-5;  // f32 LSE: exp2/log2 approximations on the GPU

  auto expect_matches_oracle = [&](const GpuResult& r, const std::string& what) {
    SCOPED_TRACE(what);
    const double err = rel_l2(batch_out(r.out), ref);
    EXPECT_LE(err, tol) << "out: rel_l2 " << err << " vs tolerance " << tol << " (f32 oracle " << err_ref << ")";
    if (spec.with_lse) {
      const double err_lse = rel_l2(rows_as_doubles(r.lse, c.row_begin(), c.row_end()), lse_ref);
      EXPECT_LE(err_lse, tol_lse) << "lse: rel_l2 " << err_lse;
    }
    // Rows outside the batch, and the padding head of strided outputs, are never written.
    for (int row = 0; row < c.total_q; ++row) {
      const bool outside = row < c.row_begin() || row >= c.row_end();
      for (int h = 0; h < hq_alloc; ++h) {
        if (!outside && h < spec.h_q) continue;
        for (int e = 0; e < dv; ++e) {
          const int64_t i = (int64_t(row) * hq_alloc + h) * dv + e;
          const uint8_t* p = r.out.bytes.data() + i * 2;
          if (p[0] != 0xff || p[1] != 0xff) {
            ADD_FAILURE() << "out row " << row << " head " << h << " written outside the batch";
            row = c.total_q;
            break;
          }
        }
        if (row == c.total_q) break;
      }
    }
  };
  GpuResult first = run_on_gpu(c, spec.tuning);
  expect_matches_oracle(first, "the spec's tuning");
  GpuResult second = run_on_gpu(c, spec.tuning);
  EXPECT_TRUE(same_bytes(first.out, second.out)) << "two runs differ (out)";
  if (spec.with_lse) EXPECT_TRUE(same_bytes(first.lse, second.lse)) << "two runs differ (lse)";
  // Every case also runs the portable kernel with each of the default's decode / verify switches turned off
  // (MT = 1 tiles; MT = 4 ignores them): per-row page-id lookups instead of lane page ids (Tuning::lane_pages
  // 0, below page runs) and the modulo ring indexing instead of the ring counters (Tuning::ring_counters 0).
  // Each against the same oracle, and where the spec's run took the portable kernel too, with its bits (same
  // slots, same arithmetic) — unless the switch changed the FP8 operand path (the lean key loop, the FP8 default,
  // needs the ring counters: without them the direct kernel runs, one rounding more a score).
  struct Switch {
    int cuda::attn::Tuning::*field;
    const char* name;
  };
  for (const Switch sw : {Switch{&cuda::attn::Tuning::lane_pages, "lane page ids"},
                          Switch{&cuda::attn::Tuning::ring_counters, "ring counters"}}) {
    if (spec.tuning.*sw.field >= 0 || spec.tuning.sm90 > 0) continue;
    cuda::attn::Tuning off = spec.tuning;
    off.*sw.field = 0;
    const GpuResult twin = run_on_gpu(c, off);
    EXPECT_EQ(twin.kernel, cuda::attn::Kernel::sm80);
    expect_matches_oracle(twin, std::string(sw.name) + " off");
    if (first.kernel == cuda::attn::Kernel::sm80 && first.fp8_direct == twin.fp8_direct) {
      EXPECT_TRUE(same_bytes(first.out, twin.out)) << sw.name << " change the output bits";
      if (spec.with_lse) {
        EXPECT_TRUE(same_bytes(first.lse, twin.lse)) << sw.name << " change the lse bits";
      }
    }
  }
  for (const TuningTwin& tw : twins) {
    const GpuResult r = run_on_gpu(c, tw.tuning);
    expect_matches_oracle(r, tw.name);
    EXPECT_EQ(r.kernel, first.kernel) << tw.name;
    EXPECT_TRUE(same_bytes(first.out, r.out)) << tw.name << ": out bits differ from the spec's tuning";
    if (spec.with_lse) EXPECT_TRUE(same_bytes(first.lse, r.lse)) << tw.name << ": lse bits differ";
  }
  return first;
}

}  // namespace attnserve::test
