// MultiStepBackend: one backend per draft step (seed 001 FlashAttentionMultiStepBackend).
#include "attnserve/backend/multi_step.h"

#include "backend/common.h"

namespace attnserve {

using namespace backend_detail;

template <class Backend>
MultiStepBackend<Backend>::MultiStepBackend(const Config& config, Stream stream) {
  ATTNSERVE_CHECK(config.spec.num_steps >= 2, "MultiStepBackend: spec.num_steps = ", config.spec.num_steps,
                  " must be >= 2 (steps 0 .. num_steps - 2 run attention; the last one only samples)");
  auto ws = make_workspace("MultiStepBackend", config.device);
  backends_.reserve(std::size_t(config.spec.num_steps - 1));
  for (int i = 0; i + 1 < config.spec.num_steps; ++i) {
    Config c = config;
    c.spec.step_id = i;
    backends_.push_back(Backend(c, ws, stream));
  }
}

template <class Backend>
Backend& MultiStepBackend<Backend>::step(int i) {
  ATTNSERVE_CHECK(i >= 0 && i < num_backends(), "MultiStepBackend::step: step ", i, " out of range [0, ",
                  num_backends(), ")");
  return backends_[std::size_t(i)];
}

template <class Backend>
void MultiStepBackend<Backend>::init_forward_metadata(const BatchSpec& batch, Stream stream) {
  ATTNSERVE_CHECK(batch.mode == ForwardMode::draft_decode, "MultiStepBackend::init_forward_metadata: mode ",
                  to_string(batch.mode), ", expected draft_decode");
  for (const Backend& b : backends_) b.validate(batch);  // all or nothing
  for (Backend& b : backends_) b.init_forward_metadata(batch, stream);
}

template <class Backend>
void MultiStepBackend<Backend>::init_cuda_graph_state(int max_bs, int max_num_tokens, Stream stream) {
  for (Backend& b : backends_) b.init_cuda_graph_state(max_bs, max_num_tokens, stream);
}

template <class Backend>
void MultiStepBackend<Backend>::init_forward_metadata_capture_cuda_graph(int bs, Stream stream) {
  for (Backend& b : backends_)  // draft trees (spec.topk > 1): topk query rows per request
    b.init_forward_metadata_capture_cuda_graph(
        bs, bs * graph_rows_per_request(ForwardMode::draft_decode, b.config().spec), ForwardMode::draft_decode, stream);
}

template <class Backend>
void MultiStepBackend<Backend>::init_forward_metadata_replay_cuda_graph(int bs, const BatchSpec& batch, Stream stream) {
  ATTNSERVE_CHECK(batch.mode == ForwardMode::draft_decode,
                  "MultiStepBackend::init_forward_metadata_replay_cuda_graph: ", "mode ", to_string(batch.mode),
                  ", expected draft_decode");
  for (const Backend& b : backends_) b.validate_replay(bs, batch);  // all or nothing
  for (Backend& b : backends_) b.init_forward_metadata_replay_cuda_graph(bs, batch, stream);
}

template class MultiStepBackend<DenseBackend>;
template class MultiStepBackend<SparseBackend>;

}  // namespace attnserve
