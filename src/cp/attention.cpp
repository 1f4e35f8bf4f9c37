// One rank's context-parallel attention call: local attention with LSE into this rank's slot of a
// gather buffer, an in-place all-gather, merge_states of the parts into the caller's out / lse.
//
// Workspace: [gather: W packets][the op's own workspace] (src/cp/parts.h).
// Sparse MLA with attn_sink: the sink is one more part after the W gathered ones (out = 0,
// lse = sink[h] on every row), which adds exp(sink) to the merged denominator once; with a.lse,
// a second merge of the W parts alone gives the lse without the sink (sparse_mla's contract), into
// one more scratch part.
#include <algorithm>
#include <string>

#include "attnserve/context_parallel.h"
#include "attnserve/ops/attention.h"
#include "attnserve/ops/sparse_mla.h"
#include "cp/parts.h"

namespace attnserve {
namespace {

using namespace cp_detail;

// After the local op wrote this rank's part: exchange, then merge into out / lse.
void exchange_and_merge(const char* who, const PartLayout& l, void* gather, Device dev, Communicator& comm,
                        const TensorView& out, const TensorView& lse, Stream stream) {
  ATTNSERVE_CHECK(comm.world_size() == l.world_size, who, ": communicator has ", comm.world_size(),
                  " ranks, the workspace was sized for ", l.world_size);
  uint8_t* base = static_cast<uint8_t*>(gather);
  comm.all_gather(base + l.packet_bytes() * std::size_t(comm.rank()), base, l.packet_bytes(), stream);
  const int W = l.world_size;
  if (l.extra_parts == 0) {
    merge_states(
        {.v_parts = l.all_out(gather, dev, W), .s_parts = l.all_lse(gather, dev, W), .v_out = out, .s_out = lse},
        stream);
    return;
  }
  // With the sink part: out over W + 1 parts; lse (without the sink) over the W parts.
  merge_states({.v_parts = l.all_out(gather, dev, W + 1), .s_parts = l.all_lse(gather, dev, W + 1), .v_out = out},
               stream);
  if (!lse.empty_view())
    merge_states({.v_parts = l.all_out(gather, dev, W),
                  .s_parts = l.all_lse(gather, dev, W),
                  .v_out = l.out_part(gather, dev, W + 1),
                  .s_out = lse},
                 stream);
}

TensorView bytes_at(void* p, std::size_t n, Device dev) {
  return TensorView::contiguous(p, DType::u8, {int64_t(n)}, dev);
}

// The sink part (index W): out = 0, lse[row, h] = sink[h]. Stream-ordered copies only (no kernel):
// sink into row 0, then rows [0, n) doubled into [n, 2n) until every row is set.
void write_sink_part(const PartLayout& l, void* gather, Device dev, const TensorView& sink, Stream stream) {
  uint8_t* packet = static_cast<uint8_t*>(gather) + l.packet_bytes() * std::size_t(l.world_size);
  memset_async(bytes_at(packet, l.out_bytes(), dev), 0, stream);
  if (l.rows == 0) return;
  const std::size_t row_bytes = std::size_t(l.heads) * 4;
  uint8_t* lse = packet + l.out_bytes();
  copy_async(bytes_at(lse, row_bytes, dev), bytes_at(sink.data, row_bytes, dev), stream);
  for (int64_t done = 1; done < l.rows; done *= 2) {
    const int64_t n = std::min(done, l.rows - done);
    copy_async(bytes_at(lse + std::size_t(done) * row_bytes, std::size_t(n) * row_bytes, dev),
               bytes_at(lse, std::size_t(n) * row_bytes, dev), stream);
  }
}

}  // namespace

// ---- Dense paged attention ----------------------------------------------------------------------

std::size_t cp_paged_attention_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps, int world_size) {
  const PartLayout l = layout_of("cp_paged_attention", a.out, world_size);
  return kAlign + l.gather_bytes() + align_up(paged_attention_workspace_size(a, caps), kAlign);
}

void cp_paged_attention(const PagedAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream) {
  constexpr const char* who = "cp_paged_attention";
  check_single_query(who, a.max_seqlen_q);
  check_no_window(who, a.window_left, a.window_right);
  const PartLayout l = layout_of(who, a.out, comm.world_size());
  const Device dev = a.q.device;
  const Split s = split(who, l, ws);
  PagedAttentionArgs local = a;
  local.out = l.out_part(s.gather, dev, comm.rank());
  local.lse = l.lse_part(s.gather, dev, comm.rank());
  paged_attention(local, s.op, stream);
  exchange_and_merge(who, l, s.gather, dev, comm, a.out, a.lse, stream);
}

// ---- MLA (absorbed) -----------------------------------------------------------------------------

std::size_t cp_mla_attention_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps, int world_size) {
  const PartLayout l = layout_of("cp_mla_attention", a.out, world_size);
  return kAlign + l.gather_bytes() + align_up(mla_attention_workspace_size(a, caps), kAlign);
}

void cp_mla_attention(const MlaAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream) {
  constexpr const char* who = "cp_mla_attention";
  check_single_query(who, a.max_seqlen_q);
  check_no_window(who, a.window_left, a.window_right);
  const PartLayout l = layout_of(who, a.out, comm.world_size());
  const Device dev = a.q_nope.device;
  const Split s = split(who, l, ws);
  MlaAttentionArgs local = a;
  local.out = l.out_part(s.gather, dev, comm.rank());
  local.lse = l.lse_part(s.gather, dev, comm.rank());
  mla_attention(local, s.op, stream);
  exchange_and_merge(who, l, s.gather, dev, comm, a.out, a.lse, stream);
}

// ---- Sparse MLA ---------------------------------------------------------------------------------

int sink_parts(const SparseMlaArgs& a) {
  if (a.attn_sink.empty_view()) return 0;
  return a.lse.empty_view() ? 1 : 2;  // the sink part, and the scratch out of the lse-only merge
}

std::size_t cp_sparse_mla_workspace_size(const SparseMlaArgs& a, const DeviceCaps& caps, int world_size) {
  const PartLayout l = layout_of("cp_sparse_mla", a.out, world_size, sink_parts(a));
  SparseMlaArgs local = a;
  local.attn_sink = {};
  return kAlign + l.gather_bytes() + align_up(sparse_mla_workspace_size(local, caps), kAlign);
}

void cp_sparse_mla(const SparseMlaArgs& a, Communicator& comm, Workspace ws, Stream stream) {
  constexpr const char* who = "cp_sparse_mla";
  ATTNSERVE_CHECK(a.max_logits.empty_view(), who, ": max_logits is not merged across ranks; leave it empty");
  const PartLayout l = layout_of(who, a.out, comm.world_size(), sink_parts(a));
  const Device dev = a.q.device;
  if (!a.attn_sink.empty_view()) {
    check_tensor(who, "attn_sink", a.attn_sink, {DType::f32}, {l.heads});
    check_same_device(who, {&a.q, &a.attn_sink});
    ATTNSERVE_CHECK(a.attn_sink.is_contiguous(), who, ": argument 'attn_sink' must be contiguous");
  }
  const Split s = split(who, l, ws);
  if (!a.attn_sink.empty_view()) write_sink_part(l, s.gather, dev, a.attn_sink, stream);
  SparseMlaArgs local = a;
  local.attn_sink = {};  // enters once, as its own part
  local.out = l.out_part(s.gather, dev, comm.rank());
  local.lse = l.lse_part(s.gather, dev, comm.rank());
  sparse_mla(local, s.op, stream);
  exchange_and_merge(who, l, s.gather, dev, comm, a.out, a.lse, stream);
}

}  // namespace attnserve
