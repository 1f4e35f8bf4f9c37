// CPU-only builds: the CUDA entry point of gather_index_k fails with a clear error. Compiled only
// without CUDA, for the reason given in src/ops/cuda_fallback.cpp (a fallback in a static library could
// shadow the real kernel).
#ifndef ATTNSERVE_WITH_CUDA
#include "cuda/index_k_gather/index_k_gather.h"

namespace attnserve::cuda {

void gather_index_k(const GatherIndexKArgs&, Stream) {
  ATTNSERVE_FAIL(
      "gather_index_k: no CUDA implementation in this build (built without CUDA); run it on CPU "
      "tensors");
}

}  // namespace attnserve::cuda
#endif  // ATTNSERVE_WITH_CUDA
