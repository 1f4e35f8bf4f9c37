// Dispatchers of paged attention, MLA (absorbed), and state merging: validate every argument, then
// run on the device the tensors live on. Index values (page ids, lengths) can only be read when they
// live in host memory, so those checks run on the CPU path only.
#include "attnserve/ops/attention.h"

#include <cmath>
#include <string_view>

#include "attnserve/cache_formats.h"

#include "cpu/cpu_ops.h"
#include "cpu/load.h"
#include "cuda/cuda_ops.h"
#include "ops/planned_ops.h"

namespace attnserve {
namespace {

constexpr std::string_view kPaged = "paged_attention";
constexpr std::string_view kMla = "mla_attention";
constexpr std::string_view kMerge = "merge_state";
constexpr std::string_view kMergeN = "merge_states";

// Query/output dtypes: bf16 | f16 everywhere, f32 too on the CPU.
void check_activation(std::string_view op, std::string_view arg, const TensorView& t, Device device,
                      std::initializer_list<int64_t> dims) {
  if (device.is_cpu()) {
    check_tensor(op, arg, t, {DType::bf16, DType::f16, DType::f32}, dims);
  } else {
    check_tensor(op, arg, t, {DType::bf16, DType::f16}, dims);
  }
  check_last_dim_contiguous(op, arg, t);
}

// Scalars shared by paged and MLA attention.
void check_attention_options(std::string_view op, float softmax_scale, int window_left, int window_right, float softcap,
                             int max_seqlen_q) {
  ATTNSERVE_CHECK(std::isfinite(softmax_scale) && softmax_scale > 0.f, op,
                  ": argument 'softmax_scale' must be finite and > 0, got ", softmax_scale);
  ATTNSERVE_CHECK(window_left >= -1, op, ": argument 'window_left' must be >= -1 (-1: unbounded), got ", window_left);
  ATTNSERVE_CHECK(window_right >= -1, op, ": argument 'window_right' must be >= -1 (-1: unbounded), got ",
                  window_right);
  ATTNSERVE_CHECK(std::isfinite(softcap) && softcap >= 0.f, op,
                  ": argument 'softcap' must be finite and >= 0 (0: off), got ", softcap);
  ATTNSERVE_CHECK(max_seqlen_q >= 0, op, ": argument 'max_seqlen_q' must be >= 0, got ", max_seqlen_q);
}

// Shapes and dtypes of page_table [b, *], cache_seqlens [b], cu_seqlens_q [b + 1].
void check_index_tensors(std::string_view op, const TensorView& page_table, const TensorView& cache_seqlens,
                         const TensorView& cu_seqlens_q) {
  check_tensor(op, "page_table", page_table, {DType::i32}, {-1, -1});
  const int64_t b = page_table.size(0);
  check_tensor(op, "cache_seqlens", cache_seqlens, {DType::i32}, {b});
  check_tensor(op, "cu_seqlens_q", cu_seqlens_q, {DType::i32}, {b + 1});
  check_last_dim_contiguous(op, "page_table", page_table);
  check_last_dim_contiguous(op, "cache_seqlens", cache_seqlens);
  check_last_dim_contiguous(op, "cu_seqlens_q", cu_seqlens_q);
}

// Index values (host memory only): query row ranges, key lengths, and every page id that is read.
void check_index_values(std::string_view op, const TensorView& page_table, const TensorView& cache_seqlens,
                        const TensorView& cu_seqlens_q, int64_t total_q, int64_t num_pages, int64_t page_size,
                        int max_seqlen_q) {
  auto at1 = [](const TensorView& t, int64_t i) { return cpu::load_index(t.data, t.dtype, cpu::offset_of(t, i)); };
  const int64_t b = page_table.size(0), max_pages = page_table.size(1);
  ATTNSERVE_CHECK(at1(cu_seqlens_q, 0) >= 0, op, ": argument 'cu_seqlens_q'[0] = ", at1(cu_seqlens_q, 0),
                  " must be >= 0");
  for (int64_t r = 0; r < b; ++r) {
    const int64_t q_begin = at1(cu_seqlens_q, r), q_end = at1(cu_seqlens_q, r + 1);
    ATTNSERVE_CHECK(q_end >= q_begin, op, ": argument 'cu_seqlens_q' must be non-decreasing, but cu_seqlens_q[", r + 1,
                    "] = ", q_end, " < cu_seqlens_q[", r, "] = ", q_begin);
  }
  const int64_t end = at1(cu_seqlens_q, b);
  ATTNSERVE_CHECK(end <= total_q, op, ": argument 'cu_seqlens_q'[", b, "] = ", end, " exceeds total_q = ", total_q,
                  " (rows of 'q')");
  for (int64_t r = 0; r < b; ++r) {
    const int64_t q_len = at1(cu_seqlens_q, r + 1) - at1(cu_seqlens_q, r);
    ATTNSERVE_CHECK(max_seqlen_q == 0 || q_len <= max_seqlen_q, op, ": request ", r, " has ", q_len,
                    " query rows, more than argument 'max_seqlen_q' = ", max_seqlen_q);
    const int64_t k_len = at1(cache_seqlens, r);
    ATTNSERVE_CHECK(k_len >= 0 && k_len <= max_pages * page_size, op, ": argument 'cache_seqlens'[", r, "] = ", k_len,
                    " out of range [0, max_pages * page_size = ", max_pages * page_size, "]");
    for (int64_t i = 0; i * page_size < k_len; ++i) {
      const int64_t id = cpu::load_index(page_table.data, page_table.dtype, cpu::offset_of(page_table, r, i));
      ATTNSERVE_CHECK(id >= 0 && id < num_pages, op, ": argument 'page_table'[", r, ", ", i, "] = ", id, " (request ",
                      r, ", page position ", i, ") out of range [0, num_pages = ", num_pages, ")");
    }
  }
}

// max_seqlen_q sizes the CUDA grid, so a CUDA launch needs it whenever there are query rows.
void check_max_seqlen_for_cuda(std::string_view op, Device device, int64_t total_q, int max_seqlen_q) {
  ATTNSERVE_CHECK(device.is_cpu() || total_q == 0 || max_seqlen_q > 0, op,
                  ": argument 'max_seqlen_q' is required (> 0) on CUDA, got ", max_seqlen_q);
}

void validate(const PagedAttentionArgs& a) {
  const Device device = a.q.device;
  // fp8 q (FlashAttention-3's FP8 contract): fp8 cache, out bf16 | f16 (f32 too on the CPU).
  const bool fp8_q = a.q.dtype == DType::fp8_e4m3;
  if (fp8_q) {
    check_tensor(kPaged, "q", a.q, {DType::fp8_e4m3}, {-1, -1, -1});
    check_last_dim_contiguous(kPaged, "q", a.q);
  } else {
    check_activation(kPaged, "q", a.q, device, {-1, -1, -1});
  }
  const int64_t total_q = a.q.size(0), h_q = a.q.size(1), d = a.q.size(2);
  if (fp8_q) check_tensor(kPaged, "k_cache", a.k_cache, {DType::fp8_e4m3}, {-1, -1, -1, d});
  else check_tensor(kPaged, "k_cache", a.k_cache, {a.q.dtype, DType::fp8_e4m3}, {-1, -1, -1, d});
  const int64_t num_pages = a.k_cache.size(0), page_size = a.k_cache.size(1), h_kv = a.k_cache.size(2);
  ATTNSERVE_CHECK(page_size >= 1, kPaged, ": argument 'k_cache' has page_size ", page_size, ", expected >= 1");
  ATTNSERVE_CHECK(h_kv >= 1 && h_q % h_kv == 0, kPaged, ": heads of 'q' (h_q = ", h_q,
                  ") must be a multiple of heads of 'k_cache' (h_kv = ", h_kv, ")");
  check_tensor(kPaged, "v_cache", a.v_cache, {a.k_cache.dtype}, {num_pages, page_size, h_kv, -1});
  const int64_t d_v = a.v_cache.size(3);
  check_activation(kPaged, "out", a.out, device, {total_q, h_q, d_v});
  check_output(kPaged, "out", a.out);
  ATTNSERVE_CHECK(fp8_q || a.out.dtype == a.q.dtype, kPaged, ": argument 'out' has dtype ", dtype_name(a.out.dtype),
                  ", expected q's dtype ", dtype_name(a.q.dtype));
  check_last_dim_contiguous(kPaged, "k_cache", a.k_cache);
  check_last_dim_contiguous(kPaged, "v_cache", a.v_cache);
  check_index_tensors(kPaged, a.page_table, a.cache_seqlens, a.cu_seqlens_q);
  const int64_t b = a.page_table.size(0);
  check_optional_tensor(kPaged, "lse", a.lse, {DType::f32}, {total_q, h_q});
  check_output(kPaged, "lse", a.lse);
  check_optional_tensor(kPaged, "q_descale", a.q_descale, {DType::f32}, {b, h_kv});
  ATTNSERVE_CHECK(fp8_q || a.q_descale.empty_view(), kPaged, ": argument 'q_descale' is given but 'q' is ",
                  dtype_name(a.q.dtype), " (q_descale applies to an fp8_e4m3 q)");
  check_optional_tensor(kPaged, "k_descale", a.k_descale, {DType::f32}, {b, h_kv});
  check_optional_tensor(kPaged, "v_descale", a.v_descale, {DType::f32}, {b, h_kv});
  const bool fp8 = a.k_cache.dtype == DType::fp8_e4m3;
  ATTNSERVE_CHECK(fp8 || a.k_descale.empty_view(), kPaged, ": argument 'k_descale' is given but 'k_cache' is ",
                  dtype_name(a.k_cache.dtype), " (descales apply to an fp8_e4m3 cache)");
  ATTNSERVE_CHECK(fp8 || a.v_descale.empty_view(), kPaged, ": argument 'v_descale' is given but 'v_cache' is ",
                  dtype_name(a.v_cache.dtype), " (descales apply to an fp8_e4m3 cache)");
  check_attention_options(kPaged, a.softmax_scale, a.window_left, a.window_right, a.softcap, a.max_seqlen_q);
  check_same_device(kPaged, {&a.q, &a.k_cache, &a.v_cache, &a.page_table, &a.cache_seqlens, &a.cu_seqlens_q, &a.out,
                             &a.lse, &a.q_descale, &a.k_descale, &a.v_descale});
  check_max_seqlen_for_cuda(kPaged, device, total_q, a.max_seqlen_q);
  if (device.is_cpu()) {
    check_index_values(kPaged, a.page_table, a.cache_seqlens, a.cu_seqlens_q, total_q, num_pages, page_size,
                       a.max_seqlen_q);
  }
}

void validate(const MlaAttentionArgs& a) {
  const Device device = a.q_nope.device;
  check_activation(kMla, "q_nope", a.q_nope, device, {-1, -1, -1});
  const int64_t total_q = a.q_nope.size(0), h_q = a.q_nope.size(1), d_v = a.q_nope.size(2);
  check_activation(kMla, "q_rope", a.q_rope, device, {total_q, h_q, -1});
  ATTNSERVE_CHECK(a.q_rope.dtype == a.q_nope.dtype, kMla, ": argument 'q_rope' has dtype ", dtype_name(a.q_rope.dtype),
                  ", expected q_nope's dtype ", dtype_name(a.q_nope.dtype));
  const int64_t d_rope = a.q_rope.size(2);
  if (a.kv_cache.dtype == DType::u8) {  // FP8-656: 512 latent + 64 rope values in 656 bytes
    ATTNSERVE_CHECK(d_v == Fp8MlaLayout::kNope && d_rope == Fp8MlaLayout::kRope, kMla,
                    ": an FP8-656 kv_cache (u8) needs d_v ", Fp8MlaLayout::kNope, " and d_rope ", Fp8MlaLayout::kRope,
                    ", got d_v ", d_v, " and d_rope ", d_rope);
    check_tensor(kMla, "kv_cache", a.kv_cache, {DType::u8}, {-1, -1, 1, int64_t(Fp8MlaLayout::kBytes)});
  } else {
    check_tensor(kMla, "kv_cache", a.kv_cache, {a.q_nope.dtype, DType::u8}, {-1, -1, 1, d_v + d_rope});
  }
  check_last_dim_contiguous(kMla, "kv_cache", a.kv_cache);
  const int64_t num_pages = a.kv_cache.size(0), page_size = a.kv_cache.size(1);
  ATTNSERVE_CHECK(page_size >= 1, kMla, ": argument 'kv_cache' has page_size ", page_size, ", expected >= 1");
  check_activation(kMla, "out", a.out, device, {total_q, h_q, d_v});
  check_output(kMla, "out", a.out);
  ATTNSERVE_CHECK(a.out.dtype == a.q_nope.dtype, kMla, ": argument 'out' has dtype ", dtype_name(a.out.dtype),
                  ", expected q_nope's dtype ", dtype_name(a.q_nope.dtype));
  check_index_tensors(kMla, a.page_table, a.cache_seqlens, a.cu_seqlens_q);
  check_optional_tensor(kMla, "lse", a.lse, {DType::f32}, {total_q, h_q});
  check_output(kMla, "lse", a.lse);
  check_attention_options(kMla, a.softmax_scale, a.window_left, a.window_right, a.softcap, a.max_seqlen_q);
  check_same_device(
      kMla, {&a.q_nope, &a.q_rope, &a.kv_cache, &a.page_table, &a.cache_seqlens, &a.cu_seqlens_q, &a.out, &a.lse});
  check_max_seqlen_for_cuda(kMla, device, total_q, a.max_seqlen_q);
  if (device.is_cpu()) {
    check_index_values(kMla, a.page_table, a.cache_seqlens, a.cu_seqlens_q, total_q, num_pages, page_size,
                       a.max_seqlen_q);
  }
}

void validate(const MergeStateArgs& a) {
  check_tensor(kMerge, "v_a", a.v_a, {DType::bf16, DType::f16, DType::f32}, {-1, -1, -1});
  const int64_t tokens = a.v_a.size(0), heads = a.v_a.size(1), d = a.v_a.size(2);
  check_tensor(kMerge, "s_a", a.s_a, {DType::f32}, {tokens, heads});
  check_tensor(kMerge, "v_b", a.v_b, {a.v_a.dtype}, {tokens, heads, d});
  check_tensor(kMerge, "s_b", a.s_b, {DType::f32}, {tokens, heads});
  check_tensor(kMerge, "v_out", a.v_out, {a.v_a.dtype}, {tokens, heads, d});
  check_output(kMerge, "v_out", a.v_out);
  check_optional_tensor(kMerge, "s_out", a.s_out, {DType::f32}, {tokens, heads});
  check_output(kMerge, "s_out", a.s_out);
  check_last_dim_contiguous(kMerge, "v_a", a.v_a);
  check_last_dim_contiguous(kMerge, "v_b", a.v_b);
  check_last_dim_contiguous(kMerge, "v_out", a.v_out);
  check_same_device(kMerge, {&a.v_a, &a.s_a, &a.v_b, &a.s_b, &a.v_out, &a.s_out});
}

void validate(const MergeStatesArgs& a) {
  check_tensor(kMergeN, "v_parts", a.v_parts, {DType::bf16, DType::f16, DType::f32}, {-1, -1, -1, -1});
  const int64_t n = a.v_parts.size(0), tokens = a.v_parts.size(1), heads = a.v_parts.size(2), d = a.v_parts.size(3);
  check_tensor(kMergeN, "s_parts", a.s_parts, {DType::f32}, {n, tokens, heads});
  // The output may be narrower than the parts (f32 partials -> bf16 result).
  check_tensor(kMergeN, "v_out", a.v_out, {DType::bf16, DType::f16, DType::f32}, {tokens, heads, d});
  check_output(kMergeN, "v_out", a.v_out);
  check_optional_tensor(kMergeN, "s_out", a.s_out, {DType::f32}, {tokens, heads});
  check_output(kMergeN, "s_out", a.s_out);
  check_last_dim_contiguous(kMergeN, "v_parts", a.v_parts);
  check_last_dim_contiguous(kMergeN, "v_out", a.v_out);
  check_same_device(kMergeN, {&a.v_parts, &a.s_parts, &a.v_out, &a.s_out});
}

}  // namespace

std::size_t paged_attention_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps) {
  validate(a);  // the same checks as the op: a size for arguments it would reject means nothing
  return a.q.device.is_cpu() ? 0 : cuda::paged_attention_workspace_size(a, caps);
}

void paged_attention(const PagedAttentionArgs& a, Workspace ws, Stream stream) {
  validate(a);
  if (a.q.device.is_cpu()) {
    cpu::paged_attention(a);
  } else {
    require_cuda_device("paged_attention");
    cuda::paged_attention(a, ws, stream);
  }
}

std::size_t mla_attention_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps) {
  validate(a);
  return a.q_nope.device.is_cpu() ? 0 : cuda::mla_attention_workspace_size(a, caps);
}

void mla_attention(const MlaAttentionArgs& a, Workspace ws, Stream stream) {
  validate(a);
  if (a.q_nope.device.is_cpu()) {
    cpu::mla_attention(a);
  } else {
    require_cuda_device("mla_attention");
    cuda::mla_attention(a, ws, stream);
  }
}

void paged_attention(const PagedAttentionArgs& a, const cuda::attn::Plan& plan, Workspace ws, Stream stream) {
  if (a.q.device.is_cpu()) return paged_attention(a, ws, stream);
  validate(a);
  require_cuda_device("paged_attention");
  cuda::paged_attention(a, plan, ws, stream);
}

void mla_attention(const MlaAttentionArgs& a, const cuda::mla::Plan& plan, Workspace ws, Stream stream) {
  if (a.q_nope.device.is_cpu()) return mla_attention(a, ws, stream);
  validate(a);
  require_cuda_device("mla_attention");
  cuda::mla_attention(a, plan, ws, stream);
}

void merge_state(const MergeStateArgs& a, Stream stream) {
  validate(a);
  if (a.v_a.device.is_cpu()) {
    cpu::merge_state(a);
  } else {
    require_cuda_device("merge_state");
    cuda::merge_state(a, stream);
  }
}

void merge_states(const MergeStatesArgs& a, Stream stream) {
  validate(a);
  if (a.v_parts.device.is_cpu()) {
    cpu::merge_states(a);
  } else {
    require_cuda_device("merge_states");
    cuda::merge_states(a, stream);
  }
}

}  // namespace attnserve
