// KV pools: shapes, dtypes, sizes, paged views aliasing the flat views, layer bounds.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attnserve/cache_formats.h"
#include "attnserve/kv_cache.h"
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

bool all_zero(const TensorView& t) {
  const auto* b = static_cast<const uint8_t*>(t.data);
  for (std::size_t i = 0; i < t.nbytes(); ++i)
    if (b[i]) return false;
  return true;
}
}  // namespace

TEST(KvPools, MhaShapesBytesAndScales) {
  for (DType dt : {DType::bf16, DType::f16, DType::fp8_e4m3}) {
    MhaKvPool p(3, 64, 4, 32, 16, dt, Device::cpu(), 0.5f, 2.f);
    EXPECT_EQ(p.k(0).shape_string(), "[64, 4, 32]");
    EXPECT_EQ(p.v(2).shape_string(), "[64, 4, 16]");
    EXPECT_EQ(p.k(1).dtype, dt);
    EXPECT_TRUE(p.k(1).is_contiguous());
    EXPECT_EQ(p.bytes(), 3u * 64u * 4u * (32u + 16u) * dtype_size(dt));
    EXPECT_TRUE(all_zero(p.k(2)) && all_zero(p.v(0)));
    // Layers do not overlap.
    EXPECT_EQ(static_cast<char*>(p.k(1).data) - static_cast<char*>(p.k(0).data),
              std::ptrdiff_t(64 * 4 * 32 * dtype_size(dt)));
    EXPECT_FLOAT_EQ(p.k_scale(2), 0.5f);
    EXPECT_FLOAT_EQ(p.v_scale(0), 2.f);
    p.set_scales(1, 0.25f, 4.f);
    EXPECT_FLOAT_EQ(p.k_scale(1), 0.25f);
    EXPECT_FLOAT_EQ(p.k_scale(0), 0.5f);
  }
}

TEST(KvPools, MhaPagedViewsAliasFlatViews) {
  auto g = rng_for_test();
  MhaKvPool p(2, 48, 2, 8, 4, DType::bf16, Device::cpu());
  for (int page_size : {1, 16}) {
    TensorView k = p.k(1), kp = p.k_paged(1, page_size), vp = p.v_paged(1, page_size);
    EXPECT_EQ(kp.shape_string(), "[" + std::to_string(48 / page_size) + ", " + std::to_string(page_size) + ", 2, 8]");
    EXPECT_EQ(vp.shape_string(), "[" + std::to_string(48 / page_size) + ", " + std::to_string(page_size) + ", 2, 4]");
    EXPECT_EQ(kp.data, k.data);
    for (int trial = 0; trial < 20; ++trial) {
      int64_t slot = int64_t(g() % 48), h = int64_t(g() % 2), j = int64_t(g() % 8);
      uint16_t bits = uint16_t(g());
      k.ptr<uint16_t>()[cpu::offset_of(k, slot, h, j)] = bits;
      EXPECT_EQ(kp.ptr<uint16_t>()[cpu::offset_of(kp, slot / page_size, slot % page_size, h, j)], bits);
    }
  }
  expect_error([&] { p.k_paged(0, 5); }, {"not a multiple of page_size 5"});
  expect_error([&] { p.v_paged(0, 0); }, {"page_size"});
}

TEST(KvPools, MhaErrors) {
  expect_error([] { MhaKvPool(1, 8, 1, 8, 8, DType::f32, Device::cpu()); }, {"dtype f32"});
  expect_error([] { MhaKvPool(1, 8, 1, 8, 8, DType::fp8_e4m3, Device::cpu(), 0.f); }, {"k_scale"});
  expect_error([] { MhaKvPool(0, 8, 1, 8, 8, DType::bf16, Device::cpu()); }, {">= 1"});
  MhaKvPool p(2, 8, 1, 8, 8, DType::bf16, Device::cpu());
  expect_error([&] { p.k(2); }, {"layer 2 out of range [0, 2)"});
  expect_error([&] { p.v(-1); }, {"layer -1"});
  expect_error([&] { p.k_scale(5); }, {"layer 5"});
  expect_error([&] { p.set_scales(0, 1.f, NAN); }, {"v_scale"});
}

TEST(KvPools, MlaShapesAndPagedViews) {
  MlaKvPool b(2, 32, MlaCacheFormat::bf16, Device::cpu());
  EXPECT_EQ(b.cache(1).shape_string(), "[32, 576]");
  EXPECT_EQ(b.cache(1).dtype, DType::bf16);
  EXPECT_EQ(b.bytes(), 2u * 32u * 576u * 2u);
  EXPECT_EQ(b.cache_paged(1, 8).shape_string(), "[4, 8, 576]");
  EXPECT_EQ(b.cache_paged(1, 8).data, b.cache(1).data);
  MlaKvPool f(3, 32, MlaCacheFormat::fp8_656, Device::cpu());
  EXPECT_EQ(f.cache(2).shape_string(), "[32, 656]");
  EXPECT_EQ(f.cache(2).dtype, DType::u8);
  EXPECT_EQ(f.row_elems(), 656);
  EXPECT_EQ(f.bytes(), 3u * 32u * 656u);
  EXPECT_TRUE(all_zero(f.cache(0)));
  TensorView c = f.cache(1), cp = f.cache_paged(1, 4);
  c.ptr<uint8_t>()[cpu::offset_of(c, 13, 600)] = 0xab;
  EXPECT_EQ(cp.ptr<uint8_t>()[cpu::offset_of(cp, 3, 1, 600)], 0xab);
  expect_error([&] { f.cache(3); }, {"layer 3"});
  expect_error([&] { f.cache_paged(0, 3); }, {"multiple of page_size"});
}

TEST(KvPools, IndexerKeyShapes) {
  IndexerKeyPool p(2, 5, 64, Device::cpu());
  EXPECT_EQ(p.cache(0).shape_string(), "[5, 8448]");  // 64 * 132
  EXPECT_EQ(p.cache(0).dtype, DType::u8);
  EXPECT_EQ(p.num_slots(), 320);
  EXPECT_EQ(p.bytes(), 2u * 5u * 64u * 132u);
  EXPECT_EQ(static_cast<char*>(p.cache(1).data) - static_cast<char*>(p.cache(0).data), 5 * 64 * 132);
  expect_error([&] { p.cache(2); }, {"layer 2"});
  expect_error([] { IndexerKeyPool(1, 5, 0, Device::cpu()); }, {"page_size"});
}
