// KV stores on CUDA against the CPU stores: the whole cache (random initial bytes) must match bit
// for bit after the store, and two runs must give identical bytes.
#include <algorithm>
#include <numeric>

#include "attnserve/ops/kv_store.h"
#include "gpu_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// n distinct slots out of num_slots, shuffled.
HostTensor random_slots(std::mt19937_64& g, int64_t n, int64_t num_slots, DType t) {
  std::vector<int64_t> all(static_cast<size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), g);
  HostTensor loc(t, {n});
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::i64) loc.ptr<int64_t>()[i] = all[size_t(i)];
    else loc.ptr<int32_t>()[i] = int32_t(all[size_t(i)]);
  }
  return loc;
}

void fill_bytes(HostTensor& t, std::mt19937_64& g) {
  for (auto& b : t.bytes) b = uint8_t(g() & 0x7f);  // finite for every float type (no NaN/inf patterns)
}

struct KvCase {
  DType in = DType::bf16, cache = DType::bf16, loc = DType::i32;
  int64_t n = 300, h_kv = 8, d = 128, d_v = 128, num_slots = 1000;
  float k_scale = 1.f, v_scale = 1.f;
};

void run_kv_case(const KvCase& c, std::mt19937_64& g) {
  HostTensor k(c.in, {c.n, c.h_kv, c.d}), v(c.in, {c.n, c.h_kv, c.d_v});
  fill_uniform(k, g, -3.f, 3.f);
  fill_uniform(v, g, -3.f, 3.f);
  HostTensor kc(c.cache, {c.num_slots, c.h_kv, c.d}), vc(c.cache, {c.num_slots, c.h_kv, c.d_v});
  fill_bytes(kc, g);
  fill_bytes(vc, g);
  HostTensor loc = random_slots(g, c.n, c.num_slots, c.loc);

  HostTensor kc_ref = kc, vc_ref = vc;
  set_kv_buffer({.k = k.view,
                 .v = v.view,
                 .k_cache = kc_ref.view,
                 .v_cache = vc_ref.view,
                 .loc = loc.view,
                 .k_scale = c.k_scale,
                 .v_scale = c.v_scale});

  DeviceTensor dk(k), dv(v), dkc(kc), dvc(vc), dloc(loc);
  HostTensor first_k, first_v;
  for (int run = 0; run < 2; ++run) {
    dkc.upload(kc);
    dvc.upload(vc);
    set_kv_buffer({.k = dk.view,
                   .v = dv.view,
                   .k_cache = dkc.view,
                   .v_cache = dvc.view,
                   .loc = dloc.view,
                   .k_scale = c.k_scale,
                   .v_scale = c.v_scale});
    HostTensor gk = dkc.download(kc), gv = dvc.download(vc);
    EXPECT_EQ(first_diff(gk, kc_ref), -1) << "k_cache differs from the CPU store";
    EXPECT_EQ(first_diff(gv, vc_ref), -1) << "v_cache differs from the CPU store";
    if (run == 0) {
      first_k = gk;
      first_v = gv;
    } else {
      EXPECT_TRUE(same_bytes(gk, first_k) && same_bytes(gv, first_v)) << "second run differs";
    }
  }
}

}  // namespace

TEST(GpuKvStore, AllInputAndCacheDtypes) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (DType in : {DType::bf16, DType::f16, DType::f32}) {
    for (DType cache : {DType::bf16, DType::f16, DType::fp8_e4m3}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + std::string(dtype_name(cache)));
      KvCase c;
      c.in = in;
      c.cache = cache;
      if (cache == DType::fp8_e4m3) {
        c.k_scale = 0.37f;
        c.v_scale = 1.9f;
      }
      run_kv_case(c, g);
    }
  }
}

TEST(GpuKvStore, I64SlotsAndUnequalHeadDims) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  KvCase c;
  c.loc = DType::i64;
  c.d = 192;
  c.d_v = 128;
  c.h_kv = 2;
  run_kv_case(c, g);
}

TEST(GpuKvStore, ScalarPathOddHeadDim) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  KvCase c;
  c.d = 36;
  c.d_v = 20;
  c.h_kv = 3;
  c.cache = DType::fp8_e4m3;
  c.k_scale = 0.5f;
  c.v_scale = 0.25f;
  run_kv_case(c, g);
}

TEST(GpuKvStore, OutOfRangeSlotIsSkipped) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  const int64_t n = 16, h = 2, d = 64, slots = 40;
  HostTensor k(DType::bf16, {n, h, d}), v(DType::bf16, {n, h, d});
  fill_uniform(k, g);
  fill_uniform(v, g);
  HostTensor kc(DType::bf16, {slots, h, d}), vc(DType::bf16, {slots, h, d});
  fill_bytes(kc, g);
  fill_bytes(vc, g);
  HostTensor loc = random_slots(g, n, slots, DType::i32);
  // Reference: the CPU store of every token but the bad one.
  HostTensor kc_ref = kc, vc_ref = vc;
  HostTensor k_ok(DType::bf16, {n - 1, h, d}), v_ok(DType::bf16, {n - 1, h, d}), loc_ok(DType::i32, {n - 1});
  std::memcpy(k_ok.bytes.data(), k.bytes.data(), size_t((n - 1) * h * d * 2));
  std::memcpy(v_ok.bytes.data(), v.bytes.data(), size_t((n - 1) * h * d * 2));
  std::memcpy(loc_ok.bytes.data(), loc.bytes.data(), size_t((n - 1) * 4));
  set_kv_buffer({.k = k_ok.view, .v = v_ok.view, .k_cache = kc_ref.view, .v_cache = vc_ref.view, .loc = loc_ok.view});
  loc.ptr<int32_t>()[n - 1] = int32_t(slots + 5);
  DeviceTensor dk(k), dv(v), dkc(kc), dvc(vc), dloc(loc);
  set_kv_buffer({.k = dk.view, .v = dv.view, .k_cache = dkc.view, .v_cache = dvc.view, .loc = dloc.view});
  EXPECT_EQ(first_diff(dkc.download(kc), kc_ref), -1);
  EXPECT_EQ(first_diff(dvc.download(vc), vc_ref), -1);
}

TEST(GpuKvStore, MlaBf16AndFp8_656) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (DType in : {DType::bf16, DType::f32}) {
    for (DType cache : {DType::bf16, DType::u8}) {
      for (DType lt : {DType::i32, DType::i64}) {
        SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + std::string(dtype_name(cache)) + " loc " +
                     std::string(dtype_name(lt)));
        const int64_t n = 257, slots = 700, width = cache == DType::bf16 ? 576 : 656;
        HostTensor kv_c(in, {n, 512}), k_rope(in, {n, 64});
        fill_uniform(kv_c, g, -20.f, 20.f);
        fill_uniform(k_rope, g, -2.f, 2.f);
        for (int i = 128; i < 256; ++i) kv_c.set(3 * 512 + i, 0.f);  // an all-zero tile (scale floor)
        for (int i = 0; i < 128; ++i) kv_c.set(5 * 512 + i, kv_c.get(5 * 512 + i) * 1e-3f);  // a small tile
        HostTensor c(cache, {slots, width});
        fill_bytes(c, g);
        HostTensor loc = random_slots(g, n, slots, lt);
        HostTensor ref = c;
        set_mla_kv_buffer({.kv_c = kv_c.view, .k_rope = k_rope.view, .cache = ref.view, .loc = loc.view});
        DeviceTensor dkv(kv_c), dr(k_rope), dc(c), dl(loc);
        HostTensor first;
        for (int run = 0; run < 2; ++run) {
          dc.upload(c);
          set_mla_kv_buffer({.kv_c = dkv.view, .k_rope = dr.view, .cache = dc.view, .loc = dl.view});
          HostTensor got = dc.download(c);
          EXPECT_EQ(first_diff(got, ref), -1);
          if (run == 0) first = got;
          else EXPECT_TRUE(same_bytes(got, first));
        }
      }
    }
  }
}

TEST(GpuKvStore, IndexerKeys) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (DType in : {DType::bf16, DType::f32}) {
    for (int page_size : {1, 64}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + " page " + std::to_string(page_size));
      const int64_t n = 300, pages = 1024 / page_size;
      HostTensor k(in, {n, 128});
      fill_uniform(k, g, -5.f, 5.f);
      for (int i = 0; i < 128; ++i) k.set(7 * 128 + i, 0.f);  // all-zero row
      HostTensor pool(DType::u8, {pages, page_size * 132});
      fill_bytes(pool, g);
      HostTensor loc = random_slots(g, n, pages * page_size, DType::i32);
      HostTensor ref = pool;
      set_index_k({.k = k.view, .index_k_cache = ref.view, .loc = loc.view, .page_size = page_size});
      DeviceTensor dk(k), dp(pool), dl(loc);
      HostTensor first;
      for (int run = 0; run < 2; ++run) {
        dp.upload(pool);
        set_index_k({.k = dk.view, .index_k_cache = dp.view, .loc = dl.view, .page_size = page_size});
        HostTensor got = dp.download(pool);
        EXPECT_EQ(first_diff(got, ref), -1);
        if (run == 0) first = got;
        else EXPECT_TRUE(same_bytes(got, first));
      }
    }
  }
}
