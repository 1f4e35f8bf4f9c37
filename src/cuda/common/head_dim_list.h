// A support list of (q/k, v) head-dim pairs, e.g. `HeadDimList<HeadDimPair<128, 128>, HeadDimPair<192, 128>>`,
// read like IntList (plan_util.h) by the plans, the launchers and the error messages. str() writes a
// pair as "d" when both dims agree and "d/d_v" otherwise: "64, 128, 192/128". Host-visible.
#pragma once
#include <string>

namespace attnserve::cuda {

template <int D, int DV>
struct HeadDimPair {
  static constexpr int d = D, d_v = DV;
};

template <typename... Pairs>
struct HeadDimList {
  static constexpr bool contains(int d, int d_v) { return ((d == Pairs::d && d_v == Pairs::d_v) || ...); }
  static std::string str() {
    std::string s;
    ((s += (s.empty() ? "" : ", ") + std::to_string(Pairs::d) +
           (Pairs::d == Pairs::d_v ? std::string() : "/" + std::to_string(Pairs::d_v))),
     ...);
    return s;
  }
  // Calls f(pair) with the HeadDimPair equal to (d, d_v); false when the list has no such pair.
  template <typename F>
  static bool dispatch(int d, int d_v, F&& f) {
    return ((d == Pairs::d && d_v == Pairs::d_v ? (f(Pairs{}), true) : false) || ...);
  }
};

}  // namespace attnserve::cuda
