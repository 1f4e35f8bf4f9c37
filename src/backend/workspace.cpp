#include "backend/workspace.h"

#include <algorithm>

#include "attnserve/ops.h"
#include "backend/common.h"

namespace attnserve::backend_detail {
namespace {

DType activation_dtype(DType kv) { return kv == DType::fp8_e4m3 || kv == DType::u8 ? DType::bf16 : kv; }

int64_t max_pages(const PlanCapacity& cap, int page_size) {
  return (int64_t(cap.max_context_len) + page_size - 1) / page_size;
}

}  // namespace

// ---- Dense -------------------------------------------------------------------------------------------

std::size_t dense_call_workspace(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseCallShape& s) {
  if (c.device.is_cpu() || s.b <= 0 || s.total_q <= 0) return 0;
  const Device dev = c.device;
  const int64_t P = c.page_size, h = c.num_q_heads, d = c.head_dim, dv = c.v_head_dim;
  const DType act = activation_dtype(c.kv_dtype);
  const TensorView pt = shape_only(DType::i32, {s.b, std::max<int64_t>(1, s.width)}, dev);
  const TensorView lens = shape_only(DType::i32, {s.b}, dev);
  const TensorView cu = shape_only(DType::i32, {s.b + 1}, dev);
  const TensorView out = shape_only(act, {s.total_q, h, dv}, dev);
  const int max_q = int(std::max<int64_t>(1, s.max_q));
  if (c.arch == AttentionArch::mha) {
    const PagedAttentionArgs a{.q = shape_only(act, {s.total_q, h, d}, dev),
                               .k_cache = shape_only(c.kv_dtype, {1, P, c.num_kv_heads, d}, dev),
                               .v_cache = shape_only(c.kv_dtype, {1, P, c.num_kv_heads, dv}, dev),
                               .page_table = pt, .cache_seqlens = lens, .cu_seqlens_q = cu, .out = out,
                               .max_seqlen_q = max_q, .softmax_scale = 1.f, .deterministic = c.deterministic};
    return paged_attention_workspace_size(a, caps);
  }
  const MlaAttentionArgs a{.q_nope = shape_only(act, {s.total_q, h, dv}, dev),
                           .q_rope = shape_only(act, {s.total_q, h, d - dv}, dev),
                           .kv_cache = shape_only(c.kv_dtype, {1, P, 1, d}, dev), .page_table = pt,
                           .cache_seqlens = lens, .cu_seqlens_q = cu, .out = out, .max_seqlen_q = max_q,
                           .softmax_scale = 1.f, .deterministic = c.deterministic};
  return mla_attention_workspace_size(a, caps);
}

std::size_t dense_workspace_graphs(const DenseBackendConfig& c, const DeviceCaps& caps, int max_bs) {
  if (c.device.is_cpu()) return 0;
  const int64_t W = max_pages(c.capacity, c.page_size), D = c.spec.draft_token_num;
  std::size_t need = 0;
  for (int64_t bs = 1; bs <= max_bs; ++bs) {
    need = std::max(need, dense_call_workspace(c, caps, {bs, bs, 1, W}));
    if (D > 0 && bs * D <= c.capacity.max_num_tokens)
      need = std::max(need, dense_call_workspace(c, caps, {bs, bs * D, D, W}));
  }
  return need;
}

std::size_t dense_workspace_initial(const DenseBackendConfig& c, const DeviceCaps& caps) {
  if (c.device.is_cpu()) return 0;
  const PlanCapacity& cap = c.capacity;
  const int64_t W = max_pages(cap, c.page_size), T = cap.max_num_tokens;
  std::size_t need = dense_workspace_graphs(c, caps, cap.max_bs);
  need = std::max(need, dense_call_workspace(c, caps, {1, T, T, W}));
  need = std::max(need, dense_call_workspace(c, caps, {cap.max_bs, T, (T + cap.max_bs - 1) / cap.max_bs, W}));
  return need;
}

std::size_t dense_workspace_for(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseMetadata& m) {
  if (c.device.is_cpu() || m.num_q_rows == 0) return 0;
  std::size_t need = dense_call_workspace(
      c, caps, {m.page_table.size(0), m.num_q_rows, m.max_seq_len_q, m.page_table.size(1)});
  if (m.has_local_attn) {
    const LocalAttentionMetadata& l = m.local_attn_metadata;
    need = std::max(need, dense_call_workspace(c, caps, {l.local_block_table.size(0), m.num_q_rows,
                                                         l.local_max_query_len, l.local_block_table.size(1)}));
  }
  return need;
}

// ---- Sparse ------------------------------------------------------------------------------------------

std::size_t sparse_call_workspace(const SparseBackendConfig& c, const DeviceCaps& caps, NsaImpl impl, int64_t rows) {
  if (c.device.is_cpu() || rows <= 0) return 0;
  const Device dev = c.device;
  const int64_t h = c.num_q_heads, K = c.index_topk;
  const TensorView out = shape_only(DType::bf16, {rows, h, 512}, dev);
  const TensorView lens = shape_only(DType::i32, {rows}, dev);
  if (impl == NsaImpl::gather) {
    const MlaAttentionArgs a{.q_nope = shape_only(DType::bf16, {rows, h, 512}, dev),
                             .q_rope = shape_only(DType::bf16, {rows, h, 64}, dev),
                             .kv_cache = shape_only(DType::bf16, {1, 1, 1, 576}, dev),
                             .page_table = shape_only(DType::i32, {rows, K}, dev), .cache_seqlens = lens,
                             .cu_seqlens_q = shape_only(DType::i32, {rows + 1}, dev), .out = out, .max_seqlen_q = 1,
                             .softmax_scale = 1.f, .deterministic = c.deterministic};
    return mla_attention_workspace_size(a, caps);
  }
  const bool fp8 = impl == NsaImpl::sparse_fp8;
  const SparseMlaArgs a{.q = shape_only(DType::bf16, {rows, h, 576}, dev),
                        .kv = fp8 ? shape_only(DType::u8, {1, 656}, dev) : shape_only(DType::bf16, {1, 576}, dev),
                        .indices = shape_only(DType::i32, {rows, K}, dev), .out = out, .topk_length = lens,
                        .softmax_scale = 1.f, .deterministic = c.deterministic};
  return sparse_mla_workspace_size(a, caps);
}

std::size_t sparse_topk_workspace(const SparseBackendConfig& c, const DeviceCaps& caps, int64_t rows, int64_t width) {
  if (c.device.is_cpu() || rows <= 0) return 0;
  const Device dev = c.device;
  const TopkArgs a{.scores = shape_only(DType::f32, {rows, std::max<int64_t>(1, width)}, dev),
                   .lengths = shape_only(DType::i32, {rows}, dev),
                   .out = shape_only(DType::i32, {rows, c.index_topk}, dev), .topk = c.index_topk};
  return topk_workspace_size(a, caps);
}

namespace {
std::size_t sparse_rows_need(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                             int64_t rows, bool decode_call, int64_t width) {
  return std::max(sparse_call_workspace(c, caps, decode_call ? impls.decode : impls.prefill, rows),
                  sparse_topk_workspace(c, caps, rows, width));
}
}  // namespace

std::size_t sparse_workspace_graphs(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                                    int max_bs) {
  if (c.device.is_cpu()) return 0;
  const int64_t D = c.spec.draft_token_num, W = c.capacity.max_context_len;
  std::size_t need = 0;
  for (int64_t bs = 1; bs <= max_bs; ++bs) {
    need = std::max(need, sparse_rows_need(c, caps, impls, bs, true, W));
    if (D > 0 && bs * D <= c.capacity.max_num_tokens)
      need = std::max(need, sparse_rows_need(c, caps, impls, bs * D, false, W));
  }
  return need;
}

std::size_t sparse_workspace_initial(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls) {
  if (c.device.is_cpu()) return 0;
  std::size_t need = sparse_workspace_graphs(c, caps, impls, c.capacity.max_bs);
  return std::max(need, sparse_rows_need(c, caps, impls, c.capacity.max_num_tokens, false, c.capacity.max_context_len));
}

std::size_t sparse_workspace_for(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                                 const SparseMetadata& m) {
  if (c.device.is_cpu() || m.num_rows == 0) return 0;
  const int64_t width = std::max<int64_t>(c.capacity.max_context_len, m.max_seq_len_k);
  return sparse_rows_need(c, caps, impls, m.num_rows, is_decode_call_mode(m.mode), width);
}

}  // namespace attnserve::backend_detail
