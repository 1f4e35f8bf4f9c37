// Writing new tokens into the KV pools at their slots (out_cache_loc). Out-of-range slots are errors.
#pragma once
#include "attnserve/runtime.h"

namespace attnserve {

// MHA/GQA: k_cache[loc[i]] = k[i] (cast; for an fp8 cache, fp8(k / k_scale)).
struct StoreKvArgs {
  TensorView k;         // [n, h_kv, d]   bf16 | f16 | f32
  TensorView v;         // [n, h_kv, d_v]
  TensorView k_cache;   // [num_slots, h_kv, d]   bf16 | f16 | fp8_e4m3
  TensorView v_cache;   // [num_slots, h_kv, d_v]
  TensorView loc;       // [n] i32 | i64 slots
  float k_scale = 1.f;  // per-layer scale of an fp8 cache
  float v_scale = 1.f;
};
void set_kv_buffer(const StoreKvArgs& a, Stream stream = {});

// MLA latent: cache row = [kv_c (512) | k_rope (64)], bf16 (576 values) or FP8-656 (656 bytes).
struct StoreMlaArgs {
  TensorView kv_c;    // [n, 512] bf16 | f32
  TensorView k_rope;  // [n, 64]  bf16 | f32
  TensorView cache;   // [num_slots, 576] bf16, or [num_slots, 656] u8
  TensorView loc;     // [n] i32 | i64
};
void set_mla_kv_buffer(const StoreMlaArgs& a, Stream stream = {});

// Indexer keys: quantized per token (fp8_pow2_scale of the row's amax) into the page layout.
struct StoreIndexKArgs {
  TensorView k;              // [n, 128] bf16 | f32
  TensorView index_k_cache;  // [num_pages, page_size * 132] u8
  TensorView loc;            // [n] i32 | i64
  int page_size = 64;
};
void set_index_k(const StoreIndexKArgs& a, Stream stream = {});

}  // namespace attnserve
