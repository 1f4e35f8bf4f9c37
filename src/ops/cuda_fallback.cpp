// Weak fallbacks for the CUDA entry points (see src/cuda/cuda_ops.h): a build without CUDA, or an op
// whose CUDA kernel is not written yet, fails with a clear error instead of a link error.
#include "cuda/cuda_ops.h"

#define ATTNSERVE_WEAK __attribute__((weak))

namespace attnserve::cuda {
namespace {
[[noreturn]] void unavailable(const char* op) {
  ATTNSERVE_FAIL(op, ": no CUDA implementation in this build (built without CUDA, or the op has no "
                     "CUDA kernel yet); run it on CPU tensors");
}
}  // namespace

ATTNSERVE_WEAK std::size_t paged_attention_workspace_size(const PagedAttentionArgs&, const DeviceCaps&) { return 0; }
ATTNSERVE_WEAK void paged_attention(const PagedAttentionArgs&, Workspace, Stream) { unavailable("paged_attention"); }
ATTNSERVE_WEAK std::size_t mla_attention_workspace_size(const MlaAttentionArgs&, const DeviceCaps&) { return 0; }
ATTNSERVE_WEAK void mla_attention(const MlaAttentionArgs&, Workspace, Stream) { unavailable("mla_attention"); }
ATTNSERVE_WEAK void merge_state(const MergeStateArgs&, Stream) { unavailable("merge_state"); }
ATTNSERVE_WEAK void merge_states(const MergeStatesArgs&, Stream) { unavailable("merge_states"); }
ATTNSERVE_WEAK std::size_t sparse_mla_workspace_size(const SparseMlaArgs&, const DeviceCaps&) { return 0; }
ATTNSERVE_WEAK void sparse_mla(const SparseMlaArgs&, Workspace, Stream) { unavailable("sparse_mla"); }
ATTNSERVE_WEAK void quantize_fp8_groups(const QuantizeFp8Args&, Stream) { unavailable("quantize_fp8_groups"); }
ATTNSERVE_WEAK void indexer_ragged(const IndexerRaggedArgs&, Workspace, Stream) { unavailable("indexer_ragged"); }
ATTNSERVE_WEAK void indexer_paged(const IndexerPagedArgs&, Workspace, Stream) { unavailable("indexer_paged"); }
ATTNSERVE_WEAK std::size_t topk_workspace_size(const TopkArgs&, const DeviceCaps&) { return 0; }
ATTNSERVE_WEAK void topk(const TopkArgs&, Workspace, Stream) { unavailable("topk"); }
ATTNSERVE_WEAK void set_kv_buffer(const StoreKvArgs&, Stream) { unavailable("set_kv_buffer"); }
ATTNSERVE_WEAK void set_mla_kv_buffer(const StoreMlaArgs&, Stream) { unavailable("set_mla_kv_buffer"); }
ATTNSERVE_WEAK void set_index_k(const StoreIndexKArgs&, Stream) { unavailable("set_index_k"); }

}  // namespace attnserve::cuda
