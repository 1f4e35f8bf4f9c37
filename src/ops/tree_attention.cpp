// Dispatcher of tree_attention: validates shapes, dtypes and devices for every device; index values
// (lengths, slots) are checked where they can be read, by the CPU implementation.
#include "attnserve/ops/tree_attention.h"

#include <cmath>

#include "cpu/tree_attention.h"
#include "cuda/cuda_ops.h"  // require_cuda_device
#include "cuda/tree_attention/tree_attention.h"

namespace attnserve {

void tree_attention(const TreeAttentionArgs& a, Stream stream) {
  constexpr const char* op = "tree_attention";
  const bool cpu = a.q.device.is_cpu();
  // Activations: bf16 | f16 everywhere, f32 too on the CPU.
  if (cpu) check_tensor(op, "q", a.q, {DType::bf16, DType::f16, DType::f32}, {-1, -1, -1});
  else check_tensor(op, "q", a.q, {DType::bf16, DType::f16}, {-1, -1, -1});
  const int64_t total_q = a.q.size(0), h_q = a.q.size(1), d_q = a.q.size(2);
  check_optional_tensor(op, "q_rope", a.q_rope, {a.q.dtype}, {total_q, h_q, -1});
  const int64_t d_rope = a.q_rope.empty_view() ? 0 : a.q_rope.size(2);
  check_tensor(op, "k_cache", a.k_cache, {a.q.dtype}, {-1, -1, d_q + d_rope});
  const int64_t num_slots = a.k_cache.size(0), h_kv = a.k_cache.size(1);
  check_tensor(op, "v_cache", a.v_cache, {a.q.dtype}, {num_slots, h_kv, -1});
  const int64_t d_v = a.v_cache.size(2);
  ATTNSERVE_CHECK(h_kv >= 1 && h_q % h_kv == 0, op, ": q has ", h_q, " heads, not a multiple of the cache's ", h_kv,
                  " kv heads");
  check_tensor(op, "key_slots", a.key_slots, {DType::i32}, {-1, -1});
  const int64_t b = a.key_slots.size(0), max_keys = a.key_slots.size(1);
  ATTNSERVE_CHECK(max_keys <= kTreeMaxKeys, op, ": argument 'key_slots' has ", max_keys, " columns, at most ",
                  kTreeMaxKeys, " keys per request are supported (one 64-bit mask word per row)");
  check_tensor(op, "num_keys", a.num_keys, {DType::i32}, {b});
  check_tensor(op, "cu_seqlens_q", a.cu_seqlens_q, {DType::i32}, {b + 1});
  check_tensor(op, "mask", a.mask, {DType::i64}, {total_q});
  check_tensor(op, "out", a.out, {a.q.dtype}, {total_q, h_q, d_v});
  check_output(op, "out", a.out);
  check_optional_tensor(op, "lse", a.lse, {DType::f32}, {total_q, h_q});
  check_output(op, "lse", a.lse);
  ATTNSERVE_CHECK(a.prefix_out.empty_view() == a.prefix_lse.empty_view(), op,
                  ": arguments 'prefix_out' and 'prefix_lse' come together (the prefix part's state)");
  check_optional_tensor(op, "prefix_out", a.prefix_out, {a.q.dtype}, {total_q, h_q, d_v});
  check_optional_tensor(op, "prefix_lse", a.prefix_lse, {DType::f32}, {total_q, h_q});
  if (!a.prefix_out.empty_view()) {
    check_last_dim_contiguous(op, "prefix_out", a.prefix_out);
    ATTNSERVE_CHECK(a.prefix_out.data != a.out.data || a.prefix_out.strides == a.out.strides, op,
                    ": 'prefix_out' is 'out' with other strides (in place needs the same view)");
  }
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q", &a.q},
                                {"k_cache", &a.k_cache},
                                {"v_cache", &a.v_cache},
                                {"key_slots", &a.key_slots},
                                {"num_keys", &a.num_keys},
                                {"cu_seqlens_q", &a.cu_seqlens_q},
                                {"mask", &a.mask},
                                {"out", &a.out}})
    check_last_dim_contiguous(op, name, *t);
  if (!a.q_rope.empty_view()) check_last_dim_contiguous(op, "q_rope", a.q_rope);
  check_same_device(op, {&a.q, &a.k_cache, &a.v_cache, &a.key_slots, &a.num_keys, &a.cu_seqlens_q, &a.mask, &a.out,
                         &a.lse, &a.q_rope, &a.prefix_out, &a.prefix_lse});
  ATTNSERVE_CHECK(std::isfinite(a.softmax_scale) && a.softmax_scale > 0.f, op,
                  ": argument 'softmax_scale' must be finite and > 0, got ", a.softmax_scale);
  ATTNSERVE_CHECK(std::isfinite(a.softcap) && a.softcap >= 0.f, op,
                  ": argument 'softcap' must be finite and >= 0 (0: off), got ", a.softcap);
  ATTNSERVE_CHECK(a.max_seqlen_q >= 0, op, ": argument 'max_seqlen_q' must be >= 0, got ", a.max_seqlen_q);
  if (cpu) {
    cpu::tree_attention(a);
  } else {
    require_cuda_device(op);
    ATTNSERVE_CHECK(a.max_seqlen_q >= 1 || total_q == 0, op,
                    ": argument 'max_seqlen_q' (rows per request, the grid) is required on CUDA");
    cuda::tree_attention(a, stream);
  }
}

}  // namespace attnserve
