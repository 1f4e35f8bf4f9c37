// Context-parallel attention with a head-sliced exchange: rank k keeps heads slice k.
//   1. for every slice j: local attention of q[:, slice j] (and the GQA kv heads of slice j) over
//      this rank's pages, into send packet j;
//   2. all_to_all: send packet j -> rank j; recv packet r = rank r's partial state of my slice;
//   3. merge_states of the W recv packets -> a.out / a.lse (this rank's slice).
// Workspace: [send: W packets][recv: W packets][the op's own workspace] (src/cp/parts.h), a packet
// being the partial state of one slice (rows x h_q / W heads).
#include "attnserve/context_parallel.h"
#include "cp/parts.h"

namespace attnserve {
namespace {

using namespace cp_detail;

// Heads per slice, checked: h % W == 0 for every sliced head count.
int64_t slice_of(const char* who, const char* what, int64_t heads, int W) {
  ATTNSERVE_CHECK(W >= 1 && heads % W == 0, who, ": ", what, " = ", heads, " must be a multiple of world_size ", W,
                  " (one head slice per rank)");
  return heads / W;
}

// a.out is this rank's slice [rows, h_q / W, d_v]: the packets have its shape; 2W of them.
PartLayout by_head_layout(const char* who, const TensorView& out, int64_t h_q, int W) {
  PartLayout l = layout_of(who, out, W, /*extra_parts=*/W);
  ATTNSERVE_CHECK(out.size(1) * W == h_q, who, ": argument 'out' holds ", out.size(1),
                  " heads, expected h_q / W = ", h_q, " / ", W);
  return l;
}

// Slice j of a view along `dim` (heads), `n` per slice.
TensorView head_slice(const TensorView& t, int dim, int64_t n, int j) {
  return t.empty_view() ? t : t.slice(dim, n * j, n * (j + 1));
}

// Steps 2 and 3, after every send packet was written.
void exchange_and_merge(const PartLayout& l, void* packets, Device dev, Communicator& comm, const TensorView& out,
                        const TensorView& lse, Stream stream) {
  const int W = l.world_size;
  uint8_t* send = static_cast<uint8_t*>(packets);
  uint8_t* recv = send + l.packet_bytes() * std::size_t(W);
  comm.all_to_all(send, recv, l.packet_bytes(), stream);
  merge_states({.v_parts = l.all_out(recv, dev, W), .s_parts = l.all_lse(recv, dev, W), .v_out = out, .s_out = lse},
               stream);
}

PagedAttentionArgs paged_slice(const PagedAttentionArgs& a, int W, int j) {
  const int64_t hq = a.q.size(1) / W, hkv = a.k_cache.size(2) / W;
  PagedAttentionArgs s = a;
  s.q = head_slice(a.q, 1, hq, j);
  s.k_cache = head_slice(a.k_cache, 2, hkv, j);
  s.v_cache = head_slice(a.v_cache, 2, hkv, j);
  s.q_descale = head_slice(a.q_descale, 1, hkv, j);
  s.k_descale = head_slice(a.k_descale, 1, hkv, j);
  s.v_descale = head_slice(a.v_descale, 1, hkv, j);
  return s;
}

MlaAttentionArgs mla_slice(const MlaAttentionArgs& a, int W, int j) {
  const int64_t hq = a.q_nope.size(1) / W;
  MlaAttentionArgs s = a;
  s.q_nope = head_slice(a.q_nope, 1, hq, j);
  s.q_rope = head_slice(a.q_rope, 1, hq, j);
  return s;
}

}  // namespace

std::size_t cp_paged_attention_by_head_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps,
                                                      int world_size) {
  constexpr const char* who = "cp_paged_attention_by_head";
  slice_of(who, "h_q", a.q.size(1), world_size);
  slice_of(who, "h_kv", a.k_cache.size(2), world_size);
  const PartLayout l = by_head_layout(who, a.out, a.q.size(1), world_size);
  PagedAttentionArgs s = paged_slice(a, world_size, 0);
  s.lse = l.lse_part(nullptr, a.q.device, 0);  // shapes only: the slice call's workspace
  return kAlign + l.gather_bytes() + align_up(paged_attention_workspace_size(s, caps), kAlign);
}

void cp_paged_attention_by_head(const PagedAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream) {
  constexpr const char* who = "cp_paged_attention_by_head";
  check_single_query(who, a.max_seqlen_q);
  check_no_window(who, a.window_left, a.window_right);
  const int W = comm.world_size();
  slice_of(who, "h_q", a.q.size(1), W);
  slice_of(who, "h_kv", a.k_cache.size(2), W);
  const PartLayout l = by_head_layout(who, a.out, a.q.size(1), W);
  const Device dev = a.q.device;
  const Split s = split(who, l, ws);
  for (int j = 0; j < W; ++j) {
    PagedAttentionArgs part = paged_slice(a, W, j);
    part.out = l.out_part(s.gather, dev, j);
    part.lse = l.lse_part(s.gather, dev, j);
    paged_attention(part, s.op, stream);
  }
  exchange_and_merge(l, s.gather, dev, comm, a.out, a.lse, stream);
}

std::size_t cp_mla_attention_by_head_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps, int world_size) {
  constexpr const char* who = "cp_mla_attention_by_head";
  slice_of(who, "h_q", a.q_nope.size(1), world_size);
  const PartLayout l = by_head_layout(who, a.out, a.q_nope.size(1), world_size);
  MlaAttentionArgs s = mla_slice(a, world_size, 0);
  s.lse = l.lse_part(nullptr, a.q_nope.device, 0);
  return kAlign + l.gather_bytes() + align_up(mla_attention_workspace_size(s, caps), kAlign);
}

void cp_mla_attention_by_head(const MlaAttentionArgs& a, Communicator& comm, Workspace ws, Stream stream) {
  constexpr const char* who = "cp_mla_attention_by_head";
  check_single_query(who, a.max_seqlen_q);
  check_no_window(who, a.window_left, a.window_right);
  const int W = comm.world_size();
  slice_of(who, "h_q", a.q_nope.size(1), W);
  const PartLayout l = by_head_layout(who, a.out, a.q_nope.size(1), W);
  const Device dev = a.q_nope.device;
  const Split s = split(who, l, ws);
  for (int j = 0; j < W; ++j) {
    MlaAttentionArgs part = mla_slice(a, W, j);
    part.out = l.out_part(s.gather, dev, j);
    part.lse = l.lse_part(s.gather, dev, j);
    mla_attention(part, s.op, stream);
  }
  exchange_and_merge(l, s.gather, dev, comm, a.out, a.lse, stream);
}

}  // namespace attnserve
