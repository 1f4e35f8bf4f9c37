// The planners' staging support on CUDA: pinned host memory (truly asynchronous host-to-device
// copies) and events that tell when a staging slot may be written again.
#include "cuda/common/check.cuh"
#include "plan/plan_device.h"

namespace attnserve::plan_cuda {

void* pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  ATTNSERVE_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void pinned_free(void* p) {
  if (p) ATTNSERVE_CUDA_CHECK(cudaFreeHost(p));
}

void* event_create() {
  cudaEvent_t e = nullptr;
  ATTNSERVE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void event_destroy(void* e) {
  if (e) ATTNSERVE_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(e)));
}

void event_record(void* e, Stream stream) {
  ATTNSERVE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(stream.handle)));
}

void event_synchronize(void* e) {
  cudaEvent_t ev = static_cast<cudaEvent_t>(e);
  if (cudaEventQuery(ev) == cudaSuccess) return;  // the common case: the copy ran long ago
  ATTNSERVE_CUDA_CHECK(cudaEventSynchronize(ev));
}

}  // namespace attnserve::plan_cuda
