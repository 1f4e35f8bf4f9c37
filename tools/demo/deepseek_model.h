// The DeepSeek-V3.2 model: sparse MLA (DSA) over the latent cache, 576 = 512 latent + 64 rope, in the
// FP8-656 format, pages of 64. Each layer, as the engine's NSA layer does:
//   1. store the new tokens' indexer keys (set_index_k into the IndexerKeyPool);
//   2. the lightning indexer: quantize q (quantize_fp8_groups, the q scale folded into the weights),
//      score the keys (indexer_paged for decode / draft decode / verify through the backend's real
//      page table; indexer_ragged for extend / draft extend over the requests' keys gathered from
//      the pool), top-k through the backend's topk_transform (slots);
//   3. the backend's forward: stores the latent (FP8-656) and attends to the top-k slots.
// Target: `layers` layers; EAGLE draft (the MTP layer): one layer with its own pools, same slots.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "activations.h"
#include "attnserve/backend.h"
#include "attnserve/kv_cache.h"
#include "attnserve/ops.h"
#include "device_array.h"
#include "model.h"

namespace demo {

class DeepSeekModel final : public Model {
 public:
  static constexpr int kLatent = 512, kRope = 64, kRow = 576;

  DeepSeekModel(const Settings& s, const CacheShape& cache, RunStats& stats)
      : s_(s),
        cache_(cache),
        stats_(stats),
        q_(s.device),
        latent_(s.device),
        rope_(s.device),
        iq_(s.device),
        iq8_(s.device),
        iscale_(s.device),
        iw_(s.device),
        ik_(s.device),
        logits_(s.device),
        gk_(s.device),
        gks_(s.device),
        gslots_(s.device),
        ks_(s.device),
        ke_(s.device),
        out_(s.device),
        loc_(s.device) {
    using namespace attnserve;
    // DeepSeek-V3.2's softmax scale: 192^-0.5 * mscale^2 with YaRN's mscale = 0.1 ln(40) + 1.
    const double mscale = 0.1 * std::log(40.0) + 1.0;
    scale_ = float(mscale * mscale / std::sqrt(192.0));
    const int64_t pages = cache.num_slots / s.page_size;
    target_ = std::make_unique<Worker_>(s.layers, cache.num_slots, pages, s.page_size, s.device);
    target_->backend = std::make_unique<SparseBackend>(config(*target_));
    capture_graphs(s, *target_->backend, Worker::target, static_cast<SparseMultiStepBackend*>(nullptr));
    if (s.spec) {
      draft_ = std::make_unique<Worker_>(1, cache.num_slots, pages, s.page_size, s.device);
      draft_->backend = std::make_unique<SparseBackend>(config(*draft_));
      draft_steps_ = std::make_unique<SparseMultiStepBackend>(config(*draft_));
      capture_graphs(s, *draft_->backend, Worker::draft, draft_steps_.get());
    }
  }

  std::string describe() const override {
    const double mb = double(target_->bytes() + (draft_ ? draft_->bytes() : 0)) / 1e6;
    return "DeepSeek-V3.2 DSA: MLA 576/512, " + std::to_string(s_.heads) + " heads; indexer " +
           std::to_string(s_.index_heads) + " x 128, top-k " + std::to_string(s_.topk) + "; " +
           std::to_string(s_.layers) + " layers" + (s_.spec ? " + 1 draft (MTP) layer" : "") + "; FP8-656 KV (" +
           attnserve::to_string(target_->backend->resolved_prefill_impl()) + "), page " + std::to_string(s_.page_size) +
           ", " + std::to_string(cache_.num_slots) + " slots (" + std::to_string(int(mb + 0.5)) + " MB)";
  }

  void forward(Worker w, const Step& step, bool check) override {
    attnserve::SparseBackend& b = *(w == Worker::target ? target_ : draft_)->backend;
    const PassShape shape = plan_pass(b, step, int64_t(step.rows.size()), s_, cache_.req_to_token, stats_);
    run_layers(w, b, step, step.rows, shape, check);
  }

  void draft_decode(const Step& step, bool check) override {
    copy_tails(step);
    const PassShape shape =
        plan_pass(*draft_steps_, step, int64_t(step.batch_size()) * step.topk, s_, cache_.req_to_token, stats_);
    for (int i = 0; i < draft_steps_->num_backends(); ++i)
      run_layers(Worker::draft, draft_steps_->step(i), step, step.draft_rows(i), shape, check);
  }

 private:
  // A worker's caches: the latent (FP8-656) and the indexer keys, one per layer.
  struct Worker_ {
    attnserve::MlaKvPool kv;
    attnserve::IndexerKeyPool index_keys;
    std::unique_ptr<attnserve::SparseBackend> backend;
    Worker_(int layers, int64_t slots, int64_t pages, int page_size, attnserve::Device d)
        : kv(layers, slots, attnserve::MlaCacheFormat::fp8_656, d), index_keys(layers, pages, page_size, d) {}
    std::size_t bytes() const { return kv.bytes() + index_keys.bytes(); }
  };

  attnserve::SparseBackendConfig config(const Worker_& w) const {
    using namespace attnserve;
    SparseBackendConfig c;
    c.num_q_heads = s_.heads;
    c.kv_cache_format = MlaCacheFormat::fp8_656;
    c.index_topk = s_.topk;
    c.index_n_heads = s_.index_heads;
    c.softmax_scale = scale_;
    c.page_size = s_.page_size;
    c.spec = {.draft_token_num = s_.draft_tokens,
              .num_steps = s_.spec ? s_.spec_steps : 0,
              .step_id = 0,
              .topk = s_.spec ? s_.spec_topk : 1};
    c.capacity = capacity_of(s_, cache_);
    c.device = s_.device;
    c.req_to_token = cache_.req_to_token;
    c.kv_buffers = kv_buffers_of(w.kv);
    return c;
  }
  int num_layers(Worker w) const { return w == Worker::target ? s_.layers : 1; }

  // Draft trees: the engine's copy of each request's partial last prefix page into the other
  // branches' first pages, indexer keys only (the indexer reads a branch through its pages; sparse MLA
  // reads token slots). The copied keys are the prefix's, regenerated here as the draft stored them.
  void copy_tails(const Step& step) {
    using namespace attnserve;
    if (step.tail_copies.empty()) return;
    PhaseTimer t(stats_, Phase::index_store, s_.device);
    const int64_t n = int64_t(step.tail_copies.size());
    std::vector<int32_t> slots;
    for (const TailCopy& c : step.tail_copies) slots.push_back(c.slot);
    const TensorView loc = tail_loc_.upload(slots, DType::i32, {n});
    for (int layer = 0; layer < num_layers(Worker::draft); ++layer) {
      std::vector<bf16_t> keys(std::size_t(n * kIndexDim));
      for (int64_t i = 0; i < n; ++i) {
        const TailCopy& c = step.tail_copies[std::size_t(i)];
        const StepRequest& req = step.reqs[std::size_t(c.req)];
        fill_act(
            &keys[std::size_t(i * kIndexDim)], kIndexDim,
            act_key(s_.seed, Worker::draft, layer, Act::index_k, req.ids[std::size_t(c.entry)], req.position(c.entry)));
      }
      set_index_k({.k = tail_k_.upload(keys, DType::bf16, {n, kIndexDim}),
                   .index_k_cache = draft_->index_keys.cache(layer),
                   .loc = loc,
                   .page_size = s_.page_size});
    }
  }
  const Worker_& worker(Worker w) const { return *(w == Worker::target ? target_ : draft_); }
  static bool ragged(attnserve::ForwardMode m) {
    return m == attnserve::ForwardMode::extend || m == attnserve::ForwardMode::draft_extend;
  }
  // DeepSeek's indexer weight scale: n_heads^-0.5 * head_dim^-0.5 (the q scale is folded in per row).
  double weight_factor() const { return 1.0 / std::sqrt(double(s_.index_heads) * kIndexDim); }

  // Every layer of a worker over the pass's query rows (`rows` live, then padding up to shape.rows:
  // zero activations stored into slot 0, the padding page).
  void run_layers(Worker w, attnserve::SparseBackend& b, const Step& step, const std::vector<QueryRow>& rows,
                  const PassShape& shape, bool check) {
    using namespace attnserve;
    const int64_t T = int64_t(rows.size()), TG = shape.rows, H = s_.heads, HI = s_.index_heads;
    stats_.count_pass(w, step.mode, T, shape.graph);
    std::vector<int32_t> locs(static_cast<std::size_t>(TG), 0);
    for (int64_t i = 0; i < T; ++i) locs[std::size_t(i)] = rows[std::size_t(i)].slot;
    for (int layer = 0; layer < num_layers(w); ++layer) {
      TensorView q, latent, rope, iq, ik, loc, out;
      {
        PhaseTimer t(stats_, Phase::inputs, s_.device);
        hq_.assign(std::size_t(TG * H * kRow), bf16_t{0});
        hlatent_.assign(std::size_t(TG * kLatent), bf16_t{0});
        hrope_.assign(std::size_t(TG * kRope), bf16_t{0});
        hiq_.assign(std::size_t(TG * HI * kIndexDim), bf16_t{0});
        hiw_.assign(std::size_t(TG * HI), 0.f);
        hik_.assign(std::size_t(TG * kIndexDim), bf16_t{0});
#pragma omp parallel for schedule(static) if (T * (H * kRow + HI * kIndexDim) >= kParallelWork)
        for (int64_t i = 0; i < T; ++i) {
          const QueryRow& r = rows[std::size_t(i)];
          auto key = [&](Act a) { return act_key(s_.seed, w, layer, a, r.token, r.pos); };
          fill_act(&hq_[std::size_t(i * H * kRow)], H * kRow, key(Act::q));
          fill_act(&hlatent_[std::size_t(i * kLatent)], kLatent, key(Act::latent));
          fill_act(&hrope_[std::size_t(i * kRope)], kRope, key(Act::rope));
          fill_act(&hiq_[std::size_t(i * HI * kIndexDim)], HI * kIndexDim, key(Act::index_q));
          fill_act(&hiw_[std::size_t(i * HI)], HI, key(Act::index_w));
          fill_act(&hik_[std::size_t(i * kIndexDim)], kIndexDim, key(Act::index_k));
        }
        q = q_.upload(hq_, DType::bf16, {TG, H, kRow});
        latent = latent_.upload(hlatent_, DType::bf16, {TG, kLatent});
        rope = rope_.upload(hrope_, DType::bf16, {TG, kRope});
        iq = iq_.upload(hiq_, DType::bf16, {TG, HI * kIndexDim});
        ik = ik_.upload(hik_, DType::bf16, {TG, kIndexDim});
        loc = loc_.upload(locs, DType::i32, {TG});
        out = out_.view(DType::bf16, {TG, H, kLatent});
      }
      const TensorView index_cache = worker(w).index_keys.cache(layer);
      {
        PhaseTimer t(stats_, Phase::index_store, s_.device);
        set_index_k({.k = ik, .index_k_cache = index_cache, .loc = loc, .page_size = s_.page_size});
      }
      TensorView topk_slots;
      {
        PhaseTimer t(stats_, Phase::indexer, s_.device);
        topk_slots = indexer_topk(b, step, rows, iq, index_cache);
      }
      {
        PhaseTimer t(stats_, Phase::attention, s_.device);
        const LayerSpec spec{.layer_id = layer, .scaling = scale_};
        b.forward({.q = q,
                   .out = out,
                   .k = latent,
                   .k_rope = rope,
                   .out_cache_loc = loc,
                   .save_kv_cache = true,
                   .topk_indices = topk_slots},
                  spec);
      }
      if (check) {
        PhaseTimer t(stats_, Phase::oracle, s_.device);
        this->check(w, layer, step, rows, download<bf16_t>(out), download<int32_t>(topk_slots));
      }
    }
  }

  // The lightning indexer and the top-k: each row's top-k slots (a view into the backend's buffer).
  attnserve::TensorView indexer_topk(attnserve::SparseBackend& b, const Step& step, const std::vector<QueryRow>& rows,
                                     const attnserve::TensorView& iq, const attnserve::TensorView& index_cache) {
    using namespace attnserve;
    const int64_t T = iq.shape[0], HI = s_.index_heads;  // the pass's rows: `rows`, then padding
    // q in fp8 per head (128 values); its scales stay on the device and multiply the weights in the
    // indexer (q_scale), so nothing waits for the device here.
    const TensorView iq8 = iq8_.view(DType::fp8_e4m3, {T, HI * kIndexDim});
    const TensorView scales = iscale_.view(DType::f32, {T, HI});
    quantize_fp8_groups({.x = iq, .out = iq8, .scales = scales, .group = kIndexDim});
    std::vector<float> weights(hiw_.size());
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = float(hiw_[i] * weight_factor());
    const TensorView w = iw_.upload(weights, DType::f32, {T, HI});
    const TensorView q8 = iq8.reshape({T, HI, kIndexDim});

    if (!ragged(step.mode)) {
      // Decode-like rows: each row has its own row of the real page table and sees expanded[i] keys.
      // Draft-tree verify rows score their request's prefix and whole tree: up to its context's entries.
      int64_t width = 1;
      for (const QueryRow& r : rows)
        width = std::max<int64_t>(
            width, step.topk > 1 ? int64_t(step.reqs[std::size_t(r.req)].slots.size()) : int64_t(r.pos) + 1);
      const TensorView logits = logits_.view(DType::f32, {T, width});
      indexer_paged({.q = q8,
                     .weights = w,
                     .index_k_cache = index_cache,
                     .page_table = b.get_page_table_64(),
                     .seqlens = b.get_seqlens_expanded(),
                     .logits = logits,
                     .page_size = s_.page_size,
                     .next_n = 1,
                     .q_scale = scales});
      return b.topk_transform(logits, s_.topk);
    }
    // Extend-like rows: the requests' keys gathered from the pool into one contiguous buffer
    // (gather_index_k over the requests' slots, request after request), then ragged scores: row i
    // sees [ks[i], ke[i]) = its request's keys up to its position.
    std::vector<int64_t> base(step.reqs.size() + 1, 0);
    std::vector<int32_t> slots;
    for (std::size_t k = 0; k < step.reqs.size(); ++k) {
      base[k + 1] = base[k] + step.seq_lens[k];
      const std::vector<int32_t>& s = step.reqs[k].slots;
      slots.insert(slots.end(), s.begin(), s.begin() + step.seq_lens[k]);
    }
    const int64_t K = base.back();
    const TensorView gk = gk_.view(DType::fp8_e4m3, {K, kIndexDim});
    const TensorView gks = gks_.view(DType::f32, {K});
    gather_index_k({.index_k_cache = index_cache,
                    .slots = gslots_.upload(slots, DType::i32, {K}),
                    .out_k = gk,
                    .out_scale = gks,
                    .page_size = int(s_.page_size)});
    std::vector<int32_t> ks(static_cast<std::size_t>(T), 0), ke(static_cast<std::size_t>(T), 0);  // padding: no key
    for (std::size_t i = 0; i < rows.size(); ++i) {
      ks[i] = int32_t(base[std::size_t(rows[i].req)]);
      ke[i] = int32_t(base[std::size_t(rows[i].req)] + rows[i].pos + 1);
    }
    const TensorView ks_v = ks_.upload(ks, DType::i32, {T}), ke_v = ke_.upload(ke, DType::i32, {T});
    const TensorView logits = logits_.view(DType::f32, {T, K});
    indexer_ragged(
        {.q = q8, .weights = w, .k = gk, .k_scale = gks, .ks = ks_v, .ke = ke_v, .logits = logits, .q_scale = scales});
    return b.topk_transform(logits, s_.topk, {}, ks_v);
  }

  // Each sampled row: its top-k slots must be valid, distinct positions 0 .. pos of its request, as
  // many as min(pos + 1, topk), and (when there is a choice) a best selection by the oracle's
  // indexer scores; its output must equal sparse MLA in double over those keys, read back from
  // activations regenerated by position and quantized as the FP8-656 cache holds them.
  void check(Worker w, int layer, const Step& step, const std::vector<QueryRow>& rows,
             const std::vector<attnserve::bf16_t>& out, const std::vector<int32_t>& topk) {
    const std::vector<int> picked =
        rows_to_check(rows, s_.check_rows, uint64_t(stats_.oracle.rows) * 31 + uint64_t(layer));
    std::vector<RowCheck> results;
    for (int i : picked) results.push_back(check_row(w, layer, step, rows[std::size_t(i)], out, topk, i));
    record_checks(stats_, "deepseek", w, layer, step, rows, picked, results);
  }
  RowCheck check_row(Worker w, int layer, const Step& step, const QueryRow& row,
                     const std::vector<attnserve::bf16_t>& out, const std::vector<int32_t>& topk, int i) const {
    const int H = s_.heads, HI = s_.index_heads, K = s_.topk;
    const StepRequest& req = step.reqs[std::size_t(row.req)];
    RowCheck r;
    auto fail = [&](std::string why) {
      r.ok = false, r.problem = std::move(why), r.err = INFINITY;
      return r;
    };
    // The selection, as indices into the row's visible entries (positions 0 .. pos, or a draft tree
    // row's prefix and path).
    const std::vector<int32_t> entries = visible_entries(row);
    std::unordered_map<int32_t, int32_t> position_of;
    for (std::size_t v = 0; v < entries.size(); ++v) position_of[req.slots[std::size_t(entries[v])]] = int32_t(v);
    const int n = int(entries.size()), expected = std::min(n, K);
    std::vector<int32_t> selected;
    std::vector<uint8_t> seen(static_cast<std::size_t>(n), 0);
    for (int j = 0; j < K; ++j) {
      const int32_t slot = topk[std::size_t(int64_t(i) * K + j)];
      if (j >= expected) {
        if (slot != -1)
          return fail("top-k entry " + std::to_string(j) + " is " + std::to_string(slot) + ", expected -1");
        continue;
      }
      const auto it = position_of.find(slot);
      if (it == position_of.end()) return fail("top-k slot " + std::to_string(slot) + " is not a visible key");
      if (seen[std::size_t(it->second)]++) return fail("top-k slot " + std::to_string(slot) + " twice");
      selected.push_back(it->second);
    }
    r.topk_checked = true;  // all visible keys when n <= K
    if (n > K) {            // a real choice: is it a best one?
      std::vector<float> x(std::size_t(HI) * kIndexDim), wr(static_cast<std::size_t>(HI));
      fill_act_bf16_rounded(x.data(), HI * kIndexDim, act_key(s_.seed, w, layer, Act::index_q, row.token, row.pos));
      fill_act(wr.data(), HI, act_key(s_.seed, w, layer, Act::index_w, row.token, row.pos));
      const Fp8Row q8 = quantize_fp8_row(x.data(), HI * kIndexDim);
      std::vector<double> weights(static_cast<std::size_t>(HI));
      for (int h = 0; h < HI; ++h)
        weights[std::size_t(h)] = double(wr[std::size_t(h)]) * weight_factor() * q8.scales[std::size_t(h)];
      std::vector<IndexScore> scores(static_cast<std::size_t>(n));
#pragma omp parallel for schedule(static) if (int64_t(n) * HI * kIndexDim >= kParallelWork)
      for (int v = 0; v < n; ++v) {
        const int32_t c = entries[std::size_t(v)];
        float kx[kIndexDim];
        fill_act_bf16_rounded(kx, kIndexDim,
                              act_key(s_.seed, w, layer, Act::index_k, req.ids[std::size_t(c)], req.position(c)));
        scores[std::size_t(v)] = index_score(q8, weights, quantize_fp8_row(kx, kIndexDim));
      }
      r.topk_sparse = true;
      if (!is_a_best_selection(scores, selected))
        return fail("the top-k selection is not a best one by the oracle's indexer scores");
    }
    // Sparse MLA over the selected keys.
    std::vector<float> q(std::size_t(H) * kRow), kv(selected.size() * kRow);
    fill_act_bf16_rounded(q.data(), H * kRow, act_key(s_.seed, w, layer, Act::q, row.token, row.pos));
#pragma omp parallel for schedule(static) if (selected.size() * kRow >= std::size_t(kParallelWork))
    for (std::size_t j = 0; j < selected.size(); ++j) {
      const int32_t c = entries[std::size_t(selected[j])], p = req.position(c);
      const uint64_t token = req.ids[std::size_t(c)];
      float lat[kLatent], rope[kRope];
      fill_act_bf16_rounded(lat, kLatent, act_key(s_.seed, w, layer, Act::latent, token, p));
      fill_act_bf16_rounded(rope, kRope, act_key(s_.seed, w, layer, Act::rope, token, p));
      fp8_656_round_trip(lat, rope, &kv[j * kRow]);
    }
    const std::vector<double> ref = mla_reference(q.data(), kv, int64_t(selected.size()), H, scale_);
    std::vector<double> got(ref.size());
    for (std::size_t c = 0; c < got.size(); ++c) got[c] = attnserve::to_float(out[std::size_t(i) * got.size() + c]);
    r.err = rel_l2(got, ref);
    r.ok = r.err <= kBf16Tolerance;
    if (!r.ok) r.problem = "rel. L2 error " + std::to_string(r.err) + " > " + std::to_string(kBf16Tolerance);
    return r;
  }

  Settings s_;
  CacheShape cache_;
  RunStats& stats_;
  float scale_ = 0;
  std::unique_ptr<Worker_> target_, draft_;
  std::unique_ptr<attnserve::SparseMultiStepBackend> draft_steps_;
  DeviceArray q_, latent_, rope_, iq_, iq8_, iscale_, iw_, ik_, logits_, gk_, gks_, gslots_, ks_, ke_, out_, loc_;
  DeviceArray tail_k_{s_.device}, tail_loc_{s_.device};
  std::vector<attnserve::bf16_t> hq_, hlatent_, hrope_, hiq_, hik_;
  std::vector<float> hiw_;
};

}  // namespace demo
