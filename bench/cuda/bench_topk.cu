// Top-k speed (a benchmark, not a test): exact top-k of float rows on the GPU, CUDA events, median
// of many after warm-up, score sets rotated beyond the 60 MB L2. Target (issue 6): 128 rows x 64K,
// topk 2048 in <= 150 us (torch.topk measured 194 us on this H200, shared/ANCHORS.md).
// GB/s counts the scores read once (the floor: rows * len * 4 bytes at the copy ceiling).
//
// Usage: bench_topk [--quick] [filter-substring]
#include <string>

#include "bench_sparse_util.cuh"

using namespace attnserve;
using namespace dsa_bench;

namespace {

void bench_case(int64_t rows, int64_t width, int k, TopkTransform transform, const char* peer) {
  const std::string name = "topk " + std::to_string(k) + " of " + std::to_string(width >> 10) + "K x " +
                           std::to_string(rows) + " rows" + (transform == TopkTransform::decode ? " +decode" : "");
  if (!selected(name)) return;
  const std::size_t set_bytes = std::size_t(rows * width) * 4;
  const int sets = sets_for(set_bytes);
  Buffer scores(set_bytes * sets, Device::cuda()), lengths(std::size_t(rows) * 4, Device::cuda());
  Buffer out(std::size_t(rows) * k * 4, Device::cuda()), table;
  fill_f32(scores.data(), std::size_t(rows * width) * sets, 7);
  fill_const(lengths.data(), std::size_t(rows), int32_t(width));
  TopkArgs a{.scores = TensorView::contiguous(scores.data(), DType::f32, {rows, width}, Device::cuda()),
             .lengths = TensorView::contiguous(lengths.data(), DType::i32, {rows}, Device::cuda()),
             .out = TensorView::contiguous(out.data(), DType::i32, {rows, k}, Device::cuda()),
             .topk = k};
  if (transform == TopkTransform::decode) {
    table = Buffer(std::size_t(rows * width) * 4, Device::cuda());
    fill_index(table.data(), std::size_t(rows * width), 3, 1u << 30);
    a.transform = transform;
    a.page_table_1 = TensorView::contiguous(table.data(), DType::i32, {rows, width}, Device::cuda());
  }
  const std::size_t ws_bytes = topk_workspace_size(a, query_device_caps(Device::cuda()));
  Buffer ws(std::max<std::size_t>(ws_bytes, 16), Device::cuda());
  const double us = median_us([&](int i) {
    TopkArgs r = a;
    r.scores.data = static_cast<float*>(scores.data()) + std::size_t(i % sets) * rows * width;
    topk(r, Workspace{ws.data(), ws.bytes()}, {});
  }, 3, 30);
  report(name, us, 0, double(set_bytes), peer);
}

}  // namespace

int main(int argc, char** argv) try {
  if (!bench_start(argc, argv, "== bench_topk (median of 30, scores rotated over > 2x L2)")) return 0;
  bench_case(128, 64 << 10, 2048, TopkTransform::none, "target <= 150 us; torch.topk 194 us");
  bench_case(128, 64 << 10, 2048, TopkTransform::decode, "fused slot transform");
  bench_case(128, 16 << 10, 2048, TopkTransform::none, "torch.topk 153 us");
  bench_case(1, 64 << 10, 2048, TopkTransform::none, "torch.topk 149 us; sglang fast_topk_v2 (B200) 40.9 us");
  bench_case(1, 16 << 10, 2048, TopkTransform::none, "sglang fast_topk_v2 (B200) 15.4 us");
  bench_case(1, 4 << 10, 2048, TopkTransform::none, "sglang fast_topk_v2 (B200) 5.2 us");
  bench_case(128, 128 << 10, 2048, TopkTransform::none, "torch.topk 312 us");
  bench_case(32, 256 << 10, 2048, TopkTransform::none, "");
  bench_case(4096, 8 << 10, 2048, TopkTransform::none, "prefill rows");
  return 0;
} catch (const std::exception& e) {  // CUDA errors (DSA_CK) and attnserve::Error from the ops
  std::fprintf(stderr, "%s: %s\n", "bench_topk", e.what());
  return 1;
}
