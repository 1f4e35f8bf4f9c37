// CPU-only builds: the CUDA entry points (src/cuda/cuda_ops.h) fail with a clear error.
// Compiled only without CUDA: in a static library a fallback could shadow the real kernel (the linker
// may pull whichever archive member defines the symbol first), so CUDA builds must define every entry
// point under src/cuda/.
#ifndef ATTNSERVE_WITH_CUDA
#include "cuda/cuda_ops.h"

namespace attnserve::cuda {
namespace {
[[noreturn]] void unavailable(const char* op) {
  ATTNSERVE_FAIL(op,
                 ": no CUDA implementation in this build (built without CUDA, or the op has no "
                 "CUDA kernel yet); run it on CPU tensors");
}
}  // namespace

std::size_t paged_attention_workspace_size(const PagedAttentionArgs&, const DeviceCaps&) { return 0; }
void paged_attention(const PagedAttentionArgs&, Workspace, Stream) { unavailable("paged_attention"); }
void paged_attention(const PagedAttentionArgs&, const attn::Plan&, Workspace, Stream) {
  unavailable("paged_attention");
}
std::size_t mla_attention_workspace_size(const MlaAttentionArgs&, const DeviceCaps&) { return 0; }
void mla_attention(const MlaAttentionArgs&, Workspace, Stream) { unavailable("mla_attention"); }
void mla_attention(const MlaAttentionArgs&, const mla::Plan&, Workspace, Stream) { unavailable("mla_attention"); }
void merge_state(const MergeStateArgs&, Stream) { unavailable("merge_state"); }
void merge_states(const MergeStatesArgs&, Stream) { unavailable("merge_states"); }
std::size_t sparse_mla_workspace_size(const SparseMlaArgs&, const DeviceCaps&) { return 0; }
void sparse_mla(const SparseMlaArgs&, Workspace, Stream) { unavailable("sparse_mla"); }
void sparse_mla(const SparseMlaArgs&, const sparse_mla_op::Plan&, Workspace, Stream) { unavailable("sparse_mla"); }
void quantize_fp8_groups(const QuantizeFp8Args&, Stream) { unavailable("quantize_fp8_groups"); }
void indexer_ragged(const IndexerRaggedArgs&, Workspace, Stream) { unavailable("indexer_ragged"); }
void indexer_paged(const IndexerPagedArgs&, Workspace, Stream) { unavailable("indexer_paged"); }
std::size_t topk_workspace_size(const TopkArgs&, const DeviceCaps&) { return 0; }
void topk(const TopkArgs&, Workspace, Stream) { unavailable("topk"); }
void set_kv_buffer(const StoreKvArgs&, Stream) { unavailable("set_kv_buffer"); }
void set_mla_kv_buffer(const StoreMlaArgs&, Stream) { unavailable("set_mla_kv_buffer"); }
void set_index_k(const StoreIndexKArgs&, Stream) { unavailable("set_index_k"); }

}  // namespace attnserve::cuda
#endif  // ATTNSERVE_WITH_CUDA
