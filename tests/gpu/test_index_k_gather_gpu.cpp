// gather_index_k on CUDA against the CPU gather: random pool bytes, random slots (i32 / i64, page sizes
// 1, 5, 64), out-of-range slots giving a zero key and scale 0, every access width (16-, 4- and 1-byte
// paths, chosen by alignment), two runs with identical bits, and a replay of a captured CUDA graph.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "attnserve/cache_formats.h"
#include "attnserve/ops/index_k_gather.h"
#include "gpu_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr int64_t kDim = IndexerKeyLayout::kDim;

HostTensor random_pool(int page_size, int64_t num_pages, std::mt19937_64& g) {
  HostTensor pool(DType::u8, {num_pages, int64_t(IndexerKeyLayout::bytes_per_page(page_size))});
  for (auto& b : pool.bytes) b = uint8_t(g() & 0x7f);  // finite scales (no NaN/inf bit patterns)
  return pool;
}

// n slots, mostly in range; every 7th one out of range (negative, == num_slots, or far beyond).
std::vector<int64_t> random_slots(std::mt19937_64& g, int64_t n, int64_t num_slots, DType t) {
  std::vector<int64_t> s(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    s[size_t(j)] = int64_t(g() % uint64_t(num_slots));
    if (j % 7 == 3) {
      const int64_t far = t == DType::i64 ? (int64_t(1) << 40) : int64_t(2000000000);
      const int64_t bad[] = {-1, num_slots, far, -far};
      s[size_t(j)] = bad[(j / 7) % 4];
    }
  }
  return s;
}

HostTensor make_slots(const std::vector<int64_t>& v, DType t) {
  HostTensor s(t, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::i64) s.ptr<int64_t>()[i] = v[i];
    else s.ptr<int32_t>()[i] = int32_t(v[i]);
  }
  return s;
}

// The expected output of the CUDA gather, as [n, row_bytes] key rows (only the first 128 bytes of a row
// are written) and [n] scales: the CPU gather for in-range slots, zeros and scale 0 for the others.
struct Expected {
  HostTensor k, scale;
};
Expected cpu_expected(const HostTensor& pool, const std::vector<int64_t>& slots, int page_size,
                      const HostTensor& k_like, const HostTensor& scale_like) {
  const int64_t n = int64_t(slots.size()), num_slots = pool.view.size(0) * page_size;
  std::vector<int64_t> clamped = slots;
  for (auto& s : clamped) s = (s >= 0 && s < num_slots) ? s : 0;
  HostTensor s = make_slots(clamped, DType::i64);
  Expected e{k_like, scale_like};
  gather_index_k({.index_k_cache = pool.view,
                  .slots = s.view,
                  .out_k = e.k.view.slice(1, 0, kDim),
                  .out_scale = e.scale.view,
                  .page_size = page_size});
  for (int64_t j = 0; j < n; ++j) {
    if (slots[size_t(j)] >= 0 && slots[size_t(j)] < num_slots) continue;
    std::memset(e.k.bytes.data() + j * e.k.view.stride(0), 0, kDim);
    e.scale.ptr<float>()[j] = 0.f;
  }
  return e;
}

// row_bytes: the out_k buffer's row pitch (128: 16-byte path; 132: 4-byte; 129: 1-byte).
void run_case(int page_size, DType slot_type, int64_t row_bytes, std::mt19937_64& g) {
  SCOPED_TRACE("page_size " + std::to_string(page_size) + " slots " + std::string(dtype_name(slot_type)) +
               " row_bytes " + std::to_string(row_bytes));
  const int64_t num_pages = 4096 / page_size + 3, n = 1000;
  HostTensor pool = random_pool(page_size, num_pages, g);
  const std::vector<int64_t> slots = random_slots(g, n, num_pages * page_size, slot_type);
  HostTensor s = make_slots(slots, slot_type);
  HostTensor k_host(DType::u8, {n, row_bytes}), scale_host(DType::f32, {n});
  poison(k_host);
  poison(scale_host);
  const Expected want = cpu_expected(pool, slots, page_size, k_host, scale_host);

  DeviceTensor dpool(pool), ds(s), dk(k_host), dscale(scale_host);
  HostTensor first_k, first_scale;
  for (int run = 0; run < 2; ++run) {
    dk.upload(k_host);  // poisoned again
    dscale.upload(scale_host);
    gather_index_k({.index_k_cache = dpool.view,
                    .slots = ds.view,
                    .out_k = dk.view.slice(1, 0, kDim).with_dtype(DType::fp8_e4m3),
                    .out_scale = dscale.view,
                    .page_size = page_size});
    stream_synchronize({});
    HostTensor got_k = dk.download(k_host), got_scale = dscale.download(scale_host);
    EXPECT_EQ(first_diff(got_k, want.k), -1) << "keys differ from the CPU gather (byte offset)";
    EXPECT_EQ(first_diff(got_scale, want.scale), -1) << "scales differ from the CPU gather (byte offset)";
    if (run == 0) {
      first_k = got_k;
      first_scale = got_scale;
    } else {
      EXPECT_TRUE(same_bytes(got_k, first_k) && same_bytes(got_scale, first_scale)) << "second run differs";
    }
  }
}

}  // namespace

TEST(GpuGatherIndexK, MatchesCpuForPageSizesAndSlotTypes) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int page_size : {1, 5, 64})
    for (DType t : {DType::i32, DType::i64}) run_case(page_size, t, kDim, g);
}

TEST(GpuGatherIndexK, NarrowAccessPathsMatchCpu) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t row_bytes : {int64_t(132), int64_t(129)})
    for (int page_size : {1, 64}) run_case(page_size, DType::i32, row_bytes, g);
}

TEST(GpuGatherIndexK, OutOfRangeSlotsGiveZeros) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  const int page_size = 64;
  HostTensor pool = random_pool(page_size, 2, g);
  const std::vector<int64_t> slots = {-1, 0, 128, 127, int64_t(1) << 33, -(int64_t(1) << 33)};
  HostTensor s = make_slots(slots, DType::i64);
  const int64_t n = int64_t(slots.size());
  HostTensor k_host(DType::fp8_e4m3, {n, kDim}), scale_host(DType::f32, {n});
  poison(k_host);
  poison(scale_host);
  DeviceTensor dpool(pool), ds(s), dk(k_host), dscale(scale_host);
  gather_index_k({.index_k_cache = dpool.view,
                  .slots = ds.view,
                  .out_k = dk.view,
                  .out_scale = dscale.view,
                  .page_size = page_size});
  HostTensor got_k = dk.download(k_host), got_scale = dscale.download(scale_host);
  for (int64_t j : {0, 2, 4, 5}) {
    for (int64_t d = 0; d < kDim; ++d) ASSERT_EQ(got_k.bytes[size_t(j * kDim + d)], 0) << "row " << j;
    ASSERT_EQ(got_scale.ptr<float>()[j], 0.f) << "row " << j;
  }
  for (int64_t j : {1, 3}) {
    ASSERT_EQ(std::memcmp(got_k.bytes.data() + j * kDim,
                          pool.bytes.data() + IndexerKeyLayout::key_offset(slots[size_t(j)], page_size), kDim),
              0);
    ASSERT_EQ(std::memcmp(got_scale.bytes.data() + j * 4,
                          pool.bytes.data() + IndexerKeyLayout::scale_offset(slots[size_t(j)], page_size), 4),
              0);
  }
}

// Captured once, replayed after the slots change on the device: the graph reads the new slots.
TEST(GpuGatherIndexK, GraphReplayReadsNewSlots) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  const int page_size = 64;
  const int64_t num_pages = 40, n = 500;
  HostTensor pool = random_pool(page_size, num_pages, g);
  std::vector<int64_t> slots = random_slots(g, n, num_pages * page_size, DType::i32);
  HostTensor s = make_slots(slots, DType::i32);
  HostTensor k_host(DType::u8, {n, kDim}), scale_host(DType::f32, {n});
  poison(k_host);
  poison(scale_host);
  DeviceTensor dpool(pool), ds(s), dk(k_host), dscale(scale_host);

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  gather_index_k({.index_k_cache = dpool.view,
                  .slots = ds.view,
                  .out_k = dk.view,
                  .out_scale = dscale.view,
                  .page_size = page_size},
                 Stream{stream});
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    if (replay == 1) {
      slots = random_slots(g, n, num_pages * page_size, DType::i32);
      s = make_slots(slots, DType::i32);
      ds.upload(s);
    }
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const Expected want = cpu_expected(pool, slots, page_size, k_host, scale_host);
    EXPECT_EQ(first_diff(dk.download(k_host), want.k), -1) << "replay " << replay;
    EXPECT_EQ(first_diff(dscale.download(scale_host), want.scale), -1) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}
