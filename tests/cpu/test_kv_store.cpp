// KV stores (set_kv_buffer, set_mla_kv_buffer, set_index_k) on the CPU against brute-force fp64
// references: written rows match, every other byte keeps its poison, bad slots/arguments are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "attnserve/cache_formats.h"
#include "attnserve/kv_cache.h"
#include "attnserve/ops/kv_store.h"
#include "common/test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an attnserve::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }
}

void poison_view(const TensorView& t) { std::memset(t.data, 0xff, t.nbytes()); }

bool all_poison(const uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != 0xff) return false;
  return true;
}

// n distinct slots in [0, num_slots), in random order, always including the first and last slot.
HostTensor random_loc(std::mt19937_64& g, int64_t n, int64_t num_slots, DType dtype) {
  std::vector<int64_t> all(static_cast<std::size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin() + 1, all.end() - 1, g);
  std::vector<int64_t> pick{0, num_slots - 1};
  for (int64_t i = 1; int64_t(pick.size()) < n; ++i) pick.push_back(all[std::size_t(i)]);
  pick.resize(std::size_t(n));
  std::shuffle(pick.begin(), pick.end(), g);
  HostTensor loc(dtype, {n});
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::i32) loc.ptr<int32_t>()[i] = int32_t(pick[std::size_t(i)]);
    else loc.ptr<int64_t>()[i] = pick[std::size_t(i)];
  }
  return loc;
}

int64_t slot_at(const HostTensor& loc, int64_t i) { return cpu::load_index(loc.bytes.data(), loc.view.dtype, i); }

// Smallest power of two s with max(amax, 1e-4) / s <= 448, by brute force in double.
double ref_pow2_scale(double amax) {
  double m = std::max(amax, double(1e-4f)), s = std::ldexp(1.0, -60);
  while (m / s > 448.0) s *= 2;
  return s;
}

// Relative rounding bound of a cache dtype plus its absolute floor (subnormal step / 2).
double abs_floor(DType t) {
  switch (t) {
    case DType::fp8_e4m3: return std::ldexp(1.0, -10);
    case DType::f16: return std::ldexp(1.0, -25);
    default: return 0;
  }
}

// The bits a single float->dtype rounding gives (the same-precision result the store must match).
uint64_t cast_bits(float x, DType t) {
  alignas(8) uint8_t bytes[8] = {};  // typed stores into raw bytes, then memcpy: no aliasing surprises
  cpu::store_from_float(bytes, t, 0, x);
  uint64_t b = 0;
  std::memcpy(&b, bytes, dtype_size(t));
  return b;
}
uint64_t load_bits(const void* base, DType t, int64_t i) {
  uint64_t b = 0;
  std::memcpy(&b, static_cast<const uint8_t*>(base) + i * int64_t(dtype_size(t)), dtype_size(t));
  return b;
}

}  // namespace

// ---- set_kv_buffer

TEST(KvStore, MhaMatchesReference) {
  auto g = rng_for_test();
  const int64_t n = 37, h = 4, d = 64, d_v = 48, slots = 128;
  int combo = 0;
  for (DType cache_dt : {DType::bf16, DType::f16, DType::fp8_e4m3}) {
    for (DType in_dt : {DType::f32, DType::bf16, DType::f16}) {
      DType loc_dt = (combo++ % 2) ? DType::i64 : DType::i32;
      // Scales matter only for fp8; a bf16/f16 cache ignores them (checked by passing non-1 values).
      const float k_scale = 0.37f, v_scale = 1.9f;
      MhaKvPool pool(2, slots, h, d, d_v, cache_dt, Device::cpu(), k_scale, v_scale);
      HostTensor k(in_dt, {n, h, d}), v(in_dt, {n, h, d_v});
      fill_uniform(k, g, -4.f, 4.f);
      fill_uniform(v, g, -4.f, 4.f);
      HostTensor loc = random_loc(g, n, slots, loc_dt);
      for (int layer = 0; layer < 2; ++layer) poison_view(pool.k(layer)), poison_view(pool.v(layer));
      set_kv_buffer({.k = k.view,
                     .v = v.view,
                     .k_cache = pool.k(1),
                     .v_cache = pool.v(1),
                     .loc = loc.view,
                     .k_scale = pool.k_scale(1),
                     .v_scale = pool.v_scale(1)});

      const bool fp8 = cache_dt == DType::fp8_e4m3;
      std::vector<char> written(slots, 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t s = slot_at(loc, i);
        written[std::size_t(s)] = 1;
        for (auto [src, cache, dim, scale] : {std::tuple{&k, pool.k(1), d, k_scale}, {&v, pool.v(1), d_v, v_scale}}) {
          for (int64_t hh = 0; hh < h; ++hh)
            for (int64_t j = 0; j < dim; ++j) {
              const float x = src->get((i * h + hh) * dim + j);
              const double ref = fp8 ? double(x) / double(scale) : double(x);
              const int64_t off = (s * h + hh) * dim + j;
              const double got = cpu::load_as_float(cache.data, cache_dt, off);
              ASSERT_LE(std::fabs(got - ref), unit_roundoff(cache_dt) * std::fabs(ref) + abs_floor(cache_dt))
                  << dtype_name(cache_dt) << " <- " << dtype_name(in_dt) << " token " << i << " j " << j;
              ASSERT_EQ(load_bits(cache.data, cache_dt, off), cast_bits(fp8 ? x / scale : x, cache_dt))
                  << "token " << i << " head " << hh << " j " << j;
            }
        }
      }
      for (int64_t s = 0; s < slots; ++s) {
        if (written[std::size_t(s)]) continue;
        const auto* kb = static_cast<const uint8_t*>(pool.k(1).data) + s * h * d * int64_t(dtype_size(cache_dt));
        const auto* vb = static_cast<const uint8_t*>(pool.v(1).data) + s * h * d_v * int64_t(dtype_size(cache_dt));
        ASSERT_TRUE(all_poison(kb, std::size_t(h * d) * dtype_size(cache_dt))) << "slot " << s << " was written";
        ASSERT_TRUE(all_poison(vb, std::size_t(h * d_v) * dtype_size(cache_dt))) << "slot " << s << " was written";
      }
      EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.k(0).data), pool.k(0).nbytes()));  // other layer
      EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.v(0).data), pool.v(0).nbytes()));
    }
  }
}

TEST(KvStore, MhaPagedCacheViewAndEmptyBatch) {
  // The flat view of a paged pool is what the store takes; n = 0 writes nothing.
  MhaKvPool pool(1, 16, 1, 8, 8, DType::bf16, Device::cpu());
  poison_view(pool.k(0));
  poison_view(pool.v(0));
  HostTensor k(DType::f32, {0, 1, 8}), v(DType::f32, {0, 1, 8}), loc(DType::i32, {0});
  set_kv_buffer({.k = k.view, .v = v.view, .k_cache = pool.k(0), .v_cache = pool.v(0), .loc = loc.view});
  EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.k(0).data), pool.k(0).nbytes()));
}

TEST(KvStore, MhaOutOfRangeSlotIsAnErrorAndWritesNothing) {
  auto g = rng_for_test();
  const int64_t n = 6, slots = 32;
  MhaKvPool pool(1, slots, 2, 16, 16, DType::fp8_e4m3, Device::cpu());
  HostTensor k(DType::bf16, {n, 2, 16}), v(DType::bf16, {n, 2, 16});
  fill_uniform(k, g);
  fill_uniform(v, g);
  for (DType loc_dt : {DType::i32, DType::i64}) {
    for (int64_t bad : {slots, int64_t(-1), int64_t(1) << 33}) {
      if (loc_dt == DType::i32 && bad > INT32_MAX) continue;
      HostTensor loc = random_loc(g, n, slots, loc_dt);
      if (loc_dt == DType::i32) loc.ptr<int32_t>()[3] = int32_t(bad);
      else loc.ptr<int64_t>()[3] = bad;
      poison_view(pool.k(0));
      poison_view(pool.v(0));
      expect_error(
          [&] {
            set_kv_buffer({.k = k.view, .v = v.view, .k_cache = pool.k(0), .v_cache = pool.v(0), .loc = loc.view});
          },
          {"set_kv_buffer", "'loc'", "loc[3] = " + std::to_string(bad), "[0, 32)"});
      EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.k(0).data), pool.k(0).nbytes()));
      EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.v(0).data), pool.v(0).nbytes()));
    }
  }
}

TEST(KvStore, MhaBadArguments) {
  const int64_t n = 4;
  MhaKvPool pool(1, 16, 2, 8, 4, DType::bf16, Device::cpu());
  MhaKvPool fp8(1, 16, 2, 8, 4, DType::fp8_e4m3, Device::cpu());
  MhaKvPool f16(1, 16, 2, 8, 4, DType::f16, Device::cpu());
  HostTensor k(DType::f32, {n, 2, 8}), v(DType::f32, {n, 2, 4}), loc(DType::i32, {n});
  StoreKvArgs ok{.k = k.view, .v = v.view, .k_cache = pool.k(0), .v_cache = pool.v(0), .loc = loc.view};
  EXPECT_NO_THROW(set_kv_buffer(ok));
  auto with = [&](auto edit) {
    StoreKvArgs a = ok;
    edit(a);
    return [a] { set_kv_buffer(a); };
  };
  HostTensor k3(DType::f32, {n, 3, 8}), ki(DType::i32, {n, 2, 8}), v5(DType::f32, {n + 1, 2, 4});
  HostTensor locf(DType::f32, {n}), loc5(DType::i32, {n + 1});
  expect_error(with([&](StoreKvArgs& a) { a.k = TensorView{}; }), {"'k' is required"});
  expect_error(with([&](StoreKvArgs& a) { a.k = ki.view; }), {"'k'", "dtype i32"});
  expect_error(with([&](StoreKvArgs& a) { a.k = k3.view; }), {"'v'"});  // v's heads no longer match k
  expect_error(with([&](StoreKvArgs& a) { a.v = v5.view; }), {"'v'", "[5, 2, 4]"});
  expect_error(with([&](StoreKvArgs& a) { a.k_cache = pool.v(0); }), {"'k_cache'", "[16, 2, 4]"});
  expect_error(with([&](StoreKvArgs& a) { a.v_cache = f16.v(0); }), {"'v_cache'", "dtype f16"});
  expect_error(with([&](StoreKvArgs& a) { a.loc = locf.view; }), {"'loc'", "dtype f32"});
  expect_error(with([&](StoreKvArgs& a) { a.loc = loc5.view; }), {"'loc'", "[5]"});
  expect_error(with([&](StoreKvArgs& a) { a.k_cache = fp8.k(0), a.v_cache = fp8.v(0), a.k_scale = 0.f; }),
               {"'k_scale'"});
  expect_error(with([&](StoreKvArgs& a) { a.k_cache = fp8.k(0), a.v_cache = fp8.v(0), a.v_scale = INFINITY; }),
               {"'v_scale'"});
  TensorView strided = pool.k(0);  // non-contiguous last dim
  strided.shape[2] = 4;
  strided.strides[2] = 2;
  HostTensor k4(DType::f32, {n, 2, 4});
  expect_error(with([&](StoreKvArgs& a) { a.k = k4.view, a.k_cache = strided; }), {"'k_cache'", "contiguous"});
  TensorView on_gpu = loc.view;
  on_gpu.device = Device::cuda(0);
  expect_error(with([&](StoreKvArgs& a) { a.loc = on_gpu; }), {"different devices"});
}

// ---- set_mla_kv_buffer

TEST(KvStoreMla, Bf16CacheMatchesReference) {
  auto g = rng_for_test();
  const int64_t n = 21, slots = 64;
  for (DType in_dt : {DType::f32, DType::bf16}) {
    MlaKvPool pool(1, slots, MlaCacheFormat::bf16, Device::cpu());
    HostTensor kv_c(in_dt, {n, 512}), k_rope(in_dt, {n, 64});
    fill_uniform(kv_c, g, -3.f, 3.f);
    fill_uniform(k_rope, g, -3.f, 3.f);
    HostTensor loc = random_loc(g, n, slots, in_dt == DType::f32 ? DType::i64 : DType::i32);
    TensorView cache = pool.cache(0);
    poison_view(cache);
    set_mla_kv_buffer({.kv_c = kv_c.view, .k_rope = k_rope.view, .cache = cache, .loc = loc.view});
    std::vector<char> written(slots, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = slot_at(loc, i);
      written[std::size_t(s)] = 1;
      for (int64_t j = 0; j < 576; ++j) {
        const float x = j < 512 ? kv_c.get(i * 512 + j) : k_rope.get(i * 64 + j - 512);
        const double got = cpu::load_as_float(cache.data, DType::bf16, s * 576 + j);
        ASSERT_LE(std::fabs(got - double(x)), std::fabs(double(x)) / 256) << "token " << i << " j " << j;
        ASSERT_EQ(load_bits(cache.data, DType::bf16, s * 576 + j), cast_bits(x, DType::bf16));
      }
    }
    for (int64_t s = 0; s < slots; ++s)
      if (!written[std::size_t(s)])
        ASSERT_TRUE(all_poison(static_cast<uint8_t*>(cache.data) + s * 576 * 2, 576 * 2)) << "slot " << s;
  }
}

TEST(KvStoreMla, Fp8_656RoundTripAndZeroTile) {
  auto g = rng_for_test();
  const int64_t n = 19, slots = 48;
  std::normal_distribution<float> nd(0.f, 2.f);
  std::uniform_real_distribution<float> mag(-3.f, 3.f);
  for (DType in_dt : {DType::f32, DType::bf16}) {
    MlaKvPool pool(2, slots, MlaCacheFormat::fp8_656, Device::cpu());
    HostTensor kv_c(in_dt, {n, 512}), k_rope(in_dt, {n, 64});
    for (int64_t i = 0; i < n; ++i) {
      // Tiles of very different magnitudes, so scales differ per tile and per token.
      for (int t = 0; t < 4; ++t) {
        const float m = std::pow(10.f, mag(g));
        for (int j = 0; j < 128; ++j) kv_c.set(i * 512 + t * 128 + j, nd(g) * m);
      }
      for (int j = 0; j < 64; ++j) k_rope.set(i * 64 + j, nd(g));
    }
    for (int j = 0; j < 128; ++j) kv_c.set(0 * 512 + 128 + j, 0.f);  // all_zero_tile: token 0, tile 1
    HostTensor loc = random_loc(g, n, slots, DType::i32);
    TensorView cache = pool.cache(1);
    poison_view(cache);
    poison_view(pool.cache(0));
    set_mla_kv_buffer({.kv_c = kv_c.view, .k_rope = k_rope.view, .cache = cache, .loc = loc.view});
    const auto* bytes = static_cast<const uint8_t*>(cache.data);
    std::vector<char> written(slots, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = slot_at(loc, i);
      written[std::size_t(s)] = 1;
      const uint8_t* row = bytes + s * 656;
      for (int t = 0; t < 4; ++t) {
        double amax = 0;
        for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(double(kv_c.get(i * 512 + t * 128 + j))));
        float scale;
        std::memcpy(&scale, row + 512 + 4 * t, 4);
        ASSERT_TRUE(std::isfinite(scale) && scale > 0.f) << "token " << i << " tile " << t;
        ASSERT_EQ(double(scale), ref_pow2_scale(amax)) << "token " << i << " tile " << t;
        for (int j = 0; j < 128; ++j) {
          const double x = kv_c.get(i * 512 + t * 128 + j);
          const double back = double(to_float(fp8_e4m3_t{row[t * 128 + j]})) * scale;
          ASSERT_LE(std::fabs(back - x), std::fabs(x) / 16 + double(scale) * std::ldexp(1.0, -10))
              << "token " << i << " tile " << t << " j " << j;
        }
      }
      for (int j = 0; j < 64; ++j) {
        bf16_t b;
        std::memcpy(&b, row + 528 + 2 * j, 2);
        ASSERT_EQ(b.bits, to_bf16(k_rope.get(i * 64 + j)).bits) << "rope " << j;
      }
      // The layout is exactly the shared cache format (what FP8 MLA kernels read).
      std::vector<float> nope(512), rope(64);
      for (int j = 0; j < 512; ++j) nope[std::size_t(j)] = kv_c.get(i * 512 + j);
      for (int j = 0; j < 64; ++j) rope[std::size_t(j)] = k_rope.get(i * 64 + j);
      std::vector<uint8_t> expect(656);
      encode_fp8_mla_token(nope.data(), rope.data(), expect.data());
      ASSERT_EQ(std::memcmp(expect.data(), row, 656), 0) << "token " << i;
    }
    // The all-zero tile decodes to zeros with a finite scale.
    std::vector<float> dec(576);
    decode_fp8_mla_token(bytes + slot_at(loc, 0) * 656, dec.data());
    for (int j = 128; j < 256; ++j) ASSERT_EQ(dec[std::size_t(j)], 0.f);
    for (int64_t s = 0; s < slots; ++s)
      if (!written[std::size_t(s)]) ASSERT_TRUE(all_poison(bytes + s * 656, 656)) << "slot " << s;
    EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.cache(0).data), pool.cache(0).nbytes()));
  }
}

TEST(KvStoreMla, OutOfRangeSlotAndBadArguments) {
  auto g = rng_for_test();
  const int64_t n = 5;
  MlaKvPool bf(1, 16, MlaCacheFormat::bf16, Device::cpu());
  MlaKvPool f8(1, 16, MlaCacheFormat::fp8_656, Device::cpu());
  HostTensor kv_c(DType::bf16, {n, 512}), k_rope(DType::bf16, {n, 64});
  fill_uniform(kv_c, g);
  fill_uniform(k_rope, g);
  HostTensor loc = random_loc(g, n, 16, DType::i64);
  loc.ptr<int64_t>()[4] = 16;
  for (const MlaKvPool* p : {&bf, &f8}) {
    poison_view(p->cache(0));
    expect_error(
        [&] { set_mla_kv_buffer({.kv_c = kv_c.view, .k_rope = k_rope.view, .cache = p->cache(0), .loc = loc.view}); },
        {"set_mla_kv_buffer", "loc[4] = 16", "[0, 16)"});
    EXPECT_TRUE(all_poison(static_cast<uint8_t*>(p->cache(0).data), p->cache(0).nbytes()));
  }
  loc.ptr<int64_t>()[4] = 3;
  StoreMlaArgs ok{.kv_c = kv_c.view, .k_rope = k_rope.view, .cache = bf.cache(0), .loc = loc.view};
  EXPECT_NO_THROW(set_mla_kv_buffer(ok));
  auto with = [&](auto edit) {
    StoreMlaArgs a = ok;
    edit(a);
    return [a] { set_mla_kv_buffer(a); };
  };
  HostTensor c256(DType::bf16, {n, 256}), r32(DType::bf16, {n, 64 - 32}), kf16(DType::f16, {n, 512});
  HostTensor bf656(DType::bf16, {16, 656}), u576(DType::u8, {16, 576}), f32c(DType::f32, {16, 576});
  HostTensor loc_short(DType::i64, {n - 1});
  expect_error(with([&](StoreMlaArgs& a) { a.kv_c = c256.view; }), {"'kv_c'", "[5, 256]"});
  expect_error(with([&](StoreMlaArgs& a) { a.kv_c = kf16.view; }), {"'kv_c'", "dtype f16"});
  expect_error(with([&](StoreMlaArgs& a) { a.k_rope = r32.view; }), {"'k_rope'"});
  expect_error(with([&](StoreMlaArgs& a) { a.cache = bf656.view; }), {"'cache'", "[16, 656]", "576"});
  expect_error(with([&](StoreMlaArgs& a) { a.cache = u576.view; }), {"'cache'", "[16, 576]", "656"});
  expect_error(with([&](StoreMlaArgs& a) { a.cache = f32c.view; }), {"'cache'", "dtype f32"});
  expect_error(with([&](StoreMlaArgs& a) { a.loc = loc_short.view; }), {"'loc'"});
  expect_error(with([&](StoreMlaArgs& a) { a.loc = TensorView{}; }), {"'loc' is required"});
}

// ---- set_index_k

TEST(KvStoreIndexK, RoundTripAndLayout) {
  auto g = rng_for_test();
  std::uniform_real_distribution<float> ud(-3.f, 3.f), mag(-2.f, 2.f);
  for (int page_size : {1, 16, 64}) {
    for (DType in_dt : {DType::f32, DType::bf16}) {
      const int64_t num_pages = page_size == 1 ? 40 : 5, slots = num_pages * page_size;
      const int64_t n = std::min<int64_t>(slots, 45);
      IndexerKeyPool pool(2, num_pages, page_size, Device::cpu());
      HostTensor k(in_dt, {n, 128});
      for (int64_t i = 0; i < n; ++i) {
        const float m = std::pow(10.f, mag(g));  // per-token magnitude: scales differ per token
        for (int j = 0; j < 128; ++j) k.set(i * 128 + j, ud(g) * m);
      }
      for (int j = 0; j < 128; ++j) k.set(1 * 128 + j, 0.f);  // an all-zero key: finite scale
      HostTensor loc = random_loc(g, n, slots, page_size == 16 ? DType::i64 : DType::i32);
      TensorView cache = pool.cache(1);
      poison_view(cache);
      poison_view(pool.cache(0));
      set_index_k({.k = k.view, .index_k_cache = cache, .loc = loc.view, .page_size = page_size});

      const auto* bytes = static_cast<const uint8_t*>(cache.data);
      std::vector<char> touched(cache.nbytes(), 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t s = slot_at(loc, i), page = s / page_size, in_page = s % page_size;
        const int64_t page_base = page * page_size * 132;
        const int64_t key_at = page_base + in_page * 128, scale_at = page_base + page_size * 128 + in_page * 4;
        double amax = 0;
        for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(double(k.get(i * 128 + j))));
        float scale;
        std::memcpy(&scale, bytes + scale_at, 4);
        ASSERT_TRUE(std::isfinite(scale) && scale > 0.f) << "token " << i;
        ASSERT_EQ(double(scale), ref_pow2_scale(amax)) << "token " << i;
        for (int j = 0; j < 128; ++j) {
          const double x = k.get(i * 128 + j);
          const double back = double(to_float(fp8_e4m3_t{bytes[key_at + j]})) * scale;
          ASSERT_LE(std::fabs(back - x), std::fabs(x) / 16 + double(scale) * std::ldexp(1.0, -10))
              << "page_size " << page_size << " token " << i << " j " << j;
          touched[std::size_t(key_at + j)] = 1;
        }
        for (int b = 0; b < 4; ++b) touched[std::size_t(scale_at + b)] = 1;
      }
      for (std::size_t b = 0; b < touched.size(); ++b)
        if (!touched[b]) ASSERT_EQ(bytes[b], 0xff) << "byte " << b << " written outside the stored slots";
      EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.cache(0).data), pool.cache(0).nbytes()));
    }
  }
}

// FP8 round trip of the indexer keys over a wide range of magnitudes (incl. fp8 subnormals).
TEST(KvStoreIndexK, Fp8RoundTripErrorBound) {
  auto g = rng_for_test();
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> mag(-6.f, 6.f);
  const int page_size = 64, num_pages = 4;
  const int64_t n = num_pages * page_size;
  IndexerKeyPool pool(1, num_pages, page_size, Device::cpu());
  HostTensor k(DType::f32, {n, 128});
  for (int64_t i = 0; i < n; ++i) {
    const float m = std::pow(10.f, mag(g));
    for (int j = 0; j < 128; ++j) k.set(i * 128 + j, nd(g) * m);
  }
  HostTensor loc = random_loc(g, n, n, DType::i32);  // every slot once
  set_index_k({.k = k.view, .index_k_cache = pool.cache(0), .loc = loc.view, .page_size = page_size});
  const auto* bytes = static_cast<const uint8_t*>(pool.cache(0).data);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = slot_at(loc, i);
    float scale;
    std::memcpy(&scale, bytes + IndexerKeyLayout::scale_offset(s, page_size), 4);
    for (int j = 0; j < 128; ++j) {
      const double x = k.get(i * 128 + j);
      const double back = double(to_float(fp8_e4m3_t{bytes[IndexerKeyLayout::key_offset(s, page_size) + j]})) * scale;
      const double bound = std::fabs(x) / 16 + double(scale) * std::ldexp(1.0, -10);
      ASSERT_LE(std::fabs(back - x), bound) << "token " << i << " j " << j;
      worst = std::max(worst, std::fabs(back - x) / bound);
    }
  }
  EXPECT_GT(worst, 0.0);  // quantization actually happened
}

TEST(KvStoreIndexK, OutOfRangeSlotAndBadArguments) {
  auto g = rng_for_test();
  const int64_t n = 4;
  IndexerKeyPool pool(1, 3, 16, Device::cpu());
  HostTensor k(DType::bf16, {n, 128});
  fill_uniform(k, g);
  HostTensor loc = random_loc(g, n, 48, DType::i32);
  loc.ptr<int32_t>()[2] = 48;
  poison_view(pool.cache(0));
  expect_error([&] { set_index_k({.k = k.view, .index_k_cache = pool.cache(0), .loc = loc.view, .page_size = 16}); },
               {"set_index_k", "loc[2] = 48", "[0, 48)"});
  EXPECT_TRUE(all_poison(static_cast<uint8_t*>(pool.cache(0).data), pool.cache(0).nbytes()));
  loc.ptr<int32_t>()[2] = -7;
  expect_error([&] { set_index_k({.k = k.view, .index_k_cache = pool.cache(0), .loc = loc.view, .page_size = 16}); },
               {"loc[2] = -7"});
  loc.ptr<int32_t>()[2] = 7;
  StoreIndexKArgs ok{.k = k.view, .index_k_cache = pool.cache(0), .loc = loc.view, .page_size = 16};
  EXPECT_NO_THROW(set_index_k(ok));
  auto with = [&](auto edit) {
    StoreIndexKArgs a = ok;
    edit(a);
    return [a] { set_index_k(a); };
  };
  HostTensor k64(DType::bf16, {n, 64}), kf16(DType::f16, {n, 128}), loc_i16(DType::u8, {n});
  expect_error(with([&](StoreIndexKArgs& a) { a.k = k64.view; }), {"'k'", "[4, 64]"});
  expect_error(with([&](StoreIndexKArgs& a) { a.k = kf16.view; }), {"'k'", "dtype f16"});
  expect_error(with([&](StoreIndexKArgs& a) { a.page_size = 32; }), {"'index_k_cache'", "4224"});
  expect_error(with([&](StoreIndexKArgs& a) { a.page_size = 0; }), {"'page_size'"});
  expect_error(with([&](StoreIndexKArgs& a) { a.index_k_cache = a.index_k_cache.with_dtype(DType::fp8_e4m3); }),
               {"'index_k_cache'", "dtype fp8_e4m3"});
  expect_error(with([&](StoreIndexKArgs& a) { a.loc = loc_i16.view; }), {"'loc'", "dtype u8"});
}

TEST(KvStore, CudaTensorsWithoutCudaBuildAreAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA build runs these on the GPU";
  HostTensor k(DType::f32, {2, 128}), loc(DType::i32, {2});
  IndexerKeyPool pool(1, 1, 16, Device::cpu());
  StoreIndexKArgs a{.k = k.view, .index_k_cache = pool.cache(0), .loc = loc.view, .page_size = 16};
  for (TensorView* t : {&a.k, &a.index_k_cache, &a.loc}) t->device = Device::cuda(0);
  expect_error([&] { set_index_k(a); }, {"set_index_k", "CUDA"});
}
