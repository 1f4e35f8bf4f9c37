// The scheduler: what a serving engine's scheduler does with the KV cache, without the model.
//   - arrivals queue up; a request is admitted (a ReqToTokenPool row, a place in the running batch)
//     when the slot allocator can hold everything it may ever need (its pages are reserved, so a
//     running request never runs out of KV and nothing has to be preempted);
//   - chunked prefill: a token budget per step, the first chunk an extend without prefix, later
//     chunks an extend with the cached prefix;
//   - decode: one token per running request;
//   - EAGLE rounds (topk 1): draft decode over num_steps, target verify of draft_tokens tokens, a
//     random accepted length 1 .. draft_tokens, draft extend over the accepted tokens; the pages of the
//     rejected tokens go back;
//   - EAGLE draft trees (topk > 1): draft decode with topk branches per step (branch 0 runs the tree's
//     spine, the other branches their own tokens in slots of their own pages), target verify of a tree
//     of draft_tokens tokens (a spine of min(draft_tokens, num_steps) tokens, the rest random
//     branches), a random accepted length along the spine (so the accepted tokens already sit at their
//     positions' slots), draft extend over them;
//   - finished requests free their pages and their row.
// Steps come out as Step: the BatchSpec arrays of a forward pass plus, per query row, the position,
// token and slot, and per request its context (token ids and slots by position) for the oracle.
//
// Tokens: while decoding, a request has `committed` positions in the KV caches (target and draft)
// and one pending token (ids[committed], sampled but not yet through the model). A decode step puts
// the pending token through; an EAGLE round puts the pending token and the drafted tokens after it
// through verify and commits the accepted ones.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnserve/batch.h"
#include "attnserve/kv_cache.h"
#include "workload.h"

namespace demo {

using attnserve::ForwardMode;

// One query row of a forward pass: its request (index into Step::reqs), absolute position, token,
// and the slot its KV is stored at (out_cache_loc). It attends to positions 0 .. pos of its request;
// in a draft tree (prefix >= 0) to the context entries 0 .. prefix - 1 and `path` instead (its
// ancestors and itself, root first).
struct QueryRow {
  int req = 0;
  int32_t pos = 0;
  uint64_t token = 0;
  int32_t slot = 0;
  int32_t prefix = -1;
  std::vector<int32_t> path;  // context entries (StepRequest indices) after the prefix
};

// A request as a pass sees it: its table row and the token ids and slots of its context entries,
// entry c at position c (draft trees: at pos[c], and entries past the table for the other branches).
struct StepRequest {
  int id = 0;
  int32_t row = 0;
  std::vector<uint64_t> ids;
  std::vector<int32_t> slots;
  std::vector<int32_t> pos;  // empty: entry c is at position c
  int32_t position(int32_t c) const { return pos.empty() ? c : pos[std::size_t(c)]; }
};

// The context entries a row attends to, in position order.
inline std::vector<int32_t> visible_entries(const QueryRow& r) {
  std::vector<int32_t> v;
  const int32_t n = r.prefix >= 0 ? r.prefix : r.pos + 1;
  for (int32_t c = 0; c < n; ++c) v.push_back(c);
  v.insert(v.end(), r.path.begin(), r.path.end());
  return v;
}

// Draft trees: a key of a request's context copied to another slot (the prefix's partial last page
// duplicated into a branch's first page, so the indexer reads it there through the branch's pages).
struct TailCopy {
  int req = 0;
  int32_t entry = 0;  // context entry (StepRequest index)
  int32_t slot = 0;   // the copy's slot
};

struct Step {
  ForwardMode mode = ForwardMode::idle;
  std::vector<StepRequest> reqs;
  std::vector<int32_t> seq_lens, req_pool_indices, extend_seq_lens, extend_prefix_lens, draft_slots;
  std::vector<QueryRow> rows;         // request-major; draft_decode: per draft step, draft_rows(i)
  int num_steps = 0;                  // draft_decode: columns of draft_slots
  int topk = 1;                       // draft trees: branches per draft step (draft_slots [bs, topk, num_steps])
  std::vector<int32_t> tree_parents;  // target_verify with draft trees: [bs, draft_tokens]
  std::vector<std::vector<QueryRow>> branch_rows;  // draft_decode with draft trees: per step, bs * topk rows
  std::vector<TailCopy> tail_copies;               // draft_decode with draft trees: before step 0

  int batch_size() const { return int(reqs.size()); }
  attnserve::BatchSpec batch(const attnserve::TensorView& req_to_token) const {
    attnserve::BatchSpec b;
    b.mode = mode;
    b.seq_lens = seq_lens;
    b.req_pool_indices = req_pool_indices;
    b.extend_seq_lens = extend_seq_lens;
    b.extend_prefix_lens = extend_prefix_lens;
    b.draft_slots = draft_slots;
    b.tree_parents = tree_parents;
    b.req_to_token = req_to_token;
    return b;
  }
  // Draft decode step i: every request's token at position seq_len + i, stored at draft_slots[r, i]
  // (draft trees: one row per branch, branch_rows[i]).
  std::vector<QueryRow> draft_rows(int i) const {
    if (topk > 1) return branch_rows[std::size_t(i)];
    std::vector<QueryRow> out;
    for (int r = 0; r < batch_size(); ++r) {
      const int32_t pos = seq_lens[std::size_t(r)] + i;
      out.push_back({r, pos, reqs[std::size_t(r)].ids[std::size_t(pos)], draft_slots[std::size_t(r * num_steps + i)]});
    }
    return out;
  }
};

struct SpecRound {
  Step draft_decode, verify, draft_extend;
  std::vector<int> accepted;          // per request of the round (accept())
  std::vector<int32_t> branch_slots;  // draft trees: the other branches' slots, freed after the round
};

struct SchedulerConfig {
  int page_size = 16;
  int64_t num_slots = 0;   // the KV pools' slots, page 0 (padding) included
  int max_running = 1;     // ReqToTokenPool rows = the batch size cap
  int max_context = 0;     // ReqToTokenPool row width (every position a request may reach)
  int prefill_budget = 1;  // prefill tokens per step
  int spec_steps = 0;      // EAGLE num_steps; 0 = no speculative decoding
  int draft_tokens = 0;    // EAGLE draft tokens (verify rows per request), 2 .. spec_steps + 1 (trees: <= 64)
  int spec_topk = 1;       // EAGLE branches per draft step; > 1: draft trees
  int spec_max_bs = 0;     // decode batches larger than this decode plainly
  uint64_t seed = 1;
};

struct SchedulerCounters {
  int64_t prefilled = 0;       // prompt tokens through prefill
  int64_t generated = 0;       // output tokens
  int64_t spec_rounds = 0;     // request-rounds of EAGLE
  int64_t accepted = 0;        // tokens accepted by verify (1 .. draft_tokens per request-round)
  int64_t prefill_chunks = 0;  // request-chunks of prefill
  int64_t prefix_chunks = 0;   // of which extend with a cached prefix
};

enum class Work { prefill, decode, spec, done };
inline const char* to_string(Work w) {
  switch (w) {
    case Work::prefill: return "prefill";
    case Work::decode: return "decode";
    case Work::spec: return "eagle";
    case Work::done: return "done";
  }
  return "?";
}

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& c, std::vector<RequestSpec> trace, attnserve::Device device)
      : cfg_(c),
        trace_(std::move(trace)),
        table_(c.max_running, c.max_context, device),
        alloc_(c.num_slots, c.page_size),
        rng_(c.seed * 0xbf58476d1ce4e5b9ull + 3) {
    reqs_.resize(trace_.size());
    std::sort(trace_.begin(), trace_.end(), [](const RequestSpec& a, const RequestSpec& b) {
      return a.arrival != b.arrival ? a.arrival < b.arrival : a.id < b.id;
    });
    for (std::size_t i = 0; i < trace_.size(); ++i) {
      reqs_[i].spec = trace_[i];
      if (positions_needed(trace_[i]) > c.max_context)
        throw std::invalid_argument("scheduler: request " + std::to_string(trace_[i].id) + " needs " +
                                    std::to_string(positions_needed(trace_[i])) + " positions, the table has " +
                                    std::to_string(c.max_context));
      if (pages_needed(trace_[i]) > usable_pages())
        throw std::invalid_argument("scheduler: request " + std::to_string(trace_[i].id) +
                                    " needs more KV pages than the pool has");
    }
  }

  bool speculative() const { return cfg_.spec_steps > 0; }

  // Advances the clock one step: arrivals queue, requests are admitted, and the work of this step
  // is chosen: prefill and decoding alternate while both have requests.
  Work next() {
    ++clock_;
    take_arrivals();
    if (running_.empty() && waiting_.empty()) {
      if (next_arrival_ == trace_.size()) return Work::done;
      clock_ = trace_[next_arrival_].arrival;  // nothing to do until the next arrival
      take_arrivals();
    }
    admit();
    if (running_.empty())
      throw std::logic_error("scheduler: a waiting request could not be admitted into an empty pool");
    bool prefill = false;
    int decoding = 0;
    for (int i : running_) {
      prefill |= reqs_[std::size_t(i)].state == State::prefilling;
      decoding += reqs_[std::size_t(i)].state == State::decoding;
    }
    Work w;
    if (prefill && (decoding == 0 || last_ != Work::prefill)) w = Work::prefill;
    else if (speculative() && decoding <= cfg_.spec_max_bs) w = Work::spec;
    else w = Work::decode;
    last_ = w;
    ++steps_;
    return w;
  }

  // ---- Prefill: chunks of the prefilling requests, in admission order, within the token budget.
  Step prefill_step() {
    Step s;
    s.mode = ForwardMode::extend;
    std::vector<int> picked;
    std::vector<attnserve::SlotAllocator::ExtendRequest> ext;
    int budget = cfg_.prefill_budget;
    for (int i : running_) {
      Request& r = reqs_[std::size_t(i)];
      if (r.state != State::prefilling || budget == 0) continue;
      const int chunk = std::min(r.spec.prompt_len - r.committed, budget);
      budget -= chunk;
      picked.push_back(i);
      ext.push_back({r.committed, r.committed ? r.slots.back() : -1, chunk});
    }
    const std::vector<int32_t> locs = alloc_.alloc_extend(ext);
    std::size_t next = 0;
    for (std::size_t k = 0; k < picked.size(); ++k) {
      Request& r = reqs_[std::size_t(picked[k])];
      const int prefix = r.committed, chunk = int(ext[k].extend_len);
      append_slots(r, std::span(locs).subspan(next, std::size_t(chunk)));
      next += std::size_t(chunk);
      add_request(s, picked[k], prefix + chunk);
      s.seq_lens.push_back(prefix + chunk);
      s.extend_seq_lens.push_back(chunk);
      s.extend_prefix_lens.push_back(prefix);
      add_rows(s, prefix, chunk);
    }
    note_pages();
    return s;
  }
  void finish_prefill(const Step& s) {
    for (std::size_t k = 0; k < s.reqs.size(); ++k) {
      Request& r = by_id(s.reqs[k].id);
      r.committed += s.extend_seq_lens[k];
      counters_.prefilled += s.extend_seq_lens[k];
      ++counters_.prefill_chunks;
      counters_.prefix_chunks += s.extend_prefix_lens[k] > 0;
      if (r.committed == r.spec.prompt_len) {  // the prefill's logits give the first output token
        r.state = State::decoding;
        r.ids.push_back(rng_());
        r.generated = 1;
        ++counters_.generated;
      }
    }
    retire_finished();
  }

  // ---- Decode: every decoding request puts its pending token through.
  Step decode_step() {
    Step s;
    s.mode = ForwardMode::decode;
    const std::vector<int> picked = decoding();
    std::vector<attnserve::SlotAllocator::DecodeRequest> dec;
    for (int i : picked) dec.push_back({reqs_[std::size_t(i)].committed, reqs_[std::size_t(i)].slots.back()});
    const std::vector<int32_t> locs = alloc_.alloc_decode(dec);
    for (std::size_t k = 0; k < picked.size(); ++k) {
      Request& r = reqs_[std::size_t(picked[k])];
      append_slots(r, std::span(locs).subspan(k, 1));
      add_request(s, picked[k], r.committed + 1);
      s.seq_lens.push_back(r.committed + 1);
      add_rows(s, r.committed, 1);
    }
    note_pages();
    return s;
  }
  void finish_decode(const Step& s) {
    for (const StepRequest& q : s.reqs) {
      Request& r = by_id(q.id);
      ++r.committed;
      r.ids.push_back(rng_());
      ++r.generated;
      ++counters_.generated;
    }
    retire_finished();
  }

  // ---- EAGLE round. Positions L .. L + A - 1 get slots (A = max(draft_tokens, num_steps)): the
  // pending token at L and the drafted tokens after it. Draft decode step i runs the token at L + i
  // (steps 0 .. num_steps - 2; the last step only samples); verify runs positions L .. L + D - 1.
  SpecRound spec_round() {
    if (cfg_.spec_topk > 1) return tree_round();
    const int S = cfg_.spec_steps, D = cfg_.draft_tokens, A = std::max(D, S);
    SpecRound round;
    Step& dd = round.draft_decode;
    Step& tv = round.verify;
    dd.mode = ForwardMode::draft_decode;
    dd.num_steps = S;
    tv.mode = ForwardMode::target_verify;
    const std::vector<int> picked = decoding();
    std::vector<attnserve::SlotAllocator::ExtendRequest> ext;
    for (int i : picked) {
      Request& r = reqs_[std::size_t(i)];
      for (int k = 1; k < A; ++k) r.ids.push_back(rng_());  // the drafted tokens
      ext.push_back({r.committed, r.slots.back(), A});
    }
    const std::vector<int32_t> locs = alloc_.alloc_extend(ext);
    for (std::size_t k = 0; k < picked.size(); ++k) {
      Request& r = reqs_[std::size_t(picked[k])];
      const int L = r.committed;
      append_slots(r, std::span(locs).subspan(k * std::size_t(A), std::size_t(A)));
      for (Step* s : {&dd, &tv}) {
        add_request(*s, picked[k], L + A);
        s->seq_lens.push_back(L);
      }
      for (int i = 0; i < S; ++i) dd.draft_slots.push_back(r.slots[std::size_t(L + i)]);
      add_rows(tv, L, D);
    }
    note_pages();
    return round;
  }
  // A draft-tree round. Per request, positions L .. L + A - 1 get slots as in a chain round; the
  // verify tree's token t sits at table position L + t (EAGLE's verify allocation) and at position
  // L + depth(t). Tokens 0 .. m - 1 (m = min(D, S)) are a chain, the spine (depth = index, so an
  // accepted prefix of it needs no KV move); the others hang off random earlier tokens. Draft decode
  // has topk branches: branch 0 runs the spine's tokens (positions L + s, the table's slots), branch
  // b > 0 its own tokens, in fresh pages at the same page offsets (slot % P == position % P, as the
  // sparse backend's indexer needs); those context entries follow the table's in the step's request.
  SpecRound tree_round() {
    const int S = cfg_.spec_steps, D = cfg_.draft_tokens, A = std::max(D, S), K = cfg_.spec_topk, P = cfg_.page_size;
    const int m = std::min(D, S);
    SpecRound round;
    Step& dd = round.draft_decode;
    Step& tv = round.verify;
    dd.mode = ForwardMode::draft_decode;
    dd.num_steps = S;
    dd.topk = K;
    dd.branch_rows.resize(std::size_t(S));
    tv.mode = ForwardMode::target_verify;
    tv.topk = K;
    const std::vector<int> picked = decoding();
    std::vector<attnserve::SlotAllocator::ExtendRequest> ext;
    for (int i : picked) {
      Request& r = reqs_[std::size_t(i)];
      for (int k = 1; k < A; ++k) r.ids.push_back(rng_());
      ext.push_back({r.committed, r.slots.back(), A});
    }
    const std::vector<int32_t> locs = alloc_.alloc_extend(ext);
    // The other branches: per request and branch a fresh stretch of positions 0 .. L % P + S - 1, of
    // which L % P .. L % P + S - 1 hold the branch's steps.
    std::vector<attnserve::SlotAllocator::ExtendRequest> bext;
    for (int i : picked)
      for (int b = 1; b < K; ++b) bext.push_back({0, -1, reqs_[std::size_t(i)].committed % P + S});
    const std::vector<int32_t> blocs = alloc_.alloc_extend(bext);
    round.branch_slots = blocs;
    std::size_t bnext = 0;
    for (std::size_t k = 0; k < picked.size(); ++k) {
      Request& r = reqs_[std::size_t(picked[k])];
      const int L = r.committed, req = int(k);
      append_slots(r, std::span(locs).subspan(k * std::size_t(A), std::size_t(A)));
      // The tree.
      std::vector<int32_t> parents(static_cast<std::size_t>(D)), depth(static_cast<std::size_t>(D), 0);
      for (int t = 0; t < D; ++t) {
        parents[std::size_t(t)] = t == 0 ? -1 : t < m ? t - 1 : int32_t(rng_() % uint64_t(t));
        if (t > 0) depth[std::size_t(t)] = depth[std::size_t(parents[std::size_t(t)])] + 1;
      }
      tv.tree_parents.insert(tv.tree_parents.end(), parents.begin(), parents.end());
      for (Step* s : {&dd, &tv}) {
        add_request(*s, picked[k], L + A);
        s->seq_lens.push_back(L);
      }
      StepRequest& vq = tv.reqs.back();
      vq.pos.resize(std::size_t(L + A));
      for (int c = 0; c < L + A; ++c) vq.pos[std::size_t(c)] = c < L || c >= L + D ? c : L + depth[std::size_t(c - L)];
      for (int t = 0; t < D; ++t) {
        QueryRow q{req, L + depth[std::size_t(t)], vq.ids[std::size_t(L + t)], vq.slots[std::size_t(L + t)], L, {}};
        for (int j = t; j >= 0; j = parents[std::size_t(j)]) q.path.insert(q.path.begin(), L + j);
        tv.rows.push_back(std::move(q));
      }
      // Draft decode: branch 0 = the table's positions L .. L + S - 1; branch b > 0 its own tokens,
      // entries L + A + (b - 1) * S + s of the step's request.
      StepRequest& dq = dd.reqs.back();
      dq.pos.resize(std::size_t(L + A));
      for (int c = 0; c < L + A; ++c) dq.pos[std::size_t(c)] = c;
      for (int b = 1; b < K; ++b) {
        for (int o = 0; o < L % P; ++o)  // the prefix's partial last page, duplicated into the branch's page
          dd.tail_copies.push_back({req, L - L % P + o, blocs[bnext + std::size_t(o)]});
        for (int s = 0; s < S; ++s) {
          dq.ids.push_back(s == 0 ? dq.ids[std::size_t(L)] : rng_());  // every branch starts at the pending token
          dq.slots.push_back(blocs[bnext + std::size_t(L % P + s)]);
          dq.pos.push_back(L + s);
        }
        bnext += std::size_t(L % P + S);
      }
      auto entry = [&](int b, int s) { return b == 0 ? L + s : L + A + (b - 1) * S + s; };
      for (int b = 0; b < K; ++b)
        for (int s = 0; s < S; ++s) dd.draft_slots.push_back(dq.slots[std::size_t(entry(b, s))]);
      for (int i = 0; i < S; ++i)
        for (int b = 0; b < K; ++b) {
          const int c = entry(b, i);
          QueryRow q{req, L + i, dq.ids[std::size_t(c)], dq.slots[std::size_t(c)], L, {}};
          for (int s = 0; s <= i; ++s) q.path.push_back(entry(b, s));
          dd.branch_rows[std::size_t(i)].push_back(std::move(q));
        }
    }
    note_pages();
    return round;
  }

  // Verify's outcome: 1 .. draft_tokens tokens accepted per request (no more than it still needs;
  // draft trees: along the spine, 1 .. min(draft_tokens, num_steps)), and the draft extend over them.
  void accept(SpecRound& round) {
    Step& de = round.draft_extend;
    de.mode = ForwardMode::draft_extend;
    const Step& tv = round.verify;
    const int most = cfg_.spec_topk > 1 ? std::min(cfg_.draft_tokens, cfg_.spec_steps) : cfg_.draft_tokens;
    for (int k = 0; k < tv.batch_size(); ++k) {
      const Request& r = by_id(tv.reqs[std::size_t(k)].id);
      const int L = r.committed;
      const int a = std::min(std::uniform_int_distribution<int>(1, most)(rng_), r.spec.output_len - r.generated);
      round.accepted.push_back(a);
      add_request(de, index_of(r.spec.id), L + a);
      de.seq_lens.push_back(L + a);
      de.extend_seq_lens.push_back(a);
      de.extend_prefix_lens.push_back(L);
      add_rows(de, L, a);
    }
  }
  void finish_spec(const SpecRound& round) {
    const int P = cfg_.page_size;
    if (!round.branch_slots.empty()) alloc_.free(round.branch_slots);
    for (std::size_t k = 0; k < round.accepted.size(); ++k) {
      Request& r = by_id(round.verify.reqs[k].id);
      const int a = round.accepted[k], kept = r.committed + a;
      // Pages holding only rejected positions go back; the page of the last kept position stays.
      std::vector<int32_t> rejected;
      for (int p = kept; p < int(r.slots.size()); ++p)
        if (p / P > (kept - 1) / P) rejected.push_back(r.slots[std::size_t(p)]);
      if (!rejected.empty()) alloc_.free(rejected);
      r.slots.resize(static_cast<std::size_t>(kept));
      r.ids.resize(static_cast<std::size_t>(kept));
      r.ids.push_back(rng_());  // the token sampled after the accepted ones: pending
      r.committed = kept;
      r.generated += a;
      counters_.generated += a;
      counters_.accepted += a;
      ++counters_.spec_rounds;
    }
    retire_finished();
  }

  // ---- State
  const attnserve::ReqToTokenPool& table() const { return table_; }
  const attnserve::SlotAllocator& allocator() const { return alloc_; }
  const SchedulerCounters& counters() const { return counters_; }
  int64_t usable_pages() const { return alloc_.num_pages() - 1; }
  int64_t pages_in_use() const { return usable_pages() - alloc_.available_pages(); }
  int64_t peak_pages() const { return peak_pages_; }
  int peak_running() const { return peak_running_; }
  int running() const { return int(running_.size()); }
  int waiting() const { return int(waiting_.size()); }
  int finished() const { return finished_; }
  int total() const { return int(trace_.size()); }
  int clock() const { return clock_; }
  int steps() const { return steps_; }

  // Bookkeeping invariants (the unit test's): each running request's slots are page-consistent,
  // its table row holds them, its pages are allocated and no page has two owners, and the pages in
  // use are exactly the running requests' pages. Returns "" or what is wrong.
  std::string check_invariants() const {
    const int P = cfg_.page_size;
    std::vector<int> owner(std::size_t(alloc_.num_pages()), -1);
    int64_t owned = 0;
    const attnserve::TensorView t = table_.table();
    for (int i : running_) {
      const Request& r = reqs_[std::size_t(i)];
      if (int(r.slots.size()) != r.committed) return "request " + std::to_string(r.spec.id) + ": slots != committed";
      if (r.state == State::decoding && int(r.ids.size()) != r.committed + 1)
        return "request " + std::to_string(r.spec.id) + ": no pending token";
      for (int p = 0; p < r.committed; ++p) {
        const int32_t s = r.slots[std::size_t(p)];
        if (s % P != p % P) return "request " + std::to_string(r.spec.id) + ": slot not page-consistent";
        if (t.device.is_cpu() && t.ptr<int32_t>()[r.row * t.stride(0) + p] != s)
          return "request " + std::to_string(r.spec.id) + ": table row differs from its slots";
        const int page = s / P;
        if (page == 0 || !alloc_.page_allocated(page))
          return "request " + std::to_string(r.spec.id) + ": page not allocated";
        if (owner[std::size_t(page)] == -1) owner[std::size_t(page)] = i, ++owned;
        else if (owner[std::size_t(page)] != i) return "page " + std::to_string(page) + " has two owners";
      }
      // Positions within the last page past `committed` belong to the same page: nothing to check.
    }
    if (owned != pages_in_use())
      return "pages in use " + std::to_string(pages_in_use()) + " != pages of running requests " +
             std::to_string(owned);
    if (table_.available() != table_.size() - int64_t(running_.size())) return "table rows leaked";
    int64_t reserved = 0;
    for (int i : running_) reserved += pages_needed(reqs_[std::size_t(i)].spec);
    if (reserved != reserved_) return "reservations out of sync";
    if (reserved_ > usable_pages()) return "more pages reserved than the pool has";
    return "";
  }

 private:
  enum class State { queued, waiting, prefilling, decoding, finished };
  struct Request {
    RequestSpec spec;
    State state = State::queued;
    int64_t row = -1;
    std::vector<uint64_t> ids;   // by position: prompt, generated, then the pending/drafted tokens
    std::vector<int32_t> slots;  // by position: the slots of the allocated positions
    int committed = 0;           // positions in the KV caches
    int generated = 0;           // output tokens so far
  };

  int lookahead() const { return speculative() ? std::max(cfg_.draft_tokens, cfg_.spec_steps) : 1; }
  int positions_needed(const RequestSpec& s) const { return s.prompt_len + s.output_len + lookahead(); }
  int64_t pages_needed(const RequestSpec& s) const {
    const int P = cfg_.page_size;
    // Draft trees: each other branch's stretch of up to P - 1 + num_steps positions in fresh pages.
    const int64_t branches =
        speculative() && cfg_.spec_topk > 1 ? int64_t(cfg_.spec_topk - 1) * ((P - 1 + cfg_.spec_steps + P - 1) / P) : 0;
    return (positions_needed(s) + P - 1) / P + branches;
  }

  void take_arrivals() {
    while (next_arrival_ < trace_.size() && trace_[next_arrival_].arrival <= clock_) {
      reqs_[next_arrival_].state = State::waiting;
      waiting_.push_back(int(next_arrival_++));
    }
  }
  void admit() {
    while (!waiting_.empty() && int(running_.size()) < cfg_.max_running) {
      Request& r = reqs_[std::size_t(waiting_.front())];
      const int64_t need = pages_needed(r.spec);
      if (reserved_ + need > usable_pages()) break;  // first come, first served: wait for pages
      reserved_ += need;
      r.row = table_.alloc();
      r.state = State::prefilling;
      r.ids.clear();
      for (int p = 0; p < r.spec.prompt_len; ++p) r.ids.push_back(rng_());
      running_.push_back(waiting_.front());
      waiting_.pop_front();
    }
    peak_running_ = std::max(peak_running_, int(running_.size()));
  }
  std::vector<int> decoding() const {
    std::vector<int> out;
    for (int i : running_)
      if (reqs_[std::size_t(i)].state == State::decoding) out.push_back(i);
    return out;
  }
  void append_slots(Request& r, std::span<const int32_t> slots) {
    table_.write(r.row, int64_t(r.slots.size()), slots);
    r.slots.insert(r.slots.end(), slots.begin(), slots.end());
  }
  void add_request(Step& s, int i, int ctx) const {
    const Request& r = reqs_[std::size_t(i)];
    s.reqs.push_back({r.spec.id, int32_t(r.row), std::vector<uint64_t>(r.ids.begin(), r.ids.begin() + ctx),
                      std::vector<int32_t>(r.slots.begin(), r.slots.begin() + ctx)});
    s.req_pool_indices.push_back(int32_t(r.row));
  }
  static void add_rows(Step& s, int first, int n) {
    const int k = s.batch_size() - 1;
    const StepRequest& q = s.reqs.back();
    for (int p = first; p < first + n; ++p) s.rows.push_back({k, p, q.ids[std::size_t(p)], q.slots[std::size_t(p)]});
  }
  int index_of(int id) const {
    for (std::size_t i = 0; i < reqs_.size(); ++i)
      if (reqs_[i].spec.id == id) return int(i);
    throw std::logic_error("scheduler: unknown request id");
  }
  Request& by_id(int id) { return reqs_[std::size_t(index_of(id))]; }
  void note_pages() { peak_pages_ = std::max(peak_pages_, pages_in_use()); }

  void retire_finished() {
    for (std::size_t k = 0; k < running_.size();) {
      Request& r = reqs_[std::size_t(running_[k])];
      if (r.state == State::decoding && r.generated >= r.spec.output_len) {
        alloc_.free(r.slots);
        table_.free(r.row);
        reserved_ -= pages_needed(r.spec);
        r.state = State::finished;
        r.slots.clear();
        r.ids.clear();
        ++finished_;
        running_.erase(running_.begin() + std::ptrdiff_t(k));
      } else {
        ++k;
      }
    }
  }

  SchedulerConfig cfg_;
  std::vector<RequestSpec> trace_;  // by arrival
  std::vector<Request> reqs_;       // same order as trace_
  attnserve::ReqToTokenPool table_;
  attnserve::SlotAllocator alloc_;
  std::mt19937_64 rng_;
  std::deque<int> waiting_;
  std::vector<int> running_;  // admission order
  std::size_t next_arrival_ = 0;
  int clock_ = -1, steps_ = 0, finished_ = 0, peak_running_ = 0;
  int64_t reserved_ = 0, peak_pages_ = 0;
  Work last_ = Work::done;
  SchedulerCounters counters_;
};

}  // namespace demo
