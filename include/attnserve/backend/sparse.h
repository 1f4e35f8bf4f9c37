// SparseBackend: DeepSeek sparse attention (DSA / the seeds' NativeSparseAttnBackend) over an MLA
// latent cache. Each query row attends to its own top-k token slots, chosen by the lightning
// indexer (run by the engine between init_forward_metadata and forward, with this backend's indexer
// metadata) and made slots by topk_transform.
//
// Per step:
//   b.init_forward_metadata(batch)                      (or capture / replay, as DenseBackend)
//   per layer:
//     seqlens   = b.get_seqlens_expanded()              keys row i may see (indexer lengths)
//     pages     = b.get_page_table_64()                 real page table (indexer keys, paged)
//     kv_lens   = b.get_seqlens_int32()                 per request
//     ... indexer logits [T, W] ...
//     slots     = b.topk_transform(logits, index_topk)  [T, index_topk] slots (-1 padded), a view
//                                                       into a buffer the backend owns
//     out       = b.forward_extend / forward_decode({.q, .out, .k, .k_rope, .out_cache_loc,
//                                                     .topk_indices = slots}, layer)
//
// Kernel paths (config.prefill_impl / decode_impl; `automatic` picks per device):
//   sparse_bf16  sparse_mla(q [T, h, 576], bf16 cache, indices = slots, topk_length = nsa_cache_seqlens)
//   sparse_fp8   the same over the FP8-656 cache
//   gather       mla_attention(q_nope, q_rope, cache as pages of one slot, page_table = slots,
//                cache_seqlens = nsa_cache_seqlens_int32, cu_seqlens_q = nsa_cu_seqlens_q, max_seqlen_q 1)
// automatic: an FP8-656 cache -> sparse_fp8 for both; a bf16 cache -> sparse_bf16 for prefill, and for
// decode gather on CUDA sm_90+ (the seeds' Hopper default, fa3), sparse_bf16 elsewhere.
// The sparse_mla paths need q packed as [T, h, 576]: a packed q, or q_nope / q_rope that are the two
// halves of one packed tensor (no copy is made); the gather path takes either form.
// Top-k indices: each row's valid slots first, then -1 (what topk_transform writes).
//
// Memory as DenseBackend: all at construction (planner, the top-k buffer [max_num_tokens, index_topk]
// i32, a positions buffer when needed, workspace), `out` passed by the caller.
#pragma once
#include <memory>

#include "attnserve/backend/config.h"

namespace attnserve {

namespace backend_detail {
class SharedWorkspace;
}
template <class Backend>
class MultiStepBackend;
class SparseBackend;

// The seeds' NSAIndexerMetadata: what the indexer reads, over the backend's current metadata.
class NsaIndexerMetadata {
 public:
  explicit NsaIndexerMetadata(SparseBackend& backend) : backend_(&backend) {}
  TensorView get_seqlens_int32() const;
  TensorView get_page_table_64() const;
  TensorView get_seqlens_expanded() const;
  TensorView topk_transform(const TensorView& logits, int topk, Stream stream = {},
                            const TensorView& row_starts = {}) const;

 private:
  SparseBackend* backend_;
};

class SparseBackend {
 public:
  using Config = SparseBackendConfig;
  using Metadata = SparseMetadata;

  explicit SparseBackend(const SparseBackendConfig& config, Stream stream = {});
  ~SparseBackend();
  SparseBackend(SparseBackend&&) noexcept;
  SparseBackend& operator=(SparseBackend&&) noexcept;

  // ---- Metadata (as DenseBackend)
  void validate(const BatchSpec& batch) const;
  void init_forward_metadata(const BatchSpec& batch, Stream stream = {});
  void init_cuda_graph_state(int max_bs, int max_num_tokens, Stream stream = {});
  void init_forward_metadata_capture_cuda_graph(int bs, int num_tokens, ForwardMode mode, Stream stream = {});
  void init_forward_metadata_replay_cuda_graph(int bs, const BatchSpec& batch, Stream stream = {});
  void validate_replay(int bs, const BatchSpec& batch) const;  // what the replay checks
  int get_cuda_graph_seq_len_fill_value() const { return 1; }

  // ---- Indexer metadata (views of the current metadata)
  TensorView get_seqlens_int32() const;     // [bs] kv_len per request
  TensorView get_page_table_64() const;     // [R, pages] real page table (page_size)
  TensorView get_seqlens_expanded() const;  // [T] keys each row sees (unclipped)
  // Top-k of each row's logits[i, row_starts[i] : row_starts[i] + expanded[i]] as token slots
  // (positions when fuse_topk = false), -1 padded: a [T, topk] view into the backend's buffer, valid
  // until the next topk_transform. logits: [T, W] f32, W >= every row's keys; topk == index_topk.
  TensorView topk_transform(const TensorView& logits, int topk, Stream stream = {}, const TensorView& row_starts = {});
  NsaIndexerMetadata get_indexer_metadata() { return NsaIndexerMetadata(*this); }

  // ---- Forward (store the latent when asked, attend over the top-k slots, return [T, h_q, 512])
  TensorView forward_extend(const ForwardArgs& args, const LayerSpec& layer, Stream stream = {});
  TensorView forward_decode(const ForwardArgs& args, const LayerSpec& layer, Stream stream = {});
  TensorView forward(const ForwardArgs& args, const LayerSpec& layer, Stream stream = {});

  // ---- State
  NsaImpl resolved_prefill_impl() const;
  NsaImpl resolved_decode_impl() const;
  bool has_forward_metadata() const;
  const SparseMetadata& forward_metadata() const;
  const SparseBackendConfig& config() const;
  int num_layers() const;
  std::size_t workspace_bytes() const;
  // The kernel workspace every batch within config.capacity needs on a device with `caps` (what the
  // constructor reserves; 0 on the CPU): an engine can size its memory once at start.
  static std::size_t workspace_for_capacity(const SparseBackendConfig& config, const DeviceCaps& caps);
  std::size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  template <class Backend>
  friend class MultiStepBackend;
  SparseBackend(const SparseBackendConfig& config, std::shared_ptr<backend_detail::SharedWorkspace> ws, Stream stream);
};

inline TensorView NsaIndexerMetadata::get_seqlens_int32() const { return backend_->get_seqlens_int32(); }
inline TensorView NsaIndexerMetadata::get_page_table_64() const { return backend_->get_page_table_64(); }
inline TensorView NsaIndexerMetadata::get_seqlens_expanded() const { return backend_->get_seqlens_expanded(); }
inline TensorView NsaIndexerMetadata::topk_transform(const TensorView& logits, int topk, Stream stream,
                                                     const TensorView& row_starts) const {
  return backend_->topk_transform(logits, topk, stream, row_starts);
}

}  // namespace attnserve
