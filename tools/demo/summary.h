// The final summary: one column per model, rows for requests, tokens, steps and passes per mode,
// time per phase, KV pool use and the oracle's verdict.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "engine.h"

namespace demo {

inline std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}
inline std::string num(int64_t v) { return std::to_string(v); }

class SummaryTable {
 public:
  explicit SummaryTable(std::vector<std::string> columns) : columns_(std::move(columns)) {}
  void row(std::string label, std::vector<std::string> values) {
    rows_.push_back({std::move(label), std::move(values)});
  }
  void section(std::string title) { rows_.push_back({std::move(title), {}}); }
  void print() const {
    std::size_t label_w = 0;
    std::vector<std::size_t> w(columns_.size());
    for (std::size_t c = 0; c < columns_.size(); ++c) w[c] = columns_[c].size();
    for (const auto& r : rows_) {
      label_w = std::max(label_w, r.label.size());
      for (std::size_t c = 0; c < r.values.size(); ++c) w[c] = std::max(w[c], r.values[c].size());
    }
    std::printf("\n%-*s", int(label_w), "");
    for (std::size_t c = 0; c < columns_.size(); ++c) std::printf("   %-*s", int(w[c]), columns_[c].c_str());
    std::printf("\n");
    for (const auto& r : rows_) {
      if (r.values.empty()) {
        std::printf("%s\n", r.label.c_str());
        continue;
      }
      std::printf("%-*s", int(label_w), r.label.c_str());
      for (std::size_t c = 0; c < r.values.size(); ++c) std::printf("   %-*s", int(w[c]), r.values[c].c_str());
      std::printf("\n");
    }
  }

 private:
  struct Row {
    std::string label;
    std::vector<std::string> values;
  };
  std::vector<std::string> columns_;
  std::vector<Row> rows_;
};

inline void print_summary(const std::vector<TraceResult>& runs) {
  std::vector<std::string> cols;
  for (const TraceResult& r : runs) cols.push_back(to_string(r.settings.model));
  SummaryTable t(cols);
  auto each = [&](auto f) {
    std::vector<std::string> v;
    for (const TraceResult& r : runs) v.push_back(f(r));
    return v;
  };
  using M = attnserve::ForwardMode;
  auto passes = [](const TraceResult& r, Worker w, M m) { return r.stats.passes[std::size_t(w)][std::size_t(m)]; };

  t.section("requests and tokens");
  t.row("  requests done", each([](const TraceResult& r) { return num(r.finished) + " / " + num(r.requests); }));
  t.row("  prompt tokens prefilled", each([](const TraceResult& r) {
          return num(r.counters.prefilled) + " (" + num(r.counters.prefill_chunks) + " chunks, " +
                 num(r.counters.prefix_chunks) + " with prefix)";
        }));
  t.row("  output tokens", each([](const TraceResult& r) { return num(r.counters.generated); }));
  t.row("  EAGLE request-rounds / accepted per round", each([](const TraceResult& r) {
          if (!r.settings.spec) return std::string("off");
          const double per = r.counters.spec_rounds ? double(r.counters.accepted) / double(r.counters.spec_rounds) : 0;
          return num(r.counters.spec_rounds) + " / " + fmt("%.2f", per) + " of " + num(r.settings.draft_tokens);
        }));
  t.section("steps and forward passes");
  t.row("  scheduler steps: prefill / decode / eagle",
        each([](const TraceResult& r) { return num(r.steps[0]) + " / " + num(r.steps[1]) + " / " + num(r.steps[2]); }));
  t.row("  target: extend / decode / verify", each([&](const TraceResult& r) {
          return num(passes(r, Worker::target, M::extend)) + " / " + num(passes(r, Worker::target, M::decode)) + " / " +
                 num(passes(r, Worker::target, M::target_verify));
        }));
  t.row("  target query rows: extend / decode / verify", each([&](const TraceResult& r) {
          auto rows = [&](M m) { return num(r.stats.rows[std::size_t(Worker::target)][std::size_t(m)]); };
          return rows(M::extend) + " / " + rows(M::decode) + " / " + rows(M::target_verify);
        }));
  t.row("  draft: extend / decode / draft decode / draft extend", each([&](const TraceResult& r) {
          if (!r.settings.spec) return std::string("-");
          return num(passes(r, Worker::draft, M::extend)) + " / " + num(passes(r, Worker::draft, M::decode)) + " / " +
                 num(passes(r, Worker::draft, M::draft_decode)) + " / " +
                 num(passes(r, Worker::draft, M::draft_extend));
        }));
  t.row("  of which on captured graph metadata", each([&](const TraceResult& r) {
          int64_t g = 0;
          for (const auto& w : r.stats.graph_passes)
            for (int64_t v : w) g += v;
          return num(g) + " (graph batch sizes <= " + num(r.settings.graph_max_bs) + ")";
        }));
  t.row("  peak batch (requests running)",
        each([](const TraceResult& r) { return num(r.peak_running) + " of " + num(r.settings.max_bs); }));
  t.row("  KV pool: peak pages in use", each([](const TraceResult& r) {
          return num(r.peak_pages) + " / " + num(r.usable_pages) + " (" +
                 fmt("%.0f%%", 100.0 * double(r.peak_pages) / double(r.usable_pages)) + ")";
        }));
  t.section("time (s)");
  for (int p = 0; p < int(Phase::count); ++p) {
    if (Phase(p) == Phase::index_store || Phase(p) == Phase::indexer) {
      t.row(std::string("  ") + to_string(Phase(p)), each([&](const TraceResult& r) {
              return r.settings.model == ModelKind::deepseek ? fmt("%.2f", r.stats.seconds[std::size_t(p)])
                                                             : std::string("-");
            }));
      continue;
    }
    t.row(std::string("  ") + to_string(Phase(p)),
          each([&](const TraceResult& r) { return fmt("%.2f", r.stats.seconds[std::size_t(p)]); }));
  }
  t.row("  wall", each([](const TraceResult& r) { return fmt("%.2f", r.stats.wall); }));
  t.section("oracle (fp64 brute force)");
  t.row("  passes checked", each([](const TraceResult& r) { return num(r.stats.oracle.passes); }));
  t.row("  rows checked / failed",
        each([](const TraceResult& r) { return num(r.stats.oracle.rows) + " / " + num(r.stats.oracle.failed_rows); }));
  t.row("  max rel. error (tolerance 7.8e-3)",
        each([](const TraceResult& r) { return fmt("%.1e", r.stats.oracle.max_err); }));
  t.row("  top-k rows checked (with a real choice)", each([](const TraceResult& r) {
          if (r.settings.model != ModelKind::deepseek) return std::string("-");
          return num(r.stats.oracle.topk_rows) + " (" + num(r.stats.oracle.topk_sparse_rows) + ")";
        }));
  t.print();
}

}  // namespace demo
