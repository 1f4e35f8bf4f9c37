// Per-layer KV pools: one zero-filled allocation per pool kind, views per layer.
#include <cmath>
#include <limits>

#include "attnserve/cache_formats.h"
#include "attnserve/kv_cache.h"

namespace attnserve {
namespace {

// Bytes of a [dims...] array of `elem` bytes, checked for overflow; dims must be >= 1.
std::size_t checked_bytes(const char* what, std::initializer_list<int64_t> dims, std::size_t elem) {
  std::size_t total = elem;
  for (int64_t d : dims) {
    ATTNSERVE_CHECK(d >= 1, what, ": every extent must be >= 1, got ", d);
    ATTNSERVE_CHECK(total <= std::numeric_limits<std::size_t>::max() / std::size_t(d), what, ": size overflows");
    total *= std::size_t(d);
  }
  return total;
}

void check_layer(const char* what, int64_t layer, int64_t num_layers) {
  ATTNSERVE_CHECK(layer >= 0 && layer < num_layers, what, ": layer ", layer, " out of range [0, ", num_layers, ")");
}

void check_scale(const char* what, float s) {
  ATTNSERVE_CHECK(std::isfinite(s) && s > 0.f, what, ": scale must be finite and > 0, got ", s);
}

// [num_slots, rest...] -> [num_pages, page_size, rest...] over the same memory.
TensorView paged(const char* what, const TensorView& t, int page_size) {
  ATTNSERVE_CHECK(page_size >= 1, what, ": page_size must be >= 1, got ", page_size);
  ATTNSERVE_CHECK(t.size(0) % page_size == 0, what, ": num_slots ", t.size(0), " is not a multiple of page_size ",
                  page_size);
  int64_t shape[kMaxDims];
  shape[0] = t.size(0) / page_size;
  shape[1] = page_size;
  for (int d = 1; d < t.ndim; ++d) shape[d + 1] = t.shape[d];
  return TensorView::contiguous(t.data, t.dtype, shape, t.ndim + 1, t.device);
}

}  // namespace

// ---- MhaKvPool

MhaKvPool::MhaKvPool(int64_t num_layers, int64_t num_slots, int64_t h_kv, int64_t d, int64_t d_v, DType dtype,
                     Device device, float k_scale, float v_scale)
    : num_layers_(num_layers), num_slots_(num_slots), h_kv_(h_kv), d_(d), d_v_(d_v), dtype_(dtype) {
  ATTNSERVE_CHECK(dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::fp8_e4m3, "MhaKvPool: dtype ",
                  dtype_name(dtype), " is not supported (bf16 | f16 | fp8_e4m3)");
  check_scale("MhaKvPool: k_scale", k_scale);
  check_scale("MhaKvPool: v_scale", v_scale);
  k_buf_ = Buffer(checked_bytes("MhaKvPool (K)", {num_layers, num_slots, h_kv, d}, dtype_size(dtype)), device);
  v_buf_ = Buffer(checked_bytes("MhaKvPool (V)", {num_layers, num_slots, h_kv, d_v}, dtype_size(dtype)), device);
  memset_async(k_buf_.view(DType::u8, {int64_t(k_buf_.bytes())}), 0);
  memset_async(v_buf_.view(DType::u8, {int64_t(v_buf_.bytes())}), 0);
  k_scales_.assign(std::size_t(num_layers), k_scale);
  v_scales_.assign(std::size_t(num_layers), v_scale);
}

TensorView MhaKvPool::k(int64_t layer) const {
  check_layer("MhaKvPool::k", layer, num_layers_);
  return k_buf_.view(dtype_, {num_layers_, num_slots_, h_kv_, d_}).select(0, layer);
}

TensorView MhaKvPool::v(int64_t layer) const {
  check_layer("MhaKvPool::v", layer, num_layers_);
  return v_buf_.view(dtype_, {num_layers_, num_slots_, h_kv_, d_v_}).select(0, layer);
}

TensorView MhaKvPool::k_paged(int64_t layer, int page_size) const {
  return paged("MhaKvPool::k_paged", k(layer), page_size);
}

TensorView MhaKvPool::v_paged(int64_t layer, int page_size) const {
  return paged("MhaKvPool::v_paged", v(layer), page_size);
}

float MhaKvPool::k_scale(int64_t layer) const {
  check_layer("MhaKvPool::k_scale", layer, num_layers_);
  return k_scales_[std::size_t(layer)];
}

float MhaKvPool::v_scale(int64_t layer) const {
  check_layer("MhaKvPool::v_scale", layer, num_layers_);
  return v_scales_[std::size_t(layer)];
}

void MhaKvPool::set_scales(int64_t layer, float k_scale, float v_scale) {
  check_layer("MhaKvPool::set_scales", layer, num_layers_);
  check_scale("MhaKvPool::set_scales: k_scale", k_scale);
  check_scale("MhaKvPool::set_scales: v_scale", v_scale);
  k_scales_[std::size_t(layer)] = k_scale;
  v_scales_[std::size_t(layer)] = v_scale;
}

// ---- MlaKvPool

static_assert(MlaKvPool::kLatentDim == Fp8MlaLayout::kNope && MlaKvPool::kRopeDim == Fp8MlaLayout::kRope);

MlaKvPool::MlaKvPool(int64_t num_layers, int64_t num_slots, MlaCacheFormat format, Device device)
    : num_layers_(num_layers), num_slots_(num_slots), format_(format) {
  ATTNSERVE_CHECK(format == MlaCacheFormat::bf16 || format == MlaCacheFormat::fp8_656,
                  "MlaKvPool: unknown cache format ", int(format));
  buf_ = Buffer(checked_bytes("MlaKvPool", {num_layers, num_slots, row_elems()}, dtype_size(dtype())), device);
  memset_async(buf_.view(DType::u8, {int64_t(buf_.bytes())}), 0);
}

int64_t MlaKvPool::row_elems() const {
  return format_ == MlaCacheFormat::bf16 ? kRowDim : int64_t(Fp8MlaLayout::kBytes);
}

TensorView MlaKvPool::cache(int64_t layer) const {
  check_layer("MlaKvPool::cache", layer, num_layers_);
  return buf_.view(dtype(), {num_layers_, num_slots_, row_elems()}).select(0, layer);
}

TensorView MlaKvPool::cache_paged(int64_t layer, int page_size) const {
  return paged("MlaKvPool::cache_paged", cache(layer), page_size);
}

// ---- IndexerKeyPool

IndexerKeyPool::IndexerKeyPool(int64_t num_layers, int64_t num_pages, int page_size, Device device)
    : num_layers_(num_layers), num_pages_(num_pages), page_size_(page_size) {
  ATTNSERVE_CHECK(page_size >= 1, "IndexerKeyPool: page_size must be >= 1, got ", page_size);
  buf_ = Buffer(
      checked_bytes("IndexerKeyPool", {num_layers, num_pages, int64_t(IndexerKeyLayout::bytes_per_page(page_size))}, 1),
      device);
  memset_async(buf_.view(DType::u8, {int64_t(buf_.bytes())}), 0);
}

TensorView IndexerKeyPool::cache(int64_t layer) const {
  check_layer("IndexerKeyPool::cache", layer, num_layers_);
  return buf_.view(DType::u8, {num_layers_, num_pages_, int64_t(IndexerKeyLayout::bytes_per_page(page_size_))})
      .select(0, layer);
}

}  // namespace attnserve
