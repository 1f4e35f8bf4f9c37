// Context parallelism (decode): the KV pages of every request are dealt over `world_size` ranks,
// each rank attends over its own pages with LSE, one all-gather exchanges the partial (out, lse)
// and merge_states combines them; the merged result equals single-rank attention.
//
// Placement, interleaved by page: global page g of a request (keys g*P .. g*P + P - 1) lives on
// rank g % W, where it is the request's local page g / W. New tokens go to the rank owning their
// page, so appends rotate over the ranks and every rank holds the same number of pages of a
// request, give or take one.
//
// The engine's page table keeps one row per request in global page order; entry g is a page id in
// the pool of rank g % W (each rank allocates its own pages). Every rank holds all query rows
// (replicated q); rows are the batch's, request-major.
//
// Modes: decode, draft_decode (EAGLE step spec.step_id: kv_len = seq_lens + step_id + 1) and
// target_verify (draft_token_num rows per request). Each query row becomes its own single-query
// request over the rank's pages: a verify row's causal limit (global position p) becomes the count
// of local keys at positions <= p, which the op's bottom-right alignment cannot express for a
// multi-row request once keys are dealt out. Decode needs no expansion (one row per request).
// Softcap, GQA and FP8 caches work unchanged (per key); the sparse path's attn_sink enters the
// merge once, as a part of its own. Not supported, rejected with an error: sliding windows (a
// window is in global positions), max_logits (sparse path), and query rows that are not
// single-query requests (max_seqlen_q > 1).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "attnserve/batch.h"
#include "attnserve/communicator.h"
#include "attnserve/ops/attention.h"
#include "attnserve/ops/sparse_mla.h"
#include "attnserve/plan.h"

namespace attnserve {

struct CpConfig {
  int world_size = 1;
  int page_size = 1;
  int padding_slot = 0;  // store_loc of a new token that another rank stores (SlotAllocator's page 0)
};

// One batch, host memory.
struct CpBatch {
  ForwardMode mode = ForwardMode::decode;
  std::span<const int32_t> seq_lens;    // [bs] as BatchSpec::seq_lens for the mode
  std::span<const int32_t> page_table;  // [bs, page_table_width] row-major: global page g of
                                        //   request r -> page id in the pool of rank g % W
  int page_table_width = 0;
  SpeculativeConfig spec{};  // target_verify: draft_token_num; draft_decode: step_id

  int batch_size() const { return int(seq_lens.size()); }
};

// Which rank holds a key, and how many of a request's keys a rank holds.
int cp_owner_rank(int64_t key_position, const CpConfig& config);
// Keys at positions 0 .. num_keys - 1 that live on `rank`.
int32_t cp_local_key_count(int64_t num_keys, int rank, const CpConfig& config);

// What one rank's attention call reads: feed page_table, cache_seqlens and cu_seqlens_q (as
// tensors on the rank's device) to paged_attention / mla_attention with max_seqlen_q = 1.
struct CpRankPlan {
  int rank = 0;
  ForwardMode mode = ForwardMode::idle;
  int batch_size = 0;
  int num_rows = 0;                        // query rows = page-table rows
  int local_width = 0;                     // columns of page_table: ceil(page_table_width / W), at least 1
  std::vector<int32_t> page_table;         // [num_rows, local_width] page ids of this rank's pool
                                           //   (0 past a row's pages)
  std::vector<int32_t> cache_seqlens;      // [num_rows] local keys query row i sees
  std::vector<int32_t> cu_seqlens_q;       // [num_rows + 1] 0, 1, .., num_rows
  std::vector<int32_t> row_request;        // [num_rows] the request of each query row
  std::vector<int32_t> row_position;       // [num_rows] global position of each query row (its new token)
  std::vector<int32_t> request_local_len;  // [bs] local keys of each request's whole context
  std::vector<int32_t> store_loc;          // [num_rows] slot of the row's new token in this rank's
                                           //   pool if it lives here, else config.padding_slot
  std::vector<uint8_t> stores_here;        // [num_rows] 1 where the new token lives on this rank
  int max_seqlen_q = 1;
  int max_local_kv = 0;  // max of cache_seqlens
};

// Throws attnserve::Error (naming the field) on a bad config, rank, mode or batch.
CpRankPlan plan_context_parallel(const CpConfig& config, const CpBatch& batch, int rank);

// Sparse path: top-k key positions -> this rank's slots. For row i of request r = row_request[i]:
//   out[i, j] = page_table[r, p / P] * P + p % P   if p = topk_positions[i, j] is in [0, kv_len(r))
//                                                    and its page lives on `rank`,
//   out[i, j] = -1                                  otherwise (sparse_mla skips it).
// kv_len(r) = kv_lens[r]. Every rank gets a disjoint share of each row's valid entries.
struct CpTopkRouting {
  std::span<const int32_t> topk_positions;  // [rows, topk]
  int topk = 0;
  std::span<const int32_t> row_request;  // [rows] request of each row
  std::span<const int32_t> kv_lens;      // [bs] keys of each request
  std::span<const int32_t> page_table;   // [bs, page_table_width] as CpBatch
  int page_table_width = 0;
};
void cp_route_topk(const CpConfig& config, int rank, const CpTopkRouting& routing, std::span<int32_t> out);

// ---- One rank's attention call ------------------------------------------------------------------
// `a` is the op's arguments with this rank's metadata (a CpRankPlan) and the rank's caches; a.out
// (and a.lse if given) receive the merged result, the same on every rank. Inside: local attention
// into this rank's slot of a gather buffer (out and lse of every row), comm.all_gather in place,
// merge_states of the world_size parts into a.out / a.lse. Stream-ordered, no allocation, no sync
// of its own (the communicator's exchange decides: NCCL's is graph-capturable). Workspace: the gather
// buffer followed by the op's own workspace, sized by the *_workspace_size query.
std::size_t cp_paged_attention_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps, int world_size);
void cp_paged_attention(const PagedAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream = {});

std::size_t cp_mla_attention_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps, int world_size);
void cp_mla_attention(const MlaAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream = {});

// a.indices: this rank's routed slots (cp_route_topk). attn_sink: every rank runs without it and
// the merge adds it once (a part with out = 0, lse = sink[h]); a.lse excludes the sink, as in
// sparse_mla. max_logits is not supported.
std::size_t cp_sparse_mla_workspace_size(const SparseMlaArgs& a, const DeviceCaps& caps, int world_size);
void cp_sparse_mla(const SparseMlaArgs& a, Communicator& comm, Workspace ws, Stream stream = {});

// ---- Head-sliced exchange (the "reduce-scatter by head") -------------------------------
// Rank k ends with heads [k * h_q / W, (k + 1) * h_q / W) only: what an o_proj sharded by heads
// (tensor parallelism over the same ranks) reads. Each rank attends over its own pages once per head
// slice (W calls of 1/W of the heads, so the KV is still read once), one all_to_all sends slice j to
// rank j ((W - 1) / W of one rank's partial state leaves each rank, against W - 1 for the all-gather),
// and merge_states of the W parts of its own slice writes a.out [rows, h_q / W, d_v] and
// a.lse [rows, h_q / W]. a.q and the caches hold every head. Dense: h_q % W == 0 and h_kv % W == 0
// (a GQA group stays on one rank); MLA: h_q % W == 0 (the latent head is shared). Which exchange is
// faster on NVLink has not been measured (bench/cuda/bench_context_parallel.cu times both).
std::size_t cp_paged_attention_by_head_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps,
                                                      int world_size);
void cp_paged_attention_by_head(const PagedAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream = {});
std::size_t cp_mla_attention_by_head_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps, int world_size);
void cp_mla_attention_by_head(const MlaAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream = {});

}  // namespace attnserve
