// CUDA entry points whose kernels are not written yet (DeepSeek sparse attention: issue "CUDA, part 2").
// They fail with a clear error; each moves to its own kernel file when implemented.
#include "cuda_ops.h"

namespace attnserve::cuda {
namespace {
[[noreturn]] void pending(const char* op) {
  ATTNSERVE_FAIL(op, ": the CUDA kernel is not implemented yet; run it on CPU tensors");
}
}  // namespace

// DeepSeek sparse attention.
std::size_t sparse_mla_workspace_size(const SparseMlaArgs&, const DeviceCaps&) { return 0; }
void sparse_mla(const SparseMlaArgs&, Workspace, Stream) { pending("sparse_mla"); }
void quantize_fp8_groups(const QuantizeFp8Args&, Stream) { pending("quantize_fp8_groups"); }
void indexer_ragged(const IndexerRaggedArgs&, Workspace, Stream) { pending("indexer_ragged"); }
void indexer_paged(const IndexerPagedArgs&, Workspace, Stream) { pending("indexer_paged"); }
std::size_t topk_workspace_size(const TopkArgs&, const DeviceCaps&) { return 0; }
void topk(const TopkArgs&, Workspace, Stream) { pending("topk"); }

}  // namespace attnserve::cuda
