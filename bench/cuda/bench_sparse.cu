// Sparse MLA speed (a benchmark, not a test), against FlashMLA's figures measured on this H200 in the
// same process (shared/ANCHORS.md, 2026-12-01): FP8-656 sparse decode (b 128, h_q 128, topk 2048: 387
// TFLOP/s), h_q 64 (316), b 32 (277); h_q 16 and 32 against FlashMLA padded to 64 heads (its time at
// h_q 64, so its useful TFLOP/s are a quarter / half of 316); bf16 sparse prefill (s_q 4096, topk 2048
// over 8K / 32K keys: 594 / 564 at h_q 128, 644 at h_q 64).
// FLOPs = 2 * rows * h_q * topk * (576 + 512). CUDA events, median after warm-up; decode pools and q
// sets far larger than L2, random slots per row.
//
// Every case prints the kernel that ran (sm80_* portable mma.sync, sm90_* Hopper wgmma) and the selector's split count
// (the top-k list of a row cut across CTAs when rows x head blocks underfill the GPU), ring depth and CTAs per SM;
// "forced" cases override them (sweeps). Times include the split combine.
//
// Usage: bench_sparse [--quick] [filter-substring]
#include <algorithm>
#include <string>

#include "bench_sparse_util.cuh"
#include "cuda/sparse_mla/sparse_mla_api.h"

using namespace attnserve;
using namespace dsa_bench;

namespace {

// FP8-656 token tails: 4 scales of 2^-4 and 64 bf16 rope values in (-1, 1).
__global__ void fp8_token_tails(uint8_t* kv, int64_t tokens) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < tokens; t += int64_t(gridDim.x) * blockDim.x) {
    uint8_t* tok = kv + t * 656;
    for (int i = 0; i < 4; ++i) reinterpret_cast<float*>(tok + 512)[i] = 0.0625f;
    for (int i = 0; i < 64; ++i) {
      const uint32_t u = __float_as_uint(unit(uint64_t(t) * 64 + i, 77));
      reinterpret_cast<uint16_t*>(tok + 528)[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
}

using Tuning = cuda::sparse_mla_op::SparseMlaTuning;

// The filter argument as alternatives separated by '|', each a name substring, or with a leading '=' the whole name
// (one device call runs the h_q 16 and 32 cases, ncu exactly one case).
bool wanted(const std::string& name) {
  if (g_filter.empty()) return true;
  std::size_t begin = 0;
  while (begin <= g_filter.size()) {
    const std::size_t end = std::min(g_filter.find('|', begin), g_filter.size());
    const std::string alt = g_filter.substr(begin, end - begin);
    if (!alt.empty() && (alt[0] == '=' ? name == alt.substr(1) : name.find(alt) != std::string::npos)) return true;
    begin = end + 1;
  }
  return false;
}

void bench_case(const std::string& what, int64_t rows, int64_t h_q, int64_t topk, int64_t pool_tokens, bool fp8,
                double peer_tflops, const std::string& peer, Tuning tune = {}, bool deterministic = false) {
  std::string name = what + " rows " + std::to_string(rows) + " h_q " + std::to_string(h_q) + " topk " +
                     std::to_string(topk) + (fp8 ? " fp8" : " bf16");
  if (tune.num_splits > 0) name += " forced splits " + std::to_string(tune.num_splits);
  if (tune.stages > 0) name += " stages " + std::to_string(tune.stages);
  if (tune.sm90 == 0) name += " portable";
  if (tune.sm90 == 1) name += " hopper";
  if (tune.small == 1) name += " small";
  if (tune.small == 0) name += " no-small";
  if (tune.dense_schedule == 1) name += " dense-schedule";
  if (tune.dense_schedule_fp8 == 1) name += " dense-schedule-fp8";
  if (deterministic) name += " deterministic";
  if (!wanted(name)) return;
  const int64_t row_bytes = fp8 ? 656 : 1152;
  Buffer kv(std::size_t(pool_tokens * row_bytes), Device::cuda());
  if (fp8) {
    fill_fp8(kv.data(), std::size_t(pool_tokens * row_bytes), 31);  // latent codes; the tails are rewritten
    fp8_token_tails<<<2048, 256>>>(static_cast<uint8_t*>(kv.data()), pool_tokens);
    DSA_CK(cudaGetLastError());
  } else {
    fill_bf16(kv.data(), std::size_t(pool_tokens * 576), 31);
  }
  const std::size_t q_set = std::size_t(rows * h_q * 576) * 2;
  const int sets = std::min(sets_for(q_set + std::size_t(rows * topk) * 4),
                            (pool_tokens * row_bytes > int64_t(kL2Bytes) * 2) ? 4 : 2);
  Buffer q(q_set * sets, Device::cuda()), idx(std::size_t(rows * topk) * 4 * sets, Device::cuda());
  Buffer out(std::size_t(rows * h_q * 512) * 2, Device::cuda()), lse(std::size_t(rows * h_q) * 4, Device::cuda());
  fill_bf16(q.data(), q_set / 2 * sets, 32);
  fill_index(idx.data(), std::size_t(rows * topk) * sets, 33, uint32_t(pool_tokens));
  SparseMlaArgs a{.q = TensorView::contiguous(q.data(), DType::bf16, {rows, h_q, 576}, Device::cuda()),
                  .kv = fp8 ? TensorView::contiguous(kv.data(), DType::u8, {pool_tokens, 656}, Device::cuda())
                            : TensorView::contiguous(kv.data(), DType::bf16, {pool_tokens, 576}, Device::cuda()),
                  .indices = TensorView::contiguous(idx.data(), DType::i32, {rows, topk}, Device::cuda()),
                  .out = TensorView::contiguous(out.data(), DType::bf16, {rows, h_q, 512}, Device::cuda())};
  a.lse = TensorView::contiguous(lse.data(), DType::f32, {rows, h_q}, Device::cuda());
  a.softmax_scale = 0.1352337f;
  a.deterministic = deterministic;
  const auto cfg = cuda::sparse_mla_op::select(a, query_device_caps(Device::cuda()), tune);
  Buffer ws(std::max<std::size_t>(cfg.ws_bytes, 16), Device::cuda());
  const double us = median_us(
      [&](int i) {
        SparseMlaArgs r = a;
        r.q.data = static_cast<uint8_t*>(q.data()) + std::size_t(i % sets) * q_set;
        r.indices.data = static_cast<int32_t*>(idx.data()) + std::size_t(i % sets) * rows * topk;
        cuda::sparse_mla_op::run(r, Workspace{ws.data(), ws.bytes()}, {}, tune);
      },
      3, 20);
  const double flops = 2.0 * double(rows) * double(h_q) * double(topk) * (576 + 512);
  const double bytes = double(rows) * topk * row_bytes + double(q_set) + double(rows * h_q * 512) * 2;
  char note[256];
  std::snprintf(note, sizeof note, "%s splits %d (x%d tiles) stages %d ctas/SM %d | %.2fx of %s (%.0f TFLOP/s)",
                cuda::sparse_mla_op::kernel_name(cfg.kernel), cfg.num_splits, cfg.split_tiles, cfg.stages,
                cfg.ctas_per_sm, flops / us * 1e-6 / peer_tflops, peer.c_str(), peer_tflops);
  report(name, us, flops, bytes, note);
}

}  // namespace

int main(int argc, char** argv) try {
  if (!bench_start(argc, argv, "== bench_sparse (median; KV bytes = rows * topk * (656 | 1152))")) return 0;
  const int64_t pool = int64_t(1) << 20;  // 1M tokens: 688 MB (FP8) / 1.2 GB (bf16)
  bench_case("sparse decode", 128, 128, 2048, pool, true, 387, "FlashMLA");
  bench_case("sparse decode", 128, 64, 2048, pool, true, 316, "FlashMLA");
  bench_case("sparse decode", 128, 32, 2048, pool, true, 316.0 / 2, "FlashMLA padded to 64 heads");
  bench_case("sparse decode", 128, 16, 2048, pool, true, 316.0 / 4, "FlashMLA padded to 64 heads");
  bench_case("sparse decode (b 64, s_q 2)", 128, 128, 2048, pool, true, 387, "FlashMLA");
  bench_case("sparse decode", 32, 128, 2048, pool, true, 277, "FlashMLA");
  bench_case("sparse decode", 128, 128, 2048, pool, false, 246, "FA3 qv, page-1 table");
  bench_case("sparse decode", 128, 16, 2048, pool, false, 45, "FA3 qv, page-1 table");
  bench_case("sparse prefill s_kv 8K", 4096, 128, 2048, 8192, false, 594, "FlashMLA");
  bench_case("sparse prefill s_kv 32K", 4096, 128, 2048, 32768, false, 564, "FlashMLA");
  bench_case("sparse prefill s_kv 8K", 4096, 64, 2048, 8192, false, 644, "FlashMLA");
  // The two kernels on the Hopper kernel's shapes (h_q 64 / 128): portable mma.sync vs wgmma.
  for (int k : {0, 1}) {
    const Tuning t{.sm90 = k};
    bench_case("sparse decode", 128, 128, 2048, pool, true, 387, "FlashMLA", t);
    bench_case("sparse decode", 128, 64, 2048, pool, true, 316, "FlashMLA", t);
    bench_case("sparse decode", 32, 128, 2048, pool, true, 277, "FlashMLA", t);
    bench_case("sparse prefill s_kv 8K", 4096, 128, 2048, 8192, false, 594, "FlashMLA", t);
    bench_case("sparse prefill s_kv 8K", 4096, 64, 2048, 8192, false, 644, "FlashMLA", t);
  }
  // Session 9 A/B (filter "s9-dense-ab" selects exactly these rows): the Hopper kernel (sm90_bf16) against the
  // sparse kernel on the dense MLA decode kernel's schedule (sm90_bf16_dense, opt-in dense_schedule), adjacent
  // (the FP8 rows after them: sm90_fp8 against sm90_fp8_dense).
  for (int d : {0, 1}) {
    const Tuning t{.sm90 = 1, .dense_schedule = d};
    bench_case("s9-dense-ab sparse prefill s_kv 8K", 4096, 128, 2048, 8192, false, 594, "FlashMLA", t);
  }
  for (int d : {0, 1}) {
    const Tuning t{.sm90 = 1, .dense_schedule = d};
    bench_case("s9-dense-ab sparse prefill s_kv 8K", 4096, 64, 2048, 8192, false, 644, "FlashMLA", t);
  }
  for (int d : {0, 1}) {
    const Tuning t{.sm90 = 1, .dense_schedule = d};
    bench_case("s9-dense-ab sparse prefill s_kv 32K", 4096, 128, 2048, 32768, false, 564, "FlashMLA", t);
  }
  for (int d : {0, 1}) {
    const Tuning t{.sm90 = 1, .dense_schedule = d};
    bench_case("s9-dense-ab sparse decode", 128, 128, 2048, pool, false, 246, "FA3 qv, page-1 table", t);
  }
  // ... and over the FP8-656 cache: sm90_fp8 against sm90_fp8_dense (opt-in dense_schedule_fp8).
  for (int d : {0, 1}) {
    const Tuning t{.sm90 = 1, .dense_schedule_fp8 = d};
    bench_case("s9-dense-ab sparse decode", 128, 128, 2048, pool, true, 387, "FlashMLA", t);
  }
  for (int d : {0, 1}) {
    const Tuning t{.sm90 = 1, .dense_schedule_fp8 = d};
    bench_case("s9-dense-ab sparse decode", 128, 64, 2048, pool, true, 316, "FlashMLA", t);
  }
  for (int d : {0, 1}) {
    const Tuning t{.sm90 = 1, .dense_schedule_fp8 = d};
    bench_case("s9-dense-ab sparse decode", 32, 128, 2048, pool, true, 277, "FlashMLA", t);
  }
  // Split-K sweeps. h_q 16 (DeepSeek-V3.2 at TP 8): splits 1 / 2 / 4 / 8 at the selector's ring, then the
  // two halves of the change apart: the 2-stage ring unsplit (still one CTA per row: 128 CTAs), and
  // 2 splits with the deep ring (one CTA per SM).
  for (int s : {1, 2, 4, 8})
    bench_case("sparse decode", 128, 16, 2048, pool, true, 316.0 / 4, "FlashMLA padded to 64 heads", {s, 0});
  bench_case("sparse decode", 128, 16, 2048, pool, true, 316.0 / 4, "FlashMLA padded to 64 heads", {1, 2});
  bench_case("sparse decode", 128, 16, 2048, pool, true, 316.0 / 4, "FlashMLA padded to 64 heads", {2, 7});
  bench_case("sparse decode", 64, 16, 2048, pool, true, 316.0 / 4, "FlashMLA padded to 64 heads");
  // 256 rows x h_q 16 fill the GPU unsplit (deep ring, one CTA per SM, 2 waves); the 2-stage ring runs
  // them as one wave of two CTAs per SM: whether the unsplit HB 16 default should change too.
  bench_case("sparse decode", 256, 16, 2048, pool, true, 316.0 / 4, "FlashMLA padded to 64 heads");
  bench_case("sparse decode", 256, 16, 2048, pool, true, 316.0 / 4, "FlashMLA padded to 64 heads", {1, 2});
  // Small head counts (DeepSeek-V3.2 under 8- / 4-way TP): the small-head FP8 kernel (the default on sm_90)
  // against the portable kernel and the 64-head Hopper kernel on the same shapes, its deterministic mode
  // (a split count of top-k alone), ring depths 2 / 3 / 4 (HB 16: 3 and 4 run one CTA per SM), and a few batch sizes.
  for (int64_t h : {16, 32}) {
    const double peer = 316.0 * double(h) / 64;
    bench_case("sparse decode", 128, h, 2048, pool, true, peer, "FlashMLA padded to 64 heads", {.sm90 = 0});
    bench_case("sparse decode", 128, h, 2048, pool, true, peer, "FlashMLA padded to 64 heads", {.sm90 = 1});
    bench_case("sparse decode", 128, h, 2048, pool, true, peer, "FlashMLA padded to 64 heads", {}, true);
    for (int st : {2, 3, 4})
      bench_case("sparse decode", 128, h, 2048, pool, true, peer, "FlashMLA padded to 64 heads", {.stages = st});
    for (int64_t rows : {32, 64, 256}) {
      bench_case("sparse decode", rows, h, 2048, pool, true, peer, "FlashMLA padded to 64 heads");
      bench_case("sparse decode", rows, h, 2048, pool, true, peer, "FlashMLA padded to 64 heads", {}, true);
    }
  }
  // Where the small-head kernel's time goes: the same h_q 16 call over pools of 32K tokens (21 MB: L2-resident)
  // to 4M (2.7 GB). Session 5 found the per-tile time independent of ring depth and HBM load (NOTES.md);
  // a time independent of the pool too would confirm that the limit is inside the SM.
  for (int64_t tokens : {int64_t(1) << 15, int64_t(1) << 18, int64_t(1) << 22})
    bench_case("sparse decode (pool " + std::to_string(tokens >> 10) + "K tokens)", 128, 16, 2048, tokens, true,
               316.0 / 4, "FlashMLA padded to 64 heads");
  // h_q 128 at 32 rows (64 CTAs of HB 64): splits 1 / 2 / 4.
  for (int s : {1, 2, 4}) bench_case("sparse decode", 32, 128, 2048, pool, true, 277, "FlashMLA", {s, 0});
  return 0;
} catch (const std::exception& e) {  // CUDA errors (DSA_CK) and attnserve::Error from the ops
  std::fprintf(stderr, "%s: %s\n", "bench_sparse", e.what());
  return 1;
}
