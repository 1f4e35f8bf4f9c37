// CPU KV stores: cast/quantize each new token's row into its slot. Every slot is range-checked
// before anything is written, so a bad loc raises an Error and leaves the cache untouched.
// Duplicate slots (e.g. padded rows all writing the padding slot) are allowed; which duplicate
// wins is unspecified.
#include <cmath>
#include <cstring>
#include <vector>

#include "attnserve/cache_formats.h"
#include "cpu/cpu_ops.h"
#include "cpu/load.h"
#include "cpu/parallel.h"

namespace attnserve::cpu {
namespace {

// Rows (or row x head items) below which a store runs on the calling thread: each item moves only a
// few hundred bytes, so a small batch costs less than waking the thread pool.
constexpr int64_t kSerialItems = 256;

// Reads loc into int64 and checks every value is in [0, num_slots).
std::vector<int64_t> checked_slots(const char* op, const TensorView& loc, int64_t num_slots) {
  const int64_t n = loc.size(0);
  std::vector<int64_t> slots(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t s = load_index(loc.data, loc.dtype, offset_of(loc, i));
    ATTNSERVE_CHECK(s >= 0 && s < num_slots, op, ": argument 'loc' has loc[", i, "] = ", s, ", out of range [0, ",
                    num_slots, ") of the cache's slots");
    slots[std::size_t(i)] = s;
  }
  return slots;
}

}  // namespace

void set_kv_buffer(const StoreKvArgs& a) {
  const auto slots = checked_slots("set_kv_buffer", a.loc, a.k_cache.size(0));
  const bool fp8 = a.k_cache.dtype == DType::fp8_e4m3;
  // Divide (not multiply by 1/scale, which would round twice): the cache holds exactly fp8(x / scale).
  const float k_scale = fp8 ? a.k_scale : 1.f, v_scale = fp8 ? a.v_scale : 1.f;
  const int64_t n = a.k.size(0), h_kv = a.k.size(1);
  parallel_for(
      n * h_kv,
      [&](int64_t w) {
        const int64_t i = w / h_kv, h = w % h_kv, slot = slots[std::size_t(i)];
        const int64_t dk = a.k.size(2), dv = a.v.size(2);
        const int64_t ko = offset_of(a.k, i, h, 0), kco = offset_of(a.k_cache, slot, h, 0);
        for (int64_t j = 0; j < dk; ++j)
          store_from_float(a.k_cache.data, a.k_cache.dtype, kco + j,
                           load_as_float(a.k.data, a.k.dtype, ko + j) / k_scale);
        const int64_t vo = offset_of(a.v, i, h, 0), vco = offset_of(a.v_cache, slot, h, 0);
        for (int64_t j = 0; j < dv; ++j)
          store_from_float(a.v_cache.data, a.v_cache.dtype, vco + j,
                           load_as_float(a.v.data, a.v.dtype, vo + j) / v_scale);
      },
      kSerialItems);
}

void set_mla_kv_buffer(const StoreMlaArgs& a) {
  const auto slots = checked_slots("set_mla_kv_buffer", a.loc, a.cache.size(0));
  const bool bf16_cache = a.cache.dtype == DType::bf16;
  parallel_for(
      a.kv_c.size(0),
      [&](int64_t i) {
        float row[576];  // [kv_c (512) | k_rope (64)]
        for (int j = 0; j < 512; ++j) row[j] = load_as_float(a.kv_c.data, a.kv_c.dtype, offset_of(a.kv_c, i, j));
        for (int j = 0; j < 64; ++j)
          row[512 + j] = load_as_float(a.k_rope.data, a.k_rope.dtype, offset_of(a.k_rope, i, j));
        const int64_t off = offset_of(a.cache, slots[std::size_t(i)], 0);
        if (bf16_cache) {
          for (int j = 0; j < 576; ++j) store_from_float(a.cache.data, DType::bf16, off + j, row[j]);
        } else {
          encode_fp8_mla_token(row, row + 512, static_cast<uint8_t*>(a.cache.data) + off);
        }
      },
      kSerialItems);
}

void set_index_k(const StoreIndexKArgs& a) {
  const int page_size = a.page_size;
  const auto slots = checked_slots("set_index_k", a.loc, a.index_k_cache.size(0) * page_size);
  auto* cache = static_cast<uint8_t*>(a.index_k_cache.data);
  parallel_for(
      a.k.size(0),
      [&](int64_t i) {
        constexpr int kDim = IndexerKeyLayout::kDim;
        float x[kDim];
        float amax = 0.f;
        for (int j = 0; j < kDim; ++j) {
          x[j] = load_as_float(a.k.data, a.k.dtype, offset_of(a.k, i, j));
          amax = std::fmax(amax, std::fabs(x[j]));
        }
        const float scale = fp8_pow2_scale(amax);
        const int64_t slot = slots[std::size_t(i)], in_page = slot % page_size;
        uint8_t* page = cache + offset_of(a.index_k_cache, slot / page_size, 0);
        uint8_t* key = page + IndexerKeyLayout::key_offset(in_page, page_size);
        for (int j = 0; j < kDim; ++j) key[j] = to_fp8_e4m3(x[j] / scale).bits;
        std::memcpy(page + IndexerKeyLayout::scale_offset(in_page, page_size), &scale, 4);
      },
      kSerialItems);
}

}  // namespace attnserve::cpu
