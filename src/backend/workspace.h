// Internal: how much kernel workspace a backend needs, from the ops' *_workspace_size on the shapes
// the backend will pass (the kernels pick split-KV counts from batch size, query rows and key width,
// so the need varies per batch). Zero on the CPU.
//   *_initial:  construction: decode batches of every size, and the full-capacity extend batch
//   *_graphs:   init_cuda_graph_state: the captured shapes of every capturable mode up to max_bs
//   *_for:      one planned batch (init_forward_metadata, capture): exact
#pragma once
#include <cstddef>

#include "attnserve/backend/config.h"
#include "backend/config_check.h"

namespace attnserve::backend_detail {

// One attention call of the dense backend: b requests (page-table rows), total_q query rows, at most
// max_q per request, page tables `width` pages wide.
struct DenseCallShape {
  int64_t b = 0, total_q = 0, max_q = 0, width = 0;
};
std::size_t dense_call_workspace(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseCallShape& s);
std::size_t dense_workspace_initial(const DenseBackendConfig& c, const DeviceCaps& caps);
std::size_t dense_workspace_graphs(const DenseBackendConfig& c, const DeviceCaps& caps, int max_bs);
std::size_t dense_workspace_for(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseMetadata& m);

// Sparse: the attention call over `rows` rows with `impl`, and top-k over [rows, width] logits.
std::size_t sparse_call_workspace(const SparseBackendConfig& c, const DeviceCaps& caps, NsaImpl impl, int64_t rows);
std::size_t sparse_topk_workspace(const SparseBackendConfig& c, const DeviceCaps& caps, int64_t rows, int64_t width);
std::size_t sparse_workspace_initial(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls);
std::size_t sparse_workspace_graphs(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                                    int max_bs);
std::size_t sparse_workspace_for(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                                 const SparseMetadata& m);

}  // namespace attnserve::backend_detail
