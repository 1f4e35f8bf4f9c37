// Internal: validation of the backend configurations (every message says what to change) and the
// per-device choice of the sparse kernel paths.
#pragma once
#include "attnserve/backend/config.h"

namespace attnserve::backend_detail {

// Validates `c` for its device (whose capabilities are `caps`) and returns it with defaults filled in
// (v_head_dim). Throws attnserve::Error.
DenseBackendConfig checked_dense_config(const DenseBackendConfig& c, const DeviceCaps& caps);

struct NsaImpls {
  NsaImpl prefill = NsaImpl::sparse_bf16;
  NsaImpl decode = NsaImpl::sparse_bf16;
};
// Validates `c` and resolves `automatic` kernel paths for the device.
NsaImpls checked_sparse_config(const SparseBackendConfig& c, const DeviceCaps& caps);

DensePlanConfig plan_config(const DenseBackendConfig& c);
SparsePlanConfig plan_config(const SparseBackendConfig& c);

}  // namespace attnserve::backend_detail
