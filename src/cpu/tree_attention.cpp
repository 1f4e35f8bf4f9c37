// CPU oracle of tree_attention: per (query row, head), a softmax over the keys the row's mask selects.
// Math in double (tiny problems: at most kTreeMaxKeys keys per row).
#include "cpu/tree_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/attention_io.h"
#include "cpu/parallel.h"

namespace attnserve::cpu {
namespace {

int64_t at(const TensorView& t, int64_t i) { return load_index_at(t, i); }

// Every index value, before anything is written.
void check_values(const TreeAttentionArgs& a) {
  constexpr const char* op = "tree_attention";
  const int64_t b = a.key_slots.size(0), max_keys = a.key_slots.size(1), total_q = a.q.size(0);
  const int64_t num_slots = a.k_cache.size(0);
  ATTNSERVE_CHECK(at(a.cu_seqlens_q, 0) >= 0, op, ": cu_seqlens_q[0] = ", at(a.cu_seqlens_q, 0), " is negative");
  for (int64_t r = 0; r < b; ++r) {
    const int64_t q0 = at(a.cu_seqlens_q, r), q1 = at(a.cu_seqlens_q, r + 1), n = at(a.num_keys, r);
    ATTNSERVE_CHECK(q0 <= q1 && q1 <= total_q, op, ": cu_seqlens_q[", r, " .. ", r + 1, "] = ", q0, " .. ", q1,
                    " is not a row range within q's ", total_q, " rows");
    ATTNSERVE_CHECK(n >= 0 && n <= max_keys, op, ": num_keys[", r, "] = ", n, " is outside [0, ", max_keys, "]");
    ATTNSERVE_CHECK(q1 - q0 <= a.max_seqlen_q || a.max_seqlen_q == 0, op, ": request ", r, " has ", q1 - q0,
                    " query rows, more than max_seqlen_q = ", a.max_seqlen_q);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t s = load_index_at(a.key_slots, r, j);
      ATTNSERVE_CHECK(s >= 0 && s < num_slots, op, ": key_slots[", r, ", ", j, "] = ", s, " is outside the cache's ",
                      num_slots, " slots");
    }
  }
}

}  // namespace

void tree_attention(const TreeAttentionArgs& a) {
  check_values(a);
  const int64_t b = a.key_slots.size(0), h_q = a.q.size(1), d_q = a.q.size(2);
  const int64_t d_rope = a.q_rope.empty_view() ? 0 : a.q_rope.size(2), d_v = a.v_cache.size(2);
  const int64_t group = h_q / a.k_cache.size(1);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < b; ++r) {
    const int64_t q0 = at(a.cu_seqlens_q, r), q1 = at(a.cu_seqlens_q, r + 1), n = at(a.num_keys, r);
    parallel_for((q1 - q0) * h_q, [&](int64_t item) {
      const int64_t row = q0 + item / h_q, h = item % h_q, hk = h / group;
      const uint64_t bits = uint64_t(load_index_at(a.mask, row));
      std::vector<double> score(std::size_t(n), neg_inf);
      double m = neg_inf;
      for (int64_t j = 0; j < n; ++j) {
        if (!((bits >> j) & 1u)) continue;
        const int64_t slot = load_index_at(a.key_slots, r, j);
        double dot = 0;
        for (int64_t c = 0; c < d_q; ++c)
          dot += load_as<double>(a.q.data, a.q.dtype, offset_of(a.q, row, h, c)) *
                 load_as<double>(a.k_cache.data, a.k_cache.dtype, offset_of(a.k_cache, slot, hk, c));
        for (int64_t c = 0; c < d_rope; ++c)
          dot += load_as<double>(a.q_rope.data, a.q_rope.dtype, offset_of(a.q_rope, row, h, c)) *
                 load_as<double>(a.k_cache.data, a.k_cache.dtype, offset_of(a.k_cache, slot, hk, d_q + c));
        double s = double(a.softmax_scale) * dot;
        if (a.softcap > 0.f) s = double(a.softcap) * std::tanh(s / double(a.softcap));
        score[std::size_t(j)] = s;
        m = std::max(m, s);
      }
      std::vector<double> acc(std::size_t(d_v), 0.0);
      double total = 0;
      if (m != neg_inf) {
        for (int64_t j = 0; j < n; ++j) {
          if (score[std::size_t(j)] == neg_inf) continue;
          const double w = std::exp(score[std::size_t(j)] - m);
          total += w;
          const int64_t slot = load_index_at(a.key_slots, r, j);
          for (int64_t c = 0; c < d_v; ++c)
            acc[std::size_t(c)] +=
                w * load_as<double>(a.v_cache.data, a.v_cache.dtype, offset_of(a.v_cache, slot, hk, c));
        }
      }
      double lse = total > 0 ? m + std::log(total) : neg_inf;
      for (int64_t c = 0; c < d_v; ++c) acc[std::size_t(c)] = total > 0 ? acc[std::size_t(c)] / total : 0.0;
      if (!a.prefix_out.empty_view()) {  // merge with the prefix part's state (merge_state's rule)
        const double lp = load_as<double>(a.prefix_lse.data, a.prefix_lse.dtype, offset_of(a.prefix_lse, row, h));
        const double la = std::isfinite(lp) ? lp : neg_inf;
        const double mm = std::max(la, lse);
        const double wp = mm == neg_inf ? 0.0 : std::exp(la - mm), wt = mm == neg_inf ? 0.0 : std::exp(lse - mm);
        for (int64_t c = 0; c < d_v; ++c) {
          const double vp = load_as<double>(a.prefix_out.data, a.prefix_out.dtype, offset_of(a.prefix_out, row, h, c));
          acc[std::size_t(c)] = wp + wt > 0 ? (wp * vp + wt * acc[std::size_t(c)]) / (wp + wt) : 0.0;
        }
        lse = wp + wt > 0 ? mm + std::log(wp + wt) : neg_inf;
      }
      for (int64_t c = 0; c < d_v; ++c)
        store_as<double>(a.out.data, a.out.dtype, offset_of(a.out, row, h, c), acc[std::size_t(c)]);
      if (!a.lse.empty_view()) store_as<double>(a.lse.data, a.lse.dtype, offset_of(a.lse, row, h), lse);
    });
  }
}

}  // namespace attnserve::cpu
