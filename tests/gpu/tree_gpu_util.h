// Shared by the draft-tree GPU tests (tests/gpu/test_tree*.cpp): random bf16 tensors, a non-blocking
// stream, and a CPU backend (the oracle) paired with a CUDA backend over device copies of the same caches.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "attnserve/ops.h"
#include "cpu/tree_test_util.h"
#include "gpu/gpu_test_util.h"

namespace attnserve::test {

struct TreeStream {
  cudaStream_t s = nullptr;
  TreeStream() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~TreeStream() { cudaStreamDestroy(s); }
  Stream get() const { return Stream{s}; }
};

inline HostTensor bf16_random(std::initializer_list<int64_t> shape, std::mt19937_64& g, double range) {
  HostTensor h(DType::bf16, shape);
  fill_view(h.view, g, range);
  return h;
}

// A CPU backend (the oracle) and a CUDA backend over device copies of the same caches and table.
struct BackendPair {
  TreeSetup& s;
  DeviceTensor dk, dv, dtable;
  DenseBackend cpu, gpu;
  static DenseBackendConfig on_gpu(DenseBackendConfig c, const DeviceTensor& k, const DeviceTensor& v,
                                   const DeviceTensor& t, bool mla) {
    c.device = Device::cuda(0);
    c.req_to_token = t.view;
    c.kv_buffers = {mla ? KvLayerBuffers{.k = k.view} : KvLayerBuffers{.k = k.view, .v = v.view}};
    return c;
  }
  BackendPair(TreeSetup& s_, const DenseBackendConfig& c, const HostTensor* latent, bool deterministic_gpu = false)
      : s(s_), dk(latent ? *latent : s_.k), dv(s_.v), dtable(s_.table), cpu(c), gpu([&] {
          DenseBackendConfig gc = on_gpu(c, dk, dv, dtable, latent != nullptr);
          gc.deterministic = deterministic_gpu;
          return gc;
        }()) {}
};

inline std::vector<double> forward_host(DenseBackend& be, const BatchSpec& b, const HostTensor& q, int h, int dv) {
  be.init_forward_metadata(b);
  HostTensor out(DType::bf16, {be.forward_metadata().num_q_rows, h, dv});
  poison(out);
  be.forward({.q = q.view, .out = out.view}, LayerSpec{.layer_id = 0});
  return to_doubles(out);
}

inline std::vector<double> forward_device(DenseBackend& be, const BatchSpec& b, const HostTensor& q, int h, int dv) {
  be.init_forward_metadata(b);
  DeviceTensor dq(q);
  HostTensor like(DType::bf16, {be.forward_metadata().num_q_rows, h, dv});
  DeviceTensor dout(like);
  dout.poison();
  be.forward({.q = dq.view, .out = dout.view}, LayerSpec{.layer_id = 0});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return to_doubles(dout.download(like));
}

// rel_l2 of the CUDA backend's output against the CPU backend's for batch b (the CUDA one reads the device
// copy of the table) and q [rows, h_q, d].
inline double gpu_vs_cpu(BackendPair& p, const BatchSpec& b, const HostTensor& q) {
  BatchSpec gb = b;
  gb.req_to_token = p.dtable.view;
  const auto ref_cpu = forward_host(p.cpu, b, q, p.s.h_q, p.s.dv);
  return rel_l2(forward_device(p.gpu, gb, q, p.s.h_q, p.s.dv), ref_cpu);
}

}  // namespace attnserve::test
