// Backends refuse bad configurations at construction, and bad calls before touching anything, with
// messages that name what to change.
#include <gtest/gtest.h>

#include <string>

#include "test_backend_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr int kCtx = 32;
const PlanCapacity kCap{.max_bs = 4, .max_num_tokens = 32, .max_context_len = kCtx};

// Runs `f`, expects attnserve::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
  }
}

struct DenseWorld {
  std::mt19937_64 g;
  TestPool pool;
  MhaKvPool kv;
  explicit DenseWorld(std::mt19937_64 gen)
      : g(gen), pool(4, kCtx, 4, g), kv(2, pool_slots(pool), 2, 16, 16, DType::bf16, Device::cpu()) {}
  DenseBackendConfig config() {
    DenseBackendConfig c;
    c.num_q_heads = 4, c.num_kv_heads = 2, c.head_dim = 16;
    c.softmax_scale = 0.25f;
    c.page_size = 4;
    c.capacity = kCap;
    c.req_to_token = pool.view();
    c.kv_buffers = kv_buffers_of(kv);
    return c;
  }
};

struct SparseWorld {
  std::mt19937_64 g;
  TestPool pool;
  MlaKvPool kv;
  explicit SparseWorld(std::mt19937_64 gen)
      : g(gen), pool(4, kCtx, 4, g), kv(1, pool_slots(pool), MlaCacheFormat::bf16, Device::cpu()) {}
  SparseBackendConfig config() {
    SparseBackendConfig c;
    c.num_q_heads = 2;
    c.index_topk = 8;
    c.softmax_scale = 0.1f;
    c.page_size = 4;
    c.prefill_impl = c.decode_impl = NsaImpl::sparse_bf16;
    c.spec = {.draft_token_num = 2};
    c.capacity = kCap;
    c.req_to_token = pool.view();
    c.kv_buffers = kv_buffers_of(kv);
    return c;
  }
};

}  // namespace

TEST(BackendErrors, DenseConfiguration) {
  DenseWorld w(rng_for_test());
  auto with = [&](auto edit) {
    DenseBackendConfig c = w.config();
    edit(c);
    return [c] { DenseBackend b(c); };
  };
  EXPECT_NO_THROW(with([](DenseBackendConfig&) {})());
  expect_error(with([](auto& c) { c.num_q_heads = 6, c.num_kv_heads = 4; }),
               {"num_q_heads 6", "multiple of num_kv_heads 4"});
  expect_error(with([](auto& c) { c.num_kv_heads = 0; }), {"num_kv_heads 0", ">= 1"});
  expect_error(with([](auto& c) { c.attention_chunk_size = 6; }),
               {"attention_chunk_size 6", "multiple of page_size 4"});
  expect_error(with([](auto& c) { c.kv_buffers.clear(); }), {"kv_buffers is empty", "kv_buffers_of"});
  expect_error(with([](auto& c) { c.req_to_token = {}; }), {"req_to_token is missing"});
  expect_error(with([](auto& c) { c.kv_dtype = DType::f16; }), {"kv_buffers[0].k", "dtype bf16"});
  expect_error(with([](auto& c) { c.head_dim = 32; }), {"kv_buffers[0].k", "shape"});
  expect_error(with([](auto& c) { c.page_size = 5; }), {"not a whole number of pages of page_size 5"});
  expect_error(with([](auto& c) { c.kv_buffers[1].v = {}; }), {"kv_buffers[1].v", "required"});
  expect_error(with([](auto& c) { c.softcap = -1.f; }), {"softcap"});
  expect_error(with([](auto& c) { c.sliding_window_size = -3; }), {"sliding_window_size -3"});
  expect_error(with([](auto& c) { c.arch = AttentionArch::mla; }), {"MLA has one latent KV head", "num_kv_heads = 1"});
  expect_error(with([](auto& c) { c.kv_dtype = DType::i32; }), {"kv_dtype i32"});
  expect_error(with([](auto& c) { c.device = Device::cuda(0); }), {"Device::cpu()"});
  expect_error(with([](auto& c) { c.capacity.max_bs = 0; }), {"max_bs"});
  expect_error(with([](auto& c) { c.spec.step_id = 3, c.spec.num_steps = 2; }), {"step_id"});
}

TEST(BackendErrors, SparseConfiguration) {
  SparseWorld w(rng_for_test());
  MlaKvPool fp8(1, pool_slots(w.pool), MlaCacheFormat::fp8_656, Device::cpu());
  auto with = [&](auto edit) {
    SparseBackendConfig c = w.config();
    edit(c);
    return [c] { SparseBackend b(c); };
  };
  EXPECT_NO_THROW(with([](SparseBackendConfig&) {})());
  expect_error(with([](auto& c) { c.kv_lora_rank = 256; }), {"kv_lora_rank 512"});
  expect_error(with([](auto& c) { c.index_head_dim = 64; }), {"index_head_dim 64"});
  expect_error(with([](auto& c) { c.index_topk = 0; }), {"index_topk 0"});
  expect_error(with([](auto& c) { c.decode_impl = NsaImpl::sparse_fp8; }),
               {"decode_impl sparse_fp8", "kv_cache_format = fp8_656"});
  expect_error(with([&](auto& c) { c.kv_cache_format = MlaCacheFormat::fp8_656, c.kv_buffers = kv_buffers_of(fp8); }),
               {"prefill_impl sparse_bf16", "pick sparse_fp8"});
  expect_error(with([](auto& c) { c.softcap = 5.f; }), {"softcap 5", "gather"});
  expect_error(with([](auto& c) {
                 c.kv_cache_format = MlaCacheFormat::fp8_656, c.prefill_impl = c.decode_impl = NsaImpl::sparse_fp8;
               }),
               {"kv_buffers[0].k", "u8"});
  expect_error(with([](auto& c) { c.page_size = 5; }), {"page_size 5"});
  expect_error(with([](auto& c) { c.kv_buffers.clear(); }), {"kv_buffers is empty"});
  expect_error(with([](auto& c) { c.num_q_heads = 0; }), {"num_q_heads 0"});
}

TEST(BackendErrors, DenseCalls) {
  DenseWorld w(rng_for_test());
  DenseBackend b(w.config());
  HostTensor q = random_tensor(DType::bf16, {2, 4, 16}, w.g), out(DType::bf16, {2, 4, 16});
  HostTensor k = random_tensor(DType::bf16, {2, 2, 16}, w.g), v = random_tensor(DType::bf16, {2, 2, 16}, w.g);
  HostTensor loc = i32_tensor({5, 9});
  const LayerSpec l0{.layer_id = 0};
  expect_error([&] { b.forward_decode({.q = q.view, .out = out.view}, l0); }, {"no forward metadata"});
  const std::vector<int32_t> seq{7, 3}, rows{0, 1};
  b.init_forward_metadata({.mode = ForwardMode::decode, .seq_lens = seq, .req_pool_indices = rows});
  expect_error([&] { b.forward_extend({.q = q.view, .out = out.view}, l0); }, {"decode batch", "forward_decode"});
  expect_error([&] { b.forward_decode({.q = q.view, .out = out.view}, {.layer_id = 2}); }, {"layer_id 2", "2 layers"});
  expect_error([&] { b.forward_decode({.q = q.view.slice(0, 0, 1), .out = out.view}, l0); },
               {"'q' has 1 rows", "2 query rows"});
  expect_error([&] { b.forward_decode({.q = q.view, .out = out.view, .k = k.view, .v = v.view}, l0); },
               {"'out_cache_loc' is required", "save_kv_cache = false"});
  expect_error([&] { b.forward_decode({.q = q.view, .out = out.view, .k = k.view, .out_cache_loc = loc.view}, l0); },
               {"'v' is required"});
  expect_error([&] { b.forward_decode({.q = q.view, .out = out.view.slice(2, 0, 8)}, l0); }, {"'out'"});
  DenseBackendConfig no_scale = w.config();
  no_scale.softmax_scale = 0.f;
  DenseBackend b2(no_scale);
  b2.init_forward_metadata({.mode = ForwardMode::decode, .seq_lens = seq, .req_pool_indices = rows});
  expect_error([&] { b2.forward_decode({.q = q.view, .out = out.view}, l0); }, {"no usable softmax scale", "scaling"});
  EXPECT_NO_THROW(b2.forward_decode({.q = q.view, .out = out.view}, {.layer_id = 0, .scaling = 0.5f}));
  // A 2-D q / out [rows, heads * dim] is read as [rows, heads, dim].
  EXPECT_NO_THROW(b.forward_decode({.q = q.view.reshape({2, 64}), .out = out.view.reshape({2, 64})}, l0));
  // Graphs.
  expect_error([&] { b.init_forward_metadata_capture_cuda_graph(2, 2, ForwardMode::decode); },
               {"init_cuda_graph_state"});
  expect_error([&] { b.init_cuda_graph_state(8, 32); }, {"max_bs 8", "capacity.max_bs = 4"});
  b.init_cuda_graph_state(4, 32);
  expect_error([&] { b.init_forward_metadata_capture_cuda_graph(2, 3, ForwardMode::decode); },
               {"num_tokens 3", "2 query rows"});
  expect_error([&] { b.init_forward_metadata_capture_cuda_graph(2, 2, ForwardMode::extend); }, {"extend"});
  // A bad batch leaves the metadata usable.
  const std::vector<int32_t> too_long{kCtx + 1, 3};
  EXPECT_THROW(b.init_forward_metadata({.mode = ForwardMode::decode, .seq_lens = too_long, .req_pool_indices = rows}),
               Error);
  EXPECT_NO_THROW(b.forward_decode({.q = q.view, .out = out.view}, l0));
}

TEST(BackendErrors, SparseCalls) {
  SparseWorld w(rng_for_test());
  SparseBackend b(w.config());
  HostTensor q = random_tensor(DType::bf16, {2, 2, 576}, w.g), out(DType::bf16, {2, 2, 512});
  HostTensor q_nope = random_tensor(DType::bf16, {2, 2, 512}, w.g),
             q_rope = random_tensor(DType::bf16, {2, 2, 64}, w.g);
  HostTensor logits = random_tensor(DType::f32, {2, kCtx}, w.g);
  const LayerSpec l0{.layer_id = 0};
  expect_error([&] { b.topk_transform(logits.view, 8); }, {"no forward metadata"});
  const std::vector<int32_t> seq{7, 3}, rows{0, 1};
  b.init_forward_metadata({.mode = ForwardMode::decode, .seq_lens = seq, .req_pool_indices = rows});
  expect_error([&] { b.topk_transform(logits.view, 16); }, {"topk 16", "index_topk 8"});
  expect_error([&] { b.topk_transform(logits.view.slice(0, 0, 1), 8); }, {"logits"});
  const TensorView idx = b.topk_transform(logits.view, 8);
  expect_error([&] { b.forward_decode({.q = q.view, .out = out.view}, l0); }, {"'topk_indices' is required"});
  expect_error(
      [&] { b.forward_decode({.q = q_nope.view, .out = out.view, .q_rope = q_rope.view, .topk_indices = idx}, l0); },
      {"packed", "gather"});
  expect_error(
      [&] { b.forward_decode({.q = q.view, .out = out.view, .topk_indices = idx}, {.layer_id = 0, .logit_cap = 3.f}); },
      {"logit_cap", "gather"});
  expect_error(
      [&] {
        b.forward_decode({.q = q.view, .out = out.view, .topk_indices = idx},
                         {.layer_id = 0, .sliding_window_size = 4});
      },
      {"sliding window"});
  expect_error([&] { b.forward_decode({.q = q.view, .out = out.view, .topk_indices = idx.slice(1, 0, 4)}, l0); },
               {"topk_indices"});
  EXPECT_NO_THROW(b.forward_decode({.q = q.view, .out = out.view, .topk_indices = idx}, l0));
  // The halves of one packed q are taken as the packed q.
  EXPECT_NO_THROW(b.forward_decode(
      {.q = q.view.slice(2, 0, 512), .out = out.view, .q_rope = q.view.slice(2, 512, 576), .topk_indices = idx}, l0));
}
