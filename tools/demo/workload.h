// The trace: requests with random prompt and output lengths, arriving over the first steps.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace demo {

struct RequestSpec {
  int id = 0;
  int arrival = 0;  // the scheduler step at which the request arrives
  int prompt_len = 1;
  int output_len = 1;  // tokens to generate (the first comes with the end of the prefill)
};

struct WorkloadShape {
  int requests = 1, min_prompt = 1, max_prompt = 1, max_output = 1;
  int arrival_gap = 0;  // steps between arrivals, uniform in [0, arrival_gap]
};

inline std::vector<RequestSpec> make_workload(const WorkloadShape& w, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 17);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<RequestSpec> reqs;
  int t = 0;
  for (int i = 0; i < w.requests; ++i) {
    if (i > 0) t += uniform(0, w.arrival_gap);
    reqs.push_back({.id = i,
                    .arrival = t,
                    .prompt_len = uniform(w.min_prompt, w.max_prompt),
                    .output_len = uniform(1, w.max_output)});
  }
  return reqs;
}

}  // namespace demo
