// CUDA entry points whose kernels are not written yet (DeepSeek sparse attention: issue "CUDA, part 2").
// They fail with a clear error; each moves to its own kernel file when implemented.
#include "cuda_ops.h"

namespace attnserve::cuda {
namespace {
[[noreturn]] void pending(const char* op) {
  ATTNSERVE_FAIL(op, ": the CUDA kernel is not implemented yet; run it on CPU tensors");
}
}  // namespace

// Dense ops: until the sm80 kernels land (removed from here as each is implemented).
std::size_t paged_attention_workspace_size(const PagedAttentionArgs&, const DeviceCaps&) { return 0; }
void paged_attention(const PagedAttentionArgs&, Workspace, Stream) { pending("paged_attention"); }
std::size_t mla_attention_workspace_size(const MlaAttentionArgs&, const DeviceCaps&) { return 0; }
void mla_attention(const MlaAttentionArgs&, Workspace, Stream) { pending("mla_attention"); }
void merge_state(const MergeStateArgs&, Stream) { pending("merge_state"); }
void merge_states(const MergeStatesArgs&, Stream) { pending("merge_states"); }
void set_kv_buffer(const StoreKvArgs&, Stream) { pending("set_kv_buffer"); }
void set_mla_kv_buffer(const StoreMlaArgs&, Stream) { pending("set_mla_kv_buffer"); }
void set_index_k(const StoreIndexKArgs&, Stream) { pending("set_index_k"); }

// DeepSeek sparse attention.
std::size_t sparse_mla_workspace_size(const SparseMlaArgs&, const DeviceCaps&) { return 0; }
void sparse_mla(const SparseMlaArgs&, Workspace, Stream) { pending("sparse_mla"); }
void quantize_fp8_groups(const QuantizeFp8Args&, Stream) { pending("quantize_fp8_groups"); }
void indexer_ragged(const IndexerRaggedArgs&, Workspace, Stream) { pending("indexer_ragged"); }
void indexer_paged(const IndexerPagedArgs&, Workspace, Stream) { pending("indexer_paged"); }
std::size_t topk_workspace_size(const TopkArgs&, const DeviceCaps&) { return 0; }
void topk(const TopkArgs&, Workspace, Stream) { pending("topk"); }

}  // namespace attnserve::cuda
