// What a run measures: forward passes per mode, time per phase, oracle results; and the timer that
// charges a phase (on CUDA it waits for the stream first, so the time is the phase's own).
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include "activations.h"
#include "attnserve/batch.h"
#include "attnserve/runtime.h"

namespace demo {

enum class Phase { inputs, plan, index_store, indexer, attention, oracle, count };
inline const char* to_string(Phase p) {
  switch (p) {
    case Phase::inputs: return "activations + upload";
    case Phase::plan: return "plan";
    case Phase::index_store: return "index-key store";
    case Phase::indexer: return "indexer + top-k";
    case Phase::attention: return "KV store + attention";
    case Phase::oracle: return "oracle";
    case Phase::count: break;
  }
  return "?";
}

constexpr int kNumModes = 6;  // ForwardMode values

struct OracleStats {
  int64_t passes = 0, rows = 0, failed_rows = 0;
  double max_err = 0;            // worst rel. L2 error of a checked row
  int64_t topk_rows = 0;         // rows whose top-k selection was checked against the oracle's scores
  int64_t topk_sparse_rows = 0;  // of which had more keys than top-k (a real selection)
  std::array<int64_t, kNumModes> passes_by_mode{};
};

struct RunStats {
  std::array<double, std::size_t(Phase::count)> seconds{};
  // Forward passes per (worker, mode); draft decode counts one per draft step with attention.
  std::array<std::array<int64_t, kNumModes>, 2> passes{};
  std::array<std::array<int64_t, kNumModes>, 2> rows{};          // query rows
  std::array<std::array<int64_t, kNumModes>, 2> graph_passes{};  // of the passes: on captured graph metadata
  OracleStats oracle;
  double wall = 0;

  void count_pass(Worker w, attnserve::ForwardMode m, int64_t query_rows, bool graph) {
    ++passes[std::size_t(w)][std::size_t(m)];
    rows[std::size_t(w)][std::size_t(m)] += query_rows;
    graph_passes[std::size_t(w)][std::size_t(m)] += graph;
  }
};

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Charges the time from construction to destruction to a phase.
class PhaseTimer {
 public:
  PhaseTimer(RunStats& s, Phase p, attnserve::Device d) : s_(s), p_(p), cuda_(d.is_cuda()) {
    if (cuda_) attnserve::stream_synchronize({});
    t0_ = now_seconds();
  }
  ~PhaseTimer() {
    try {
      if (cuda_) attnserve::stream_synchronize({});  // an error here shows again at the next call
    } catch (...) {
    }
    s_.seconds[std::size_t(p_)] += now_seconds() - t0_;
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  RunStats& s_;
  Phase p_;
  bool cuda_;
  double t0_ = 0;
};

}  // namespace demo
