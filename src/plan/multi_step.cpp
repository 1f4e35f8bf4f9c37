// MultiStepPlanner: one planner per draft step (seed 001 FlashAttentionMultiStepBackend).
#include "attnserve/plan.h"

namespace attnserve {

template <class Planner>
MultiStepPlanner<Planner>::MultiStepPlanner(const Config& config, Device device) {
  ATTNSERVE_CHECK(config.spec.num_steps >= 2, "MultiStepPlanner: spec.num_steps = ", config.spec.num_steps,
                  " must be >= 2 (steps 0 .. num_steps - 2 run attention)");
  for (int i = 0; i + 1 < config.spec.num_steps; ++i) {
    Config c = config;
    c.spec.step_id = i;
    planners_.emplace_back(c, device);
  }
  out_.reserve(planners_.size());
}

template <class Planner>
void MultiStepPlanner<Planner>::init(const PlanCapacity& capacity, Stream stream) {
  for (Planner& p : planners_) p.init(capacity, stream);
}

template <class Planner>
auto MultiStepPlanner<Planner>::plan(const BatchSpec& batch, Stream stream) -> const std::vector<const Metadata*>& {
  ATTNSERVE_CHECK(batch.mode == ForwardMode::draft_decode, "MultiStepPlanner::plan: mode ", to_string(batch.mode),
                  ", expected draft_decode");
  for (const Planner& p : planners_) p.validate(batch);
  out_.clear();
  for (Planner& p : planners_) out_.push_back(&p.plan(batch, stream));
  return out_;
}

template <class Planner>
auto MultiStepPlanner<Planner>::capture(int bs, Stream stream) -> const std::vector<const Metadata*>& {
  out_.clear();
  for (Planner& p : planners_) out_.push_back(&p.capture(bs, ForwardMode::draft_decode, stream));
  return out_;
}

template <class Planner>
auto MultiStepPlanner<Planner>::replay(int bs, const BatchSpec& batch, Stream stream)
    -> const std::vector<const Metadata*>& {
  for (const Planner& p : planners_) p.validate_replay(bs, ForwardMode::draft_decode, batch);
  out_.clear();
  for (Planner& p : planners_) out_.push_back(&p.replay(bs, ForwardMode::draft_decode, batch, stream));
  return out_;
}

template class MultiStepPlanner<DensePlanner>;
template class MultiStepPlanner<SparsePlanner>;

}  // namespace attnserve
