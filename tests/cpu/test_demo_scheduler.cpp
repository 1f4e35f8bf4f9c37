// The demo's scheduler (tools/demo/scheduler.h) without a model: every step it hands out is a batch
// the planners accept, its query rows are the positions the mode defines, and the KV bookkeeping
// holds after every step (page-consistent slots, table rows = slots, no page with two owners,
// reservations in sync); at the end every request finished, every page and row is back, and the
// token counts add up. Also the graph batch sizes and the rows the oracle samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "../../tools/demo/model.h"
#include "../../tools/demo/scheduler.h"
#include "attnserve/plan.h"
#include "common/test_util.h"

using namespace attnserve;
using namespace demo;

namespace {

struct Case {
  const char* name;
  int page_size, max_running, prefill_budget, spec_steps, draft_tokens, spec_max_bs;
  int requests, max_prompt, max_output;
  int kv_requests;  // pool size in max-sized requests
};

SchedulerConfig config_of(const Case& c, uint64_t seed) {
  const int lookahead = c.spec_steps ? std::max(c.spec_steps, c.draft_tokens) : 1;
  const int per_request = c.max_prompt + c.max_output + lookahead;
  SchedulerConfig s;
  s.page_size = c.page_size;
  s.num_slots = (int64_t(c.kv_requests) * ((per_request + c.page_size - 1) / c.page_size) + 1) * c.page_size;
  s.max_running = c.max_running;
  s.max_context = per_request;
  s.prefill_budget = c.prefill_budget;
  s.spec_steps = c.spec_steps;
  s.draft_tokens = c.draft_tokens;
  s.spec_max_bs = c.spec_max_bs;
  s.seed = seed;
  return s;
}

// The planner accepts the step, and its rows are the positions the mode defines.
void expect_valid_step(const Step& s, const SchedulerConfig& c, const ReqToTokenPool& table, int per_request_rows) {
  const SpeculativeConfig spec{
      .draft_token_num = c.draft_tokens, .num_steps = c.spec_steps, .step_id = c.spec_steps ? c.spec_steps - 1 : 0};
  DensePlanner planner({.page_size = c.page_size, .spec = spec}, Device::cpu());
  planner.init({.max_bs = c.max_running,
                .max_num_tokens = std::max(c.prefill_budget, c.max_running * std::max(1, c.draft_tokens)),
                .max_context_len = c.max_context});
  EXPECT_NO_THROW(planner.validate(s.batch(table.table()))) << to_string(s.mode);
  std::size_t row = 0;
  for (int r = 0; r < s.batch_size(); ++r) {
    const StepRequest& q = s.reqs[std::size_t(r)];
    int first = 0, n = 0;
    switch (s.mode) {
      case ForwardMode::extend:
      case ForwardMode::draft_extend:
        first = s.seq_lens[std::size_t(r)] - s.extend_seq_lens[std::size_t(r)], n = s.extend_seq_lens[std::size_t(r)];
        if (s.mode == ForwardMode::draft_extend) {
          EXPECT_LE(n, c.draft_tokens);
        }
        break;
      case ForwardMode::decode: first = s.seq_lens[std::size_t(r)] - 1, n = 1; break;
      case ForwardMode::target_verify: first = s.seq_lens[std::size_t(r)], n = per_request_rows; break;
      case ForwardMode::draft_decode:
        for (int i = 0; i < s.num_steps; ++i) {
          const int32_t slot = s.draft_slots[std::size_t(r * s.num_steps + i)];
          EXPECT_EQ(slot % c.page_size, (s.seq_lens[std::size_t(r)] + i) % c.page_size) << "draft slot page offset";
          EXPECT_EQ(slot, q.slots[std::size_t(s.seq_lens[std::size_t(r)] + i)]);
        }
        continue;
      default: FAIL() << "unexpected mode " << to_string(s.mode);
    }
    for (int p = first; p < first + n; ++p, ++row) {
      ASSERT_LT(row, s.rows.size());
      EXPECT_EQ(s.rows[row].req, r);
      EXPECT_EQ(s.rows[row].pos, p);
      EXPECT_EQ(s.rows[row].slot, q.slots[std::size_t(p)]);
      EXPECT_EQ(s.rows[row].token, q.ids[std::size_t(p)]);
    }
  }
  if (s.mode != ForwardMode::draft_decode) {
    EXPECT_EQ(row, s.rows.size());
  }
}

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.name);
  const SchedulerConfig cfg = config_of(c, seed);
  const std::vector<RequestSpec> trace = make_workload({.requests = c.requests,
                                                        .min_prompt = 1,
                                                        .max_prompt = c.max_prompt,
                                                        .max_output = c.max_output,
                                                        .arrival_gap = 2},
                                                       seed);
  Scheduler s(cfg, trace, Device::cpu());
  int64_t prompt_total = 0, output_total = 0;
  for (const RequestSpec& r : trace) prompt_total += r.prompt_len, output_total += r.output_len;
  int kinds[3] = {0, 0, 0};
  for (int guard = 0; guard < 100000; ++guard) {
    const Work w = s.next();
    if (w == Work::done) break;
    ++kinds[int(w)];
    if (w == Work::prefill) {
      const Step st = s.prefill_step();
      int tokens = 0;
      for (int e : st.extend_seq_lens) tokens += e;
      EXPECT_LE(tokens, cfg.prefill_budget);
      expect_valid_step(st, cfg, s.table(), 0);
      s.finish_prefill(st);
    } else if (w == Work::decode) {
      const Step st = s.decode_step();
      expect_valid_step(st, cfg, s.table(), 1);
      s.finish_decode(st);
    } else {
      SpecRound round = s.spec_round();
      EXPECT_LE(round.verify.batch_size(), cfg.spec_max_bs);
      expect_valid_step(round.draft_decode, cfg, s.table(), 0);
      expect_valid_step(round.verify, cfg, s.table(), cfg.draft_tokens);
      s.accept(round);
      expect_valid_step(round.draft_extend, cfg, s.table(), 0);
      s.finish_spec(round);
    }
    const std::string problem = s.check_invariants();
    ASSERT_EQ(problem, "") << "after step " << s.steps() << " (" << to_string(w) << ")";
    ASSERT_LE(s.running(), cfg.max_running);
  }
  EXPECT_EQ(s.finished(), c.requests);
  EXPECT_EQ(s.pages_in_use(), 0);
  EXPECT_EQ(s.table().available(), s.table().size());
  EXPECT_EQ(s.counters().prefilled, prompt_total);
  EXPECT_EQ(s.counters().generated, output_total);
  EXPECT_GT(s.peak_pages(), 0);
  EXPECT_GT(kinds[int(Work::prefill)], 0);
  if (c.spec_steps) {
    EXPECT_GT(kinds[int(Work::spec)], 0);
    EXPECT_LE(s.counters().accepted, s.counters().spec_rounds * c.draft_tokens);
  }
}

}  // namespace

TEST(DemoScheduler, TracesFinishWithConsistentBookkeeping) {
  auto g = test::rng_for_test();
  const Case cases[] = {
      // name                 P  run budget S  D  spec_bs req prompt out kv
      {"page_16_spec", 16, 6, 48, 3, 4, 3, 14, 90, 20, 3},
      {"page_1_no_spec", 1, 4, 32, 0, 0, 0, 10, 60, 12, 2},
      {"page_64_spec_2_of_3", 64, 8, 100, 3, 2, 8, 12, 150, 16, 4},
      {"one_request_at_a_time", 16, 4, 16, 2, 3, 4, 5, 40, 9, 1},
  };
  for (const Case& c : cases) run_case(c, g());
}

// Draft trees (topk > 1): every round's draft decode and tree verify plan in both planners; verify
// rows are the tree's tokens at positions L + depth, each seeing its prefix and its path (ending at its
// own entry); draft decode has topk rows per request and step, page-aligned branch slots; the
// accepted tokens lie on the spine; the bookkeeping holds and the branches' pages come back.
TEST(DemoScheduler, DraftTreeRoundsPlanInBothPlanners) {
  auto g = test::rng_for_test();
  for (int P : {16, 64}) {
    SCOPED_TRACE("page " + std::to_string(P));
    const int S = 3, D = 9, K = 4, max_running = 5, per_request = 120 + 20 + D + S;
    SchedulerConfig cfg;
    cfg.page_size = P;
    const int64_t pages = (per_request + P - 1) / P + (K - 1) * ((P - 1 + S + P - 1) / P);
    cfg.num_slots = (3 * pages + 1) * P;
    cfg.max_running = max_running;
    cfg.max_context = per_request;
    cfg.prefill_budget = 64;
    cfg.spec_steps = S;
    cfg.draft_tokens = D;
    cfg.spec_topk = K;
    cfg.spec_max_bs = max_running;
    cfg.seed = g();
    const std::vector<RequestSpec> trace =
        make_workload({.requests = 10, .min_prompt = 1, .max_prompt = 120, .max_output = 20, .arrival_gap = 2}, g());
    Scheduler s(cfg, trace, Device::cpu());
    const PlanCapacity cap{.max_bs = max_running, .max_num_tokens = 256, .max_context_len = per_request};
    int rounds = 0;
    for (int guard = 0; guard < 100000; ++guard) {
      const Work w = s.next();
      if (w == Work::done) break;
      if (w == Work::prefill) s.finish_prefill(s.prefill_step());
      else if (w == Work::decode) s.finish_decode(s.decode_step());
      else {
        ++rounds;
        SpecRound round = s.spec_round();
        const Step& dd = round.draft_decode;
        const Step& tv = round.verify;
        for (int step = 0; step < S - 1; ++step) {
          const SpeculativeConfig spec{.draft_token_num = D, .num_steps = S, .step_id = step, .topk = K};
          DensePlanner dense({.page_size = P, .spec = spec}, Device::cpu());
          SparsePlanner sparse({.page_size = P, .topk = 32, .spec = spec}, Device::cpu());
          dense.init(cap), sparse.init(cap);
          for (ForwardMode m : {ForwardMode::draft_decode, ForwardMode::target_verify}) {
            const Step& st = m == ForwardMode::draft_decode ? dd : tv;
            EXPECT_NO_THROW(dense.validate(st.batch(s.table().table()))) << to_string(m);
            EXPECT_NO_THROW(sparse.validate(st.batch(s.table().table()))) << to_string(m);
          }
          const std::vector<QueryRow> rows = dd.draft_rows(step);
          ASSERT_EQ(rows.size(), std::size_t(dd.batch_size() * K));
          for (const QueryRow& q : rows) {
            const StepRequest& rq = dd.reqs[std::size_t(q.req)];
            EXPECT_EQ(q.pos, dd.seq_lens[std::size_t(q.req)] + step);
            EXPECT_EQ(q.slot % P, q.pos % P) << "branch slot page offset";
            ASSERT_EQ(q.path.size(), std::size_t(step + 1));
            EXPECT_EQ(rq.slots[std::size_t(q.path.back())], q.slot);
            for (std::size_t d = 0; d < q.path.size(); ++d) EXPECT_EQ(rq.position(q.path[d]), q.prefix + int(d));
          }
        }
        ASSERT_EQ(tv.rows.size(), std::size_t(tv.batch_size() * D));
        for (const QueryRow& q : tv.rows) {
          const StepRequest& rq = tv.reqs[std::size_t(q.req)];
          EXPECT_EQ(q.prefix, tv.seq_lens[std::size_t(q.req)]);
          ASSERT_FALSE(q.path.empty());
          EXPECT_EQ(rq.slots[std::size_t(q.path.back())], q.slot);
          EXPECT_EQ(q.pos, q.prefix + int(q.path.size()) - 1);
          for (std::size_t d = 0; d < q.path.size(); ++d) EXPECT_EQ(rq.position(q.path[d]), q.prefix + int(d));
        }
        s.accept(round);
        for (int a : round.accepted) EXPECT_LE(a, std::min(D, S));
        s.finish_spec(round);
      }
      ASSERT_EQ(s.check_invariants(), "") << "after step " << s.steps();
    }
    EXPECT_GT(rounds, 0);
    EXPECT_EQ(s.finished(), 10);
    EXPECT_EQ(s.pages_in_use(), 0);
  }
}

TEST(DemoScheduler, RejectsARequestThePoolCannotHold) {
  SchedulerConfig c;
  c.page_size = 16;
  c.num_slots = 4 * 16;  // 3 usable pages
  c.max_running = 2;
  c.max_context = 1000;
  c.prefill_budget = 64;
  const std::vector<RequestSpec> trace = {{.id = 0, .arrival = 0, .prompt_len = 60, .output_len = 10}};
  EXPECT_THROW(Scheduler(c, trace, Device::cpu()), std::invalid_argument);
}

TEST(DemoScheduler, GraphBatchSizesAndCheckedRows) {
  EXPECT_EQ(graph_batch_sizes(36), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 36}));
  EXPECT_EQ(graph_batch_sizes(4), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(graph_batch_sizes(1), (std::vector<int>{1}));
  EXPECT_TRUE(graph_batch_sizes(0).empty());
  Settings s;
  s.graph_max_bs = 6;
  Step step;
  step.mode = ForwardMode::decode;
  step.reqs.resize(5);
  EXPECT_EQ(graph_bs_for(s, step), 6);  // sizes 1, 2, 4, 6: 5 requests run padded to 6
  step.reqs.resize(7);
  EXPECT_EQ(graph_bs_for(s, step), 0);  // larger than every graph: eager
  step.mode = ForwardMode::extend;
  step.reqs.resize(1);
  EXPECT_EQ(graph_bs_for(s, step), 0);  // extend is never captured
  // Three requests of 4, 1 and 3 rows: the last row of each, plus one more at random.
  std::vector<QueryRow> rows;
  const int lens[] = {4, 1, 3};
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < lens[r]; ++i) rows.push_back({.req = r, .pos = i});
  const std::vector<int> picked = rows_to_check(rows, 4, 7);
  for (int last : {3, 4, 7}) EXPECT_NE(std::find(picked.begin(), picked.end(), last), picked.end()) << last;
  EXPECT_LE(picked.size(), 4u);
  EXPECT_TRUE(std::is_sorted(picked.begin(), picked.end()));
}
