// The dense model: Llama-3-8B-like GQA attention (h_q 32, h_kv 8, d 128), bf16 KV in pages of 16,
// odd layers local (chunked, Llama-4 style use_irope) when a chunk is set. The target worker has
// `layers` layers over one MhaKvPool; the EAGLE draft worker one layer over its own pool, sharing the
// slots (as the engine's draft and target pools do). Backends: DenseBackend for the target and the
// draft's extend / draft extend / decode, DenseMultiStepBackend for the draft decode.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "activations.h"
#include "attnserve/backend.h"
#include "attnserve/kv_cache.h"
#include "device_array.h"
#include "model.h"

namespace demo {

class DenseModel final : public Model {
 public:
  DenseModel(const Settings& s, const CacheShape& cache, RunStats& stats)
      : s_(s), cache_(cache), stats_(stats), q_(s.device), k_(s.device), v_(s.device), out_(s.device), loc_(s.device) {
    using namespace attnserve;
    scale_ = 1.f / std::sqrt(float(s.head_dim));
    target_pool_ = std::make_unique<MhaKvPool>(s.layers, cache.num_slots, s.kv_heads, s.head_dim, s.head_dim,
                                               DType::bf16, s.device);
    target_ = std::make_unique<DenseBackend>(config(*target_pool_));
    capture_graphs(s, *target_, Worker::target, static_cast<DenseMultiStepBackend*>(nullptr));
    if (s.spec) {
      draft_pool_ =
          std::make_unique<MhaKvPool>(1, cache.num_slots, s.kv_heads, s.head_dim, s.head_dim, DType::bf16, s.device);
      draft_ = std::make_unique<DenseBackend>(config(*draft_pool_));
      draft_steps_ = std::make_unique<DenseMultiStepBackend>(config(*draft_pool_));
      capture_graphs(s, *draft_, Worker::draft, draft_steps_.get());
    }
  }

  std::string describe() const override {
    std::string local = "none";
    if (s_.local_chunk > 0 && s_.layers > 1) local = "odd layers, chunk " + std::to_string(s_.local_chunk);
    const double mb = double(target_pool_->bytes() + (draft_pool_ ? draft_pool_->bytes() : 0)) / 1e6;
    return "Llama-3-8B-like GQA: h_q " + std::to_string(s_.heads) + ", h_kv " + std::to_string(s_.kv_heads) + ", d " +
           std::to_string(s_.head_dim) + "; " + std::to_string(s_.layers) + " layers (local: " + local + ")" +
           (s_.spec ? " + 1 draft layer" : "") + "; bf16 KV, page " + std::to_string(s_.page_size) + ", " +
           std::to_string(cache_.num_slots) + " slots (" + std::to_string(int(mb + 0.5)) + " MB)";
  }

  void forward(Worker w, const Step& step, bool check) override {
    attnserve::DenseBackend& b = w == Worker::target ? *target_ : *draft_;
    const PassShape shape = plan_pass(b, step, int64_t(step.rows.size()), s_, cache_.req_to_token, stats_);
    run_layers(w, b, step, step.rows, shape, check);
  }

  void draft_decode(const Step& step, bool check) override {
    const PassShape shape =
        plan_pass(*draft_steps_, step, int64_t(step.batch_size()) * step.topk, s_, cache_.req_to_token, stats_);
    for (int i = 0; i < draft_steps_->num_backends(); ++i)
      run_layers(Worker::draft, draft_steps_->step(i), step, step.draft_rows(i), shape, check);
  }

 private:
  attnserve::DenseBackendConfig config(const attnserve::MhaKvPool& pool) const {
    using namespace attnserve;
    DenseBackendConfig c;
    c.arch = AttentionArch::mha;
    c.num_q_heads = s_.heads;
    c.num_kv_heads = s_.kv_heads;
    c.head_dim = s_.head_dim;
    c.kv_dtype = DType::bf16;
    c.softmax_scale = scale_;
    c.page_size = s_.page_size;
    c.attention_chunk_size = s_.local_chunk;
    c.spec = {.draft_token_num = s_.draft_tokens,
              .num_steps = s_.spec ? s_.spec_steps : 0,
              .step_id = 0,
              .topk = s_.spec ? s_.spec_topk : 1};
    c.capacity = capacity_of(s_, cache_);
    c.device = s_.device;
    c.req_to_token = cache_.req_to_token;
    c.kv_buffers = kv_buffers_of(pool);
    return c;
  }
  int num_layers(Worker w) const { return w == Worker::target ? s_.layers : 1; }
  bool is_local(Worker w, int layer) const { return w == Worker::target && s_.local_chunk > 0 && layer % 2 == 1; }

  // Every layer of a worker over the pass's query rows (`rows` live, then padding up to shape.rows:
  // zero activations stored into slot 0, the padding page).
  void run_layers(Worker w, attnserve::DenseBackend& b, const Step& step, const std::vector<QueryRow>& rows,
                  const PassShape& shape, bool check) {
    using namespace attnserve;
    const int64_t T = int64_t(rows.size()), TG = shape.rows, hq = s_.heads, hkv = s_.kv_heads, d = s_.head_dim;
    stats_.count_pass(w, step.mode, T, shape.graph);
    std::vector<int32_t> locs(static_cast<std::size_t>(TG), 0);
    for (int64_t i = 0; i < T; ++i) locs[std::size_t(i)] = rows[std::size_t(i)].slot;
    for (int layer = 0; layer < num_layers(w); ++layer) {
      TensorView q, k, v, out, loc;
      {
        PhaseTimer t(stats_, Phase::inputs, s_.device);
        for (auto* h : {&hq_, &hk_, &hv_}) h->assign(std::size_t(TG * (h == &hq_ ? hq : hkv) * d), bf16_t{0});
#pragma omp parallel for schedule(static) if (T * (hq + 2 * hkv) * d >= kParallelWork)
        for (int64_t i = 0; i < T; ++i) {
          const QueryRow& r = rows[std::size_t(i)];
          fill_act(&hq_[std::size_t(i * hq * d)], hq * d, act_key(s_.seed, w, layer, Act::q, r.token, r.pos));
          fill_act(&hk_[std::size_t(i * hkv * d)], hkv * d, act_key(s_.seed, w, layer, Act::k, r.token, r.pos));
          fill_act(&hv_[std::size_t(i * hkv * d)], hkv * d, act_key(s_.seed, w, layer, Act::v, r.token, r.pos));
        }
        q = q_.upload(hq_, DType::bf16, {TG, hq, d});
        k = k_.upload(hk_, DType::bf16, {TG, hkv, d});
        v = v_.upload(hv_, DType::bf16, {TG, hkv, d});
        loc = loc_.upload(locs, DType::i32, {TG});
        out = out_.view(DType::bf16, {TG, hq, d});
      }
      {
        PhaseTimer t(stats_, Phase::attention, s_.device);
        const LayerSpec spec{.layer_id = layer, .use_irope = is_local(w, layer)};
        b.forward({.q = q, .out = out, .k = k, .v = v, .out_cache_loc = loc, .save_kv_cache = true}, spec);
      }
      if (check) {
        PhaseTimer t(stats_, Phase::oracle, s_.device);
        this->check(w, layer, step, rows, download<bf16_t>(out));
      }
    }
  }

  // Each sampled row against gqa_reference over the keys it may see (its request's positions
  // 0 .. pos, from the start of its chunk on a local layer), regenerated from the token ids.
  void check(Worker w, int layer, const Step& step, const std::vector<QueryRow>& rows,
             const std::vector<attnserve::bf16_t>& out) {
    const std::vector<int> picked =
        rows_to_check(rows, s_.check_rows, uint64_t(stats_.oracle.rows) * 31 + uint64_t(layer));
    std::vector<RowCheck> results;
    for (int i : picked) results.push_back(check_row(w, layer, step, rows[std::size_t(i)], out, i));
    record_checks(stats_, "dense", w, layer, step, rows, picked, results);
  }
  RowCheck check_row(Worker w, int layer, const Step& step, const QueryRow& row,
                     const std::vector<attnserve::bf16_t>& out, int i) const {
    const int hq = s_.heads, hkv = s_.kv_heads, d = s_.head_dim;
    const StepRequest& req = step.reqs[std::size_t(row.req)];
    // The context entries the row sees: positions first .. pos (a local layer's chunk), or a draft
    // tree row's prefix and path.
    std::vector<int32_t> entries = visible_entries(row);
    if (is_local(w, layer)) {
      const int first = row.pos / s_.local_chunk * s_.local_chunk;
      entries.erase(entries.begin(), entries.begin() + first);
    }
    const int64_t n = int64_t(entries.size());
    std::vector<float> q(std::size_t(hq) * d), kk(std::size_t(n * hkv * d)), vv(kk.size());
    fill_act_bf16_rounded(q.data(), hq * d, act_key(s_.seed, w, layer, Act::q, row.token, row.pos));
#pragma omp parallel for schedule(static) if (n * hkv * d >= kParallelWork)
    for (int64_t j = 0; j < n; ++j) {
      const int32_t c = entries[std::size_t(j)], p = req.position(c);
      const uint64_t token = req.ids[std::size_t(c)];
      fill_act_bf16_rounded(&kk[std::size_t(j * hkv * d)], hkv * d, act_key(s_.seed, w, layer, Act::k, token, p));
      fill_act_bf16_rounded(&vv[std::size_t(j * hkv * d)], hkv * d, act_key(s_.seed, w, layer, Act::v, token, p));
    }
    const std::vector<double> ref = gqa_reference(q.data(), kk, vv, n, hq, hkv, d, scale_);
    std::vector<double> got(ref.size());
    for (std::size_t c = 0; c < got.size(); ++c) got[c] = attnserve::to_float(out[std::size_t(i) * got.size() + c]);
    RowCheck r;
    r.err = rel_l2(got, ref);
    r.ok = r.err <= kBf16Tolerance;
    if (!r.ok) r.problem = "rel. L2 error " + std::to_string(r.err) + " > " + std::to_string(kBf16Tolerance);
    return r;
  }

  Settings s_;
  CacheShape cache_;
  RunStats& stats_;
  float scale_ = 0;
  std::unique_ptr<attnserve::MhaKvPool> target_pool_, draft_pool_;
  std::unique_ptr<attnserve::DenseBackend> target_, draft_;
  std::unique_ptr<attnserve::DenseMultiStepBackend> draft_steps_;
  DeviceArray q_, k_, v_, out_, loc_;
  std::vector<attnserve::bf16_t> hq_, hk_, hv_;
};

}  // namespace demo
