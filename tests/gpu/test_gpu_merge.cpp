// merge_state / merge_states on CUDA against the CPU oracle (double math). The same-precision
// reference of the tolerance rule is a float32 merge written here; -inf parts (empty key sets)
// must contribute nothing and all-empty rows give v = 0, s = -inf exactly.
#include <cmath>

#include "attnserve/ops/attention.h"
#include "gpu_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// float32 merge of n parts (for the tolerance): parts [n, rows, d], s [n, rows].
void merge_f32(const std::vector<std::vector<float>>& v, const std::vector<std::vector<float>>& s, int rows, int d,
               std::vector<double>& out, std::vector<double>& s_out) {
  out.assign(size_t(rows) * d, 0.0);
  s_out.assign(size_t(rows), -INFINITY);
  for (int r = 0; r < rows; ++r) {
    float m = -INFINITY;
    for (auto& sp : s) m = std::fmax(m, sp[size_t(r)]);
    if (m == -INFINITY) continue;
    float sum = 0.f;
    std::vector<float> acc(size_t(d), 0.f);
    for (size_t p = 0; p < v.size(); ++p) {
      if (s[p][size_t(r)] == -INFINITY) continue;
      const float w = std::exp(s[p][size_t(r)] - m);
      sum += w;
      for (int e = 0; e < d; ++e) acc[size_t(e)] += w * v[p][size_t(r) * d + e];
    }
    for (int e = 0; e < d; ++e) out[size_t(r) * d + e] = acc[size_t(e)] / sum;
    s_out[size_t(r)] = m + std::log(sum);
  }
}

void fill_lse(HostTensor& s, std::mt19937_64& g, double p_neg_inf) {
  std::uniform_real_distribution<float> u(-6.f, 6.f);
  std::bernoulli_distribution inf(p_neg_inf);
  for (int64_t i = 0; i < s.numel(); ++i) s.set(i, inf(g) ? -INFINITY : u(g));
}

// The tolerance rule's (values, lses) for parts v [n, tokens, heads, d], s [n, tokens, heads] merged into the
// oracle's ref / sref: from the float32 merge's distance to the oracle.
std::pair<double, double> rule_tolerances(const HostTensor& v, const HostTensor& s, const HostTensor& ref,
                                          const HostTensor& sref, DType out_t) {
  const int n = int(v.view.size(0)), d = int(v.view.size(3));
  const int rows = int(v.view.size(1) * v.view.size(2));
  std::vector<std::vector<float>> vv(static_cast<size_t>(n)), ss(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    for (int i = 0; i < rows * d; ++i) vv[size_t(p)].push_back(v.get(int64_t(p) * rows * d + i));
    for (int i = 0; i < rows; ++i) ss[size_t(p)].push_back(s.get(int64_t(p) * rows + i));
  }
  std::vector<double> f32_out, f32_s;
  merge_f32(vv, ss, rows, d, f32_out, f32_s);
  return {tolerance_by_rule(rel_l2(f32_out, to_doubles(ref)), out_t),
          tolerance_by_rule(rel_l2(f32_s, to_doubles(sref)), DType::f32) + 1e-6};
}

void check_merge_states(DType in_t, DType out_t, int n, std::mt19937_64& g, int d = 128) {
  const int tokens = 37, heads = 5, rows = tokens * heads;
  HostTensor v(in_t, {n, tokens, heads, d}), s(DType::f32, {n, tokens, heads});
  fill_uniform(v, g, -2.f, 2.f);
  fill_lse(s, g, 0.25);
  for (int p = 0; p < n; ++p) s.set(int64_t(p) * rows + 3, -INFINITY);  // row 3: every part empty
  HostTensor ref(DType::f32, {tokens, heads, d}), sref(DType::f32, {tokens, heads});
  merge_states({.v_parts = v.view, .s_parts = s.view, .v_out = ref.view, .s_out = sref.view});
  const auto [tol, tol_s] = rule_tolerances(v, s, ref, sref, out_t);

  DeviceTensor dv(v), ds(s);
  HostTensor out_h(out_t, {tokens, heads, d}), s_h(DType::f32, {tokens, heads});
  DeviceTensor dout(out_h), dsout(s_h);
  HostTensor first;
  for (int run = 0; run < 2; ++run) {
    dout.poison();
    dsout.poison();
    merge_states({.v_parts = dv.view, .s_parts = ds.view, .v_out = dout.view, .s_out = dsout.view});
    HostTensor got = dout.download(out_h), got_s = dsout.download(s_h);
    EXPECT_LE(rel_l2(to_doubles(got), to_doubles(ref)), tol);
    EXPECT_LE(rel_l2(to_doubles(got_s), to_doubles(sref)), tol_s);
    if (run == 0) first = got;
    else EXPECT_TRUE(same_bytes(first, got));
  }
}

}  // namespace

TEST(GpuMerge, MergeStatesDtypes) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (auto [in_t, out_t] : {std::pair{DType::f32, DType::bf16},
                             {DType::f32, DType::f32},
                             {DType::bf16, DType::bf16},
                             {DType::f16, DType::f32}}) {
    SCOPED_TRACE(std::string(dtype_name(in_t)) + " -> " + std::string(dtype_name(out_t)));
    check_merge_states(in_t, out_t, 5, g);
  }
  check_merge_states(DType::f32, DType::f16, 1, g);  // a single part passes through
  // Head dims the 16-byte path does not divide (it falls back to one element a thread) and MLA's 512.
  check_merge_states(DType::bf16, DType::bf16, 3, g, 100);
  check_merge_states(DType::f32, DType::f32, 3, g, 37);
  check_merge_states(DType::f32, DType::bf16, 4, g, 512);
}

// The kernel reads 16 bytes a thread where dims, strides and pointers allow, else one element: the same
// parts given contiguously and as a view into rows padded by one element (offset one element: neither
// pointer nor strides aligned) must give the same bits (same arithmetic at either width).
TEST(GpuMerge, VectorAndElementWidthsGiveTheSameBits) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Case {
    DType in_t, out_t;
    int n, d;
  };
  for (const Case k : {Case{DType::bf16, DType::bf16, 3, 128}, Case{DType::f32, DType::bf16, 4, 512},
                       Case{DType::f16, DType::f32, 2, 64}, Case{DType::f32, DType::f32, 3, 100}}) {
    SCOPED_TRACE(std::string(dtype_name(k.in_t)) + " -> " + std::string(dtype_name(k.out_t)) + " d " +
                 std::to_string(k.d));
    const int tokens = 19, heads = 3, n = k.n, d = k.d;
    HostTensor padded(k.in_t, {n, tokens, heads, d + 1}), v(k.in_t, {n, tokens, heads, d});
    HostTensor s(DType::f32, {n, tokens, heads});
    fill_uniform(padded, g, -2.f, 2.f);
    fill_lse(s, g, 0.25);
    for (int64_t r = 0; r < v.numel() / d; ++r)
      for (int e = 0; e < d; ++e) v.set(r * d + e, padded.get(r * (d + 1) + 1 + e));
    HostTensor ref(DType::f32, {tokens, heads, d}), sref(DType::f32, {tokens, heads});
    merge_states({.v_parts = v.view, .s_parts = s.view, .v_out = ref.view, .s_out = sref.view});
    const auto [tol, tol_s] = rule_tolerances(v, s, ref, sref, k.out_t);
    DeviceTensor dv(v), dpad(padded), ds(s);
    HostTensor out_h(k.out_t, {tokens, heads, d}), s_h(DType::f32, {tokens, heads});
    DeviceTensor dout(out_h), dsout(s_h);
    HostTensor wide, wide_s;
    for (const bool offset : {false, true}) {
      dout.poison();
      dsout.poison();
      const TensorView parts = offset ? dpad.view.slice(3, 1, d + 1) : dv.view;
      merge_states({.v_parts = parts, .s_parts = ds.view, .v_out = dout.view, .s_out = dsout.view});
      HostTensor got = dout.download(out_h), got_s = dsout.download(s_h);
      EXPECT_LE(rel_l2(to_doubles(got), to_doubles(ref)), tol);
      EXPECT_LE(rel_l2(to_doubles(got_s), to_doubles(sref)), tol_s);
      if (!offset) {
        wide = got;
        wide_s = got_s;
      } else {
        EXPECT_TRUE(same_bytes(wide, got)) << "the element-wide path changes the output bits";
        EXPECT_TRUE(same_bytes(wide_s, got_s)) << "the element-wide path changes the lse bits";
      }
    }
  }
}

TEST(GpuMerge, MergeStateTwoParts) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    SCOPED_TRACE(dtype_name(t));
    const int tokens = 50, heads = 4, d = 64;
    HostTensor va(t, {tokens, heads, d}), vb(t, {tokens, heads, d});
    HostTensor sa(DType::f32, {tokens, heads}), sb(DType::f32, {tokens, heads});
    fill_uniform(va, g);
    fill_uniform(vb, g);
    fill_lse(sa, g, 0.2);
    fill_lse(sb, g, 0.2);
    sa.set(0, -INFINITY);
    sb.set(0, -INFINITY);  // both empty
    sa.set(1, INFINITY);   // FlashMLA's empty row (+inf): b alone
    sa.set(2, INFINITY);
    sb.set(2, -INFINITY);  // empty with both signs
    HostTensor ref(t, {tokens, heads, d}), sref(DType::f32, {tokens, heads});
    merge_state(
        {.v_a = va.view, .s_a = sa.view, .v_b = vb.view, .s_b = sb.view, .v_out = ref.view, .s_out = sref.view});
    HostTensor ref64(DType::f32, {tokens, heads, d});
    {
      HostTensor wa(DType::f32, {tokens, heads, d}), wb(DType::f32, {tokens, heads, d});
      for (int64_t i = 0; i < wa.numel(); ++i) {
        wa.set(i, va.get(i));
        wb.set(i, vb.get(i));
      }
      merge_state({.v_a = wa.view, .s_a = sa.view, .v_b = wb.view, .s_b = sb.view, .v_out = ref64.view});
    }
    const double tol = tolerance_by_rule(rel_l2(to_doubles(ref), to_doubles(ref64)), t) + 1e-6;
    DeviceTensor dva(va), dvb(vb), dsa(sa), dsb(sb);
    HostTensor out_h(t, {tokens, heads, d}), s_h(DType::f32, {tokens, heads});
    DeviceTensor dout(out_h), dsout(s_h);
    dout.poison();
    dsout.poison();
    merge_state(
        {.v_a = dva.view, .s_a = dsa.view, .v_b = dvb.view, .s_b = dsb.view, .v_out = dout.view, .s_out = dsout.view});
    HostTensor got = dout.download(out_h), got_s = dsout.download(s_h);
    EXPECT_LE(rel_l2(to_doubles(got), to_doubles(ref64)), tol);
    EXPECT_LE(rel_l2(to_doubles(got_s), to_doubles(sref)), 1e-6);
    EXPECT_EQ(got_s.get(0), -INFINITY);
    for (int e = 0; e < d; ++e) EXPECT_EQ(got.get(e), 0.f);
    EXPECT_EQ(got_s.get(1), sb.get(1));
    EXPECT_EQ(got_s.get(2), -INFINITY);
    for (int e = 0; e < d; ++e) EXPECT_EQ(got.get(2 * d + e), 0.f);
  }
}
