// Context-parallel decode over NCCL on the GPUs of one host (issue 19): one thread per GPU, each with
// its own NcclCommunicator (one ncclUniqueId, ncclCommInitRank per thread) and only its own pages.
// Written for a multi-GPU machine; not yet run when committed (docs/context_parallel.md).
//
// Per rank: KV of its pages only (page g of a request on rank g % W), filled by a hash of the GLOBAL
// key position, so every world size (and the single-GPU run) attends over the same values. Times,
// CUDA events, median after warm-up: the whole cp_paged_attention call (local attention + one
// all-gather + merge), the local attention alone, the exchange + merge alone (the difference), and
// cp_paged_attention_by_head (head slices, one all_to_all) where the heads divide by W. Then, on a short
// context, each rank's output against single-GPU paged_attention on GPU 0 (max |diff|, rel-L2).
//
// Usage: bench_context_parallel [--quick] [--world W (default: every GPU)] [--bs 8] [--ctx 524288]
//        [--page 16] [--hq 32] [--hkv 8] [--iters 50]
// Prints: world, median us (cp call / local / exchange+merge), tokens per second, and the check.
// NVLink multicast stays off (NCCL_NVLS_ENABLE=0 is set here too).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attnserve/context_parallel.h"
#include "attnserve/ops.h"

using namespace attnserve;

#define CK(x)                                                                                                 \
  do {                                                                                                        \
    cudaError_t e = (x);                                                                                      \
    if (e != cudaSuccess)                                                                                     \
      throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorString(e) + " at " + __FILE__ + ":" + \
                               std::to_string(__LINE__));                                                     \
  } while (0)

namespace {

struct Shape {
  int world = 1, bs = 8, ctx = 524288, page = 16, h_q = 32, h_kv = 8, d = 128, iters = 50;
};

__device__ uint16_t hash_bf16(uint64_t key, float scale) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const float x = (float(uint32_t(h) & 0xffffff) / 16777216.f * 2.f - 1.f) * scale;  // never all zeros
  uint32_t u;
  memcpy(&u, &x, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // bf16 RNE
}

// Fills the pages of this rank: local page id 1 + r * lp + l holds global page g = rank + l * W of
// request r; element (slot s, head h, dim c) = hash(request, global key, h, c, which).
__global__ void fill_pages(uint16_t* cache, int bs, int lp, int W, int rank, int P, int h_kv, int d, int which) {
  const size_t per_page = size_t(P) * h_kv * d, n = size_t(bs) * lp * per_page;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t page = i / per_page, in_page = i % per_page;
    const int r = int(page / lp), l = int(page % lp);
    const int slot = int(in_page / (size_t(h_kv) * d)), hc = int(in_page % (size_t(h_kv) * d));
    const uint64_t key = uint64_t(int64_t(rank) + int64_t(l) * W) * P + slot;
    cache[(size_t(1) + page) * per_page + in_page] =
        hash_bf16(((uint64_t(r) * (1ull << 40) + key) * uint64_t(h_kv * d) + hc) * 2 + which, 1.f);
  }
}
__global__ void fill_q(uint16_t* q, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    q[i] = hash_bf16(i ^ 0xABCDEF12345ull, 3.f);
}

TensorView dev_i32(Buffer& b, const std::vector<int32_t>& v, std::initializer_list<int64_t> shape, int dev) {
  b = Buffer(v.size() * 4, Device::cuda(dev));
  CK(cudaMemcpy(b.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  return b.view(DType::i32, shape);
}

float bf16_to_float(uint16_t x) {
  uint32_t u = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One rank's problem, and its buffers.
struct Rank {
  Buffer k, v, q, out, lse, pt, cs, cu, ws;
  PagedAttentionArgs args;
};

// Builds rank `rank` of `W` on the current device: its pages, plan, buffers.
void build_rank(Rank& rk, const Shape& s, int W, int rank, int dev) {
  const int pages = (s.ctx + s.page - 1) / s.page, lp = (pages + W - 1) / W;
  // Global page table: global page g of request r is local page g / W on rank g % W, id 1 + r*lp + g/W.
  std::vector<int32_t> table(size_t(s.bs) * pages), seq(size_t(s.bs), s.ctx);
  for (int r = 0; r < s.bs; ++r)
    for (int g = 0; g < pages; ++g) table[size_t(r) * pages + g] = 1 + r * lp + g / W;
  const CpRankPlan p = plan_context_parallel(
      {.world_size = W, .page_size = s.page},
      {.mode = ForwardMode::decode, .seq_lens = seq, .page_table = table, .page_table_width = pages}, rank);
  const size_t num_pages = 1 + size_t(s.bs) * lp, page_elems = size_t(s.page) * s.h_kv * s.d;
  rk.k = Buffer(num_pages * page_elems * 2, Device::cuda(dev));
  rk.v = Buffer(num_pages * page_elems * 2, Device::cuda(dev));
  fill_pages<<<2048, 256>>>(static_cast<uint16_t*>(rk.k.data()), s.bs, lp, W, rank, s.page, s.h_kv, s.d, 0);
  fill_pages<<<2048, 256>>>(static_cast<uint16_t*>(rk.v.data()), s.bs, lp, W, rank, s.page, s.h_kv, s.d, 1);
  CK(cudaGetLastError());
  const size_t q_elems = size_t(s.bs) * s.h_q * s.d;
  rk.q = Buffer(q_elems * 2, Device::cuda(dev));
  fill_q<<<256, 256>>>(static_cast<uint16_t*>(rk.q.data()), q_elems);
  CK(cudaGetLastError());
  rk.out = Buffer(q_elems * 2, Device::cuda(dev));
  rk.lse = Buffer(size_t(s.bs) * s.h_q * 4, Device::cuda(dev));
  PagedAttentionArgs& a = rk.args;
  a.q = rk.q.view(DType::bf16, {s.bs, s.h_q, s.d});
  a.k_cache = rk.k.view(DType::bf16, {int64_t(num_pages), s.page, s.h_kv, s.d});
  a.v_cache = rk.v.view(DType::bf16, {int64_t(num_pages), s.page, s.h_kv, s.d});
  a.page_table = dev_i32(rk.pt, p.page_table, {p.num_rows, p.local_width}, dev);
  a.cache_seqlens = dev_i32(rk.cs, p.cache_seqlens, {p.num_rows}, dev);
  a.cu_seqlens_q = dev_i32(rk.cu, p.cu_seqlens_q, {p.num_rows + 1}, dev);
  a.out = rk.out.view(DType::bf16, {s.bs, s.h_q, s.d});
  a.lse = rk.lse.view(DType::f32, {s.bs, s.h_q});
  a.max_seqlen_q = 1;
  a.softmax_scale = 1.f / std::sqrt(float(s.d));
  const std::size_t ws = std::max(cp_paged_attention_workspace_size(a, query_device_caps(Device::cuda(dev)), W),
                                  paged_attention_workspace_size(a, query_device_caps(Device::cuda(dev))));
  rk.ws = Buffer(std::max<std::size_t>(ws, 1), Device::cuda(dev));
}

double median_us(cudaStream_t st, int iters, const std::function<void()>& f) {
  for (int i = 0; i < 5; ++i) f();
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a, st));
    f();
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

// Runs the W ranks (one thread per GPU); fn(rank, comm) on each; rethrows the first error.
void run_world(int W, const std::function<void(int, Communicator&)>& fn) {
  const NcclUniqueId id = NcclCommunicator::new_unique_id();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(W));
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r)
    threads.emplace_back([&, r] {
      try {
        CK(cudaSetDevice(r));
        auto comm = NcclCommunicator::create(id, r, W);
        fn(r, *comm);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct Timing {
  double cp_us = 0, local_us = 0;  // cp call (max over ranks), local attention alone (rank 0)
};

Timing bench(const Shape& s) {
  const int W = s.world;
  std::vector<double> cp_us(static_cast<size_t>(W)), local_us(static_cast<size_t>(W)), xchg_us(static_cast<size_t>(W)),
      by_head_us(static_cast<size_t>(W), 0.0);
  run_world(W, [&](int rank, Communicator& comm) {
    Rank rk;
    build_rank(rk, s, W, rank, rank);
    CK(cudaDeviceSynchronize());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const Workspace ws{rk.ws.data(), rk.ws.bytes()};
    cp_us[size_t(rank)] = median_us(st, s.iters, [&] { cp_paged_attention(rk.args, comm, ws, {st}); });
    local_us[size_t(rank)] = median_us(st, s.iters, [&] { paged_attention(rk.args, ws, {st}); });
    if (W > 1 && s.h_q % W == 0 && s.h_kv % W == 0) {  // the head-sliced exchange: out is one slice
      Buffer slice_out(size_t(s.bs) * (s.h_q / W) * s.d * 2, Device::cuda(rank)),
          slice_lse(size_t(s.bs) * (s.h_q / W) * 4, Device::cuda(rank));
      PagedAttentionArgs a = rk.args;
      a.out = slice_out.view(DType::bf16, {s.bs, s.h_q / W, s.d});
      a.lse = slice_lse.view(DType::f32, {s.bs, s.h_q / W});
      Buffer hws(cp_paged_attention_by_head_workspace_size(a, query_device_caps(Device::cuda(rank)), W),
                 Device::cuda(rank));
      by_head_us[size_t(rank)] = median_us(st, s.iters, [&] {
        cp_paged_attention_by_head(a, comm, {hws.data(), hws.bytes()}, {st});
      });
    }
    CK(cudaStreamDestroy(st));
  });
  for (int r = 0; r < W; ++r) xchg_us[size_t(r)] = cp_us[size_t(r)] - local_us[size_t(r)];
  const double cp = *std::max_element(cp_us.begin(), cp_us.end());
  std::printf(
      "world %d  b %d x %d  %d/%d d %d page %d: cp call %.1f us (max over ranks), local %.1f us, "
      "exchange+merge %.1f us (cp - local, rank 0)  -> %.0f tokens/s\n",
      W, s.bs, s.ctx, s.h_q, s.h_kv, s.d, s.page, cp, local_us[0], xchg_us[0], s.bs / (cp * 1e-6));
  if (by_head_us[0] > 0)
    std::printf("world %d head-sliced exchange (all_to_all, out = one head slice): %.1f us (max over ranks)\n", W,
                *std::max_element(by_head_us.begin(), by_head_us.end()));
  return {cp, local_us[0]};
}

// Each rank's output against single-GPU paged_attention on GPU 0, short context.
void check(Shape s) {
  s.ctx = std::min(s.ctx, 8192 + 37);
  const int W = s.world;
  std::vector<std::vector<uint16_t>> outs(static_cast<size_t>(W));
  run_world(W, [&](int rank, Communicator& comm) {
    Rank rk;
    build_rank(rk, s, W, rank, rank);
    cp_paged_attention(rk.args, comm, {rk.ws.data(), rk.ws.bytes()}, {nullptr});
    CK(cudaDeviceSynchronize());
    outs[size_t(rank)].resize(rk.args.out.numel());
    CK(cudaMemcpy(outs[size_t(rank)].data(), rk.out.data(), outs[size_t(rank)].size() * 2, cudaMemcpyDeviceToHost));
  });
  CK(cudaSetDevice(0));
  Rank one;
  build_rank(one, s, 1, 0, 0);
  paged_attention(one.args, {one.ws.data(), one.ws.bytes()}, {nullptr});
  CK(cudaDeviceSynchronize());
  std::vector<uint16_t> ref(one.args.out.numel());
  CK(cudaMemcpy(ref.data(), one.out.data(), ref.size() * 2, cudaMemcpyDeviceToHost));
  for (int r = 0; r < W; ++r) {
    double num = 0, den = 0, max_diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double a = bf16_to_float(outs[size_t(r)][i]), b = bf16_to_float(ref[i]);
      num += (a - b) * (a - b), den += b * b, max_diff = std::max(max_diff, std::fabs(a - b));
    }
    std::printf("check world %d rank %d (b %d x %d): rel-L2 vs single GPU %.3g, max |diff| %.3g, bits %s\n", W, r, s.bs,
                s.ctx, std::sqrt(num / std::max(den, 1e-30)), max_diff,
                outs[size_t(r)] == outs[0] ? "same on every rank" : "DIFFER from rank 0");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast off (device docs)
    Shape s;
    int gpus = 0;
    CK(cudaGetDeviceCount(&gpus));
    s.world = gpus;
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      if (k == "--quick") {  // scripts/gpu_check.sh BENCH=quick
        s.ctx = std::min(s.ctx, 65536), s.iters = 10;
        continue;
      }
      if (k.rfind("--", 0) != 0) continue;  // gpu_check's BENCH_FILTER: one case only, nothing to filter
      if (i + 1 >= argc) throw std::runtime_error("option " + k + " needs a value");
      const int v = std::atoi(argv[++i]);
      if (k == "--world") s.world = v;
      else if (k == "--bs") s.bs = v;
      else if (k == "--ctx") s.ctx = v;
      else if (k == "--page") s.page = v;
      else if (k == "--hq") s.h_q = v;
      else if (k == "--hkv") s.h_kv = v;
      else if (k == "--iters") s.iters = v;
      else throw std::runtime_error("unknown option " + k);
    }
    if (!nccl_available()) throw std::runtime_error("built without NCCL");
    if (s.world < 1 || s.world > gpus) throw std::runtime_error("--world must be in [1, GPUs]");
    check(s);
    Shape one = s;
    one.world = 1;
    const Timing single = bench(one);  // single GPU: plain paged_attention over every page (local_us)
    std::printf("single GPU paged_attention: %.1f us -> %.0f tokens/s\n", single.local_us,
                s.bs / (single.local_us * 1e-6));
    if (s.world > 1) {
      const Timing cp = bench(s);
      std::printf("speedup world %d over one GPU: %.2fx (issue 19 asks >= 1.8x on 2, >= 3.5x on 4)\n", s.world,
                  single.local_us / cp.cp_us);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
