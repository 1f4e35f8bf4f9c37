// Internal: CUDA entry points of every op, called by the dispatchers in src/ops/ after validation.
// Plain C++ declarations (no CUDA headers), so host code can call them. A CUDA build must define every
// one under src/cuda/<op>/; a CPU-only build gets throwing definitions from src/ops/cuda_fallback.cpp.
#pragma once
#include <cstddef>

#include "attnserve/ops.h"
#include "cuda/attention/plan.h"
#include "cuda/mla/plan.h"
#include "cuda/sparse_mla/plan.h"

namespace attnserve {
// Before any CUDA entry point: a clear error when CUDA tensors meet a build or machine without CUDA.
inline void require_cuda_device(const char* op) {
  ATTNSERVE_CHECK(cuda_available(), op, ": the tensors are on a CUDA device, but there is no CUDA ",
                  "implementation available here (built without CUDA, or no GPU on this machine)");
}
}  // namespace attnserve

namespace attnserve::cuda {

std::size_t paged_attention_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps);
void paged_attention(const PagedAttentionArgs& a, Workspace ws, Stream stream);
// With a plan made for a's shapes (the backends make one per batch, src/cuda/<op>/plan.h).
void paged_attention(const PagedAttentionArgs& a, const attn::Plan& plan, Workspace ws, Stream stream);
std::size_t mla_attention_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps);
void mla_attention(const MlaAttentionArgs& a, Workspace ws, Stream stream);
void mla_attention(const MlaAttentionArgs& a, const mla::Plan& plan, Workspace ws, Stream stream);
void merge_state(const MergeStateArgs& a, Stream stream);
void merge_states(const MergeStatesArgs& a, Stream stream);

std::size_t sparse_mla_workspace_size(const SparseMlaArgs& a, const DeviceCaps& caps);
void sparse_mla(const SparseMlaArgs& a, Workspace ws, Stream stream);
void sparse_mla(const SparseMlaArgs& a, const sparse_mla_op::Plan& plan, Workspace ws, Stream stream);

void quantize_fp8_groups(const QuantizeFp8Args& a, Stream stream);
void indexer_ragged(const IndexerRaggedArgs& a, Workspace ws, Stream stream);
void indexer_paged(const IndexerPagedArgs& a, Workspace ws, Stream stream);
std::size_t topk_workspace_size(const TopkArgs& a, const DeviceCaps& caps);
void topk(const TopkArgs& a, Workspace ws, Stream stream);

void set_kv_buffer(const StoreKvArgs& a, Stream stream);
void set_mla_kv_buffer(const StoreMlaArgs& a, Stream stream);
void set_index_k(const StoreIndexKArgs& a, Stream stream);

}  // namespace attnserve::cuda
