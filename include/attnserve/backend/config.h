// What an attention backend is configured with (once, from the model and the server settings), what
// each layer adds (LayerSpec), and the inputs of one forward call (ForwardArgs). The backends
// themselves: backend/dense.h, backend/sparse.h, backend/multi_step.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "attnserve/kv_cache.h"
#include "attnserve/plan.h"

namespace attnserve {

// ---- Buffers the backend reads ------------------------------------------------------------------

// One layer's KV buffers: what the seeds' token_to_kv_pool.get_kv_buffer(layer_id) returns.
//   MHA: k [num_slots, h_kv, head_dim] and v [num_slots, h_kv, v_head_dim]: bf16 | f16 | fp8_e4m3
//        (f32 too on the CPU: attention only, the stores write bf16 | f16 | fp8).
//   MLA: k = the latent cache, rows [kv_c (512) | k_rope (64)]: [num_slots, 576] bf16 (f32 too on the CPU
//        for attention), or [num_slots, 656] u8 in the FP8-656 format (sparse backend); v absent.
// k_scale / v_scale: an fp8 MHA cache's per-layer scales (stored = fp8(x / scale)), 1 otherwise.
struct KvLayerBuffers {
  TensorView k;
  TensorView v{};
  float k_scale = 1.f;
  float v_scale = 1.f;
};
// Every layer of a pool, in layer order (views: the pool must outlive the backend).
std::vector<KvLayerBuffers> kv_buffers_of(const MhaKvPool& pool);
std::vector<KvLayerBuffers> kv_buffers_of(const MlaKvPool& pool);

// ---- Per layer ------------------------------------------------------------------------------------

// The seeds' RadixAttention fields. An unset optional takes the backend config's value.
struct LayerSpec {
  int layer_id = 0;                          // index into config.kv_buffers
  std::optional<float> scaling{};            // softmax scale (DeepSeek-V3.2: 192^-0.5 * mscale^2)
  std::optional<float> logit_cap{};          // softcap; 0 = off
  std::optional<int> sliding_window_size{};  // -1 = none; w >= 0: the row at position p sees keys p - w .. p
  bool use_irope = false;                    // a local (chunked) attention layer (Llama 4); needs
                                             //   config.attention_chunk_size > 0, else the layer is global
  std::optional<float> k_scale{};            // fp8 MHA cache; unset: the KvLayerBuffers' scales
  std::optional<float> v_scale{};
};

// ---- One forward call -------------------------------------------------------------------------------

// The seeds' forward_extend / forward_decode arguments. Views live on the backend's device. T is the
// number of query rows of the current metadata (num_q_rows dense, num_rows sparse). A 2-D q/out
// [T, heads * dim] is read as [T, heads, dim] (contiguous rows).
struct ForwardArgs {
  TensorView q;                // MHA: [T, h_q, head_dim]. MLA: q_nope [T, h_q, 512] with q_rope, or the
                               //   packed [T, h_q, 576] ([q_nope | q_rope]) with q_rope absent
  TensorView out;              // [T, h_q, v_head_dim], q's dtype: written and returned
  TensorView k{};              // new keys to store (absent: nothing stored). MHA [T, h_kv, head_dim];
                               //   MLA: the latent kv_c [T, 512] (or [T, 1, 512])
  TensorView v{};              // MHA: [T, h_kv, v_head_dim] (required with k). MLA: ignored
  TensorView q_rope{};         // MLA split form: [T, h_q, 64]
  TensorView k_rope{};         // MLA: [T, 64] (or [T, 1, 64]), required with k
  TensorView out_cache_loc{};  // [T] i32 | i64 slots of the new tokens, required when storing
  bool save_kv_cache = true;
  TensorView topk_indices{};  // sparse backend: [T, index_topk] i32, the rows' top-k token slots (what
                              //   topk_transform returns; positions instead when fuse_topk = false)
};

// ---- Dense backend (FlashAttention backend of the seeds) -------------------------------------------

enum class AttentionArch : uint8_t {
  mha,  // MHA / GQA / MQA: separate K and V pools
  mla,  // MLA, absorbed: one latent pool [num_slots, v_head_dim + rope]; q as q_nope / q_rope
};

struct DenseBackendConfig {
  // Model, per tensor-parallel rank.
  AttentionArch arch = AttentionArch::mha;
  int num_q_heads = 0;           // tp_q_head_num
  int num_kv_heads = 0;          // tp_k_head_num (MLA: 1)
  int head_dim = 0;              // q/k head dim (MLA: kv_lora_rank + qk_rope_head_dim, 576)
  int v_head_dim = 0;            // MHA: 0 = head_dim. MLA: kv_lora_rank (512)
  DType kv_dtype = DType::bf16;  // the cache's dtype (every layer of kv_buffers must have it)
  float softmax_scale = 0.f;     // for layers without `scaling`; 0 = every layer must give one
  float softcap = 0.f;           // for layers without `logit_cap`
  int sliding_window_size = -1;  // for layers without `sliding_window_size`
  // Server.
  int page_size = 1;
  int attention_chunk_size = 0;  // local attention chunk for use_irope layers; 0 = off
  bool deterministic = false;    // enable_deterministic_inference: fixed split sizes
  SpeculativeConfig spec{};      // EAGLE (topk 1): draft_token_num, num_steps, step_id
  PlanCapacity capacity{};       // max_bs, max_num_tokens, max_context_len: every buffer is sized once
  Device device{};
  // Buffers.
  TensorView req_to_token{};               // [pool_size, max_context_len] i32 (a BatchSpec's own table wins)
  std::vector<KvLayerBuffers> kv_buffers;  // one per layer, indexed by LayerSpec::layer_id
};

// ---- Sparse backend (DeepSeek-V3.2 NSA backend of the seeds) ----------------------------------------

// Which kernel serves a forward call (the seeds' nsa_prefill_backend / nsa_decode_backend).
enum class NsaImpl : uint8_t {
  automatic,    // chosen per device and cache format (see SparseBackend::resolved_*_impl)
  sparse_bf16,  // sparse_mla over the bf16 cache, indices = top-k slots            (seeds: flashmla_sparse)
  sparse_fp8,   // sparse_mla over the FP8-656 cache                                 (seeds: flashmla_kv)
  gather,       // mla_attention, page size 1, page table = the top-k slots, bf16 cache (seeds: fa3)
};
const char* to_string(NsaImpl impl);
// Our names or the seeds' ("flashmla_sparse", "flashmla_kv", "fa3", "auto"/"automatic").
NsaImpl parse_nsa_impl(std::string_view name);

struct SparseBackendConfig {
  // Model, per tensor-parallel rank.
  int num_q_heads = 0;
  int kv_lora_rank = 512;                                 // d_v (the kernels take exactly 512)
  int qk_rope_head_dim = 64;                              // (exactly 64)
  MlaCacheFormat kv_cache_format = MlaCacheFormat::bf16;  // nsa_kv_cache_store_fp8 -> fp8_656
  int index_topk = 2048;                                  // nsa_index_topk
  int index_n_heads = 64;                                 // lightning indexer heads
  int index_head_dim = 128;                               // (exactly 128: IndexerKeyLayout)
  float softmax_scale = 0.f;                              // for layers without `scaling`; 0 = every layer must give one
  float softcap = 0.f;                                    // gather impl only (sparse_mla has none)
  // Server.
  int page_size = 64;  // the real page size (real_page_table, the indexer key pool)
  bool deterministic = false;
  NsaImpl prefill_impl = NsaImpl::automatic;  // forward_extend (extend, target_verify, draft_extend)
  NsaImpl decode_impl = NsaImpl::automatic;   // forward_decode (decode, draft_decode)
  bool fuse_topk = true;                      // NSA_FUSE_TOPK: topk_transform returns slots; false: positions, which
                                              //   forward transforms through page_table_1
  SpeculativeConfig spec{};
  PlanCapacity capacity{};
  Device device{};
  // Buffers.
  TensorView req_to_token{};
  std::vector<KvLayerBuffers> kv_buffers;  // MLA latent caches, one per layer
};

}  // namespace attnserve
