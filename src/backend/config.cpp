// Backend configuration: validation with messages that say what to change, the per-device kernel
// path choice of the sparse backend, and the pool adapters.
#include <cmath>
#include <string>

#include "backend/config_check.h"
#include "backend/op_plans.h"

namespace attnserve {

std::vector<KvLayerBuffers> kv_buffers_of(const MhaKvPool& pool) {
  std::vector<KvLayerBuffers> out;
  for (int64_t l = 0; l < pool.num_layers(); ++l)
    out.push_back({.k = pool.k(l), .v = pool.v(l), .k_scale = pool.k_scale(l), .v_scale = pool.v_scale(l)});
  return out;
}

std::vector<KvLayerBuffers> kv_buffers_of(const MlaKvPool& pool) {
  std::vector<KvLayerBuffers> out;
  for (int64_t l = 0; l < pool.num_layers(); ++l) out.push_back({.k = pool.cache(l)});
  return out;
}

const char* to_string(NsaImpl impl) {
  switch (impl) {
    case NsaImpl::automatic: return "automatic";
    case NsaImpl::sparse_bf16: return "sparse_bf16";
    case NsaImpl::sparse_fp8: return "sparse_fp8";
    case NsaImpl::gather: return "gather";
  }
  return "?";
}

NsaImpl parse_nsa_impl(std::string_view s) {
  if (s == "automatic" || s == "auto") return NsaImpl::automatic;
  if (s == "sparse_bf16" || s == "flashmla_sparse") return NsaImpl::sparse_bf16;
  if (s == "sparse_fp8" || s == "flashmla_kv") return NsaImpl::sparse_fp8;
  if (s == "gather" || s == "fa3") return NsaImpl::gather;
  ATTNSERVE_FAIL("unknown NSA kernel path '", s,
                 "' (expected automatic, sparse_bf16 | flashmla_sparse, sparse_fp8 | flashmla_kv, gather | fa3)");
}

namespace backend_detail {
namespace {

bool dtype_in(DType t, std::initializer_list<DType> ok) {
  for (DType d : ok)
    if (d == t) return true;
  return false;
}

void check_common(const char* who, Device device, float softmax_scale, float softcap, int page_size,
                  const TensorView& req_to_token, const std::vector<KvLayerBuffers>& kv) {
  ATTNSERVE_CHECK(device.is_cpu() || cuda_available(), who, ": config.device is ", to_string(device),
                  " but this build has no CUDA or no GPU is present: use Device::cpu()");
  ATTNSERVE_CHECK(std::isfinite(softmax_scale) && softmax_scale >= 0.f, who, ": softmax_scale ", softmax_scale,
                  " must be finite and >= 0 (0: every layer gives its own scaling)");
  ATTNSERVE_CHECK(std::isfinite(softcap) && softcap >= 0.f, who, ": softcap ", softcap, " must be >= 0 (0 = off)");
  ATTNSERVE_CHECK(page_size >= 1, who, ": page_size ", page_size, " must be >= 1");
  ATTNSERVE_CHECK(!req_to_token.empty_view(), who,
                  ": config.req_to_token is missing: pass the engine's request -> token-slot table "
                  "([pool_size, max_context_len] i32, e.g. ReqToTokenPool::table())");
  ATTNSERVE_CHECK(req_to_token.dtype == DType::i32 && req_to_token.ndim == 2, who,
                  ": config.req_to_token must be a 2-D i32 table, got ", dtype_name(req_to_token.dtype), " ",
                  req_to_token.shape_string());
  ATTNSERVE_CHECK(req_to_token.device == device, who, ": config.req_to_token is on ", to_string(req_to_token.device),
                  ", the backend on ", to_string(device));
  ATTNSERVE_CHECK(!kv.empty(), who,
                  ": config.kv_buffers is empty: give one KvLayerBuffers per layer (kv_buffers_of(pool))");
  for (std::size_t l = 0; l < kv.size(); ++l) {
    const KvLayerBuffers& b = kv[l];
    ATTNSERVE_CHECK(!b.k.empty_view() && b.k.data != nullptr, who, ": config.kv_buffers[", l, "].k is missing");
    ATTNSERVE_CHECK(b.k.device == device, who, ": config.kv_buffers[", l, "].k is on ", to_string(b.k.device),
                    ", the backend on ", to_string(device));
    ATTNSERVE_CHECK(b.k.ndim >= 2 && b.k.strides[b.k.ndim - 1] == 1, who, ": config.kv_buffers[", l,
                    "].k must be [num_slots, ...] with a contiguous last dim, got ", b.k.shape_string());
    ATTNSERVE_CHECK(b.k.shape[0] % page_size == 0, who, ": config.kv_buffers[", l, "] has ", b.k.shape[0],
                    " slots, not a whole number of pages of page_size ", page_size,
                    " (size the pool in pages, or fix page_size)");
  }
}

}  // namespace

DenseBackendConfig checked_dense_config(const DenseBackendConfig& in, const DeviceCaps& caps) {
  constexpr const char* who = "DenseBackend";
  DenseBackendConfig c = in;
  const bool cuda = c.device.is_cuda();
  ATTNSERVE_CHECK(c.num_q_heads >= 1 && c.num_kv_heads >= 1, who, ": num_q_heads ", c.num_q_heads, " and num_kv_heads ",
                  c.num_kv_heads, " must be >= 1");
  ATTNSERVE_CHECK(c.num_q_heads % c.num_kv_heads == 0, who, ": num_q_heads ", c.num_q_heads,
                  " is not a multiple of num_kv_heads ", c.num_kv_heads,
                  " (GQA groups must divide evenly; check the per-rank head counts after tensor parallelism)");
  ATTNSERVE_CHECK(c.head_dim >= 1, who, ": head_dim ", c.head_dim, " must be >= 1");
  if (c.arch == AttentionArch::mha) {
    if (c.v_head_dim == 0) c.v_head_dim = c.head_dim;
    ATTNSERVE_CHECK(c.v_head_dim >= 1, who, ": v_head_dim ", c.v_head_dim, " must be >= 1 (0 = head_dim)");
    if (cuda) {
      ATTNSERVE_CHECK(dtype_in(c.kv_dtype, {DType::bf16, DType::f16, DType::fp8_e4m3}), who, ": kv_dtype ",
                      dtype_name(c.kv_dtype), " on CUDA: use bf16, f16 or fp8_e4m3");
    } else {
      ATTNSERVE_CHECK(dtype_in(c.kv_dtype, {DType::bf16, DType::f16, DType::fp8_e4m3, DType::f32}), who, ": kv_dtype ",
                      dtype_name(c.kv_dtype), ": use bf16, f16, fp8_e4m3 (or f32 on the CPU)");
    }
  } else {
    ATTNSERVE_CHECK(c.num_kv_heads == 1, who, ": MLA has one latent KV head: set num_kv_heads = 1, got ",
                    c.num_kv_heads);
    ATTNSERVE_CHECK(c.v_head_dim >= 1 && c.head_dim > c.v_head_dim, who, ": MLA needs head_dim = kv_lora_rank + ",
                    "qk_rope_head_dim > v_head_dim = kv_lora_rank, got head_dim ", c.head_dim, ", v_head_dim ",
                    c.v_head_dim, " (DeepSeek: 576 and 512)");
    ATTNSERVE_CHECK(c.kv_dtype == DType::bf16 || (!cuda && c.kv_dtype == DType::f32), who, ": MLA kv_dtype ",
                    dtype_name(c.kv_dtype), ": the latent cache is bf16", cuda ? "" : " (or f32 on the CPU)");
  }
  if (cuda) {  // head dims and the rest of what the kernels support: the op plans' one list
    const DenseCall call{.b = 1, .total_q = 1, .width = 1, .max_q = 1};
    const cuda::Support s = c.arch == AttentionArch::mha ? cuda::attn::can_implement(mha_problem(c, call), caps)
                                                         : cuda::mla::can_implement(mla_problem(c, call), caps);
    ATTNSERVE_CHECK(s.ok(), who, ": ", s.reason, " (the config's head_dim ", c.head_dim, ", v_head_dim ", c.v_head_dim,
                    "; or run on the CPU)");
  }
  ATTNSERVE_CHECK(c.sliding_window_size >= -1, who, ": sliding_window_size ", c.sliding_window_size,
                  " (use -1 for none)");
  ATTNSERVE_CHECK(c.attention_chunk_size >= 0, who, ": attention_chunk_size ", c.attention_chunk_size,
                  " must be >= 0 (0 = no local attention)");
  ATTNSERVE_CHECK(c.page_size >= 1 && c.attention_chunk_size % c.page_size == 0, who, ": attention_chunk_size ",
                  c.attention_chunk_size, " is not a multiple of page_size ", c.page_size,
                  ": local attention cuts requests at whole pages (pick a chunk that is a multiple of the page)");
  check_common(who, c.device, c.softmax_scale, c.softcap, c.page_size, c.req_to_token, c.kv_buffers);
  for (std::size_t l = 0; l < c.kv_buffers.size(); ++l) {
    const KvLayerBuffers& b = c.kv_buffers[l];
    if (c.arch == AttentionArch::mha) {
      const std::string k = "config.kv_buffers[" + std::to_string(l) + "].k";
      const std::string v = "config.kv_buffers[" + std::to_string(l) + "].v";
      check_tensor(who, k, b.k, {c.kv_dtype}, {-1, c.num_kv_heads, c.head_dim});
      check_tensor(who, v, b.v, {c.kv_dtype}, {b.k.shape[0], c.num_kv_heads, c.v_head_dim});
      check_last_dim_contiguous(who, v, b.v);
      check_same_device(who, {&b.k, &b.v});
      if (c.kv_dtype == DType::fp8_e4m3)
        ATTNSERVE_CHECK(std::isfinite(b.k_scale) && b.k_scale > 0 && std::isfinite(b.v_scale) && b.v_scale > 0, who,
                        ": config.kv_buffers[", l, "] fp8 scales must be finite and > 0, got ", b.k_scale, ", ",
                        b.v_scale);
    } else {
      check_tensor(who, "config.kv_buffers[" + std::to_string(l) + "].k (the latent cache)", b.k, {c.kv_dtype},
                   {-1, c.head_dim});
    }
  }
  return c;
}

NsaImpls checked_sparse_config(const SparseBackendConfig& c, const DeviceCaps& caps) {
  constexpr const char* who = "SparseBackend";
  ATTNSERVE_CHECK(c.num_q_heads >= 1, who, ": num_q_heads ", c.num_q_heads, " must be >= 1");
  ATTNSERVE_CHECK(c.kv_lora_rank == 512 && c.qk_rope_head_dim == 64, who,
                  ": the sparse kernels take kv_lora_rank 512 and qk_rope_head_dim 64 (DeepSeek-V3.2), got ",
                  c.kv_lora_rank, " and ", c.qk_rope_head_dim);
  ATTNSERVE_CHECK(c.index_topk >= 1, who, ": index_topk ", c.index_topk, " must be >= 1");
  ATTNSERVE_CHECK(c.index_n_heads >= 1, who, ": index_n_heads ", c.index_n_heads, " must be >= 1");
  ATTNSERVE_CHECK(c.index_head_dim == 128, who, ": index_head_dim ", c.index_head_dim,
                  ": the indexer key cache holds 128-dim keys");
  check_common(who, c.device, c.softmax_scale, c.softcap, c.page_size, c.req_to_token, c.kv_buffers);
  const bool fp8 = c.kv_cache_format == MlaCacheFormat::fp8_656;

  // automatic: the only path that reads the FP8-656 cache; with softcap the only path that has one;
  // else sparse_mla for prefill and, on Hopper and later, the gather path for decode (the seeds' fa3).
  auto resolve = [&](NsaImpl impl, bool decode) {
    if (impl != NsaImpl::automatic) return impl;
    if (fp8) return NsaImpl::sparse_fp8;
    if (c.softcap > 0.f) return NsaImpl::gather;
    if (decode && c.device.is_cuda() && caps.arch >= 90) return NsaImpl::gather;
    return NsaImpl::sparse_bf16;
  };
  NsaImpls r{resolve(c.prefill_impl, false), resolve(c.decode_impl, true)};
  for (auto [name, impl] : {std::pair{"prefill_impl", r.prefill}, std::pair{"decode_impl", r.decode}}) {
    if (impl == NsaImpl::sparse_fp8) {
      ATTNSERVE_CHECK(fp8, who, ": ", name, " sparse_fp8 reads the FP8-656 cache, but kv_cache_format is bf16: ",
                      "set kv_cache_format = fp8_656, or pick sparse_bf16 / gather");
    } else {
      ATTNSERVE_CHECK(!fp8, who, ": ", name, " ", to_string(impl), " reads a bf16 cache, but kv_cache_format is ",
                      "fp8_656: pick sparse_fp8 (the path that reads FP8-656), or store the cache in bf16");
    }
    ATTNSERVE_CHECK(impl == NsaImpl::gather || c.softcap == 0.f, who, ": softcap ", c.softcap, " needs the gather ",
                    "path (sparse_mla has no softcap): set ", name, " = gather, or softcap = 0");
  }
  const bool need_bf16 = r.prefill == NsaImpl::sparse_bf16 || r.decode == NsaImpl::sparse_bf16;
  for (std::size_t l = 0; l < c.kv_buffers.size(); ++l) {
    const std::string k = "config.kv_buffers[" + std::to_string(l) + "].k (the latent cache)";
    const TensorView& t = c.kv_buffers[l].k;
    if (fp8) {
      check_tensor(who, k, t, {DType::u8}, {-1, 656});
    } else if (c.device.is_cpu() && !need_bf16) {
      check_tensor(who, k, t, {DType::bf16, DType::f32}, {-1, 576});  // the gather path on the CPU takes f32 too
    } else {
      check_tensor(who, k, t, {DType::bf16}, {-1, 576});
    }
  }
  return r;
}

DensePlanConfig plan_config(const DenseBackendConfig& c) {
  return DensePlanConfig{.page_size = c.page_size,
                         .attention_chunk_size = c.attention_chunk_size,
                         .sliding_window_size = c.sliding_window_size,
                         .spec = c.spec};
}

SparsePlanConfig plan_config(const SparseBackendConfig& c) {
  return SparsePlanConfig{.page_size = c.page_size, .topk = c.index_topk, .spec = c.spec};
}

}  // namespace backend_detail
}  // namespace attnserve
