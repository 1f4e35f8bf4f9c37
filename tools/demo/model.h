// What the engine loop drives: a model shape (dense GQA or DeepSeek-V3.2 sparse MLA) with its KV
// pools and attention backends, target and EAGLE draft workers, and the oracle check of a pass.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "attnserve/backend.h"
#include "oracle.h"
#include "options.h"
#include "scheduler.h"
#include "stats.h"

namespace demo {

// What the model's backends are built against: the scheduler's KV cache.
struct CacheShape {
  attnserve::TensorView req_to_token;  // the ReqToTokenPool's table
  int64_t num_slots = 0;               // slots of every KV pool (page 0 included)
  int max_context = 0;                 // the table's row width
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string describe() const = 0;
  // A worker's forward pass over a step (extend, decode, target verify, draft extend), every layer.
  virtual void forward(Worker w, const Step& step, bool check) = 0;
  // The draft worker's draft decode: the multi-step backend, one attention step per draft step.
  virtual void draft_decode(const Step& step, bool check) = 0;
};

inline attnserve::PlanCapacity capacity_of(const Settings& s, const CacheShape& c) {
  const int per_request = std::max(1, s.draft_tokens);
  return {.max_bs = s.max_bs,
          .max_num_tokens = std::max(s.prefill_budget, s.max_bs * per_request),
          .max_context_len = c.max_context};
}

// The rows a check recomputes: the last row of up to max_rows - 1 requests (spread over the batch),
// and one more row at random (an earlier row of a prefill chunk, say).
inline std::vector<int> rows_to_check(const std::vector<QueryRow>& rows, int max_rows, uint64_t salt) {
  std::vector<int> last;  // last row of each request
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (i + 1 == rows.size() || rows[i + 1].req != rows[i].req) last.push_back(int(i));
  std::vector<int> out;
  const int want = std::max(1, max_rows - 1);
  for (int k = 0; k < want && k < int(last.size()); ++k)
    out.push_back(last[std::size_t(int64_t(k) * int64_t(last.size()) / std::min<int>(want, int(last.size())))]);
  if (!rows.empty()) out.push_back(int(mix64(salt) % rows.size()));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// One checked row's outcome, recorded into the run's oracle statistics.
struct RowCheck {
  double err = 0;       // rel. L2 error of the output row
  bool ok = true;       // error within tolerance, and (sparse) a valid, best top-k selection
  std::string problem;  // what failed, for the message
  bool topk_checked = false, topk_sparse = false;
};

inline void record_checks(RunStats& stats, const char* model, Worker w, int layer, const Step& step,
                          const std::vector<QueryRow>& rows, const std::vector<int>& picked,
                          const std::vector<RowCheck>& results) {
  OracleStats& o = stats.oracle;
  for (std::size_t k = 0; k < picked.size(); ++k) {
    const RowCheck& c = results[k];
    ++o.rows;
    if (std::isfinite(c.err)) o.max_err = std::max(o.max_err, c.err);
    o.topk_rows += c.topk_checked;
    o.topk_sparse_rows += c.topk_sparse;
    if (!c.ok) {
      ++o.failed_rows;
      const QueryRow& row = rows[std::size_t(picked[k])];
      std::fprintf(stderr, "  [oracle] MISMATCH %s %s layer %d %s: request %d position %d: %s\n", model, to_string(w),
                   layer, attnserve::to_string(step.mode), step.reqs[std::size_t(row.req)].id, row.pos,
                   c.problem.c_str());
    }
  }
}

}  // namespace demo
