#include "backend/op_plans.h"

#include <algorithm>

#include "backend/common.h"

namespace attnserve::backend_detail {
namespace {

// The activations' dtype the backend plans for: the cache's, bf16 over an fp8 cache.
DType activation_dtype(DType kv) { return kv == DType::fp8_e4m3 || kv == DType::u8 ? DType::bf16 : kv; }

int64_t pool_slots(const std::vector<KvLayerBuffers>& layers) { return layers.empty() ? 0 : layers[0].k.size(0); }

template <typename Plan, typename Problem, typename Make>
const Plan& find_or_add(std::vector<Plan>& plans, const Problem& p, Make&& make) {
  for (const Plan& plan : plans)
    if (plan.problem == p) return plan;
  plans.push_back(make());
  return plans.back();
}

template <typename Plans>
std::size_t most(const Plans& plans) {
  std::size_t need = 0;
  for (const auto& p : plans) need = std::max(need, p.ws_bytes);
  return need;
}

// Query-row counts per request at which some op plan changes: the plans depend on max_q only through
// the packed rows max_q * group rounded up to a multiple of 16 (tile rows 16 / 32 / 64 and the m-block
// counts all change there), so each class of equal plans ends at floor(16 j / group). Beyond the j at
// which `ctas(j)` (a lower bound of the grid's CTAs) fills every CTA slot (<= 2 per SM) no plan splits
// the keys, and the workspace stops growing: the last class ends at max_q = T.
template <typename Ctas>
std::vector<int> max_q_classes(int group, int T, int num_sms, Ctas&& ctas) {
  std::vector<int> out;
  for (int64_t j = 1;; ++j) {
    const int q = int(std::min<int64_t>(T, 16 * j / group));
    if (q >= 1 && (out.empty() || out.back() != q)) out.push_back(q);
    if (q >= T || ctas(j) >= 2 * int64_t(num_sms)) break;
  }
  if (out.empty() || out.back() != T) out.push_back(T);
  return out;
}

}  // namespace

std::size_t BatchPlans::workspace_bytes() const { return std::max({most(mha), most(mla), most(sparse)}); }

const cuda::attn::Plan& BatchPlans::get(const cuda::attn::Problem& p, const DeviceCaps& caps) {
  return find_or_add(mha, p, [&] { return cuda::attn::make_plan(p, caps); });
}
const cuda::mla::Plan& BatchPlans::get(const cuda::mla::Problem& p, const DeviceCaps& caps) {
  return find_or_add(mla, p, [&] { return cuda::mla::make_plan(p, caps); });
}
const cuda::sparse_mla_op::Plan& BatchPlans::get(const cuda::sparse_mla_op::Problem& p, const DeviceCaps& caps) {
  return find_or_add(sparse, p, [&] { return cuda::sparse_mla_op::make_plan(p, caps); });
}

// ---- Dense -------------------------------------------------------------------------------------------

// The shapes DenseBackend's forward passes (dense_backend.cpp: as_pages of the layer's buffers).
cuda::attn::Problem mha_problem(const DenseBackendConfig& c, const DenseCall& call) {
  const DType act = activation_dtype(c.kv_dtype);
  return cuda::attn::Problem{.b = call.b,
                             .total_q = call.total_q,
                             .h_q = c.num_q_heads,
                             .h_kv = c.num_kv_heads,
                             .d = c.head_dim,
                             .d_v = c.v_head_dim,
                             .num_pages = pool_slots(c.kv_buffers) / c.page_size,
                             .page_size = c.page_size,
                             .max_pages = call.width,
                             .max_seqlen_q = call.max_q,
                             .dtype = act,
                             .out_dtype = act,
                             .kv_dtype = c.kv_dtype,
                             .descale = c.kv_dtype == DType::fp8_e4m3,
                             .deterministic = c.deterministic};
}

cuda::mla::Problem mla_problem(const DenseBackendConfig& c, const DenseCall& call) {
  return cuda::mla::Problem{.b = call.b,
                            .total_q = call.total_q,
                            .h_q = c.num_q_heads,
                            .d_v = c.v_head_dim,
                            .d_rope = c.head_dim - c.v_head_dim,
                            .d_kv = c.head_dim,
                            .num_pages = pool_slots(c.kv_buffers) / c.page_size,
                            .page_size = c.page_size,
                            .max_pages = call.width,
                            .max_seqlen_q = call.max_q,
                            .dtype = c.kv_dtype,
                            .kv_dtype = c.kv_dtype,
                            .out_dtype = c.kv_dtype,
                            .deterministic = c.deterministic};
}

namespace {
void add_dense_call(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseCall& call, BatchPlans& plans) {
  if (c.arch == AttentionArch::mha) plans.get(mha_problem(c, call), caps);
  else plans.get(mla_problem(c, call), caps);
}
}  // namespace

BatchPlans plan_dense_batch(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseMetadata& m) {
  BatchPlans plans;
  if (c.device.is_cpu() || m.num_q_rows == 0) return plans;
  add_dense_call(c, caps, {m.page_table.size(0), m.num_q_rows, m.page_table.size(1), m.max_seq_len_q}, plans);
  if (m.has_local_attn) {
    const LocalAttentionMetadata& l = m.local_attn_metadata;
    add_dense_call(c, caps,
                   {l.local_block_table.size(0), m.num_q_rows, l.local_block_table.size(1), l.local_max_query_len},
                   plans);
  }
  return plans;
}

// Every batch of b <= max_bs requests, T = max_num_tokens query rows at most, page tables at most W
// pages wide (local attention's virtual batches are narrower). A plan depends on total_q only through
// the workspace, which grows with it, and takes at least as many splits for a wider table, so per
// (b, max_q class) the worst batch has the widest table and total_q = min(T, b * max_q).
std::size_t dense_workspace_for_capacity(const DenseBackendConfig& c, const DeviceCaps& caps, int max_bs) {
  if (c.device.is_cpu()) return 0;
  const PlanCapacity& cap = c.capacity;
  const int64_t W = (int64_t(cap.max_context_len) + c.page_size - 1) / c.page_size;
  const int T = cap.max_num_tokens;
  const bool mha = c.arch == AttentionArch::mha;
  const int group = mha ? c.num_q_heads / std::max(1, c.num_kv_heads) : c.num_q_heads;
  const int64_t kv_heads = mha ? c.num_kv_heads : 1;  // MLA: a CTA holds every head of its rows
  std::size_t need = 0;
  for (int64_t b = 1; b <= max_bs; ++b) {
    const auto ctas = [&](int64_t j) { return b * kv_heads * ((j + 3) / 4); };  // >= 1 m-block per 64 rows
    for (int q : max_q_classes(group, T, caps.num_sms, ctas)) {
      const DenseCall call{b, std::min<int64_t>(T, b * q), W, q};
      need = std::max(need, mha ? cuda::attn::workspace_size(cuda::attn::make_plan(mha_problem(c, call), caps))
                                : cuda::mla::workspace_size(cuda::mla::make_plan(mla_problem(c, call), caps)));
    }
  }
  return need;
}

// ---- Sparse ------------------------------------------------------------------------------------------

// The shapes SparseBackend's forward passes (sparse_backend.cpp).
cuda::mla::Problem sparse_gather_problem(const SparseBackendConfig& c, int64_t rows) {
  return cuda::mla::Problem{.b = rows,
                            .total_q = rows,
                            .h_q = c.num_q_heads,
                            .d_v = c.kv_lora_rank,
                            .d_rope = c.qk_rope_head_dim,
                            .d_kv = c.kv_lora_rank + c.qk_rope_head_dim,
                            .num_pages = pool_slots(c.kv_buffers),
                            .page_size = 1,
                            .max_pages = c.index_topk,
                            .max_seqlen_q = 1,
                            .dtype = DType::bf16,
                            .kv_dtype = DType::bf16,
                            .out_dtype = DType::bf16,
                            .deterministic = c.deterministic};
}

cuda::sparse_mla_op::Problem sparse_mla_problem(const SparseBackendConfig& c, NsaImpl impl, int64_t rows) {
  return cuda::sparse_mla_op::Problem{.rows = rows,
                                      .h_q = c.num_q_heads,
                                      .d_qk = c.kv_lora_rank + c.qk_rope_head_dim,
                                      .topk = c.index_topk,
                                      .dtype = DType::bf16,
                                      .kv_dtype = impl == NsaImpl::sparse_fp8 ? DType::u8 : DType::bf16,
                                      .deterministic = c.deterministic};
}

namespace {
void add_sparse_call(const SparseBackendConfig& c, const DeviceCaps& caps, NsaImpl impl, int64_t rows,
                     BatchPlans& plans) {
  if (impl == NsaImpl::gather) plans.get(sparse_gather_problem(c, rows), caps);
  else plans.get(sparse_mla_problem(c, impl, rows), caps);
}
}  // namespace

BatchPlans plan_sparse_batch(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                             const SparseMetadata& m) {
  BatchPlans plans;
  if (c.device.is_cpu() || m.num_rows == 0) return plans;
  add_sparse_call(c, caps, is_decode_call_mode(m.mode) ? impls.decode : impls.prefill, m.num_rows, plans);
  return plans;
}

// Every batch of at most T = max_num_tokens rows (decode: one per request; verify and extend: one per
// query row). A plan depends on the rows only through its split count, which is 1 once the rows fill
// every CTA slot (<= 2 per SM), and the workspace grows with the rows: rows 1 .. 2 * SMs, and T.
std::size_t sparse_workspace_for_capacity(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                                          int max_bs) {
  if (c.device.is_cpu()) return 0;
  const int64_t T = c.capacity.max_num_tokens;
  // Decode calls have one row per request, or per branch with draft trees (draft decode, topk rows).
  const int64_t decode_rows = int64_t(max_bs) * std::max(1, c.spec.topk);
  std::size_t need = 0;
  auto add = [&](NsaImpl impl, int64_t rows) {
    BatchPlans p;
    add_sparse_call(c, caps, impl, rows, p);
    need = std::max(need, p.workspace_bytes());
  };
  for (int64_t rows = 1; rows <= std::min<int64_t>(T, 2 * int64_t(caps.num_sms)); ++rows) {
    if (rows <= decode_rows) add(impls.decode, rows);
    add(impls.prefill, rows);
  }
  add(impls.prefill, T);
  add(impls.decode, std::min<int64_t>(T, decode_rows));
  // Top-k over [rows, max_context_len] logits (its kernels keep everything in shared memory today).
  const cuda::topk_op::Problem topk{.rows = T, .width = c.capacity.max_context_len, .k = c.index_topk};
  return std::max(need, cuda::topk_op::workspace_size(cuda::topk_op::make_plan(topk, caps)));
}

}  // namespace attnserve::backend_detail
