// Host-only helpers of the op plans (src/cuda/<op>/plan.cpp, built with g++ in every build): grid
// arithmetic, the split-KV heuristic, the one workspace-layout helper, and can_implement's answer.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

namespace attnserve::cuda {

inline int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }  // results that fit an int
inline int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr std::size_t kWorkspaceAlign = 256;  // every workspace region starts on a 256-byte boundary
constexpr std::size_t align_up(std::size_t x, std::size_t a = kWorkspaceAlign) { return (x + a - 1) / a * a; }

// Split-KV count, FlashAttention-style: split only when the `base` CTAs leave the `slots` CTA slots of
// the GPU underfilled; the smallest split count (<= max_splits, <= 64) whose wave efficiency is within
// 85% of the best.
inline int heuristic_splits(int64_t base, int slots, int max_splits) {
  if (base <= 0 || double(base) >= 0.8 * slots) return 1;
  const int max_s = std::max(1, std::min(64, max_splits));
  double best = 0, eff[65] = {};
  for (int s = 1; s <= max_s; ++s) {
    const double waves = double(base) * s / slots;
    eff[s] = waves / std::ceil(waves);
    best = std::max(best, eff[s]);
  }
  for (int s = 1; s <= max_s; ++s)
    if (eff[s] >= 0.85 * best) return s;
  return 1;
}

// One workspace layout both counts and fills: a plan's layout function takes its regions in order
// from a carver; with a null base it only counts (make_plan: the size), with the caller's memory it
// hands out the pointers (the launcher). Regions are 256-byte aligned relative to the base.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(std::size_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ = align_up(used_ + count * sizeof(T));
    return p;
  }
  std::size_t bytes() const { return used_; }

 private:
  char* base_;
  std::size_t used_ = 0;
};

// can_implement's answer: ok, or the reason naming what is unsupported.
struct Support {
  std::string reason;  // empty: supported
  bool ok() const { return reason.empty(); }
  explicit operator bool() const { return ok(); }
};
template <typename... Parts>
Support unsupported(const Parts&... parts) {
  std::ostringstream os;
  ((os << parts), ...);
  return Support{os.str()};
}

// A support list written once, e.g. `using HeadDims = IntList<64, 128, 256>;`: the plans' checks, the
// launchers' dispatch and the error messages all read it.
template <int... Vs>
struct IntList {
  static constexpr bool contains(int v) { return ((v == Vs) || ...); }
  static std::string str() {
    std::string s;
    ((s += (s.empty() ? "" : ", ") + std::to_string(Vs)), ...);
    return s;
  }
  // Calls f(std::integral_constant<int, V>) for the V equal to v; false when v is not in the list.
  template <typename F>
  static bool dispatch(int v, F&& f) {
    return ((v == Vs ? (f(std::integral_constant<int, Vs>{}), true) : false) || ...);
  }
};

}  // namespace attnserve::cuda
