// DenseBackend: the attention backend an engine drives each step for dense models (the seeds'
// FlashAttentionBackend): MHA/GQA/MQA and MLA (absorbed), paged KV, sliding window, softcap, local
// (chunked) attention for use_irope layers, speculative decoding modes, CUDA graphs.
//
// Lifecycle (the seeds' names):
//   DenseBackend b(config);                        // validates the config, allocates everything once
//   b.init_forward_metadata(batch);                // eager: plans the batch
//   b.forward_extend(args, layer) / b.forward_decode(args, layer)   // per layer
// CUDA graphs:
//   b.init_cuda_graph_state(max_bs, max_num_tokens);
//   b.init_forward_metadata_capture_cuda_graph(bs, num_tokens, mode);  // outside stream capture
//   ... capture the model's forward (forward_* calls) ...
//   per step: b.init_forward_metadata_replay_cuda_graph(bs, batch); launch the graph.
//
// Memory: everything is allocated at construction (planner buffers, fp8 scale table, the kernels'
// workspace, sized by workspace_for_capacity from the ops' plans for every batch of the capacity).
// Forward calls never allocate: the caller passes `out` (ForwardArgs::out), which forward returns as
// [T, h_q, v_head_dim]. init_forward_metadata / capture make the batch's op plans (kernel, tiles,
// splits, workspace: src/cuda/<op>/plan.h) once; every layer's forward reuses them, and a replay the
// plans captured with its graph. The workspace is re-checked against each batch's plans and grown only
// in init_forward_metadata / capture (never in forward, never in replay); a grown workspace keeps the
// old one alive so graphs captured earlier stay valid. On the CPU the workspace is empty.
//
// Forward mode -> call: decode and draft_decode go through forward_decode; extend, target_verify and
// draft_extend through forward_extend (as in the seeds); forward() picks by the current mode.
// Captured draft_extend: rows past the accepted tokens are not written.
#pragma once
#include <memory>

#include "attnserve/backend/config.h"

namespace attnserve {

namespace backend_detail {
class SharedWorkspace;
}
template <class Backend>
class MultiStepBackend;

class DenseBackend {
 public:
  using Config = DenseBackendConfig;
  using Metadata = DenseMetadata;

  // Throws attnserve::Error naming what to change when the configuration is not usable.
  explicit DenseBackend(const DenseBackendConfig& config, Stream stream = {});
  ~DenseBackend();
  DenseBackend(DenseBackend&&) noexcept;
  DenseBackend& operator=(DenseBackend&&) noexcept;

  // ---- Metadata
  void validate(const BatchSpec& batch) const;  // what init_forward_metadata checks
  void init_forward_metadata(const BatchSpec& batch, Stream stream = {});
  void init_cuda_graph_state(int max_bs, int max_num_tokens, Stream stream = {});
  // num_tokens: the graph's query rows, bs * (1 | draft_token_num) for the mode.
  void init_forward_metadata_capture_cuda_graph(int bs, int num_tokens, ForwardMode mode, Stream stream = {});
  // The batch's mode picks the graph (bs, batch.mode); its requests are padded to bs.
  void init_forward_metadata_replay_cuda_graph(int bs, const BatchSpec& batch, Stream stream = {});
  void validate_replay(int bs, const BatchSpec& batch) const;  // what the replay checks
  int get_cuda_graph_seq_len_fill_value() const { return 0; }

  // ---- Forward (store the new K/V when asked, attend, return out as [T, h_q, v_head_dim])
  TensorView forward_extend(const ForwardArgs& args, const LayerSpec& layer, Stream stream = {});
  TensorView forward_decode(const ForwardArgs& args, const LayerSpec& layer, Stream stream = {});
  TensorView forward(const ForwardArgs& args, const LayerSpec& layer, Stream stream = {});

  // ---- State
  bool has_forward_metadata() const;
  const DenseMetadata& forward_metadata() const;  // the last init_forward_metadata / capture / replay
  const DenseBackendConfig& config() const;
  int num_layers() const;
  std::size_t workspace_bytes() const;
  // The kernel workspace every batch within config.capacity needs on a device with `caps` (what the
  // constructor reserves; 0 on the CPU): an engine can size its memory once at start.
  static std::size_t workspace_for_capacity(const DenseBackendConfig& config, const DeviceCaps& caps);
  std::size_t device_bytes() const;  // planner buffers + scale table + workspace

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  template <class Backend>
  friend class MultiStepBackend;
  DenseBackend(const DenseBackendConfig& config, std::shared_ptr<backend_detail::SharedWorkspace> ws, Stream stream);
};

}  // namespace attnserve
