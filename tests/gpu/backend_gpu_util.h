// Shared by the backend GPU tests (test_backend_gpu.cpp, test_sparse_tree_gpu.cpp; the stream also by
// test_plan_gpu.cpp): a non-blocking stream, a CUDA graph captured from what a callable enqueues, the
// sparse backend's config and the comparison of top-k index sets.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "attnserve/backend.h"

namespace attnserve::test {

struct GpuStream {
  cudaStream_t s = nullptr;
  GpuStream() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~GpuStream() { cudaStreamDestroy(s); }
  GpuStream(const GpuStream&) = delete;
  GpuStream& operator=(const GpuStream&) = delete;
  Stream get() const { return Stream{s}; }
};

// An instantiated CUDA graph (capture_graph fills it), destroyed with the object.
struct CapturedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// Waits for `s`, then captures what `record()` enqueues on it (thread-local mode) into `g` and
// instantiates it. Fails with ASSERT: call it under ASSERT_NO_FATAL_FAILURE.
template <class Record>
void capture_graph(CapturedGraph& g, cudaStream_t s, Record&& record) {
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  record();
  ASSERT_EQ(cudaStreamEndCapture(s, &g.graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&g.exec, g.graph, 0), cudaSuccess);
}

// The sparse (DSA) backend's config of these tests: `impl` for prefill and decode, its cache format
// (FP8-656 for sparse_fp8, else bf16), softmax scale 0.135; spec, capacity and deterministic are the
// caller's.
inline SparseBackendConfig sparse_backend_config(NsaImpl impl, int heads, int topk, int page, TensorView table,
                                                 std::vector<KvLayerBuffers> kv, Device device) {
  SparseBackendConfig c;
  c.num_q_heads = heads;
  c.kv_cache_format = impl == NsaImpl::sparse_fp8 ? MlaCacheFormat::fp8_656 : MlaCacheFormat::bf16;
  c.index_topk = topk;
  c.softmax_scale = 0.135f;
  c.page_size = page;
  c.prefill_impl = c.decode_impl = impl;
  c.device = device;
  c.req_to_token = table;
  c.kv_buffers = std::move(kv);
  return c;
}

// Rows of two [rows, topk] index arrays hold the same sets (each row sorted, then all compared).
inline bool same_index_sets(std::vector<int32_t> a, std::vector<int32_t> b, int64_t rows, int64_t topk) {
  for (int64_t i = 0; i < rows; ++i) {
    std::sort(a.begin() + i * topk, a.begin() + (i + 1) * topk);
    std::sort(b.begin() + i * topk, b.begin() + (i + 1) * topk);
  }
  return a == b;
}

}  // namespace attnserve::test
