// Memory-bound speed of the portable CUDA kernels, timed with CUDA events (a benchmark, not a
// test): copy ceiling, paged decode (page sizes 1/16/64), target verify, KV stores, MLA decode,
// and prefill as measured. Median of many runs after warm-up; K/V sets are far larger than L2
// (60 MB), and small inputs (q, the stores' sources) rotate over sets whose sum exceeds L2.
//
// Usage: bench_attention [--quick] [filter-substring]
// Prints one line per case: name, median us, GB/s (or TFLOP/s), % of the copy ceiling.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnserve/ops.h"
#include "cuda/attention/attention_api.h"
#include "cuda/mla/mla_api.h"

using namespace attnserve;

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
std::string g_filter;
double g_copy_gbs = 0;  // measured device-to-device copy (read + write), GB/s

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

// Median time in microseconds of fn(i) over `reps` timed runs after `warm` warm-ups.
double median_us(const std::function<void(int)>& fn, int warm = 3, int reps = 30) {
  if (g_quick) reps = std::min(reps, 8);
  for (int i = 0; i < warm; ++i) fn(i);
  CK(cudaDeviceSynchronize());
  Timer t;
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
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

bool selected(const std::string& name) { return g_filter.empty() || name.find(g_filter) != std::string::npos; }

void report_bw(const std::string& name, double us, double bytes, const std::string& note = "") {
  const double gbs = bytes / us * 1e-3;
  std::printf("%-52s %10.1f us %9.0f GB/s %6.1f%% of copy  floor %8.1f us %s\n", name.c_str(), us, gbs,
              100.0 * gbs / g_copy_gbs, bytes / g_copy_gbs * 1e-3, note.c_str());
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
}

// A paged decode/verify/extend problem in device memory.
struct Paged {
  int b, h_q, h_kv, d, ps, q_len, ctx, max_pages, num_pages;
  int d_v;  // v and out head dim
  Buffer q, k, v, out, lse, pt, sl, cu, ws;
  int q_sets;
  size_t q_set_elems;
};

Paged make_paged(int b, int h_q, int h_kv, int d, int ps, int q_len, int ctx, bool shuffle, uint32_t seed,
                 int d_v = 0) {
  Paged p{b, h_q, h_kv, d, ps, q_len, ctx, 0, 0, d_v > 0 ? d_v : d, {}, {}, {}, {}, {}, {}, {}, {}, {}, 0, 0};
  p.max_pages = (ctx + ps - 1) / ps;
  p.num_pages = b * p.max_pages;
  const size_t kv_elems = size_t(p.num_pages) * ps * h_kv * d, v_elems = kv_elems / d * p.d_v;
  p.k = Buffer(kv_elems * 2, Device::cuda());
  p.v = Buffer(v_elems * 2, Device::cuda());
  fill_bf16(p.k.data(), kv_elems, seed);
  fill_bf16(p.v.data(), v_elems, seed + 1);
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
  PagedAttentionArgs a{.q = TensorView::contiguous(static_cast<char*>(p.q.data()) + size_t(set) * p.q_set_elems * 2,
                                                   DType::bf16, {total_q, p.h_q, p.d}, Device::cuda()),
                       .k_cache = p.k.view(DType::bf16, {p.num_pages, p.ps, p.h_kv, p.d}),
                       .v_cache = p.v.view(DType::bf16, {p.num_pages, p.ps, p.h_kv, p.d_v}),
                       .page_table = p.pt.view(DType::i32, {p.b, p.max_pages}),
                       .cache_seqlens = p.sl.view(DType::i32, {p.b}),
                       .cu_seqlens_q = p.cu.view(DType::i32, {p.b + 1}),
                       .out = p.out.view(DType::bf16, {total_q, p.h_q, p.d_v})};
  a.lse = p.lse.view(DType::f32, {total_q, p.h_q});
  a.max_seqlen_q = p.q_len;
  a.softmax_scale = 1.f / std::sqrt(float(p.d));
  a.causal = true;
  a.deterministic = deterministic;
  return a;
}

void bench_paged(const std::string& name, int b, int h_q, int h_kv, int d, int ps, int q_len, int ctx,
                 bool shuffle = true, cuda::attn::Tuning tune = {}, bool deterministic = false) {
  if (!selected(name)) return;
  Paged p = make_paged(b, h_q, h_kv, d, ps, q_len, ctx, shuffle, 1234u + uint32_t(ps));
  PagedAttentionArgs a0 = paged_args(p, 0, deterministic);
  const auto cfg = cuda::attn::select(a0, cuda::attn::current_device_caps(), tune);
  p.ws = Buffer(std::max<size_t>(cfg.ws_bytes, 256), Device::cuda());
  const double us = median_us([&](int i) {
    cuda::attn::run(paged_args(p, i % p.q_sets, deterministic), Workspace{p.ws.data(), p.ws.bytes()}, {}, tune);
  });
  const double kv_bytes = 2.0 * b * double(ctx) * h_kv * d * 2;
  char note[128];
  std::snprintf(note, sizeof note, "[splits %d stages %d mt %d]", cfg.num_splits, cfg.stages, cfg.mt);
  report_bw(name, us, kv_bytes, note);
}

// d_v: v head dim (0: d); causal false: every row sees all keys (FA3's paper figures are non-causal).
void bench_prefill(const std::string& name, int b, int s, int h_q, int h_kv, int d, int prefix = 0,
                   cuda::attn::Tuning tune = {}, int page_size = 16, int d_v = 0, bool causal = true) {
  if (!selected(name)) return;
  const int ctx = s + prefix;
  Paged p = make_paged(b, h_q, h_kv, d, page_size, s, ctx, true, 99, d_v);
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
  report_flops(name, us, flops, bytes, note);
}

void bench_mla(const std::string& name, int b, int h_q, int ctx, int ps, int q_len = 1, cuda::mla::MlaTuning tune = {},
               bool deterministic = false) {
  if (!selected(name)) return;
  const int max_pages = (ctx + ps - 1) / ps, num_pages = b * max_pages, total_q = b * q_len;
  Buffer kv(size_t(num_pages) * ps * 576 * 2, Device::cuda());
  fill_bf16(kv.data(), size_t(num_pages) * ps * 576, 7);
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
    MlaAttentionArgs a{.q_nope = TensorView::contiguous(static_cast<char*>(qn.data()) + size_t(set) * qn_elems * 2,
                                                        DType::bf16, {total_q, h_q, 512}, Device::cuda()),
                       .q_rope = TensorView::contiguous(static_cast<char*>(qr.data()) + size_t(set) * qr_elems * 2,
                                                        DType::bf16, {total_q, h_q, 64}, Device::cuda()),
                       .kv_cache = kv.view(DType::bf16, {num_pages, ps, 1, 576}),
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
  const double bytes = double(b) * ctx * 576 * 2;
  char note[96];
  std::snprintf(note, sizeof note, "[%s hb %d splits %d stages %d] %.0f%% of copy", cuda::mla::kernel_name(cfg.kernel),
                cfg.rows_per_block, cfg.num_splits, cfg.stages, 100.0 * bytes / us * 1e-3 / g_copy_gbs);
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
    else g_filter = argv[i];
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB, smem/block opt-in %zu KB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10);
  bench_copy();

  // Decode, h_q 32 / h_kv 8 / d 128, b 64 x 8K (target >= 3.5 TB/s of K+V read).
  for (int ps : {1, 16, 64})
    bench_paged("decode b64x8K hq32 hkv8 page" + std::to_string(ps), 64, 32, 8, 128, ps, 1, 8192);
  bench_paged("decode b64x8K hq32 hkv8 page16 sequential-pages", 64, 32, 8, 128, 16, 1, 8192, false);
  bench_paged("decode b64x8K hq32 hkv8 page1 sequential-pages", 64, 32, 8, 128, 1, 1, 8192, false);
  // h_q 16 / h_kv 2, b 128 x 4K (target >= 3.0 TB/s).
  for (int ps : {1, 16, 64})
    bench_paged("decode b128x4K hq16 hkv2 page" + std::to_string(ps), 128, 16, 2, 128, ps, 1, 4096);
  // Target verify: b 64, 4K, 4 draft tokens, page 16 (target >= 3.3 TB/s).
  bench_paged("verify4 b64x4K hq32 hkv8 page16", 64, 32, 8, 128, 16, 4, 4096);
  // Deterministic mode (fixed 1024-key splits) on the first decode shape.
  bench_paged("decode b64x8K hq32 hkv8 page16 deterministic", 64, 32, 8, 128, 16, 1, 8192, true, {}, true);
  // Split-count sweep on the underfilled shape (b 128 x h_kv 2 = 256 CTAs).
  if (!g_quick)
    for (int s : {1, 2, 3, 4})
      bench_paged("sweep decode b128x4K hq16 hkv2 page16 splits" + std::to_string(s), 128, 16, 2, 128, 16, 1, 4096,
                  true, cuda::attn::Tuning{s, 0, 0});
  if (!g_quick)
    for (int st : {2})
      bench_paged("sweep decode b64x8K hq32 hkv8 page16 stages" + std::to_string(st), 64, 32, 8, 128, 16, 1, 8192, true,
                  cuda::attn::Tuning{0, st, 0});

  // A/B on one machine: shift addressing of power-of-two pages (default) vs integer division.
  for (int shifts : {1, 0}) {
    const std::string v = shifts ? " shifts" : " division";
    cuda::attn::Tuning t{0, 0, 0, shifts};
    bench_paged("ab decode b64x8K hq32 hkv8 page16" + v, 64, 32, 8, 128, 16, 1, 8192, true, t);
    bench_paged("ab decode b128x4K hq16 hkv2 page16" + v, 128, 16, 2, 128, 16, 1, 4096, true, t);
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
  for (int k90 : {0, 1}) {
    cuda::mla::MlaTuning t;
    t.sm90 = k90;
    const std::string v = k90 ? " sm90" : " portable";
    bench_mla("mla ab decode b128 hq128 8K page64" + v, 128, 128, 8192, 64, 1, t);
    bench_mla("mla ab decode b128 hq16 8K page64" + v, 128, 16, 8192, 64, 1, t);
    bench_mla("mla ab decode b128 hq32 8K page64" + v, 128, 32, 8192, 64, 1, t);
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
