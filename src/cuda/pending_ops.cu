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

}  // namespace attnserve::cuda
