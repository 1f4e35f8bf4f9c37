// The engine loop: one model's trace, driven the way a serving engine drives its attention layer.
// Each scheduler step runs the forward passes its work needs:
//   prefill  target extend, then the draft model's extend over the same tokens (EAGLE keeps the
//            draft's KV of the prompt);
//   decode   target decode (and the draft's decode, which keeps its KV in step when a batch is too
//            large for speculation);
//   eagle    draft decode (multi-step), target verify, draft extend over the accepted tokens.
// A sample of the passes is checked against the oracle: the first of each (worker, mode) and every
// Nth after that.
#pragma once
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "deepseek_model.h"
#include "dense_model.h"
#include "options.h"
#include "scheduler.h"
#include "stats.h"
#include "workload.h"

namespace demo {

// What one model's trace did.
struct TraceResult {
  Settings settings;
  std::string description;
  RunStats stats;
  SchedulerCounters counters;
  int requests = 0, finished = 0, peak_running = 0;
  int64_t peak_pages = 0, usable_pages = 0;
  std::array<int64_t, 3> steps{};  // prefill, decode, eagle
  bool ok() const { return finished == requests && stats.oracle.failed_rows == 0 && stats.oracle.rows > 0; }
};

inline SchedulerConfig scheduler_config(const Settings& s) {
  SchedulerConfig c;
  c.page_size = s.page_size;
  c.num_slots = (int64_t(s.kv_tokens + s.page_size - 1) / s.page_size + 1) * s.page_size;  // + the padding page
  c.max_running = s.max_bs;
  c.max_context = s.max_context() + std::max(s.spec_steps, 1);
  c.prefill_budget = s.prefill_budget;
  c.spec_steps = s.spec ? s.spec_steps : 0;
  c.draft_tokens = s.spec ? s.draft_tokens : 0;
  c.spec_topk = s.spec ? s.spec_topk : 1;
  c.spec_max_bs = s.spec_max_bs;
  c.seed = s.seed;
  return c;
}

inline TraceResult run_trace(const Settings& s) {
  const double t0 = now_seconds();
  TraceResult res;
  res.settings = s;
  const SchedulerConfig sc = scheduler_config(s);
  Scheduler sched(sc,
                  make_workload({.requests = s.requests,
                                 .min_prompt = s.min_prompt,
                                 .max_prompt = s.max_prompt,
                                 .max_output = s.max_output,
                                 .arrival_gap = s.arrival_gap},
                                s.seed + (s.model == ModelKind::dense ? 0 : 1000)),
                  s.device);
  const CacheShape cache{sched.table().table(), sc.num_slots, sc.max_context};
  std::unique_ptr<Model> model;
  if (s.model == ModelKind::dense) model = std::make_unique<DenseModel>(s, cache, res.stats);
  else model = std::make_unique<DeepSeekModel>(s, cache, res.stats);
  res.description = model->describe();
  std::printf("\n== %s: %s\n", to_string(s.model), res.description.c_str());
  std::printf(
      "   trace: %d requests, prompts %d..%d, outputs 1..%d; batch <= %d, prefill budget %d tokens/step; "
      "EAGLE %s\n",
      s.requests, s.min_prompt, s.max_prompt, s.max_output, s.max_bs, s.prefill_budget,
      s.spec ? ("num_steps " + std::to_string(s.spec_steps) + ", draft tokens " + std::to_string(s.draft_tokens) +
                (s.spec_topk > 1 ? ", draft trees of topk " + std::to_string(s.spec_topk) : std::string()) +
                ", batches <= " + std::to_string(s.spec_max_bs))
                   .c_str()
             : "off");
  std::fflush(stdout);

  // The oracle's sample: the first pass of each (worker, mode), then every Nth pass.
  std::array<std::array<bool, kNumModes>, 2> seen{};
  int64_t pass = 0;
  auto check = [&](Worker w, ForwardMode m) {
    bool& first = seen[std::size_t(w)][std::size_t(m)];
    const bool due = !first || (s.check_every > 0 && pass % s.check_every == 0);
    ++pass;
    first = true;
    if (due) {
      ++res.stats.oracle.passes;
      ++res.stats.oracle.passes_by_mode[std::size_t(m)];
    }
    return due;
  };

  for (;;) {
    const Work work = sched.next();
    if (work == Work::done) break;
    int bs = 0, tokens = 0;
    switch (work) {
      case Work::prefill: {
        const Step step = sched.prefill_step();
        model->forward(Worker::target, step, check(Worker::target, step.mode));
        if (s.spec) model->forward(Worker::draft, step, check(Worker::draft, step.mode));
        bs = step.batch_size(), tokens = int(step.rows.size());
        sched.finish_prefill(step);
        break;
      }
      case Work::decode: {
        const Step step = sched.decode_step();
        model->forward(Worker::target, step, check(Worker::target, step.mode));
        if (s.spec) model->forward(Worker::draft, step, check(Worker::draft, step.mode));
        bs = step.batch_size(), tokens = int(step.rows.size());
        sched.finish_decode(step);
        break;
      }
      case Work::spec: {
        SpecRound round = sched.spec_round();
        model->draft_decode(round.draft_decode, check(Worker::draft, ForwardMode::draft_decode));
        model->forward(Worker::target, round.verify, check(Worker::target, ForwardMode::target_verify));
        sched.accept(round);
        model->forward(Worker::draft, round.draft_extend, check(Worker::draft, ForwardMode::draft_extend));
        bs = round.verify.batch_size(), tokens = int(round.verify.rows.size());
        sched.finish_spec(round);
        break;
      }
      case Work::done: break;
    }
    ++res.steps[std::size_t(work)];
    if (!s.quiet && s.progress_every > 0 && sched.steps() % s.progress_every == 0) {
      std::printf(
          "   step %4d  %-7s bs %3d  tokens %5d | KV pages %5lld / %lld | running %3d  waiting %3d  done %3d/%d\n",
          sched.steps(), to_string(work), bs, tokens, (long long)sched.pages_in_use(), (long long)sched.usable_pages(),
          sched.running(), sched.waiting(), sched.finished(), sched.total());
      std::fflush(stdout);
    }
  }
  res.counters = sched.counters();
  res.requests = sched.total();
  res.finished = sched.finished();
  res.peak_running = sched.peak_running();
  res.peak_pages = sched.peak_pages();
  res.usable_pages = sched.usable_pages();
  res.stats.wall = now_seconds() - t0;
  const OracleStats& o = res.stats.oracle;
  std::printf("   %s: %d/%d requests in %d steps, %.1f s; oracle: %lld rows of %lld passes checked, %lld failed\n",
              res.ok() ? "done" : "FAILED", res.finished, res.requests, sched.steps(), res.stats.wall,
              (long long)o.rows, (long long)o.passes, (long long)o.failed_rows);
  return res;
}

}  // namespace demo
