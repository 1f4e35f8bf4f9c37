// Memory-bound speed of the portable CUDA kernels, timed with CUDA events (a benchmark, not a
// test): copy ceiling, paged decode (page sizes 1/16/64), target verify, KV stores, MLA decode,
// and prefill as measured. Median of many runs after warm-up; K/V sets are far larger than L2
// (60 MB), and small inputs (q, the stores' sources) rotate over sets whose sum exceeds L2.
//
// Ceilings measured in the same run: the device copy (bytes read + written) and the read-only
// streaming reduction (2 GiB, no writes): decode reads, so the read figure is its physical bound.
//
// Usage: bench_attention [--quick] [--sustained] [--host-gaps] [filter-substring]
// Prints one line per case: name, median us, GB/s (or TFLOP/s), % of the copy and read ceilings; the
// prefill lines end with the SM clock probed right after their timed runs ("@ N MHz"). Times are device
// time (a spin kernel hides the host's launch path, bench_spin.cuh); --host-gaps counts it as well.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attnserve/ops.h"
#include "bench_spin.cuh"
#include "cuda/attention/attention_api.h"
#include "cuda/mla/mla_api.h"

using namespace attnserve;
using attnserve::bench::hide_host_launch;

// Throws rather than exit() (DESIGN.md): main's catch prints the error and returns 1.
#define CK(x)                                                                                                 \
  do {                                                                                                        \
    cudaError_t e = (x);                                                                                      \
    if (e != cudaSuccess)                                                                                     \
      throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorString(e) + " at " + __FILE__ + ":" + \
                               std::to_string(__LINE__));                                                     \
  } while (0)

namespace {

bool g_quick = false;
bool g_sustained = false;  // --sustained: time after >= 250 ms of load (median_us)
bool g_host_gaps = false;  // --host-gaps: no spin before a timed call, so the host's launch path counts
std::string g_filter;
double g_copy_gbs = 0;  // measured device-to-device copy (read + write), GB/s
double g_read_gbs = 0;  // measured read-only streaming reduction, GB/s

__global__ void fill_random_kernel(uint16_t* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float x = (float(h & 0xffffff) / 16777216.f * 2.f - 1.f) * scale;  // never all zeros
    uint32_t u;
    std::memcpy(&u, &x, 4);
    p[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // bf16 RNE
  }
}

// Random e4m3 bytes with bit 6 clear (|x| < 2, never the NaN codes S.1111.111).
__global__ void fill_fp8_kernel(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = uint8_t(h & 0xbfu);
  }
}

// Read-only ceiling: every thread streams 16-byte words, 8 independent loads in flight, and folds
// them into one word that is stored only if it hits a magic value (keeps the loads live, no writes).
__global__ void __launch_bounds__(512) read_reduce_kernel(const uint4* p, size_t n, uint32_t* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 7 * stride < n; i += 8 * stride) {
    uint4 w[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) w[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= w[u].x ^ w[u].y ^ w[u].z ^ w[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 w = __ldcs(p + i);
    acc ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// The decode's K/V bytes (one head's 256-byte rows, found through the page table) read with no
// math and no shared memory: the bandwidth of the access pattern alone. Grid (h_kv, b), 128 threads;
// thread = 16-byte chunk `lch` of rows lrow + 8 i of each 64-key tile (the decode kernel's mapping).
__global__ void __launch_bounds__(128)
    gather_read_kernel(const char* k, const char* v, const int* pt, int max_pages, int ps_shift, int ctx, int64_t stok,
                       int64_t sh, uint32_t* sink) {
  const int hk = blockIdx.x, r = blockIdx.y;
  const int lch = threadIdx.x % 16, lrow = threadIdx.x / 16;
  const int* row_pages = pt + int64_t(r) * max_pages;
  const char* gK = k + hk * sh + lch * 16;
  const char* gV = v + hk * sh + lch * 16;
  const int mask = (1 << ps_shift) - 1;
  uint32_t acc = 0;
  for (int j0 = 0; j0 < ctx; j0 += 64) {
    uint4 a[8], b[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int j = j0 + lrow + 8 * i;
      a[i] = b[i] = make_uint4(0, 0, 0, 0);
      if (j < ctx) {
        const int64_t slot = (int64_t(__ldg(row_pages + (j >> ps_shift))) << ps_shift) | (j & mask);
        a[i] = __ldcs(reinterpret_cast<const uint4*>(gK + slot * stok));
        b[i] = __ldcs(reinterpret_cast<const uint4*>(gV + slot * stok));
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) acc ^= a[i].x ^ a[i].y ^ a[i].z ^ a[i].w ^ b[i].x ^ b[i].y ^ b[i].z ^ b[i].w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

void fill_bf16(void* p, size_t n, uint32_t seed, float scale = 1.f) {
  fill_random_kernel<<<1024, 256>>>(static_cast<uint16_t*>(p), n, seed, scale);
  CK(cudaGetLastError());
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

// The SM clock right now: one thread spins ~200 us on one SM, counting its clocks (clock64) against
// the global nanosecond timer; the ratio is the clock in MHz. Launched between timed rounds, it reads
// the clock the power/thermal controller left (it reacts in milliseconds, the rounds last ~50 ms).
__global__ void clock_probe_kernel(double* mhz) {
  uint64_t t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  while (t1 - t0 < 200000);
  const long long c1 = clock64();
  *mhz = double(c1 - c0) * 1e3 / double(t1 - t0);
}

double sm_clock_mhz() {
  static double* dev = [] {
    double* p = nullptr;
    CK(cudaMalloc(&p, sizeof(double)));  // kept for the process's life
    return p;
  }();
  clock_probe_kernel<<<1, 1>>>(dev);
  double mhz = 0;
  CK(cudaMemcpy(&mhz, dev, sizeof mhz, cudaMemcpyDeviceToHost));
  return mhz;
}

// Median time in microseconds of fn(i) over `reps` timed runs after `warm` warm-ups. --sustained: the
// warm-ups go on until the GPU has been busy with fn for >= 250 ms, so the timed runs see the clock the
// SW power cap holds under sustained load (~1815 MHz on the H200 for the Hopper prefill kernels,
// against 1980 in the first ~50 ms: bench/NOTES.md "Session 6").
double median_us(const std::function<void(int)>& fn, int warm = 3, int reps = 30) {
  if (g_quick) reps = std::min(reps, 8);
  for (int i = 0; i < warm; ++i) fn(i);
  CK(cudaDeviceSynchronize());
  if (g_sustained) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = warm; std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(250); ++i) {
      fn(i);
      if (i % 4 == 0) CK(cudaDeviceSynchronize());  // keep the queue short so the loop measures busy time
    }
    CK(cudaDeviceSynchronize());
  }
  Timer t;
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    if (!g_host_gaps) hide_host_launch();  // device time (bench_spin.cuh)
    CK(cudaEventRecord(t.a));
    fn(i);
    CK(cudaEventRecord(t.b));
    CK(cudaEventSynchronize(t.b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, t.a, t.b));
    v.push_back(ms * 1000.0);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The filter: substrings separated by '|'; one starting with '^' matches the name's start only.
bool selected(const std::string& name) {
  if (g_filter.empty()) return true;
  size_t start = 0;
  while (start <= g_filter.size()) {
    const size_t end = std::min(g_filter.find('|', start), g_filter.size());
    const std::string item = g_filter.substr(start, end - start);
    if (!item.empty() && item[0] == '^' ? name.rfind(item.substr(1), 0) == 0
                                        : !item.empty() && name.find(item) != std::string::npos)
      return true;
    start = end + 1;
  }
  return false;
}

void report_bw(const std::string& name, double us, double bytes, const std::string& note = "") {
  const double gbs = bytes / us * 1e-3;
  std::printf("%-52s %10.1f us %9.0f GB/s %6.1f%% of copy %6.1f%% of read  floor %8.1f us %s\n", name.c_str(), us, gbs,
              100.0 * gbs / g_copy_gbs, 100.0 * gbs / g_read_gbs, bytes / g_copy_gbs * 1e-3, note.c_str());
  std::fflush(stdout);
}

void report_flops(const std::string& name, double us, double flops, double bytes, const std::string& note = "") {
  std::printf("%-52s %10.1f us %9.1f TFLOP/s %8.0f GB/s %s\n", name.c_str(), us, flops / us * 1e-6, bytes / us * 1e-3,
              note.c_str());
  std::fflush(stdout);
}

void bench_copy() {
  const size_t bytes = size_t(2) << 30;
  Buffer a(bytes, Device::cuda()), b(bytes, Device::cuda());
  fill_bf16(a.data(), bytes / 2, 1);
  const double us =
      median_us([&](int) { CK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
  g_copy_gbs = 2.0 * bytes / us * 1e-3;
  std::printf("%-52s %10.1f us %9.0f GB/s (read + write)\n", "copy 2 GiB d2d (ceiling)", us, g_copy_gbs);
  // Read-only ceiling over the same 2 GiB: the best of a few grid shapes (blocks of 512 per SM).
  Buffer sink(256, Device::cuda());
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int per_sm : {2, 4, 8}) {
    const double r_us = median_us(
        [&](int) {
          read_reduce_kernel<<<sms * per_sm, 512>>>(static_cast<const uint4*>(a.data()), bytes / 16,
                                                    static_cast<uint32_t*>(sink.data()));
        },
        3, 20);
    const double gbs = double(bytes) / r_us * 1e-3;
    std::printf("%-52s %10.1f us %9.0f GB/s (read only)\n",
                ("read 2 GiB stream-reduce " + std::to_string(per_sm) + " blocks/SM").c_str(), r_us, gbs);
    g_read_gbs = std::max(g_read_gbs, gbs);
  }
  CK(cudaGetLastError());
  std::printf("%-52s %10s    %9.0f GB/s (the best of the three: the read ceiling)\n", "read ceiling", "", g_read_gbs);
}

// A paged decode/verify/extend problem in device memory. The pool holds `pool` times the pages the
// batch uses and each request's pages are a random sample of it (pool 1: a permutation of exactly
// the batch's pages), as in an engine's cache where the batch is a small part of the pool.
struct Paged {
  int b, h_q, h_kv, d, ps, q_len, ctx, max_pages, num_pages;
  bool fp8;
  int d_v;  // v and out head dim
  Buffer q, k, v, out, lse, pt, sl, cu, ws, kds, vds;
  int q_sets;
  size_t q_set_elems;
};

// v_slack: bytes the V allocation holds past the pool (filled too), for views of V shifted inside it.
Paged make_paged(int b, int h_q, int h_kv, int d, int ps, int q_len, int ctx, bool shuffle, uint32_t seed, int pool = 1,
                 bool fp8 = false, int d_v = 0, size_t v_slack = 0) {
  Paged p{b,  h_q, h_kv, d,  ps, q_len, ctx, 0,  0, fp8, d_v > 0 ? d_v : d, {}, {}, {},
          {}, {},  {},   {}, {}, {},    {},  {}, 0, 0};
  p.max_pages = (ctx + ps - 1) / ps;
  p.num_pages = b * p.max_pages * std::max(1, pool);
  const size_t kv_elems = size_t(p.num_pages) * ps * h_kv * d, v_elems = kv_elems / d * p.d_v;
  const size_t kv_bytes = kv_elems * (fp8 ? 1 : 2), v_bytes = v_elems * (fp8 ? 1 : 2);
  p.k = Buffer(kv_bytes, Device::cuda());
  p.v = Buffer(v_bytes + v_slack, Device::cuda());
  if (fp8) {
    fill_fp8_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p.k.data()), kv_bytes, seed);
    fill_fp8_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p.v.data()), v_bytes + v_slack, seed + 1);
    CK(cudaGetLastError());
    std::vector<float> ds(size_t(b) * h_kv);
    for (size_t i = 0; i < ds.size(); ++i) ds[i] = 0.25f + 0.01f * float(i % 17);
    p.kds = Buffer(ds.size() * 4, Device::cuda());
    p.vds = Buffer(ds.size() * 4, Device::cuda());
    CK(cudaMemcpy(p.kds.data(), ds.data(), ds.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.vds.data(), ds.data(), ds.size() * 4, cudaMemcpyHostToDevice));
  } else {
    fill_bf16(p.k.data(), kv_elems, seed);
    fill_bf16(p.v.data(), v_elems + v_slack / 2, seed + 1);
  }
  p.q_set_elems = size_t(b) * q_len * h_q * d;
  p.q_sets = std::max<int>(1, int((96ull << 20) / (p.q_set_elems * 2 + 1)) + 1);  // > L2 across sets
  p.q_sets = std::min(p.q_sets, 64);
  p.q = Buffer(p.q_set_elems * 2 * p.q_sets, Device::cuda());
  fill_bf16(p.q.data(), p.q_set_elems * p.q_sets, seed + 2, 2.f);
  p.out = Buffer(p.q_set_elems / d * p.d_v * 2, Device::cuda());
  p.lse = Buffer(size_t(b) * q_len * h_q * 4, Device::cuda());
  std::vector<int32_t> ids(static_cast<size_t>(p.num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  if (shuffle) std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  ids.resize(size_t(b) * p.max_pages);  // the batch's page table: the first pages of the permutation
  std::vector<int32_t> sl(static_cast<size_t>(b), ctx), cu(static_cast<size_t>(b) + 1);
  for (int i = 0; i <= b; ++i) cu[size_t(i)] = i * q_len;
  p.pt = Buffer(ids.size() * 4, Device::cuda());
  p.sl = Buffer(sl.size() * 4, Device::cuda());
  p.cu = Buffer(cu.size() * 4, Device::cuda());
  CK(cudaMemcpy(p.pt.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.sl.data(), sl.data(), sl.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.cu.data(), cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  return p;
}

PagedAttentionArgs paged_args(Paged& p, int set, bool deterministic) {
  const int total_q = p.b * p.q_len;
  const DType kv_t = p.fp8 ? DType::fp8_e4m3 : DType::bf16;
  PagedAttentionArgs a{.q = TensorView::contiguous(static_cast<char*>(p.q.data()) + size_t(set) * p.q_set_elems * 2,
                                                   DType::bf16, {total_q, p.h_q, p.d}, Device::cuda()),
                       .k_cache = p.k.view(kv_t, {p.num_pages, p.ps, p.h_kv, p.d}),
                       .v_cache = p.v.view(kv_t, {p.num_pages, p.ps, p.h_kv, p.d_v}),
                       .page_table = p.pt.view(DType::i32, {p.b, p.max_pages}),
                       .cache_seqlens = p.sl.view(DType::i32, {p.b}),
                       .cu_seqlens_q = p.cu.view(DType::i32, {p.b + 1}),
                       .out = p.out.view(DType::bf16, {total_q, p.h_q, p.d_v})};
  a.lse = p.lse.view(DType::f32, {total_q, p.h_q});
  if (p.fp8) {
    a.k_descale = p.kds.view(DType::f32, {p.b, p.h_kv});
    a.v_descale = p.vds.view(DType::f32, {p.b, p.h_kv});
  }
  a.max_seqlen_q = p.q_len;
  a.softmax_scale = 1.f / std::sqrt(float(p.d));
  a.causal = true;
  a.deterministic = deterministic;
  return a;
}

// Options of one decode/verify case (the defaults: shuffled pages of a pool of exactly the batch).
struct DecodeOpts {
  bool shuffle = true;
  int pool = 1;  // the pool holds pool x the batch's pages
  bool fp8 = false;
  bool deterministic = false;
  cuda::attn::Tuning tune{};
  bool gather = false;  // also time gather_read_kernel on the same pages (d 128 bf16 only)
};

void bench_decode(const std::string& name, int b, int h_q, int h_kv, int d, int ps, int q_len, int ctx,
                  const DecodeOpts& o = {}) {
  if (!selected(name)) return;
  Paged p = make_paged(b, h_q, h_kv, d, ps, q_len, ctx, o.shuffle, 1234u + uint32_t(ps), o.pool, o.fp8);
  PagedAttentionArgs a0 = paged_args(p, 0, o.deterministic);
  const auto cfg = cuda::attn::select(a0, cuda::attn::current_device_caps(), o.tune);
  p.ws = Buffer(std::max<size_t>(cfg.ws_bytes, 256), Device::cuda());
  const double us = median_us([&](int i) {
    cuda::attn::run(paged_args(p, i % p.q_sets, o.deterministic), Workspace{p.ws.data(), p.ws.bytes()}, {}, o.tune);
  });
  const double kv_bytes = 2.0 * b * double(ctx) * h_kv * d * (o.fp8 ? 1 : 2);
  char note[160];
  std::snprintf(note, sizeof note, "[splits %d stages %d mt %d ctas/SM %d%s]", cfg.num_splits, cfg.stages, cfg.mt,
                cfg.ctas_per_sm,
                cfg.page_runs && ps >= 16       ? " page-runs"
                : cfg.lane_pages && cfg.mt == 1 ? " lane-pages"
                                                : "");
  report_bw(name, us, kv_bytes, note);
  if (o.gather && d == 128 && !o.fp8 && (ps & (ps - 1)) == 0) {
    int shift = 0;
    while ((1 << shift) < ps) ++shift;
    Buffer sink(256, Device::cuda());
    const int64_t stok = int64_t(h_kv) * d * 2, sh = int64_t(d) * 2;
    const double g_us = median_us([&](int) {
      gather_read_kernel<<<dim3(unsigned(h_kv), unsigned(b)), 128>>>(
          static_cast<const char*>(p.k.data()), static_cast<const char*>(p.v.data()),
          static_cast<const int*>(p.pt.data()), p.max_pages, shift, ctx, stok, sh, static_cast<uint32_t*>(sink.data()));
    });
    CK(cudaGetLastError());
    report_bw("  gather-read (same pages, no math)", g_us, kv_bytes);
  }
}

// One variant of a same-buffer comparison: its tuning, mode, and which page table it reads.
struct Variant {
  std::string label;
  cuda::attn::Tuning tune{};
  bool deterministic = false;
  bool near = false;    // pool > 1: a permutation of the pool's first b x max_pages pages instead
  bool gather = false;  // gather_read_kernel (no math) instead of the attention op
  // > 0: the median of back-to-back bursts of this many calls between one pair of events, per call (the
  // host's launch path and the GPU's idle gap between one call's events leave the figure; what stays is
  // what a CUDA-graph replay of many layers pays: each call's ramp-up and tail).
  int b2b = 0;
  // V read through a view this many bytes past the allocation's start (the K/V distance changes by it,
  // the pages and the page table do not); > 0 only for timing (the values read differ).
  size_t v_shift = 0;
};

// One allocation (pool, caches, both page tables), every variant timed in turn, `rounds` times
// (A B C A B C): variants compared on the same buffers, the repeat showing the drift in between.
void bench_variants(const std::string& name, int b, int h_q, int h_kv, int d, int ps, int q_len, int ctx, int pool,
                    const std::vector<Variant>& vs, int rounds = 2, bool fp8 = false) {
  if (!selected(name)) return;
  size_t v_slack = 0;
  for (const Variant& v : vs) v_slack = std::max(v_slack, v.v_shift);
  Paged p = make_paged(b, h_q, h_kv, d, ps, q_len, ctx, true, 4321u + uint32_t(ps), pool, fp8, 0, v_slack);
  const Buffer& pt_far = p.pt;  // the batch's pages sampled from the whole pool
  Buffer pt_near(size_t(b) * p.max_pages * 4, Device::cuda());
  {
    std::vector<int32_t> ids(size_t(b) * p.max_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(77));
    CK(cudaMemcpy(pt_near.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  }
  size_t ws_bytes = 256;
  for (const Variant& v : vs) {
    const auto cfg = cuda::attn::select(paged_args(p, 0, v.deterministic), cuda::attn::current_device_caps(), v.tune);
    ws_bytes = std::max(ws_bytes, cfg.ws_bytes);
  }
  p.ws = Buffer(ws_bytes, Device::cuda());
  const double kv_bytes = 2.0 * b * double(ctx) * h_kv * d * (fp8 ? 1 : 2);
  int shift = 0;
  while ((1 << shift) < ps) ++shift;
  Buffer sink(256, Device::cuda());
  for (int round = 0; round < rounds; ++round)
    for (const Variant& v : vs) {
      const Buffer& pt = v.near ? pt_near : pt_far;
      const char* v_base = static_cast<const char*>(p.v.data()) + v.v_shift;
      auto args = [&](int set) {
        PagedAttentionArgs a = paged_args(p, set, v.deterministic);
        a.page_table = pt.view(DType::i32, {b, p.max_pages});
        a.v_cache.data = const_cast<char*>(v_base);
        return a;
      };
      double us = 0;
      std::string note;
      if (v.gather) {
        if (fp8 || d != 128) continue;  // the gather kernel reads 256-byte rows
        us = median_us([&](int) {
          gather_read_kernel<<<dim3(unsigned(h_kv), unsigned(b)), 128>>>(
              static_cast<const char*>(p.k.data()), v_base, static_cast<const int*>(pt.data()), p.max_pages, shift, ctx,
              int64_t(h_kv) * d * 2, int64_t(d) * 2, static_cast<uint32_t*>(sink.data()));
        });
        CK(cudaGetLastError());
      } else {
        const auto cfg = cuda::attn::select(args(0), cuda::attn::current_device_caps(), v.tune);
        const int burst = std::max(1, v.b2b);
        us = median_us([&](int i) {
               for (int k = 0; k < burst; ++k)
                 cuda::attn::run(args((i * burst + k) % p.q_sets), Workspace{p.ws.data(), p.ws.bytes()}, {}, v.tune);
             }) /
             burst;
        // Page runs apply from 2 load steps per page (16 slots at d 128 bf16, 32 for its 128-byte FP8 rows).
        const int runs_from = 2 * (128 / (d * (fp8 ? 1 : 2) / 16));
        char buf[160];
        std::snprintf(buf, sizeof buf, "[%s splits %d stages %d mt %d ctas/SM %d%s%s%s]",
                      cuda::attn::kernel_name(cfg.kernel), cfg.num_splits, cfg.stages, cfg.mt, cfg.ctas_per_sm,
                      cfg.page_runs && ps >= runs_from ? " page-runs"
                      : cfg.lane_pages && cfg.mt == 1  ? " lane-pages"
                                                       : "",
                      cfg.ring_counters ? " ring" : "",
                      cfg.fp8_direct == 2 ? " fp8-lean"
                      : cfg.fp8_direct    ? " fp8-direct"
                                          : "");
        note = buf;
        if (v.b2b > 0) {  // the host's side of one call: a burst enqueued onto a busy GPU, host clock per call
          CK(cudaDeviceSynchronize());
          const auto h0 = std::chrono::steady_clock::now();
          for (int k = 0; k < burst; ++k)
            cuda::attn::run(args(k % p.q_sets), Workspace{p.ws.data(), p.ws.bytes()}, {}, v.tune);
          const double host_us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
          CK(cudaDeviceSynchronize());
          char h[48];
          std::snprintf(h, sizeof h, " host %.1f us/call", host_us / burst);
          note += h;
        }
      }
      // The SM clock right after (the power controller's state: a just-filled allocation's cases ran ~12 %
      // slow in sessions 5 and 7, the gather-read too; this says whether the clock moved with them).
      char clock[32];
      std::snprintf(clock, sizeof clock, " @ %.0f MHz", sm_clock_mhz());
      report_bw(name + " " + v.label + " r" + std::to_string(round + 1), us, kv_bytes, note + clock);
    }
}

void bench_paged(const std::string& name, int b, int h_q, int h_kv, int d, int ps, int q_len, int ctx,
                 bool shuffle = true, cuda::attn::Tuning tune = {}, bool deterministic = false) {
  DecodeOpts o;
  o.shuffle = shuffle;
  o.tune = tune;
  o.deterministic = deterministic;
  bench_decode(name, b, h_q, h_kv, d, ps, q_len, ctx, o);
}

// d_v: v head dim (0: d); causal false: every row sees all keys (FA3's paper figures are non-causal).
void bench_prefill(const std::string& name, int b, int s, int h_q, int h_kv, int d, int prefix = 0,
                   cuda::attn::Tuning tune = {}, int page_size = 16, int d_v = 0, bool causal = true) {
  if (!selected(name)) return;
  const int ctx = s + prefix;
  Paged p = make_paged(b, h_q, h_kv, d, page_size, s, ctx, true, 99, 1, false, d_v);
  auto args = [&](int set) {
    PagedAttentionArgs a = paged_args(p, set, false);
    a.causal = causal;
    return a;
  };
  PagedAttentionArgs a0 = args(0);
  const auto cfg = cuda::attn::select(a0, cuda::attn::current_device_caps(), tune);
  p.ws = Buffer(std::max<size_t>(cfg.ws_bytes, 256), Device::cuda());
  const double us = median_us(
      [&](int i) {
        cuda::attn::run(args(i % p.q_sets), Workspace{p.ws.data(), p.ws.bytes()}, {}, tune);
      },
      2, 10);
  // Causal: each query row i (of s) sees prefix + i + 1 keys; non-causal: all ctx keys. A visible
  // pair costs 2 d (q . k) + 2 d_v (p v) FLOPs.
  const double pairs = causal ? double(b) * (double(s) * prefix + double(s) * (s + 1) / 2.0) : double(b) * s * ctx;
  const double flops = 2.0 * pairs * h_q * (d + p.d_v);
  const double bytes = double(b) * ctx * h_kv * (d + p.d_v) * 2 + 2.0 * b * double(s) * h_q * (d + p.d_v);
  char note[96];
  if (cfg.sm90())
    std::snprintf(note, sizeof note, "[sm90 wgmma %s]",
                  cfg.sm90() == 4   ? "ping-pong eager"
                  : cfg.sm90() == 3 ? "ping-pong"
                  : cfg.sm90() == 2 ? "warp-specialized"
                                    : "coop");
  else std::snprintf(note, sizeof note, "[splits %d stages %d mt %d]", cfg.num_splits, cfg.stages, cfg.mt);
  // The loader: " tma" (whole tiles, or K / V of the split loaders), " ktma" / " vtma" / " lean" (sm90_kv_load).
  if (cfg.sm90_tma) std::strncat(note, " tma", sizeof note - std::strlen(note) - 1);
  if (cfg.sm90_kv_load >= 2)
    std::strncat(note,
                 cfg.sm90_kv_load == 2   ? " ktma"
                 : cfg.sm90_kv_load == 3 ? " vtma"
                                         : " lean",
                 sizeof note - std::strlen(note) - 1);
  char clock[32];
  std::snprintf(clock, sizeof clock, " @ %.0f MHz", sm_clock_mhz());
  report_flops(name, us, flops, bytes, note + std::string(clock));
}

// Random e4m3 codes with exponents 4..8 (|x| in [0.125, 3.75]) and a random sign: finite, never zero
// (the FP8 prefill inputs: no zeros and no subnormals in q or K).
__global__ void fill_fp8_prefill_kernel(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = uint8_t(0x20 + (h % 40)) | uint8_t((h >> 16) & 0x80);
  }
}

// FP8 prefill/extend (q, K, V e4m3, descales [b, h_kv] of 0.5, out bf16), the shapes of bench_prefill;
// FLOPs counted the same way (causal: visible pairs), bytes with 1-byte q / K / V.
void bench_prefill_fp8(const std::string& name, int b, int s, int h_q, int h_kv, int d, int prefix = 0,
                       cuda::attn::Tuning tune = {}, int page_size = 16) {
  if (!selected(name)) return;
  const int ctx = s + prefix, max_pages = (ctx + page_size - 1) / page_size, num_pages = b * max_pages;
  const int total_q = b * s;
  const size_t kv_elems = size_t(num_pages) * page_size * h_kv * d, q_elems = size_t(total_q) * h_q * d;
  const int sets = int(std::min<size_t>(64, (96ull << 20) / q_elems + 1));  // > L2 across sets
  Buffer k(kv_elems, Device::cuda()), v(kv_elems, Device::cuda()), q(q_elems * sets, Device::cuda());
  fill_fp8_prefill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(k.data()), kv_elems, 11);
  fill_fp8_prefill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(v.data()), kv_elems, 12);
  fill_fp8_prefill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(q.data()), q_elems * sets, 13);
  CK(cudaGetLastError());
  Buffer out(q_elems * 2, Device::cuda()), lse(size_t(total_q) * h_q * 4, Device::cuda());
  std::vector<int32_t> ids(static_cast<size_t>(num_pages)), sl(static_cast<size_t>(b), ctx), cu(size_t(b) + 1);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(99));
  for (int i = 0; i <= b; ++i) cu[size_t(i)] = i * s;
  std::vector<float> ds(size_t(b) * h_kv, 0.5f);
  Buffer pt(ids.size() * 4, Device::cuda()), slb(sl.size() * 4, Device::cuda()), cub(cu.size() * 4, Device::cuda()),
      dsb(ds.size() * 4, Device::cuda());
  CK(cudaMemcpy(pt.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(slb.data(), sl.data(), sl.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(cub.data(), cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsb.data(), ds.data(), ds.size() * 4, cudaMemcpyHostToDevice));
  auto args = [&](int set) {
    PagedAttentionArgs a{.q = TensorView::contiguous(static_cast<char*>(q.data()) + size_t(set) * q_elems,
                                                     DType::fp8_e4m3, {total_q, h_q, d}, Device::cuda()),
                         .k_cache = k.view(DType::fp8_e4m3, {num_pages, page_size, h_kv, d}),
                         .v_cache = v.view(DType::fp8_e4m3, {num_pages, page_size, h_kv, d}),
                         .page_table = pt.view(DType::i32, {b, max_pages}),
                         .cache_seqlens = slb.view(DType::i32, {b}),
                         .cu_seqlens_q = cub.view(DType::i32, {b + 1}),
                         .out = out.view(DType::bf16, {total_q, h_q, d})};
    a.lse = lse.view(DType::f32, {total_q, h_q});
    a.q_descale = dsb.view(DType::f32, {b, h_kv});
    a.k_descale = dsb.view(DType::f32, {b, h_kv});
    a.v_descale = dsb.view(DType::f32, {b, h_kv});
    a.max_seqlen_q = s;
    a.softmax_scale = 1.f / std::sqrt(float(d));
    a.causal = true;
    return a;
  };
  const auto cfg = cuda::attn::select(args(0), cuda::attn::current_device_caps(), tune);
  Buffer ws(std::max<size_t>(cfg.ws_bytes, 256), Device::cuda());
  const double us = median_us(
      [&](int i) {
        cuda::attn::run(args(i % sets), cfg, Workspace{ws.data(), ws.bytes()}, {});
      },
      2, 10);
  const double pairs = double(b) * (double(s) * prefix + double(s) * (s + 1) / 2.0);
  const double flops = 4.0 * pairs * h_q * d;
  const double bytes = 2.0 * b * double(ctx) * h_kv * d + double(total_q) * h_q * d * 3;
  char clock[32];
  std::snprintf(clock, sizeof clock, " @ %.0f MHz", sm_clock_mhz());
  report_flops(name, us, flops, bytes, std::string("[") + cuda::attn::kernel_name(cfg.kernel) + "]" + clock);
}

// The in-run drift (session 5's final check: the first prefill case 573 TFLOP/s, its repeat 20 cases
// later 531): the bf16 ping-pong at b1 x 8K causal 32/8 page 16 on ONE allocation, `rounds` rounds of
// 40 launches (median per round) back to back, then `rest_ms` of idle GPU, then `rounds` more, then a
// fresh allocation of the same shape for 5 rounds. Each line: seconds since the first round, the
// round's median, TFLOP/s and the SM clock probed right after the round. Flat clocks with falling
// TFLOP/s would point at the kernel or the memory; clocks that fall with it, at power or heat.
// Runs only when a filter names it (`bench_attention drift`): its 2 s idle would reset the clock
// state of the cases after it in a full run.
void bench_drift(const std::string& name, int rounds, int rest_ms, cuda::attn::Tuning tune) {
  if (g_filter.empty() || !selected(name)) return;
  const int b = 1, s = 8192, h_q = 32, h_kv = 8, d = 128;
  const double flops = 2.0 * double(b) * (double(s) * (s + 1) / 2.0) * h_q * (2 * d);
  const auto t_start = std::chrono::steady_clock::now();
  auto secs = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
  auto run_rounds = [&](Paged& p, const char* phase, int n) {
    auto args = [&](int set) {
      PagedAttentionArgs a = paged_args(p, set, false);
      a.causal = true;
      return a;
    };
    const auto cfg = cuda::attn::select(args(0), cuda::attn::current_device_caps(), tune);
    p.ws = Buffer(std::max<size_t>(cfg.ws_bytes, 256), Device::cuda());
    for (int r = 0; r < n; ++r) {
      const double t = secs();
      const double us = median_us(
          [&](int i) {
            cuda::attn::run(args(i % p.q_sets), Workspace{p.ws.data(), p.ws.bytes()}, {}, tune);
          },
          1, 40);
      std::printf("%s %-8s round %2d  t %6.3f s  %8.1f us %7.1f TFLOP/s  SM %5.0f MHz  [%s]\n", name.c_str(), phase, r,
                  t, us, flops / us * 1e-6, sm_clock_mhz(), cuda::attn::kernel_name(cfg.kernel));
      std::fflush(stdout);
    }
  };
  std::printf("%s idle     SM %5.0f MHz before the first round\n", name.c_str(), sm_clock_mhz());
  {
    Paged p = make_paged(b, h_q, h_kv, d, 16, s, s, true, 99, 1, false, 0);
    run_rounds(p, "hot", rounds);
    std::this_thread::sleep_for(std::chrono::milliseconds(rest_ms));
    std::printf("%s rested   SM %5.0f MHz after %d ms idle\n", name.c_str(), sm_clock_mhz(), rest_ms);
    run_rounds(p, "rested", rounds);
  }
  Paged fresh = make_paged(b, h_q, h_kv, d, 16, s, s, true, 7, 1, false, 0);
  run_rounds(fresh, "fresh", 5);
}

// fp8: an FP8-656 cache (656 bytes per token), its tokens quantized by set_mla_kv_buffer from random bf16.
void bench_mla(const std::string& name, int b, int h_q, int ctx, int ps, int q_len = 1, cuda::mla::MlaTuning tune = {},
               bool deterministic = false, bool fp8 = false) {
  if (!selected(name)) return;
  const int max_pages = (ctx + ps - 1) / ps, num_pages = b * max_pages, total_q = b * q_len;
  const int64_t slots = int64_t(num_pages) * ps, row_bytes = fp8 ? 656 : 1152;
  Buffer kv(size_t(slots) * row_bytes, Device::cuda());
  if (!fp8) {
    fill_bf16(kv.data(), size_t(slots) * 576, 7);
  } else {  // quantize in chunks of 256K tokens (contiguous slots)
    const int64_t chunk = std::min<int64_t>(slots, 262144);
    Buffer src(size_t(chunk) * 576 * 2, Device::cuda()), loc(size_t(chunk) * 4, Device::cuda());
    fill_bf16(src.data(), size_t(chunk) * 576, 7);
    std::vector<int32_t> idx(static_cast<size_t>(chunk));
    for (int64_t s0 = 0; s0 < slots; s0 += chunk) {
      const int64_t n = std::min(chunk, slots - s0);
      for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = int32_t(s0 + i);
      CK(cudaMemcpy(loc.data(), idx.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
      set_mla_kv_buffer({.kv_c = TensorView::contiguous(src.data(), DType::bf16, {n, 512}, Device::cuda()),
                         .k_rope = TensorView::contiguous(static_cast<char*>(src.data()) + size_t(chunk) * 1024,
                                                          DType::bf16, {n, 64}, Device::cuda()),
                         .cache = kv.view(DType::u8, {slots, 656}),
                         .loc = loc.view(DType::i32, {n})});
    }
    CK(cudaDeviceSynchronize());
  }
  const size_t qn_elems = size_t(total_q) * h_q * 512, qr_elems = size_t(total_q) * h_q * 64;
  const int sets = int(std::min<size_t>(32, (96ull << 20) / ((qn_elems + qr_elems) * 2) + 1));
  Buffer qn(qn_elems * 2 * sets, Device::cuda()), qr(qr_elems * 2 * sets, Device::cuda());
  fill_bf16(qn.data(), qn_elems * sets, 8);
  fill_bf16(qr.data(), qr_elems * sets, 9);
  Buffer out(qn_elems * 2, Device::cuda()), lse(size_t(total_q) * h_q * 4, Device::cuda());
  std::vector<int32_t> ids(static_cast<size_t>(num_pages)), sl(static_cast<size_t>(b), ctx),
      cu(static_cast<size_t>(b) + 1);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(5));
  for (int i = 0; i <= b; ++i) cu[size_t(i)] = i * q_len;
  Buffer pt(ids.size() * 4, Device::cuda()), slb(sl.size() * 4, Device::cuda()), cub(cu.size() * 4, Device::cuda());
  CK(cudaMemcpy(pt.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(slb.data(), sl.data(), sl.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(cub.data(), cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  auto args = [&](int set) {
    MlaAttentionArgs a{
        .q_nope = TensorView::contiguous(static_cast<char*>(qn.data()) + size_t(set) * qn_elems * 2, DType::bf16,
                                         {total_q, h_q, 512}, Device::cuda()),
        .q_rope = TensorView::contiguous(static_cast<char*>(qr.data()) + size_t(set) * qr_elems * 2, DType::bf16,
                                         {total_q, h_q, 64}, Device::cuda()),
        .kv_cache = fp8 ? kv.view(DType::u8, {num_pages, ps, 1, 656}) : kv.view(DType::bf16, {num_pages, ps, 1, 576}),
        .page_table = pt.view(DType::i32, {b, max_pages}),
        .cache_seqlens = slb.view(DType::i32, {b}),
        .cu_seqlens_q = cub.view(DType::i32, {b + 1}),
        .out = out.view(DType::bf16, {total_q, h_q, 512})};
    a.lse = lse.view(DType::f32, {total_q, h_q});
    a.max_seqlen_q = q_len;
    a.softmax_scale = 0.1352337f;
    a.deterministic = deterministic;
    return a;
  };
  const auto cfg = cuda::mla::select(args(0), cuda::attn::current_device_caps(), tune);
  Buffer ws(std::max<size_t>(cfg.ws_bytes, 256), Device::cuda());
  const double us = median_us(
      [&](int i) {
        cuda::mla::run(args(i % sets), Workspace{ws.data(), ws.bytes()}, {}, tune);
      },
      3, 20);
  const double flops = 2.0 * total_q * h_q * double(ctx) * (576 + 512);
  const double bytes = double(b) * ctx * row_bytes;  // cache bytes read (FP8: 656 per token)
  char note[96];
  std::snprintf(note, sizeof note, "[%s%s hb %d splits %d stages %d] %.0f%% of copy",
                cuda::mla::kernel_name(cfg.kernel), cfg.sm90_tma ? " tma" : "", cfg.rows_per_block, cfg.num_splits,
                cfg.stages, 100.0 * bytes / us * 1e-3 / g_copy_gbs);
  report_flops(name, us, flops, bytes, note);
}

void bench_store(const std::string& name, int64_t n, int h_kv, int d, DType cache_t) {
  if (!selected(name)) return;
  const int64_t slots = n * 2;
  const int sets = 4;  // 4 sets of sources: n * h_kv * d * 2 * 2 bytes each, far over L2
  Buffer src(size_t(n) * h_kv * d * 2 * 2 * sets, Device::cuda());
  fill_bf16(src.data(), size_t(n) * h_kv * d * 2 * sets, 3);
  Buffer kc(size_t(slots) * h_kv * d * dtype_size(cache_t), Device::cuda()),
      vc(size_t(slots) * h_kv * d * dtype_size(cache_t), Device::cuda());
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(11));
  ids.resize(size_t(n));
  Buffer loc(ids.size() * 4, Device::cuda());
  CK(cudaMemcpy(loc.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  const size_t set_bytes = size_t(n) * h_kv * d * 2 * 2;
  const double us = median_us([&](int i) {
    char* base = static_cast<char*>(src.data()) + size_t(i % sets) * set_bytes;
    StoreKvArgs a{.k = TensorView::contiguous(base, DType::bf16, {n, h_kv, d}, Device::cuda()),
                  .v = TensorView::contiguous(base + set_bytes / 2, DType::bf16, {n, h_kv, d}, Device::cuda()),
                  .k_cache = kc.view(cache_t, {slots, h_kv, d}),
                  .v_cache = vc.view(cache_t, {slots, h_kv, d}),
                  .loc = loc.view(DType::i32, {n})};
    a.k_scale = 0.5f;
    a.v_scale = 0.5f;
    set_kv_buffer(a);
  });
  const double bytes = double(n) * h_kv * d * 2 * (2 + dtype_size(cache_t));  // read k,v; write caches
  report_bw(name, us, bytes);
}

void bench_store_mla(const std::string& name, int64_t n, bool fp8) {
  if (!selected(name)) return;
  const int64_t slots = n * 2;
  Buffer src(size_t(n) * 576 * 2 * 4, Device::cuda());
  fill_bf16(src.data(), size_t(n) * 576 * 4, 4);
  const int64_t width = fp8 ? 656 : 1152;
  Buffer cache(size_t(slots) * width, Device::cuda());
  std::vector<int32_t> ids(static_cast<size_t>(slots));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(12));
  ids.resize(size_t(n));
  Buffer loc(ids.size() * 4, Device::cuda());
  CK(cudaMemcpy(loc.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  const double us = median_us([&](int i) {
    char* base = static_cast<char*>(src.data()) + size_t(i % 4) * size_t(n) * 576 * 2;
    StoreMlaArgs a{.kv_c = TensorView::contiguous(base, DType::bf16, {n, 512}, Device::cuda()),
                   .k_rope = TensorView::contiguous(base + size_t(n) * 512 * 2, DType::bf16, {n, 64}, Device::cuda()),
                   .cache = fp8 ? cache.view(DType::u8, {slots, 656}) : cache.view(DType::bf16, {slots, 576}),
                   .loc = loc.view(DType::i32, {n})};
    set_mla_kv_buffer(a);
  });
  report_bw(name, us, double(n) * (1152 + width));
}

}  // namespace

int main(int argc, char** argv) try {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) g_quick = true;
    else if (std::strcmp(argv[i], "--sustained") == 0) g_sustained = true;
    else if (std::strcmp(argv[i], "--host-gaps") == 0) g_host_gaps = true;
    else g_filter = argv[i];
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB, smem/block opt-in %zu KB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10);
  bench_copy();

  using cuda::attn::Tuning;
  // Decode, h_q 32 / h_kv 8 / d 128, b 64 x 8K; each with the gather-read ceiling of its pages.
  DecodeOpts with_gather;
  with_gather.gather = true;
  for (int ps : {1, 16, 64})
    bench_decode("decode b64x8K hq32 hkv8 page" + std::to_string(ps), 64, 32, 8, 128, ps, 1, 8192, with_gather);
  bench_paged("decode b64x8K hq32 hkv8 page16 sequential-pages", 64, 32, 8, 128, 16, 1, 8192, false);
  bench_paged("decode b64x8K hq32 hkv8 page1 sequential-pages", 64, 32, 8, 128, 1, 1, 8192, false);
  // An engine's cache: the batch's pages sampled from a pool 4x / 16x larger (34 GB at 16x).
  for (int pool : {4, 16})
    for (int ps : {1, 16, 64}) {
      DecodeOpts o = with_gather;
      o.pool = pool;
      bench_decode("decode b64x8K hq32 hkv8 page" + std::to_string(ps) + " pool" + std::to_string(pool) + "x", 64, 32,
                   8, 128, ps, 1, 8192, o);
    }
  // h_q 16 / h_kv 2, b 128 x 4K; short contexts; target verify with 4 and 8 draft tokens.
  for (int ps : {1, 16, 64})
    bench_paged("decode b128x4K hq16 hkv2 page" + std::to_string(ps), 128, 16, 2, 128, ps, 1, 4096);
  bench_paged("decode b256x2K hq32 hkv8 page16", 256, 32, 8, 128, 16, 1, 2048);
  bench_paged("decode b64x1K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 1024);
  bench_paged("verify4 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 4, 4096);
  bench_paged("verify8 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 8, 4096);
  // Deterministic mode (fixed 1024-key splits) on the same shapes, then larger fixed split sizes.
  bench_paged("decode b64x8K hq32 hkv8 page16 deterministic", 64, 32, 8, 128, 16, 1, 8192, true, {}, true);
  bench_paged("decode b128x4K hq16 hkv2 page16 deterministic", 128, 16, 2, 128, 16, 1, 4096, true, {}, true);
  bench_paged("decode b256x2K hq32 hkv8 page16 deterministic", 256, 32, 8, 128, 16, 1, 2048, true, {}, true);
  bench_paged("decode b64x1K hq32 hkv8 page16 deterministic", 64, 32, 8, 128, 16, 1, 1024, true, {}, true);
  bench_paged("verify4 b64x4K hq32 hkv8 page16 deterministic", 64, 32, 8, 128, 16, 4, 4096, true, {}, true);
  for (int sk : {2048, 4096}) {
    const std::string v = " deterministic split" + std::to_string(sk);
    bench_paged("decode b64x8K hq32 hkv8 page16" + v, 64, 32, 8, 128, 16, 1, 8192, true, Tuning{.split_keys = sk},
                true);
    bench_paged("decode b128x4K hq16 hkv2 page16" + v, 128, 16, 2, 128, 16, 1, 4096, true, Tuning{.split_keys = sk},
                true);
    bench_paged("verify4 b64x4K hq32 hkv8 page16" + v, 64, 32, 8, 128, 16, 4, 4096, true, Tuning{.split_keys = sk},
                true);
  }
  // FP8 e4m3 K/V with descales (GB/s of FP8 bytes).
  {
    DecodeOpts o;
    o.fp8 = true;
    bench_decode("decode fp8 b64x8K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 8192, o);
    bench_decode("decode fp8 b64x8K hq32 hkv8 page64", 64, 32, 8, 128, 64, 1, 8192, o);
    bench_decode("decode fp8 b128x4K hq16 hkv2 page16", 128, 16, 2, 128, 16, 1, 4096, o);
    o.tune = Tuning{.ctas = 3};
    bench_decode("decode fp8 b64x8K hq32 hkv8 page16 ctas3", 64, 32, 8, 128, 16, 1, 8192, o);
  }
  // The decode investigations of session 5 (split sweeps, A/B pairs): full runs only, so that the quick
  // run (scripts/gpu_check.sh BENCH=quick) keeps to the headline cases and the same-buffer comparisons.
  if (!g_quick) {
    // Split-count sweeps: the underfilled shape (b 128 x h_kv 2 = 256 CTAs) and the short contexts.
    for (int s : {1, 2, 3, 4})
      bench_paged("sweep decode b128x4K hq16 hkv2 page16 splits" + std::to_string(s), 128, 16, 2, 128, 16, 1, 4096,
                  true, Tuning{.num_splits = s});
    for (int s : {1, 2, 4})
      bench_paged("sweep decode b64x1K hq32 hkv8 page16 splits" + std::to_string(s), 64, 32, 8, 128, 16, 1, 1024, true,
                  Tuning{.num_splits = s});
    for (int s : {1, 2})
      bench_paged("sweep decode b256x2K hq32 hkv8 page16 splits" + std::to_string(s), 256, 32, 8, 128, 16, 1, 2048,
                  true, Tuning{.num_splits = s});
    bench_paged("sweep decode b64x8K hq32 hkv8 page16 stages2", 64, 32, 8, 128, 16, 1, 8192, true, Tuning{.stages = 2});

    // A/B on one machine: page runs (one page-table entry per run of a thread's rows) off vs on.
    for (int runs : {0, 1}) {
      const std::string v = runs ? " page-runs" : " per-row";
      const Tuning t{.page_runs = runs};
      for (int ps : {16, 64}) {
        bench_paged("ab decode b64x8K hq32 hkv8 page" + std::to_string(ps) + v, 64, 32, 8, 128, ps, 1, 8192, true, t);
        bench_paged("ab decode b128x4K hq16 hkv2 page" + std::to_string(ps) + v, 128, 16, 2, 128, ps, 1, 4096, true, t);
      }
      bench_paged("ab verify4 b64x4K hq32 hkv8 page16" + v, 64, 32, 8, 128, 16, 4, 4096, true, t);
    }
    // A/B: three 2-stage CTAs per SM (168 registers, 12 warps) against the default two 3-stage ones;
    // split counts 1..3 where the 396 slots quantize the grid.
    for (int s : {1, 2, 3})
      for (int ps : {1, 16, 64})
        bench_paged("ab decode b64x8K hq32 hkv8 page" + std::to_string(ps) + " ctas3 splits" + std::to_string(s), 64,
                    32, 8, 128, ps, 1, 8192, true, Tuning{.num_splits = s, .ctas = 3});
    for (int s : {1, 2})
      bench_paged("ab decode b128x4K hq16 hkv2 page16 ctas3 splits" + std::to_string(s), 128, 16, 2, 128, 16, 1, 4096,
                  true, Tuning{.num_splits = s, .ctas = 3});
    for (int s : {1, 2})
      bench_paged("ab decode b256x2K hq32 hkv8 page16 ctas3 splits" + std::to_string(s), 256, 32, 8, 128, 16, 1, 2048,
                  true, Tuning{.num_splits = s, .ctas = 3});
    for (int s : {1, 2, 4})
      bench_paged("ab decode b64x1K hq32 hkv8 page16 ctas3 splits" + std::to_string(s), 64, 32, 8, 128, 16, 1, 1024,
                  true, Tuning{.num_splits = s, .ctas = 3});
    for (int s : {1, 2})
      for (int q : {4, 8})
        bench_paged("ab verify" + std::to_string(q) + " b64x4K hq32 hkv8 page16 ctas3 splits" + std::to_string(s), 64,
                    32, 8, 128, 16, q, 4096, true, Tuning{.num_splits = s, .ctas = 3});
    bench_paged("ab decode b64x8K hq32 hkv8 page16 deterministic ctas3", 64, 32, 8, 128, 16, 1, 8192, true,
                Tuning{.ctas = 3}, true);
    {
      DecodeOpts o;
      o.pool = 16;
      o.tune = Tuning{.ctas = 3};
      bench_decode("ab decode b64x8K hq32 hkv8 page64 pool16x ctas3", 64, 32, 8, 128, 64, 1, 8192, o);
    }
    // A/B on one machine: shift addressing of power-of-two pages (default) vs integer division.
    for (int shifts : {1, 0}) {
      const std::string v = shifts ? " shifts" : " division";
      Tuning t{.page_shifts = shifts};
      bench_paged("ab decode b64x8K hq32 hkv8 page16" + v, 64, 32, 8, 128, 16, 1, 8192, true, t);
    }
  }
  // Same-buffer comparisons (one allocation per shape, every variant twice, interleaved): fresh
  // allocations moved whole figures by ~12 % between cases in session 5's first run (bench/NOTES.md).
  // (The L2-prefetch variant measured here in bd5002d, 10 % slower everywhere, is removed.)
  {
    const Tuning s3{.num_splits = 3, .ctas = 3}, det1k{.split_keys = 1024}, det2k{.split_keys = 2048};
    const Variant def{"default"}, rows{"per-row", Tuning{.page_runs = 0, .lane_pages = 0}}, c3{"ctas3 splits3", s3},
        det{"deterministic", {}, true}, d1k{"deterministic split1024", det1k, true},
        d2k{"deterministic split2048", det2k, true}, gat{"gather-read", {}, false, false, true};
    bench_variants("same b64x8K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 8192, 1, {def, rows, c3, det, d1k, d2k, gat});
    const Variant near{"near", {}, false, true}, near_gat{"near gather-read", {}, false, true, true};
    bench_variants("same b64x8K hq32 hkv8 page64 pool16x", 64, 32, 8, 128, 64, 1, 8192, 16,
                   {def, c3, rows, gat, near, near_gat});
    bench_variants("same b64x8K hq32 hkv8 page1 pool16x", 64, 32, 8, 128, 1, 1, 8192, 16, {def, gat, near, near_gat});
    bench_variants("same b64x8K hq32 hkv8 page16 pool4x", 64, 32, 8, 128, 16, 1, 8192, 4, {def, gat, near, near_gat});
    const Variant c3s1{"ctas3 splits1", Tuning{.num_splits = 1, .ctas = 3}},
        c3s2{"ctas3 splits2", Tuning{.num_splits = 2, .ctas = 3}};
    bench_variants("same b256x2K hq32 hkv8 page16", 256, 32, 8, 128, 16, 1, 2048, 1, {def, c3s1, det, d1k});
    bench_variants("same b64x1K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 1024, 1, {def, c3s2, det});
    bench_variants("same b128x4K hq16 hkv2 page16", 128, 16, 2, 128, 16, 1, 4096, 1, {def, c3s1, det, d1k});
    bench_variants("same verify4 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 4, 4096, 1, {def, det, d1k});
    bench_variants("same verify8 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 8, 4096, 1, {def, det});
    // Lane page ids (Tuning::lane_pages, the default since session 7) where page runs do not apply (pages below
    // 16 slots): per-row page-id lookups against the default, both at three CTAs per SM, and the gather-read
    // ceiling of the same bytes.
    const Tuning per_row{.lane_pages = 0}, per_row_c3s3{.num_splits = 3, .ctas = 3, .lane_pages = 0},
        per_row_c3s1{.num_splits = 1, .ctas = 3, .lane_pages = 0};
    const Variant rows_v{"per-row-pages", per_row}, rows_c3{"per-row-pages ctas3 splits3", per_row_c3s3},
        rows_c3s1{"per-row-pages ctas3 splits1", per_row_c3s1};
    for (int ps : {1, 8}) {
      const std::string page = " page" + std::to_string(ps);
      bench_variants("same lanes b64x8K hq32 hkv8" + page, 64, 32, 8, 128, ps, 1, 8192, 1,
                     {rows_v, def, rows_c3, c3, gat});
      bench_variants("same lanes b128x4K hq16 hkv2" + page, 128, 16, 2, 128, ps, 1, 4096, 1,
                     {rows_v, def, rows_c3s1, c3s1, gat});
    }
    // Ring counters (Tuning::ring_counters, the default since session 7: the key loop's stage and page-id
    // ring slots as counters, the page-id prefetch by shifts, ~150 fewer instructions per thread per tile,
    // bench/NOTES.md "Session 7: decode") against "modulo" rows (ring_counters 0) on the same buffers; with lane page
    // ids where page runs do not apply; "b2b": bursts of 10 calls between one pair of events (per call), which
    // separates the per-call constant (~18 us in 610e825's context sweep) from the streaming rate; "v+32K"
    // / "v+1M": V read 32 KB / 1 MB further into its allocation (tests whether the K/V distance, not the
    // pages, makes an allocation read slowly: the pool4x case, slow in 610e825 with near pages too).
    {
      // (Lane page ids are the default since session 7: below page runs "per-row-pages" rows take the old path.)
      const Tuning rc{.ring_counters = 0}, rows_rc{.lane_pages = 0, .ring_counters = 0},
          c3_rc{.num_splits = 3, .ctas = 3, .ring_counters = 0};
      const Variant ring{"modulo", rc}, rows_ring{"per-row-pages modulo", rows_rc},
          c3_ring{"ctas3 splits3 modulo", c3_rc};
      Variant def_b2b{"default b2b10"}, ring_b2b{"modulo b2b10", rc};
      def_b2b.b2b = ring_b2b.b2b = 10;
      auto shifted = [&](const char* label, size_t bytes, bool gather) {
        Variant v{label, {}, false, false, gather};
        v.v_shift = bytes;
        return v;
      };
      const std::vector<Variant> kv_dist{shifted("v+32K", 32 << 10, false),
                                         shifted("v+32K gather-read", 32 << 10, true), shifted("v+1M", 1 << 20, false),
                                         shifted("v+1M gather-read", 1 << 20, true)};
      auto with = [](std::vector<Variant> a, const std::vector<Variant>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
      };
      bench_variants("same ring b64x8K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 8192, 1,
                     with({def, ring, def_b2b, ring_b2b, gat}, kv_dist));
      bench_variants("same ring b64x8K hq32 hkv8 page16 pool4x", 64, 32, 8, 128, 16, 1, 8192, 4,
                     with({def, ring, gat}, kv_dist));
      // The same-process FA3 comparison's layout at page 1 and 64: the batch's pages sampled from a 16x pool.
      bench_variants("same ring b64x8K hq32 hkv8 page64 pool16x", 64, 32, 8, 128, 64, 1, 8192, 16, {def, ring, gat});
      bench_variants("same ring b64x8K hq32 hkv8 page1 pool16x", 64, 32, 8, 128, 1, 1, 8192, 16,
                     {def, ring, rows_v, rows_ring, gat});
      bench_variants("same ring b64x8K hq32 hkv8 page1", 64, 32, 8, 128, 1, 1, 8192, 1,
                     {def, ring, rows_v, rows_ring, gat});
      bench_variants("same ring b64x8K hq32 hkv8 page8", 64, 32, 8, 128, 8, 1, 8192, 1, {def, ring, rows_v, rows_ring});
      bench_variants("same ring b64x8K hq32 hkv8 page16 ctas3", 64, 32, 8, 128, 16, 1, 8192, 1, {c3, c3_ring});
      bench_variants("same ring b64x1K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 1024, 1,
                     {def, ring, def_b2b, ring_b2b});
      bench_variants("same ring b256x2K hq32 hkv8 page16", 256, 32, 8, 128, 16, 1, 2048, 1,
                     {def, ring, def_b2b, ring_b2b});
      bench_variants("same ring b128x4K hq16 hkv2 page16", 128, 16, 2, 128, 16, 1, 4096, 1,
                     {def, ring, def_b2b, ring_b2b});
      bench_variants("same ring b128x4K hq16 hkv2 page1", 128, 16, 2, 128, 1, 1, 4096, 1,
                     {def, ring, rows_v, rows_ring});
      bench_variants("same ring verify4 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 4, 4096, 1, {def, ring});
      bench_variants("same ring b64x8K hq32 hkv8 page16 deterministic", 64, 32, 8, 128, 16, 1, 8192, 1,
                     {det, Variant{"deterministic modulo", rc, true}});
      // FP8 rows are 128 bytes at d 128: 16 rows per load step, so page 16 takes the per-row path (runs
      // need pages of 32), and lane page ids apply there.
      bench_variants("same ring fp8 b64x8K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 8192, 1,
                     {def, ring, rows_v, rows_ring}, 2, true);
      bench_variants("same ring fp8 b64x8K hq32 hkv8 page64", 64, 32, 8, 128, 64, 1, 8192, 1, {def, ring}, 2, true);
      bench_variants("same ring fp8 b128x4K hq16 hkv2 page16", 128, 16, 2, 128, 16, 1, 4096, 1,
                     {def, ring, rows_v, rows_ring}, 2, true);
    }
    // FP8 operands straight from the e4m3 bytes (Tuning::fp8_direct 1, session 8: ldmatrix on the raw tiles, e4m3 ->
    // f16 in registers, no widening pass) against the widening kernel (fp8_direct 0, the default until session 8) on
    // the same buffers, at two and at three CTAs per SM (without conversion tiles 4 stages fit three CTAs; the
    // widening kernel takes 2 there).
    {
      const Variant wide{"widening", Tuning{.fp8_direct = 0}}, direct{"fp8direct", Tuning{.fp8_direct = 1}},
          wide3{"ctas3", Tuning{.ctas = 3, .fp8_direct = 0}},
          direct3{"fp8direct ctas3", Tuning{.ctas = 3, .fp8_direct = 1}};
      for (int ps : {1, 16, 64})
        bench_variants("same fp8direct b64x8K hq32 hkv8 page" + std::to_string(ps), 64, 32, 8, 128, ps, 1, 8192, 1,
                       {wide, direct, wide3, direct3}, 2, true);
      bench_variants("same fp8direct b128x4K hq16 hkv2 page16", 128, 16, 2, 128, 16, 1, 4096, 1,
                     {wide, direct, wide3, direct3}, 2, true);
      bench_variants("same fp8direct verify4 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 4, 4096, 1,
                     {wide, direct, wide3, direct3}, 2, true);
    }
    // The direct kernel (Tuning::fp8_direct 1) against its lean key loop (session 8: the score scale folded into the
    // exponent's FFMA, softcap and mask as uniform branches, leaner lane-page loads; the default since session 9) on
    // the same buffers; lean ctas3 at page 16 (the direct kernel lost there: 3027-3030 against 3394).
    {
      const Variant direct{"fp8direct", Tuning{.fp8_direct = 1}}, lean{"fp8lean", Tuning{.fp8_direct = 2}},
          lean3{"fp8lean ctas3", Tuning{.ctas = 3, .fp8_direct = 2}};
      for (int ps : {1, 16, 64})
        bench_variants("same fp8lean b64x8K hq32 hkv8 page" + std::to_string(ps), 64, 32, 8, 128, ps, 1, 8192, 1,
                       ps == 16 ? std::vector<Variant>{direct, lean, lean3} : std::vector<Variant>{direct, lean}, 2,
                       true);
      bench_variants("same fp8lean b128x4K hq16 hkv2 page16", 128, 16, 2, 128, 16, 1, 4096, 1, {direct, lean}, 2, true);
      bench_variants("same fp8lean verify4 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 4, 4096, 1, {direct, lean}, 2,
                     true);
    }
    // Deterministic mode's cost on small batches (fewer CTAs with larger fixed splits).
    bench_variants("same b4x32K hq32 hkv8 page16", 4, 32, 8, 128, 16, 1, 32768, 1, {def, det, d1k});
    bench_variants("same b1x32K hq32 hkv8 page16", 1, 32, 8, 128, 16, 1, 32768, 1, {def, det, d1k});
  }

  // The committed sweeps: context 1K -> 32K (b 64, page 16) and page size 1 -> 256 (b 64 x 8K),
  // default plan and three CTAs per SM.
  for (int ctx : {1024, 2048, 4096, 8192, 16384, 32768}) {
    bench_paged("ctx sweep b64 hq32 hkv8 page16 ctx" + std::to_string(ctx), 64, 32, 8, 128, 16, 1, ctx);
    bench_paged("ctx sweep b64 hq32 hkv8 page16 ctx" + std::to_string(ctx) + " ctas3", 64, 32, 8, 128, 16, 1, ctx, true,
                Tuning{.ctas = 3});
  }
  for (int ps : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    bench_paged("page sweep b64x8K hq32 hkv8 page" + std::to_string(ps), 64, 32, 8, 128, ps, 1, 8192);
    bench_paged("page sweep b64x8K hq32 hkv8 page" + std::to_string(ps) + " ctas3", 64, 32, 8, 128, ps, 1, 8192, true,
                Tuning{.ctas = 3});
  }
  // The default configuration again, to see the spread within this run.
  bench_paged("repeat decode b64x8K hq32 hkv8 page16", 64, 32, 8, 128, 16, 1, 8192);

  // Stores (target >= 2.5 TB/s): 128K tokens x 8 heads x 128.
  bench_store("store_kv bf16->bf16 n128K hkv8 d128", 131072, 8, 128, DType::bf16);
  bench_store("store_kv bf16->fp8 n128K hkv8 d128", 131072, 8, 128, DType::fp8_e4m3);
  bench_store_mla("store_mla bf16 n256K", 262144, false);
  bench_store_mla("store_mla fp8-656 n256K", 262144, true);

  // MLA decode: the default plan (Hopper wgmma kernel from 64 packed rows per request on sm_90, else
  // portable; the note names the kernel), then A/B within the run: portable (sm90 = 0) against Hopper
  // (sm90 = 1) on the shapes of ../shared/ANCHORS.md.
  bench_mla("mla decode b128 hq16 8K page64", 128, 16, 8192, 64);
  bench_mla("mla decode b128 hq128 8K page64", 128, 128, 8192, 64);
  bench_mla("mla decode b16 hq128 32K page64", 16, 128, 32768, 64);
  bench_mla("mla decode b64 hq128 sq2 4K page64", 64, 128, 4096, 64, 2);
  bench_mla("mla decode b128 hq32 8K page64", 128, 32, 8192, 64);
  bench_mla("mla decode b128 hq64 8K page64", 128, 64, 8192, 64);
  bench_mla("mla verify b64 hq16 sq4 8K page64", 64, 16, 8192, 64, 4);
  bench_mla("mla decode b128 hq128 8K page64 deterministic", 128, 128, 8192, 64, 1, {}, true);
  bench_mla("mla decode b128 hq16 8K page1", 128, 16, 8192, 1);
  bench_mla("mla decode b128 hq128 8K page1", 128, 128, 8192, 1);
  // FP8-656 cache (issue 15 deliverable 2: >= 1.6x the bf16 cache's tokens/s at h_q 16; GB/s counts 656 B
  // per token): the default plan, the portable kernel, page 1, deterministic.
  bench_mla("mla fp8 decode b128 hq16 8K page64", 128, 16, 8192, 64, 1, {}, false, true);
  bench_mla("mla fp8 decode b128 hq128 8K page64", 128, 128, 8192, 64, 1, {}, false, true);
  bench_mla("mla fp8 decode b128 hq64 8K page64", 128, 64, 8192, 64, 1, {}, false, true);
  bench_mla("mla fp8 decode b128 hq16 8K page1", 128, 16, 8192, 1, 1, {}, false, true);
  bench_mla("mla fp8 decode b128 hq16 8K page64 portable", 128, 16, 8192, 64, 1, cuda::mla::MlaTuning{0, 0, 0, 0},
            false, true);
  bench_mla("mla fp8 decode b128 hq128 8K page64 portable", 128, 128, 8192, 64, 1, cuda::mla::MlaTuning{0, 0, 0, 0},
            false, true);
  bench_mla("mla fp8 decode b128 hq128 8K page64 deterministic", 128, 128, 8192, 64, 1, {}, true, true);
  for (int k90 : {0, 1}) {
    cuda::mla::MlaTuning t;
    t.sm90 = k90;
    const std::string v = k90 ? " sm90" : " portable";
    bench_mla("mla ab decode b128 hq128 8K page64" + v, 128, 128, 8192, 64, 1, t);
    bench_mla("mla ab decode b128 hq16 8K page64" + v, 128, 16, 8192, 64, 1, t);
    bench_mla("mla ab decode b128 hq32 8K page64" + v, 128, 32, 8192, 64, 1, t);
  }
  // A/B within the run: the Hopper kernel's bf16 producers (cp.async ring / TMA boxes), two rounds each.
  for (int round : {1, 2})
    for (int tma : {0, 1}) {
      cuda::mla::MlaTuning t;
      t.sm90 = 1;
      t.sm90_tma = tma;
      const std::string v = std::string(tma ? " tma" : " cp.async") + " r" + std::to_string(round);
      bench_mla("mla producer decode b128 hq128 8K page64" + v, 128, 128, 8192, 64, 1, t);
      bench_mla("mla producer decode b64 hq128 sq2 4K page64" + v, 64, 128, 4096, 64, 2, t);
      bench_mla("mla producer decode b16 hq128 32K page64" + v, 16, 128, 32768, 64, 1, t);
      bench_mla("mla producer decode b128 hq64 8K page64" + v, 128, 64, 8192, 64, 1, t);
      bench_mla("mla producer decode b128 hq16 8K page64" + v, 128, 16, 8192, 64, 1, t);
    }
  // The same over the FP8-656 cache (the dequantizing producer's raw bytes by cp.async or by TMA boxes).
  for (int round : {1, 2})
    for (int tma : {0, 1}) {
      cuda::mla::MlaTuning t;
      t.sm90 = 1;
      t.sm90_tma = tma;
      const std::string v = std::string(tma ? " tma" : " cp.async") + " r" + std::to_string(round);
      bench_mla("mla fp8 producer decode b128 hq16 8K page64" + v, 128, 16, 8192, 64, 1, t, false, true);
      bench_mla("mla fp8 producer decode b128 hq64 8K page64" + v, 128, 64, 8192, 64, 1, t, false, true);
      bench_mla("mla fp8 producer decode b128 hq128 8K page64" + v, 128, 128, 8192, 64, 1, t, false, true);
    }
  if (!g_quick) {  // A/B within the run: pipeline depth at h_q 16, row block at h_q 128, a repeat for spread
    for (int st : {3, 4})
      bench_mla("mla sweep decode b128 hq16 8K page64 stages" + std::to_string(st), 128, 16, 8192, 64, 1,
                cuda::mla::MlaTuning{0, st, 0});
    bench_mla("mla sweep decode b128 hq128 8K page64 hb32", 128, 128, 8192, 64, 1, cuda::mla::MlaTuning{0, 0, 32});
    bench_mla("mla repeat decode b128 hq128 8K page64", 128, 128, 8192, 64);
  }

  // Prefill/extend, all kernels in the same run: the portable mma.sync kernel (Tuning::sm90 = 0),
  // the Hopper wgmma kernels kCoop (sm90 = 1), kWarpSpecialized (2), kPingPong (3) and the A/B
  // baseline kPingPongEager (4, the session-3 ping-pong); off sm_90 they fall back to the portable
  // kernel (see the note column).
  for (int k90 : {0, 1, 2, 3, 4}) {
    cuda::attn::Tuning t;
    t.sm90 = k90;
    const std::string v = k90 == 4   ? " sm90pp-eager"
                          : k90 == 3 ? " sm90pp"
                          : k90 == 2 ? " sm90ws"
                          : k90      ? " sm90"
                                     : " portable";
    bench_prefill("prefill b1 s8K hq32 hkv8 d128 causal" + v, 1, 8192, 32, 8, 128, 0, t);
    bench_prefill("prefill b4 s4K hq32 hkv8 d128 causal" + v, 4, 4096, 32, 8, 128, 0, t);
    bench_prefill("extend b8 prefix4K +1K hq32 hkv8 page16" + v, 8, 1024, 32, 8, 128, 4096, t);
  }
  // FP8 (q, K, V e4m3, issue 13 deliverable 3) beside the bf16 ping-pong, adjacent pairs in one run
  // ("fp8ab" selects them alone); the portable kernel runs the fp8 q widened to bf16.
  {
    cuda::attn::Tuning pp, f8, port;
    pp.sm90 = 3;
    f8.sm90 = 8;
    port.sm90 = 0;
    bench_prefill("prefill b1 s8K hq32 hkv8 d128 causal fp8ab bf16-sm90pp", 1, 8192, 32, 8, 128, 0, pp);
    bench_prefill_fp8("prefill b1 s8K hq32 hkv8 d128 causal fp8ab fp8-sm90", 1, 8192, 32, 8, 128, 0, f8);
    bench_prefill("extend b8 prefix4K +1K hq32 hkv8 page16 fp8ab bf16-sm90pp", 8, 1024, 32, 8, 128, 4096, pp);
    bench_prefill_fp8("extend b8 prefix4K +1K hq32 hkv8 page16 fp8ab fp8-sm90", 8, 1024, 32, 8, 128, 4096, f8);
    bench_prefill_fp8("prefill b1 s16K hq64 hkv8 d128 causal fp8ab fp8-sm90", 1, 16384, 64, 8, 128, 0, f8);
    bench_prefill_fp8("prefill b1 s8K hq32 hkv8 d128 causal page64 fp8ab fp8-sm90", 1, 8192, 32, 8, 128, 0, f8, 64);
    bench_prefill_fp8("prefill b1 s8K hq32 hkv8 d128 causal page1 fp8ab fp8-sm90", 1, 8192, 32, 8, 128, 0, f8, 1);
    bench_prefill_fp8("prefill b1 s8K hq32 hkv8 d128 causal fp8ab fp8-portable", 1, 8192, 32, 8, 128, 0, port);
    bench_prefill_fp8("prefill b1 s8K hq32 hkv8 d128 causal repeat fp8ab fp8-sm90", 1, 8192, 32, 8, 128, 0, f8);
    bench_prefill("prefill b1 s8K hq32 hkv8 d128 causal repeat fp8ab bf16-sm90pp", 1, 8192, 32, 8, 128, 0, pp);
  }
  // The ping-pong's two K/V loaders, interleaved A B A B on the same shapes ("tmaab" selects them alone;
  // Tuning::sm90_tma 0: cp.async gather, 1: TMA boxes for whole tiles, sm90/tile_load_tma.cuh).
  {
    cuda::attn::Tuning a, bt;
    a.sm90 = bt.sm90 = 3;
    a.sm90_tma = 0;
    bt.sm90_tma = 1;
    for (int rep = 0; rep < 2; ++rep) {
      const std::string r = rep ? " r2" : " r1";
      bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d128 causal cp.async" + r, 1, 8192, 32, 8, 128, 0, a);
      bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d128 causal tma" + r, 1, 8192, 32, 8, 128, 0, bt);
    }
    bench_prefill("tmaab extend b8 prefix4K +1K hq32 hkv8 page16 cp.async", 8, 1024, 32, 8, 128, 4096, a);
    bench_prefill("tmaab extend b8 prefix4K +1K hq32 hkv8 page16 tma", 8, 1024, 32, 8, 128, 4096, bt);
    bench_prefill("tmaab prefill b1 s16K hq64 hkv8 d128 causal cp.async", 1, 16384, 64, 8, 128, 0, a);
    bench_prefill("tmaab prefill b1 s16K hq64 hkv8 d128 causal tma", 1, 16384, 64, 8, 128, 0, bt);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d128 causal page64 cp.async", 1, 8192, 32, 8, 128, 0, a, 64);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d128 causal page64 tma", 1, 8192, 32, 8, 128, 0, bt, 64);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d64 causal cp.async", 1, 8192, 32, 8, 64, 0, a);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d64 causal tma", 1, 8192, 32, 8, 64, 0, bt);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d192/128 causal cp.async", 1, 8192, 32, 8, 192, 0, a, 16, 128);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d192/128 causal tma", 1, 8192, 32, 8, 192, 0, bt, 16, 128);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d256 causal cp.async", 1, 8192, 32, 8, 256, 0, a);
    bench_prefill("tmaab prefill b1 s8K hq32 hkv8 d256 causal tma", 1, 8192, 32, 8, 256, 0, bt);
  }
  // The ping-pong's split K/V loaders beside the gather and whole-tile TMA, adjacent on each shape ("kvsplit"
  // selects them alone; Tuning::sm90_tma 0: cp.async gather, 2: K by TMA + V by the lean gather, 3: V by TMA
  // + K by the lean gather, 4: both by the lean gather, 1: whole tiles by TMA; sm90/tile_load_split.cuh).
  {
    const std::pair<int, const char*> loads[] = {
        {0, " cp.async"}, {2, " ktma"}, {3, " vtma"}, {4, " lean"}, {1, " tma"}};
    auto rows = [&](const std::string& shape, int b, int s, int h_q, int h_kv, int d, int prefix, int page, int d_v) {
      for (auto [kv, tag] : loads) {
        cuda::attn::Tuning t;
        t.sm90 = 3;
        t.sm90_tma = kv;
        bench_prefill("kvsplit " + shape + tag, b, s, h_q, h_kv, d, prefix, t, page, d_v);
      }
    };
    rows("prefill b1 s8K hq32 hkv8 d128 causal r1", 1, 8192, 32, 8, 128, 0, 16, 0);
    rows("extend b8 prefix4K +1K hq32 hkv8 page16", 8, 1024, 32, 8, 128, 4096, 16, 0);
    rows("prefill b1 s16K hq64 hkv8 d128 causal", 1, 16384, 64, 8, 128, 0, 16, 0);
    rows("prefill b1 s8K hq32 hkv8 d128 causal page32", 1, 8192, 32, 8, 128, 0, 32, 0);
    rows("prefill b1 s8K hq32 hkv8 d128 causal page64", 1, 8192, 32, 8, 128, 0, 64, 0);
    rows("prefill b1 s8K hq32 hkv8 d192/128 causal", 1, 8192, 32, 8, 192, 0, 16, 128);
    rows("prefill b1 s8K hq32 hkv8 d256 causal", 1, 8192, 32, 8, 256, 0, 16, 0);
    rows("prefill b1 s8K hq32 hkv8 d128 causal r2", 1, 8192, 32, 8, 128, 0, 16, 0);
  }
  // The in-run drift, measured (`bench_attention drift` only; 12 rounds hot, 2 s idle, 12 rounds, 5 fresh).
  bench_drift("drift pp b1x8K", 12, 2000, cuda::attn::Tuning{.sm90 = 3});
  // The ping-pong kernel on the other shapes of ../shared/ANCHORS.md and on d 64, page 64, page 1,
  // and a repeat of the first case for the spread inside the run.
  {
    cuda::attn::Tuning t;
    t.sm90 = 3;
    bench_prefill("prefill b1 s16K hq64 hkv8 d128 causal sm90pp", 1, 16384, 64, 8, 128, 0, t);
    bench_prefill("prefill b1 s8K hq32 hkv8 d64 causal sm90pp", 1, 8192, 32, 8, 64, 0, t);
    bench_prefill("prefill b1 s8K hq32 hkv8 d128 causal page64 sm90pp", 1, 8192, 32, 8, 128, 0, t, 64);
    bench_prefill("prefill b1 s8K hq32 hkv8 d128 causal page1 sm90pp", 1, 8192, 32, 8, 128, 0, t, 1);
    bench_prefill("prefill b1 s8K hq32 hkv8 d128 causal repeat sm90pp", 1, 8192, 32, 8, 128, 0, t);
    t.sm90 = 4;
    bench_prefill("prefill b1 s8K hq32 hkv8 d128 causal repeat sm90pp-eager", 1, 8192, 32, 8, 128, 0, t);
    bench_prefill("prefill b1 s16K hq64 hkv8 d128 causal sm90pp-eager", 1, 16384, 64, 8, 128, 0, t);
  }
  // Head dims (default plan: the ping-pong kernel on sm_90 for all of them; names start "hd" so
  // `bench_attention hd` runs only these). b1 x 8K causal GQA 32/8 for every dim; FA3's paper shapes
  // (16K tokens, hidden 2048 = h x d, MHA, non-causal); DeepSeek's non-absorbed MLA prefill (q/k 192,
  // v 128, 16 heads: 128 / TP 8); the portable kernel at d 256 and 192/128 for scale.
  {
    const cuda::attn::Tuning t{};
    for (int d : {64, 96, 128, 192, 256})
      bench_prefill("hd prefill b1 s8K hq32 hkv8 d" + std::to_string(d) + " causal", 1, 8192, 32, 8, d, 0, t);
    bench_prefill("hd prefill b1 s8K hq32 hkv8 d192/128 causal", 1, 8192, 32, 8, 192, 0, t, 16, 128);
    bench_prefill("hd prefill b1 s8K hq16 hkv16 d192/128 causal", 1, 8192, 16, 16, 192, 0, t, 16, 128);
    bench_prefill("hd extend b8 prefix4K +1K hq16 hkv16 d192/128", 8, 1024, 16, 16, 192, 4096, t, 16, 128);
    bench_prefill("hd prefill b1 s16K hq32 hkv32 d64 non-causal", 1, 16384, 32, 32, 64, 0, t, 16, 0, false);
    bench_prefill("hd prefill b1 s16K hq16 hkv16 d128 non-causal", 1, 16384, 16, 16, 128, 0, t, 16, 0, false);
    bench_prefill("hd prefill b1 s16K hq8 hkv8 d256 non-causal", 1, 16384, 8, 8, 256, 0, t, 16, 0, false);
    bench_prefill("hd prefill b1 s16K hq8 hkv8 d256 non-causal page128", 1, 16384, 8, 8, 256, 0, t, 128, 0, false);
    const cuda::attn::Tuning portable{.sm90 = 0};
    bench_prefill("hd prefill b1 s8K hq32 hkv8 d256 causal portable", 1, 8192, 32, 8, 256, 0, portable);
    bench_prefill("hd prefill b1 s8K hq16 hkv16 d192/128 causal portable", 1, 8192, 16, 16, 192, 0, portable, 16, 128);
    bench_prefill("hd prefill b1 s8K hq32 hkv8 d64 causal repeat", 1, 8192, 32, 8, 64, 0, t);
  }
  return 0;
} catch (const std::exception& e) {  // CUDA errors (CK) and attnserve::Error from the ops
  std::fprintf(stderr, "%s: %s\n", "bench_attention", e.what());
  return 1;
}
