// Batch planners: BatchSpec (batch.h) -> the metadata attention kernels read, for every forward mode,
// eager or through CUDA-graph static buffers.
//
//   DensePlanner   the FlashAttention backend's metadata (cache_seqlens, cu_seqlens, page_table,
//                  window, local (chunked) attention virtual batches)
//   SparsePlanner  the DeepSeek sparse-attention (NSA) backend's metadata (page_table_1,
//                  real_page_table, per-row expanded lengths clipped to top-k)
//   MultiStepPlanner<P>  one planner per EAGLE draft step
//
// Lifecycle: construct (config, device) -> init(capacity) allocates every buffer once -> then any
// number of plan() (eager) and capture()/replay() (CUDA graphs) calls. Planning reads host-side
// lengths only and never synchronizes: small arrays are written to a host staging area the planner
// owns (on CUDA a ring of 4 pinned buffers; the host waits for the GPU only if it runs more than 4
// plans ahead) and sent with one copy_async on the caller's stream; the page-table gathers and the
// per-row expanded lengths run as small kernels on that stream (host loops on the CPU device).
// Call capture() outside CUDA stream capture (it writes the buffers, as the seeds do before capturing).
//
// Returned metadata holds TensorViews into the planner's buffers. Eager metadata is valid until the
// next plan()/capture()/replay() on the same planner (stream-ordered: work already enqueued keeps
// reading the right values). Captured metadata keeps its views for the planner's lifetime; replay()
// rewrites their contents in place (no allocation, same addresses, no device-to-host copy). Eager
// plans and graphs share the buffers: replay() right before launching a graph, as the seeds do.
// Every call validates all its inputs before touching any state: a bad batch throws
// attnserve::Error and leaves buffers and metadata as they were.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "attnserve/batch.h"
#include "attnserve/runtime.h"

namespace attnserve {

// Sizes every buffer is allocated for.
struct PlanCapacity {
  int max_bs = 0;           // requests per batch
  int max_num_tokens = 0;   // query rows per batch (extend tokens; bs * draft_token_num in verify)
  int max_context_len = 0;  // keys per request (>= every kv_len); the page-table width in tokens
};

// Speculative decoding (EAGLE), fixed per worker like the seeds' backend constructors; a graph
// capture needs them before any batch exists.
struct SpeculativeConfig {
  int draft_token_num = 0;  // target_verify: query rows per request; draft_extend: max accepted
  int num_steps = 0;        // draft_decode: steps per round (draft_slots has num_steps columns)
  int step_id = 0;          // draft_decode: the step this planner serves (0 .. num_steps - 1)
  int topk = 1;             // > 1: draft trees (EAGLE-2/3): target_verify over a tree of draft_token_num
                            //   <= 64 tokens, draft_decode with topk branches (topk * (step_id + 1) <= 64);
                            //   attention then runs in two parts (DenseMetadata::tree). 0 and 1: chains
};

// ---- Dense (FlashAttention backend) -----------------------------------------------------------

struct DensePlanConfig {
  int page_size = 1;
  int attention_chunk_size = 0;  // local (chunked) attention, 0 = off; a multiple of page_size
  int sliding_window_size = -1;  // -1 = off; else window (sliding_window_size, 0)
  SpeculativeConfig spec{};
};

// Local (chunked) attention as independent "virtual" requests: each request is cut at multiples of
// the chunk; a virtual batch holds the query rows of one chunk and sees that chunk's keys.
struct LocalAttentionMetadata {
  TensorView local_query_start_loc;  // [vb + 1] i32, cu_seqlens_q of the virtual batches (same rows)
  TensorView local_seqused_k;        // [vb] i32 keys of each virtual batch
  TensorView local_block_table;      // [vb, pages_per_local_batch] i32 page ids (0 past a vb's keys)
  int local_max_query_len = 0;       // captured: the graph's query rows per request
  int local_max_seq_len = 0;         // captured: the chunk
  int num_virtual_batches = 0;       // captured: the bound, the tail being empty virtual batches
  int effective_chunk_size = 0;      // min(chunk, max kv_len rounded up to a page), >= one page;
                                     // the configured chunk in captured metadata
};

// Draft trees (spec.topk > 1) in target_verify and draft_decode: attention runs in two parts merged
// by their LSE. The prefix part is the metadata's own paged attention WITHOUT the causal mask:
// cache_seqlens_int32 / cu_seqlens_k / page_table cover the cached prefix only (seq_lens), every query
// row of a request sees all of it. The tree part is tree_attention (ops/tree_attention.h) over the
// request's draft tokens with these views:
struct DraftTreeMetadata {
  bool enabled = false;
  int max_keys = 0;      // draft keys per request: draft_token_num (verify), topk * (step_id + 1) (draft decode)
  TensorView key_slots;  // [bs, max_keys] i32 token slots of the draft keys (verify: req_to_token at
                         //   seq_lens .. seq_lens + draft_token_num; draft decode: step-major,
                         //   key s * topk + b = branch b's token of step s)
  TensorView num_keys;   // [bs] i32 (0 for graph padding requests)
  TensorView mask;       // [num_q_rows] i64: bit j = the row sees draft key j of its request
  TensorView positions;  // [num_q_rows] i32 absolute positions of the query rows (verify: seq_lens +
                         //   depth; draft decode: seq_lens + step_id), e.g. for RoPE
};

struct DenseMetadata {
  ForwardMode mode = ForwardMode::idle;
  int batch_size = 0;
  int num_q_rows = 0;  // query rows (the graph's bound in captured metadata)
  int page_size = 1;
  TensorView cache_seqlens_int32;  // [bs] i32 kv_len per request
  TensorView cu_seqlens_q;         // [bs + 1] i32 (extend without prefix: the cu_seqlens_k view)
  TensorView cu_seqlens_k;         // [bs + 1] i32
  int max_seq_len_q = 0;
  int max_seq_len_k = 0;
  TensorView page_table;  // [bs, pages] i32: page ids (token slots when page_size == 1);
                          // key j of request r: slot page_table[r, j / P] * P + j % P.
                          // 0 past a request's keys (up to the plan's width)
  int window_left = -1;
  int window_right = -1;
  bool has_local_attn = false;
  LocalAttentionMetadata local_attn_metadata;
  DraftTreeMetadata tree;  // spec.topk > 1, target_verify / draft_decode: the two-part attention
  // Captured metadata: views and host scalars (max_seq_len_q/k = capture bounds, num_q_rows) are
  // fixed at capture; replay rewrites device contents only. Requests past the live batch are
  // padding: kv_len 0 (their query rows see no key).
  bool captured = false;
};

class DensePlanner {
 public:
  using Config = DensePlanConfig;
  using Metadata = DenseMetadata;
  DensePlanner(const DensePlanConfig& config, Device device);
  ~DensePlanner();
  DensePlanner(DensePlanner&&) noexcept;
  DensePlanner& operator=(DensePlanner&&) noexcept;

  void init(const PlanCapacity& capacity, Stream stream = {});  // allocates every buffer once

  void validate(const BatchSpec& batch) const;  // what plan() checks; throws attnserve::Error
  const DenseMetadata& plan(const BatchSpec& batch, Stream stream = {});

  // CUDA graphs: modes decode, draft_decode, target_verify, draft_extend.
  const DenseMetadata& capture(int bs, ForwardMode mode, Stream stream = {});
  void validate_replay(int bs, ForwardMode mode, const BatchSpec& batch) const;
  // batch.batch_size() <= bs; the rest is padding. Returns the captured metadata (same object).
  const DenseMetadata& replay(int bs, ForwardMode mode, const BatchSpec& batch, Stream stream = {});

  const DensePlanConfig& config() const;
  const PlanCapacity& capacity() const;
  Device device() const;
  std::size_t device_bytes() const;  // everything init() allocated on the device

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- Sparse (DeepSeek NSA backend) -------------------------------------------------------------

struct SparsePlanConfig {
  int page_size = 64;  // the real page size (real_page_table)
  int topk = 2048;     // nsa_index_topk: nsa_cache_seqlens = min(expanded, topk)
  SpeculativeConfig spec{};
};

// Draft trees (spec.topk > 1) in the sparse backend: every query row is its own single-query row with
// its own page-table row, which lists exactly the keys the row may attend to, in position order
// (its causal set): the cached prefix, then its path in the tree (root .. itself). The indexer, the
// top-k and sparse MLA then run as for a chain.
//   target_verify (rows = bs * draft_token_num, row r * D + t = draft token t): the indexer scores the
//     request's prefix and ALL its draft tokens in req_to_token's order (real_page_table and
//     nsa_seqlens_expanded = seq_lens + D, as linear verify's last row); topk_transform then moves
//     each row's path logits (columns seq + path[d]) to columns seq + d, in place, and takes the
//     top-k over topk_lengths = seq + depth + 1 columns, made slots through page_table_1 (the row's
//     causal set). nsa_cache_seqlens = min(topk_lengths, topk).
//   draft_decode (rows = bs * topk, row r * topk + b = branch b): each row is a chain draft-decode row
//     of its branch (prefix + branch b's tokens of steps 0 .. step_id, slots from draft_slots
//     [bs, topk, num_steps], which must be page aligned as for chains); no logits move.
struct SparseDraftTreeMetadata {
  bool enabled = false;
  int path_width = 0;       // target_verify: draft_token_num (path columns); draft_decode: 0 (no path)
  TensorView path;          // target_verify: [rows, path_width] i32 draft token at depth d of the row's path
                            //   (its root first, the row's own token last), -1 past the row's depth
  TensorView topk_lengths;  // [rows] i32 keys of the row's causal set: seq + depth + 1 (draft_decode:
                            //   seq + step_id + 1); 0 for padding rows
  TensorView positions;     // [rows] i32 absolute positions of the query rows (seq + depth, seq + step_id)
};

// Query rows ("rows"): decode, draft_decode: one per request; extend, draft_extend: the new tokens,
// request-major; target_verify: one per draft token (bs * draft_token_num), each its own
// single-query row with its own copy of the request's page-table row. Draft trees: see above.
struct SparseMetadata {
  ForwardMode mode = ForwardMode::idle;
  int batch_size = 0;
  int num_rows = 0;  // query rows (the graph's bound in captured metadata)
  int page_size = 1;
  int topk = 0;
  TensorView cache_seqlens_int32;  // [bs] i32 kv_len per request
  TensorView cu_seqlens_k;         // [bs + 1] i32
  TensorView cu_seqlens_q;         // [R + 1] i32, R = page-table rows; row i belongs to page-table
                                   // row r with cu_seqlens_q[r] <= i < cu_seqlens_q[r + 1]
  int max_seq_len_q = 0;           // max rows per page-table row (1 in decode and verify)
  int max_seq_len_k = 0;
  TensorView page_table_1;                        // [R, max_seq_len_k] i32 token slots (page size 1);
                                                  // R = bs, or rows in target_verify. 0 past a row's keys
  TensorView real_page_table;                     // [R, pages] i32 page ids for page_size (== page_table_1 if 1)
  TensorView nsa_seqlens_expanded;                // [rows] i32 keys row i sees: kv_len - q_len + 1 + t
  TensorView nsa_cache_seqlens_int32;             // [rows] i32 min(expanded, topk)
  TensorView nsa_cu_seqlens_q;                    // [rows + 1] i32 = 0 .. rows
  TensorView nsa_cu_seqlens_k;                    // [rows + 1] i32 prefix sums of nsa_cache_seqlens_int32
  std::vector<int32_t> nsa_extend_seq_lens_list;  // host: query rows of each page-table row
                                                  // (replay rewrites it; a captured kernel must read cu_seqlens_q)
  int nsa_max_seqlen_q = 1;
  SparseDraftTreeMetadata tree;  // spec.topk > 1, target_verify / draft_decode
  // Captured metadata: as DenseMetadata. Rows past the live rows (padding requests, draft_extend
  // rows past the accepted tokens) have expanded = nsa_cache_seqlens = 0.
  bool captured = false;
};

class SparsePlanner {
 public:
  using Config = SparsePlanConfig;
  using Metadata = SparseMetadata;
  SparsePlanner(const SparsePlanConfig& config, Device device);
  ~SparsePlanner();
  SparsePlanner(SparsePlanner&&) noexcept;
  SparsePlanner& operator=(SparsePlanner&&) noexcept;

  void init(const PlanCapacity& capacity, Stream stream = {});

  void validate(const BatchSpec& batch) const;
  const SparseMetadata& plan(const BatchSpec& batch, Stream stream = {});

  const SparseMetadata& capture(int bs, ForwardMode mode, Stream stream = {});
  void validate_replay(int bs, ForwardMode mode, const BatchSpec& batch) const;
  const SparseMetadata& replay(int bs, ForwardMode mode, const BatchSpec& batch, Stream stream = {});

  const SparsePlanConfig& config() const;
  const PlanCapacity& capacity() const;
  Device device() const;
  std::size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- Multi-step draft decode --------------------------------------------------------------------

// One planner per draft step i in [0, spec.num_steps - 1) (the last step samples only and runs no
// attention, as in the seeds), each with its own buffers: all steps' metadata coexist, as one
// draft round (or one captured graph) runs them all. Mode: draft_decode.
template <class Planner>
class MultiStepPlanner {
 public:
  using Config = typename Planner::Config;
  using Metadata = typename Planner::Metadata;

  MultiStepPlanner(const Config& config, Device device);
  void init(const PlanCapacity& capacity, Stream stream = {});
  int num_plans() const { return int(planners_.size()); }
  Planner& step(int i) { return planners_.at(std::size_t(i)); }

  // All steps are validated before any is planned.
  const std::vector<const Metadata*>& plan(const BatchSpec& batch, Stream stream = {});
  const std::vector<const Metadata*>& capture(int bs, Stream stream = {});
  const std::vector<const Metadata*>& replay(int bs, const BatchSpec& batch, Stream stream = {});

 private:
  std::vector<Planner> planners_;
  std::vector<const Metadata*> out_;
};
using DenseMultiStepPlanner = MultiStepPlanner<DensePlanner>;
using SparseMultiStepPlanner = MultiStepPlanner<SparsePlanner>;
extern template class MultiStepPlanner<DensePlanner>;
extern template class MultiStepPlanner<SparsePlanner>;

// ---- Index transform (sparse attention, non-fused top-k) ----------------------------------------

// Top-k positions -> token slots: out[i, j] = page_table_1[r(i), topk_indices[i, j]], and -1 where
// the position is < 0 (kept) or >= page_table_1's width. Decode rows (cu_seqlens_q absent):
// r(i) = i. Prefill rows: r(i) = the r with cu_seqlens_q[r] <= i < cu_seqlens_q[r + 1]; rows past
// cu_seqlens_q[R] get -1. Graph-safe: the row -> request map is read from device memory.
struct TransformIndexArgs {
  TensorView page_table_1;    // [R, W] i32 token slots
  TensorView topk_indices;    // [rows, topk] i32 positions
  TensorView out;             // [rows, topk] i32 slots
  TensorView cu_seqlens_q{};  // optional [R + 1] i32 (prefill rows)
};
void transform_index_page_table(const TransformIndexArgs& a, Stream stream = {});

}  // namespace attnserve
