// Random paged-attention problems for the tests: shuffled page ids, page tables longer than needed
// (with out-of-range garbage past the used pages), NaN in every cache slot no request owns, optional
// strided (non-contiguous) views, and query rows outside the batch on both sides. Plus the checks
// every attention test runs: against the brute force by the tolerance rule, and "only batch rows
// written".
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnserve/ops/attention.h"
#include "common/test_util.h"
#include "cpu/cpu_ops.h"
#include "cpu/reference_attention.h"

namespace attnserve::test {

struct PagedSpec {
  std::vector<int> q_lens{1}, k_lens{17};
  int h_q = 4, h_kv = 1;
  int d = 64, d_v = 0;  // d_v = 0: same as d
  int page_size = 16;
  DType dtype = DType::f32;  // q, out (and K/V unless kv_fp8); f64 runs the oracle's fp64 mode
  bool kv_fp8 = false, descale = false;
  bool causal = true;
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  float softmax_scale = 0.f;  // 0: 1/sqrt(d)
  bool with_lse = true;
  int rows_before = 0;  // cu_seqlens_q[0]
  int rows_after = 2;   // rows of q past cu_seqlens_q[b]
  int spare_pages = 2, spare_table_cols = 2;
  bool strided = false;  // q, caches, out, lse as views with padding (last dim contiguous)
};

// Stores x at element `offset` of a view (f64 exactly).
inline void set_at(const TensorView& t, int64_t offset, double x) {
  if (t.dtype == DType::f64) {
    static_cast<double*>(t.data)[offset] = x;
  } else {
    cpu::store_from_float(t.data, t.dtype, offset, float(x));
  }
}

// Fills every element of a 2-4 dim view with uniform values in [-range, range).
inline void fill_view(const TensorView& t, std::mt19937_64& g, double range) {
  std::uniform_real_distribution<double> u(-range, range);
  std::array<int64_t, kMaxDims> idx{};
  const int64_t n = t.numel();
  for (int64_t e = 0; e < n; ++e) {
    int64_t rem = e, off = 0;
    for (int dim = t.ndim - 1; dim >= 0; --dim) {
      idx[dim] = rem % t.shape[dim];
      rem /= t.shape[dim];
      off += idx[dim] * t.strides[dim];
    }
    set_at(t, off, u(g));
  }
}

struct PagedCase {
  PagedCase() = default;
  PagedCase(PagedCase&&) = default;
  PagedCase(const PagedCase&) = delete;
  HostTensor q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, out, lse, k_descale, v_descale;
  PagedAttentionArgs args;
};

// A padded tensor and a [.., :extent] view of it when `strided`; else a plain contiguous one.
inline HostTensor padded(DType t, std::vector<int64_t> shape, bool strided, TensorView& view) {
  std::vector<int64_t> alloc = shape;
  if (strided) {
    alloc.back() += 8;
    if (alloc.size() >= 3) alloc[alloc.size() - 2] += 1;
  }
  HostTensor h;
  switch (alloc.size()) {
    case 2: h = HostTensor(t, {alloc[0], alloc[1]}); break;
    case 3: h = HostTensor(t, {alloc[0], alloc[1], alloc[2]}); break;
    default: h = HostTensor(t, {alloc[0], alloc[1], alloc[2], alloc[3]}); break;
  }
  view = h.view;
  for (size_t dim = 0; dim < shape.size(); ++dim) view = view.slice(int(dim), 0, shape[dim]);
  return h;
}

inline PagedCase make_paged_case(const PagedSpec& s, std::mt19937_64& g) {
  PagedCase c;
  const int64_t b = int64_t(s.q_lens.size()), d_v = s.d_v ? s.d_v : s.d, ps = s.page_size;
  const int64_t batch_rows = std::accumulate(s.q_lens.begin(), s.q_lens.end(), int64_t(0));
  const int64_t total_q = s.rows_before + batch_rows + s.rows_after;
  int64_t used_pages = 0, max_pages = 0;
  for (int k : s.k_lens) {
    used_pages += (k + ps - 1) / ps;
    max_pages = std::max<int64_t>(max_pages, (k + ps - 1) / ps);
  }
  const int64_t num_pages = used_pages + s.spare_pages, table_cols = max_pages + s.spare_table_cols;
  const DType kv_dtype = s.kv_fp8 ? DType::fp8_e4m3 : s.dtype;
  const DType lse_dtype = s.dtype == DType::f64 ? DType::f64 : DType::f32;
  auto& a = c.args;

  c.q = padded(s.dtype, {total_q, s.h_q, s.d}, s.strided, a.q);
  fill_view(c.q.view, g, 4.0);  // q.k with k in [-1.5, 1.5]: scaled scores of std ~2
  c.k_cache = padded(kv_dtype, {num_pages, ps, s.h_kv, s.d}, s.strided, a.k_cache);
  c.v_cache = padded(kv_dtype, {num_pages, ps, s.h_kv, d_v}, s.strided, a.v_cache);
  poison(c.k_cache);  // slots no request owns stay NaN: reading one poisons the result
  poison(c.v_cache);
  c.out = padded(s.dtype, {total_q, s.h_q, d_v}, s.strided, a.out);
  if (s.with_lse) c.lse = padded(lse_dtype, {total_q, s.h_q}, s.strided, a.lse);

  // Page ids: a random permutation, handed out request by request; unused table entries are garbage.
  std::vector<int32_t> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), g);
  c.page_table = HostTensor(DType::i32, {b, table_cols});
  c.cache_seqlens = HostTensor(DType::i32, {b});
  c.cu_seqlens_q = HostTensor(DType::i32, {b + 1});
  size_t next = 0;
  c.cu_seqlens_q.ptr<int32_t>()[0] = s.rows_before;
  std::uniform_real_distribution<double> kv(-1.5, 1.5), vv(-1.0, 1.0);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t k_len = s.k_lens[size_t(r)];
    c.cache_seqlens.ptr<int32_t>()[r] = int32_t(k_len);
    c.cu_seqlens_q.ptr<int32_t>()[r + 1] = c.cu_seqlens_q.ptr<int32_t>()[r] + s.q_lens[size_t(r)];
    for (int64_t i = 0; i < table_cols; ++i)
      c.page_table.ptr<int32_t>()[r * table_cols + i] = i * ps < k_len ? ids[next++] : int32_t(num_pages + 1000 + i);
    for (int64_t j = 0; j < k_len; ++j) {
      const int64_t page = c.page_table.ptr<int32_t>()[r * table_cols + j / ps];
      for (int64_t h = 0; h < s.h_kv; ++h) {
        for (int64_t e = 0; e < s.d; ++e) set_at(a.k_cache, cpu::offset_of(a.k_cache, page, j % ps, h, e), kv(g));
        for (int64_t e = 0; e < d_v; ++e) set_at(a.v_cache, cpu::offset_of(a.v_cache, page, j % ps, h, e), vv(g));
      }
    }
  }
  a.page_table = c.page_table.view;
  a.cache_seqlens = c.cache_seqlens.view;
  a.cu_seqlens_q = c.cu_seqlens_q.view;
  if (s.descale) {
    c.k_descale = HostTensor(DType::f32, {b, s.h_kv});
    c.v_descale = HostTensor(DType::f32, {b, s.h_kv});
    fill_uniform(c.k_descale, g, 0.5f, 2.f);
    fill_uniform(c.v_descale, g, 0.5f, 2.f);
    a.k_descale = c.k_descale.view;
    a.v_descale = c.v_descale.view;
  }
  a.max_seqlen_q = *std::max_element(s.q_lens.begin(), s.q_lens.end());
  a.softmax_scale = s.softmax_scale > 0 ? s.softmax_scale : float(1.0 / std::sqrt(double(s.d)));
  a.causal = s.causal;
  a.window_left = s.window_left;
  a.window_right = s.window_right;
  a.softcap = s.softcap;
  return c;
}

// The MLA view of a case built with h_kv = 1, d = d_v + d_rope: q = [q_nope | q_rope], kv = k_cache.
inline MlaAttentionArgs mla_args_of(const PagedCase& c) {
  const PagedAttentionArgs& p = c.args;
  const int64_t d_v = p.out.size(2), d = p.q.size(2);
  MlaAttentionArgs m;
  m.q_nope = p.q.slice(2, 0, d_v);
  m.q_rope = p.q.slice(2, d_v, d);
  m.kv_cache = p.k_cache;
  m.page_table = p.page_table;
  m.cache_seqlens = p.cache_seqlens;
  m.cu_seqlens_q = p.cu_seqlens_q;
  m.out = p.out;
  m.lse = p.lse;
  m.max_seqlen_q = p.max_seqlen_q;
  m.softmax_scale = p.softmax_scale;
  m.causal = p.causal;
  m.window_left = p.window_left;
  m.window_right = p.window_right;
  m.softcap = p.softcap;
  return m;
}

// Values of an output view [total_q, h] or [total_q, h, d] at the batch rows, row-major.
inline std::vector<double> batch_values(const TensorView& t, const std::vector<bool>& row_in_batch) {
  std::vector<double> v;
  const int64_t inner = t.ndim == 3 ? t.size(2) : 1;
  for (int64_t r = 0; r < t.size(0); ++r) {
    if (!row_in_batch[size_t(r)]) continue;
    for (int64_t h = 0; h < t.size(1); ++h)
      for (int64_t c = 0; c < inner; ++c)
        v.push_back(ref_read(t, r * t.strides[0] + h * t.strides[1] + c * t.stride(-1)));
  }
  return v;
}
inline std::vector<double> batch_values(const std::vector<double>& ref, int64_t per_row,
                                        const std::vector<bool>& row_in_batch) {
  std::vector<double> v;
  for (size_t r = 0; r < row_in_batch.size(); ++r)
    if (row_in_batch[r]) v.insert(v.end(), ref.begin() + int64_t(r) * per_row, ref.begin() + int64_t(r + 1) * per_row);
  return v;
}

// Every element of `backing` outside the batch rows of `view` still holds the poison bytes (0xff).
inline ::testing::AssertionResult only_batch_rows_written(const HostTensor& backing, const TensorView& view,
                                                          const std::vector<bool>& row_in_batch) {
  const int64_t esize = int64_t(dtype_size(view.dtype));
  const int64_t base = (static_cast<const uint8_t*>(view.data) - backing.bytes.data()) / esize;
  const int64_t n_elems = int64_t(backing.bytes.size()) / esize;
  std::vector<bool> mine(size_t(n_elems), false);
  const int64_t inner = view.ndim == 3 ? view.size(2) : 1;
  for (int64_t r = 0; r < view.size(0); ++r) {
    if (!row_in_batch[size_t(r)]) continue;
    for (int64_t h = 0; h < view.size(1); ++h)
      for (int64_t c = 0; c < inner; ++c)
        mine[size_t(base + r * view.strides[0] + h * view.strides[1] + c * view.stride(-1))] = true;
  }
  for (int64_t e = 0; e < n_elems; ++e) {
    if (mine[size_t(e)]) continue;
    for (int64_t k = 0; k < esize; ++k)
      if (backing.bytes[size_t(e * esize + k)] != 0xff)
        return ::testing::AssertionFailure() << "element " << e << " outside the batch rows was written";
  }
  return ::testing::AssertionSuccess();
}

// Compares out (and lse, if given) at the batch rows with the fp64 brute force: to 1e-12 for the
// fp64 mode (f64 outputs), else by the tolerance rule against the float brute force.
inline void expect_outputs_match(const TensorView& out, const TensorView& lse, const ReferenceAttention& ref64,
                                 const ReferenceAttention& ref32, const std::string& label) {
  const auto& rows = ref64.row_in_batch;
  const int64_t h_q = out.size(1), per_row = h_q * out.size(2);
  const bool fp64 = out.dtype == DType::f64;
  const std::vector<double> want = batch_values(ref64.out, per_row, rows);
  const double same_precision_err = rel_l2(batch_values(ref32.out, per_row, rows), want);
  const double out_tol = fp64 ? 1e-12 : tolerance_by_rule(same_precision_err, out.dtype);
  EXPECT_LE(rel_l2(batch_values(out, rows), want), out_tol) << label << ": out";
  if (lse.empty_view()) return;
  const std::vector<double> want_lse = batch_values(ref64.lse, h_q, rows);
  const double same_precision_lse_err = rel_l2(batch_values(ref32.lse, h_q, rows), want_lse);
  const double lse_tol = fp64 ? 1e-12 : tolerance_by_rule(same_precision_lse_err, DType::f32);
  EXPECT_LE(rel_l2(batch_values(lse, rows), want_lse), lse_tol) << label << ": lse";
}

// The above, plus: nothing outside the batch rows of out and lse was written.
inline void expect_matches_reference(const PagedCase& c, const ReferenceAttention& ref64,
                                     const ReferenceAttention& ref32, const std::string& label) {
  expect_outputs_match(c.args.out, c.args.lse, ref64, ref32, label);
  EXPECT_TRUE(only_batch_rows_written(c.out, c.args.out, ref64.row_in_batch)) << label << ": out";
  if (!c.args.lse.empty_view())
    EXPECT_TRUE(only_batch_rows_written(c.lse, c.args.lse, ref64.row_in_batch)) << label << ": lse";
}

// Builds the case, runs paged attention (fp64 mode for f64, else the public dispatcher) and checks it.
inline void check_paged(const PagedSpec& spec, std::mt19937_64& g, const std::string& label) {
  PagedCase c = make_paged_case(spec, g);
  poison(c.out);
  if (spec.with_lse) poison(c.lse);
  if (spec.dtype == DType::f64) {
    cpu::paged_attention(c.args, /*fp64=*/true);
  } else {
    paged_attention(c.args);
  }
  expect_matches_reference(c, reference_paged_attention<double>(c.args), reference_paged_attention<float>(c.args),
                           label + " [" + std::string(dtype_name(spec.dtype)) + "]");
}

// The same problem in every precision: fp64 mode (to 1e-12), f32 and bf16 through the dispatcher.
inline void check_paged_all_precisions(PagedSpec spec, std::mt19937_64& g, const std::string& label) {
  for (DType t : {DType::f64, DType::f32, DType::bf16}) {
    spec.dtype = t;
    check_paged(spec, g, label);
  }
}

// Same for MLA: spec.h_kv = 1, spec.d = d_v + d_rope, spec.d_v = d_v.
inline void check_mla(const PagedSpec& spec, std::mt19937_64& g, const std::string& label) {
  PagedCase c = make_paged_case(spec, g);
  poison(c.out);
  if (spec.with_lse) poison(c.lse);
  const MlaAttentionArgs m = mla_args_of(c);
  if (spec.dtype == DType::f64) {
    cpu::mla_attention(m, /*fp64=*/true);
  } else {
    mla_attention(m);
  }
  expect_matches_reference(c, reference_mla_attention<double>(m), reference_mla_attention<float>(m),
                           label + " [" + std::string(dtype_name(spec.dtype)) + "]");
}

inline void check_mla_all_precisions(PagedSpec spec, std::mt19937_64& g, const std::string& label) {
  for (DType t : {DType::f64, DType::f32, DType::bf16}) {
    spec.dtype = t;
    check_mla(spec, g, label);
  }
}

}  // namespace attnserve::test
