// Dispatchers of the KV stores: validate every argument once, then run on the tensors' device.
// Slot values (loc) live on the device, so they are range-checked by the implementation: the CPU
// one checks every slot before writing anything.
#include <cmath>

#include "attnserve/ops/kv_store.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"

namespace attnserve {

void set_kv_buffer(const StoreKvArgs& a, Stream stream) {
  const char* op = "set_kv_buffer";
  check_tensor(op, "k", a.k, {DType::bf16, DType::f16, DType::f32}, {-1, -1, -1});
  const int64_t n = a.k.size(0), h_kv = a.k.size(1), d = a.k.size(2);
  check_tensor(op, "v", a.v, {DType::bf16, DType::f16, DType::f32}, {n, h_kv, -1});
  const int64_t d_v = a.v.size(2);
  check_tensor(op, "k_cache", a.k_cache, {DType::bf16, DType::f16, DType::fp8_e4m3}, {-1, h_kv, d});
  check_output(op, "k_cache", a.k_cache);
  const int64_t num_slots = a.k_cache.size(0);
  check_tensor(op, "v_cache", a.v_cache, {a.k_cache.dtype}, {num_slots, h_kv, d_v});
  check_output(op, "v_cache", a.v_cache);
  check_tensor(op, "loc", a.loc, {DType::i32, DType::i64}, {n});
  check_same_device(op, {&a.k, &a.v, &a.k_cache, &a.v_cache, &a.loc});
  for (auto [name, t] :
       {std::pair{"k", &a.k}, {"v", &a.v}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}, {"loc", &a.loc}})
    check_last_dim_contiguous(op, name, *t);
  if (a.k_cache.dtype == DType::fp8_e4m3) {
    ATTNSERVE_CHECK(std::isfinite(a.k_scale) && a.k_scale > 0.f, op,
                    ": argument 'k_scale' must be finite and > 0 "
                    "for an fp8 cache, got ",
                    a.k_scale);
    ATTNSERVE_CHECK(std::isfinite(a.v_scale) && a.v_scale > 0.f, op,
                    ": argument 'v_scale' must be finite and > 0 "
                    "for an fp8 cache, got ",
                    a.v_scale);
  }
  if (a.k.device.is_cpu()) cpu::set_kv_buffer(a);
  else {
    require_cuda_device("set_kv_buffer");
    cuda::set_kv_buffer(a, stream);
  }
}

void set_mla_kv_buffer(const StoreMlaArgs& a, Stream stream) {
  const char* op = "set_mla_kv_buffer";
  check_tensor(op, "kv_c", a.kv_c, {DType::bf16, DType::f32}, {-1, 512});
  const int64_t n = a.kv_c.size(0);
  check_tensor(op, "k_rope", a.k_rope, {DType::bf16, DType::f32}, {n, 64});
  check_tensor(op, "cache", a.cache, {DType::bf16, DType::u8}, {-1, -1});
  // bf16 rows hold [kv_c | k_rope] = 576 values; u8 rows are the FP8 format of 656 bytes.
  check_tensor(op, "cache", a.cache, {a.cache.dtype}, {-1, a.cache.dtype == DType::bf16 ? 576 : 656});
  check_output(op, "cache", a.cache);
  check_tensor(op, "loc", a.loc, {DType::i32, DType::i64}, {n});
  check_same_device(op, {&a.kv_c, &a.k_rope, &a.cache, &a.loc});
  for (auto [name, t] : {std::pair{"kv_c", &a.kv_c}, {"k_rope", &a.k_rope}, {"cache", &a.cache}, {"loc", &a.loc}})
    check_last_dim_contiguous(op, name, *t);
  if (a.cache.device.is_cpu()) cpu::set_mla_kv_buffer(a);
  else {
    require_cuda_device("set_mla_kv_buffer");
    cuda::set_mla_kv_buffer(a, stream);
  }
}

void set_index_k(const StoreIndexKArgs& a, Stream stream) {
  const char* op = "set_index_k";
  ATTNSERVE_CHECK(a.page_size >= 1, op, ": argument 'page_size' must be >= 1, got ", a.page_size);
  check_tensor(op, "k", a.k, {DType::bf16, DType::f32}, {-1, 128});
  const int64_t n = a.k.size(0);
  check_tensor(op, "index_k_cache", a.index_k_cache, {DType::u8}, {-1, int64_t(a.page_size) * 132});
  check_output(op, "index_k_cache", a.index_k_cache);
  check_tensor(op, "loc", a.loc, {DType::i32, DType::i64}, {n});
  check_same_device(op, {&a.k, &a.index_k_cache, &a.loc});
  for (auto [name, t] : {std::pair{"k", &a.k}, {"index_k_cache", &a.index_k_cache}, {"loc", &a.loc}})
    check_last_dim_contiguous(op, name, *t);
  if (a.k.device.is_cpu()) cpu::set_index_k(a);
  else {
    require_cuda_device("set_index_k");
    cuda::set_index_k(a, stream);
  }
}

}  // namespace attnserve
