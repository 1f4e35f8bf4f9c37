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
#include "options.h"
#include "oracle.h"
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
  const int per_request = std::max({1, s.draft_tokens, s.spec_topk});
  return {.max_bs = s.max_bs,
          .max_num_tokens = std::max(s.prefill_budget, s.max_bs * per_request),
          .max_context_len = c.max_context};
}

// ---- CUDA-graph batches: the engine captures graphs for batch sizes 1, 2, 4, 8, 16, 24, 32, ... up to
// its graph max batch size; a decode-like batch (decode, draft decode, target verify, draft extend) of
// bs requests runs on the smallest captured size >= bs, padded. Here the capture writes the backend's
// padding metadata, each step replays the batch into it, and the kernels then launch on the padded
// rows (no stream capture: the same work a graph launch replays).
inline std::vector<int> graph_batch_sizes(int graph_max_bs) {
  std::vector<int> sizes;
  for (int bs = 1; bs < graph_max_bs; bs = bs < 16 ? bs * 2 : bs + 8) sizes.push_back(bs);
  if (graph_max_bs > 0) sizes.push_back(graph_max_bs);
  return sizes;
}
inline bool graph_mode(attnserve::ForwardMode m) { return attnserve::is_graph_capturable(m); }
inline int graph_rows_per_request(attnserve::ForwardMode m, int draft_tokens, int topk) {
  if (m == attnserve::ForwardMode::target_verify || m == attnserve::ForwardMode::draft_extend) return draft_tokens;
  return m == attnserve::ForwardMode::draft_decode ? topk : 1;  // draft trees: one row per branch
}
// The captured batch size a step runs on (0: eager).
inline int graph_bs_for(const Settings& s, const Step& step) {
  if (!graph_mode(step.mode)) return 0;
  for (int g : graph_batch_sizes(s.graph_max_bs))
    if (g >= step.batch_size()) return g;
  return 0;
}

// Plans a pass: the replay of the captured graph metadata when the batch fits one, else an eager
// plan. Returns the query rows the kernels run on (the graph's, padding included).
struct PassShape {
  int64_t rows = 0;  // query rows the kernels run on (live rows first, then padding)
  bool graph = false;
};
template <class Backend>
PassShape plan_pass(Backend& b, const Step& step, int64_t live_rows, const Settings& s,
                    const attnserve::TensorView& r2t, RunStats& stats) {
  PhaseTimer t(stats, Phase::plan, s.device);
  const int g = graph_bs_for(s, step);
  if (g == 0) {
    b.init_forward_metadata(step.batch(r2t));
    return {live_rows, false};
  }
  b.init_forward_metadata_replay_cuda_graph(g, step.batch(r2t));
  return {int64_t(g) * graph_rows_per_request(step.mode, s.draft_tokens, s.spec_topk), true};
}

// Captures every graph the worker's backends run: target decode and verify; draft decode, draft
// extend and the multi-step draft decode.
template <class Backend, class MultiStep>
void capture_graphs(const Settings& s, Backend& b, Worker w, MultiStep* steps) {
  if (s.graph_max_bs == 0) return;
  using attnserve::ForwardMode;
  const int D = std::max(1, s.draft_tokens);
  b.init_cuda_graph_state(s.graph_max_bs, s.graph_max_bs * D);
  if (steps) steps->init_cuda_graph_state(s.graph_max_bs, s.graph_max_bs * std::max(1, s.spec_topk));
  for (int bs : graph_batch_sizes(s.graph_max_bs)) {
    b.init_forward_metadata_capture_cuda_graph(bs, bs, ForwardMode::decode);
    if (s.spec && w == Worker::target)
      b.init_forward_metadata_capture_cuda_graph(bs, bs * D, ForwardMode::target_verify);
    if (s.spec && w == Worker::draft) b.init_forward_metadata_capture_cuda_graph(bs, bs * D, ForwardMode::draft_extend);
    if (steps) steps->init_forward_metadata_capture_cuda_graph(bs);
  }
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
