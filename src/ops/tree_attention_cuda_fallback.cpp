// CPU-only builds: the CUDA entry point of tree_attention fails with a clear error. Compiled only
// without CUDA, for the reason given in src/ops/cuda_fallback.cpp (a fallback in a static library could
// shadow the real kernel).
#ifndef ATTNSERVE_WITH_CUDA
#include "cuda/tree_attention/tree_attention.h"

namespace attnserve::cuda {

void tree_attention(const TreeAttentionArgs&, Stream) {
  ATTNSERVE_FAIL("tree_attention: no CUDA implementation in this build (built without CUDA); run it on CPU tensors");
}

}  // namespace attnserve::cuda
#endif  // ATTNSERVE_WITH_CUDA
