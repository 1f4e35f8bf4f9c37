// CPU oracle of merging partial attention states (out, lse) over disjoint key sets:
//   s = log(sum_i exp(s_i)),  v = sum_i v_i * exp(s_i - s).
// Parts with an infinite s_i of either sign are empty ("no keys": FlashMLA reports +inf for an empty
// row, FA3 and attnserve -inf; SEED_NOTES 19) and skipped (their v_i is never read); if all are,
// v = 0 and s = -inf.
// The math is in double: it costs nothing here and keeps the oracle exact enough to check others.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/attention_io.h"
#include "cpu/cpu_ops.h"
#include "cpu/parallel.h"

namespace attnserve::cpu {
namespace {

// Merges the parts of one (token, head): part_v[i] is a view [d] of part i, part_s[i] its lse.
void merge_one(const std::vector<TensorView>& part_v, std::vector<double> part_s, const TensorView& v_out, void* s_out,
               DType s_out_dtype, int64_t s_out_offset) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (double& s : part_s) s = std::isinf(s) ? neg_inf : s;
  const int64_t d = v_out.size(0);
  double s_max = neg_inf;
  for (double s : part_s) s_max = std::max(s_max, s);
  if (s_max == neg_inf) {
    for (int64_t c = 0; c < d; ++c) store_as<double>(v_out.data, v_out.dtype, c * v_out.strides[0], 0.0);
    if (s_out) store_as<double>(s_out, s_out_dtype, s_out_offset, neg_inf);
    return;
  }
  std::vector<double> acc(size_t(d), 0.0);
  double total = 0;
  for (size_t i = 0; i < part_v.size(); ++i) {
    if (part_s[i] == neg_inf) continue;
    const double w = std::exp(part_s[i] - s_max);
    total += w;
    const TensorView& v = part_v[i];
    for (int64_t c = 0; c < d; ++c) acc[size_t(c)] += w * load_as<double>(v.data, v.dtype, c * v.strides[0]);
  }
  for (int64_t c = 0; c < d; ++c)
    store_as<double>(v_out.data, v_out.dtype, c * v_out.strides[0], acc[size_t(c)] / total);
  if (s_out) store_as<double>(s_out, s_out_dtype, s_out_offset, s_max + std::log(total));
}

// v [.., tokens, heads, d] -> the [d] view at (token, head).
TensorView row_of(const TensorView& v, int64_t token, int64_t head) { return v.select(0, token).select(0, head); }

}  // namespace

void merge_state(const MergeStateArgs& a) {
  const int64_t heads = a.v_out.size(1);
  parallel_for(a.v_out.size(0) * heads, [&](int64_t item) {
    const int64_t t = item / heads, h = item % heads;
    const std::vector<TensorView> vs = {row_of(a.v_a, t, h), row_of(a.v_b, t, h)};
    const std::vector<double> ss = {load_as<double>(a.s_a.data, a.s_a.dtype, offset_of(a.s_a, t, h)),
                                    load_as<double>(a.s_b.data, a.s_b.dtype, offset_of(a.s_b, t, h))};
    const bool has_s = !a.s_out.empty_view();
    merge_one(vs, ss, row_of(a.v_out, t, h), has_s ? a.s_out.data : nullptr, a.s_out.dtype,
              has_s ? offset_of(a.s_out, t, h) : 0);
  });
}

void merge_states(const MergeStatesArgs& a) {
  const int64_t n = a.v_parts.size(0), heads = a.v_out.size(1);
  parallel_for(a.v_out.size(0) * heads, [&](int64_t item) {
    const int64_t t = item / heads, h = item % heads;
    std::vector<TensorView> vs;
    std::vector<double> ss;
    for (int64_t i = 0; i < n; ++i) {
      vs.push_back(row_of(a.v_parts.select(0, i), t, h));
      ss.push_back(load_as<double>(a.s_parts.data, a.s_parts.dtype, offset_of(a.s_parts, i, t, h)));
    }
    const bool has_s = !a.s_out.empty_view();
    merge_one(vs, ss, row_of(a.v_out, t, h), has_s ? a.s_out.data : nullptr, a.s_out.dtype,
              has_s ? offset_of(a.s_out, t, h) : 0);
  });
}

}  // namespace attnserve::cpu
