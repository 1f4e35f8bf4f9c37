// Internal: CUDA entry point of gather_index_k (src/cuda/index_k_gather/sm80/index_k_gather.cu; a
// CPU-only build gets a throwing definition from src/ops/index_k_gather_cuda_fallback.cpp).
// Plain C++ declaration (no CUDA headers), so the host dispatcher can call it.
#pragma once
#include "attnserve/ops/index_k_gather.h"

namespace attnserve::cuda {
// Out-of-range slots give a zero key and scale 0; no host sync, graph-capturable.
void gather_index_k(const GatherIndexKArgs& a, Stream stream);
}  // namespace attnserve::cuda
