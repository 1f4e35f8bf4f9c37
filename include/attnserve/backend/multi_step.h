// MultiStepBackend: one backend per EAGLE draft step (the seeds' FlashAttentionMultiStepBackend).
// Steps 0 .. num_steps - 2 run attention (the last step only samples, as in the seeds); backend i is
// configured with spec.step_id = i and has its own planner buffers, so every step's metadata exists
// at once (one draft round, or one captured graph, runs them all). The steps share one workspace:
// they run one after another on the engine's stream. Mode: draft_decode.
//
// Per round: init_forward_metadata(batch) (every step validated before any is planned), then for
// step i the engine's forward uses step(i) (the seeds' attn_backends[i]) with that step's
// out_cache_loc (the draft token slots of step i: draft_slots[:, i]).
#pragma once
#include <memory>
#include <vector>

#include "attnserve/backend/dense.h"
#include "attnserve/backend/sparse.h"

namespace attnserve {

template <class Backend>
class MultiStepBackend {
 public:
  using Config = typename Backend::Config;

  // config.spec.num_steps >= 2; config.spec.step_id is ignored (set per step).
  explicit MultiStepBackend(const Config& config, Stream stream = {});
  MultiStepBackend(const MultiStepBackend&) = delete;
  MultiStepBackend& operator=(const MultiStepBackend&) = delete;
  MultiStepBackend(MultiStepBackend&&) noexcept = default;
  MultiStepBackend& operator=(MultiStepBackend&&) noexcept = default;

  int num_backends() const { return int(backends_.size()); }
  Backend& step(int i);
  std::vector<Backend>& attn_backends() { return backends_; }

  void init_forward_metadata(const BatchSpec& batch, Stream stream = {});
  void init_cuda_graph_state(int max_bs, int max_num_tokens, Stream stream = {});
  void init_forward_metadata_capture_cuda_graph(int bs, Stream stream = {});
  void init_forward_metadata_replay_cuda_graph(int bs, const BatchSpec& batch, Stream stream = {});

 private:
  std::vector<Backend> backends_;
};
using DenseMultiStepBackend = MultiStepBackend<DenseBackend>;
using SparseMultiStepBackend = MultiStepBackend<SparseBackend>;
extern template class MultiStepBackend<DenseBackend>;
extern template class MultiStepBackend<SparseBackend>;

}  // namespace attnserve
