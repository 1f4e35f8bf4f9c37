// EAGLE draft trees (spec.topk > 1) on the CPU: the tree_attention op, the planner's tree inputs and
// errors, and the dense backend's two-part attention (prefix + tree merged by LSE) against a brute-force
// reference; a one-token tree and a chain tree equal linear verify; graph replay equals eager.
#include <gtest/gtest.h>

#include <cstring>

#include "attnserve/ops.h"
#include "cpu/tree_test_util.h"

namespace attnserve::test {
namespace {

constexpr double kTol = 2e-5;  // f32 kernels against the double reference (a few hundred keys)

std::vector<uint8_t> leading_bytes(const HostTensor& t, std::size_t n) {
  return std::vector<uint8_t>(t.bytes.begin(), t.bytes.begin() + std::ptrdiff_t(n));
}

HostTensor random_q(int64_t rows, int h, int d, std::mt19937_64& g) {
  HostTensor q(DType::f32, {rows, h, d});
  fill_view(q.view, g, 2.0);
  return q;
}

std::vector<double> run_backend(DenseBackend& be, const BatchSpec& b, const HostTensor& q, int h, int dv) {
  be.init_forward_metadata(b);
  const int64_t rows = be.forward_metadata().num_q_rows;
  HostTensor out(DType::f32, {rows, h, dv});
  poison(out);
  be.forward({.q = q.view, .out = out.view}, LayerSpec{.layer_id = 0});
  return to_doubles(out);
}

// Brute force of tree verify: token t of request r sees the prefix and its ancestors (and itself).
std::vector<double> verify_reference(const TreeSetup& s, const std::vector<int32_t>& parents, const HostTensor& q,
                                     float scale, float softcap = 0.f) {
  std::vector<double> out;
  for (int r = 0; r < s.bs; ++r) {
    const std::vector<int32_t> p(parents.begin() + r * s.n, parents.begin() + (r + 1) * s.n);
    for (int t = 0; t < s.n; ++t) {
      std::vector<int32_t> slots;
      for (int j = 0; j < s.seq_lens[std::size_t(r)]; ++j) slots.push_back(s.slot(r, j));
      for (int j = t; j >= 0; j = p[std::size_t(j)]) slots.push_back(s.slot(r, s.seq_lens[std::size_t(r)] + j));
      s.reference_row(q, int64_t(r) * s.n + t, slots, scale, softcap, out);
    }
  }
  return out;
}

// ---- The op -------------------------------------------------------------------------------------------

TEST(TreeAttentionOp, MatchesBruteForceWithRandomMasks) {
  auto g = rng_for_test();
  for (int d_rope : {0, 16}) {
    const int b = 3, h_q = 4, h_kv = 2, d = 32 + d_rope, dv = 48, max_keys = 64;
    const int64_t slots = 400;
    const std::vector<int32_t> q_lens = {5, 0, 64};
    std::vector<int32_t> cu = {0};
    for (int x : q_lens) cu.push_back(cu.back() + x);
    const int64_t rows = cu.back();
    HostTensor q(DType::f32, {rows, h_q, d - d_rope}), qr(DType::f32, {rows, h_q, std::max(1, d_rope)});
    fill_view(q.view, g, 2.0);
    fill_view(qr.view, g, 2.0);
    HostTensor k(DType::f32, {slots, h_kv, d}), v(DType::f32, {slots, h_kv, dv});
    fill_view(k.view, g, 1.5);
    fill_view(v.view, g, 1.0);
    HostTensor ks(DType::i32, {b, max_keys}), nk(DType::i32, {b}), cuq(DType::i32, {b + 1}), mask(DType::i64, {rows});
    std::vector<int32_t> perm(slots);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), g);
    const std::vector<int32_t> nkeys = {7, 3, 64};
    for (int r = 0; r < b; ++r) {
      nk.ptr<int32_t>()[r] = nkeys[std::size_t(r)];
      for (int j = 0; j < max_keys; ++j) ks.ptr<int32_t>()[r * max_keys + j] = perm[std::size_t(r * max_keys + j)];
    }
    std::memcpy(cuq.bytes.data(), cu.data(), cu.size() * 4);
    for (int64_t i = 0; i < rows; ++i) mask.ptr<int64_t>()[i] = int64_t(g());
    mask.ptr<int64_t>()[0] = 0;  // a row that sees nothing: out 0, lse -inf
    HostTensor out(DType::f32, {rows, h_q, dv}), lse(DType::f32, {rows, h_q});
    poison(out);
    const float scale = 0.3f, softcap = d_rope ? 5.f : 0.f;
    TreeAttentionArgs a{.q = q.view,
                        .k_cache = k.view,
                        .v_cache = v.view,
                        .key_slots = ks.view,
                        .num_keys = nk.view,
                        .cu_seqlens_q = cuq.view,
                        .mask = mask.view,
                        .out = out.view,
                        .lse = lse.view,
                        .max_seqlen_q = 64,
                        .softmax_scale = scale,
                        .softcap = softcap};
    if (d_rope) a.q_rope = qr.view;
    tree_attention(a);
    // Reference: q . k over the concatenated dims, keys by mask bit.
    std::vector<double> ref, ref_lse;
    for (int r = 0; r < b; ++r)
      for (int64_t row = cu[std::size_t(r)]; row < cu[std::size_t(r) + 1]; ++row)
        for (int h = 0; h < h_q; ++h) {
          std::vector<double> s;
          std::vector<int> keys;
          for (int j = 0; j < nkeys[std::size_t(r)]; ++j) {
            if (!((uint64_t(mask.ptr<int64_t>()[row]) >> j) & 1)) continue;
            const int64_t sl = ks.ptr<int32_t>()[r * max_keys + j];
            double dot = 0;
            for (int c = 0; c < d; ++c) {
              const double qc = c < d - d_rope ? q.get((row * h_q + h) * (d - d_rope) + c)
                                               : qr.get((row * h_q + h) * d_rope + (c - (d - d_rope)));
              dot += qc * k.get((sl * h_kv + h / 2) * d + c);
            }
            double x = scale * dot;
            if (softcap > 0) x = softcap * std::tanh(x / softcap);
            s.push_back(x);
            keys.push_back(int(sl));
          }
          double m = -INFINITY, tot = 0;
          for (double x : s) m = std::max(m, x);
          std::vector<double> acc(dv, 0.0);
          for (std::size_t j = 0; j < s.size(); ++j) {
            const double w = std::exp(s[j] - m);
            tot += w;
            for (int c = 0; c < dv; ++c) acc[std::size_t(c)] += w * v.get((int64_t(keys[j]) * h_kv + h / 2) * dv + c);
          }
          for (int c = 0; c < dv; ++c) ref.push_back(s.empty() ? 0.0 : acc[std::size_t(c)] / tot);
          ref_lse.push_back(s.empty() ? -INFINITY : m + std::log(tot));
        }
    EXPECT_LT(rel_l2(to_doubles(out), ref), kTol) << "d_rope " << d_rope;
    EXPECT_LT(rel_l2(to_doubles(lse), ref_lse), kTol) << "d_rope " << d_rope;
    EXPECT_EQ(lse.get(0), -INFINITY);
  }
}

TEST(TreeAttentionOp, RejectsBadArguments) {
  HostTensor q(DType::f32, {2, 2, 8}), k(DType::f32, {4, 1, 8}), v(DType::f32, {4, 1, 8});
  HostTensor ks(DType::i32, {1, 65}), ks_ok(DType::i32, {1, 2}), nk(DType::i32, {1}), cu(DType::i32, {2});
  HostTensor mask(DType::i64, {2}), out(DType::f32, {2, 2, 8});
  cu.ptr<int32_t>()[1] = 2;
  const TreeAttentionArgs ok{.q = q.view,
                             .k_cache = k.view,
                             .v_cache = v.view,
                             .key_slots = ks_ok.view,
                             .num_keys = nk.view,
                             .cu_seqlens_q = cu.view,
                             .mask = mask.view,
                             .out = out.view,
                             .max_seqlen_q = 2,
                             .softmax_scale = 1.f};
  EXPECT_NO_THROW(tree_attention(ok));
  TreeAttentionArgs a = ok;
  a.key_slots = ks.view;
  EXPECT_THROW(tree_attention(a), Error);  // more than 64 keys
  nk.ptr<int32_t>()[0] = 3;
  EXPECT_THROW(tree_attention(ok), Error);  // num_keys past key_slots' columns
  nk.ptr<int32_t>()[0] = 2;
  ks_ok.ptr<int32_t>()[1] = 4;
  EXPECT_THROW(tree_attention(ok), Error);  // slot outside the cache
}

// ---- Trees: validation -------------------------------------------------------------------------------

struct PlannerFixture {
  std::mt19937_64 g = rng_for_test();
  TreeSetup s{{5, 9}, 4, 1, 32, g};
  DensePlanner planner{DensePlanConfig{.page_size = 1, .spec = {.draft_token_num = 4, .topk = 2}}, Device::cpu()};
  PlannerFixture() { planner.init({.max_bs = 4, .max_num_tokens = 16, .max_context_len = 32}); }
  BatchSpec batch(const std::vector<int32_t>& parents) const {
    BatchSpec b = s.verify_batch(parents);
    b.req_to_token = s.table.view;
    return b;
  }
};

TEST(DraftTree, BadTreesAreClearErrors) {
  PlannerFixture f;
  auto message = [&](const BatchSpec& b) -> std::string {
    try {
      f.planner.plan(b);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::vector<int32_t> ok = {-1, 0, 0, 1, -1, 0, 1, 2};
  EXPECT_EQ(message(f.batch(ok)), "");
  EXPECT_NE(message(f.batch({-1, 0, 0, 4, -1, 0, 1, 2})).find("out of range"), std::string::npos);
  EXPECT_NE(message(f.batch({-1, 0, 0, -2, -1, 0, 1, 2})).find("out of range"), std::string::npos);
  EXPECT_NE(message(f.batch({-1, 2, 1, 1, -1, 0, 1, 2})).find("cycle"), std::string::npos);
  EXPECT_NE(message(f.batch({-1, 0, 0, 1, -1, 0, 1, 3})).find("cycle"), std::string::npos);  // self parent
  EXPECT_NE(message(f.batch({-1, 0, 0})).find("tree_parents"), std::string::npos);           // wrong size
  BatchSpec none = f.batch({});
  EXPECT_NE(message(none).find("exactly one"), std::string::npos);
  const std::vector<int64_t> masks = {1, 3, 5, 11, 1, 3, 7, 15};
  BatchSpec both = f.batch(ok);
  both.tree_mask = masks;
  EXPECT_NE(message(both).find("exactly one"), std::string::npos);
  // Masks: missing the token's own bit, bits past the tree, not an ancestor set.
  auto with_mask = [&](std::vector<int64_t> m) {
    BatchSpec b = f.batch({});
    b.tree_mask = m;
    return message(b);
  };
  EXPECT_EQ(with_mask(masks), "");
  EXPECT_NE(with_mask({1, 1, 5, 11, 1, 3, 7, 15}).find("lacks bit"), std::string::npos);
  EXPECT_NE(with_mask({1, 3, 5, 11 | 16, 1, 3, 7, 15}).find("bits past"), std::string::npos);
  EXPECT_NE(with_mask({1, 3, 5, 10, 1, 3, 7, 15}).find("ancestor set"), std::string::npos);  // 3 sees 1, not 0
  EXPECT_NE(with_mask({1, 3, 6, 11, 1, 3, 7, 15}).find("ancestor set"), std::string::npos);
  // A tree given to a chain planner, and a tree larger than 64 tokens.
  DensePlanner chain{DensePlanConfig{.page_size = 1, .spec = {.draft_token_num = 4}}, Device::cpu()};
  chain.init({.max_bs = 4, .max_num_tokens = 16, .max_context_len = 32});
  EXPECT_THROW(chain.plan(f.batch(ok)), Error);
  EXPECT_THROW(DensePlanner(DensePlanConfig{.spec = {.draft_token_num = 65, .topk = 4}}, Device::cpu()), Error);
  EXPECT_THROW(DensePlanner(DensePlanConfig{.spec = {.draft_token_num = 8, .num_steps = 9, .step_id = 8, .topk = 8}},
                            Device::cpu()),
               Error);  // 8 branches x 9 steps = 72 draft keys
  EXPECT_THROW(
      DensePlanner(DensePlanConfig{.sliding_window_size = 8, .spec = {.draft_token_num = 8, .topk = 2}}, Device::cpu()),
      Error);
  // The sparse planner takes trees too (test_tree_sparse.cpp), with the same configuration limits.
  EXPECT_NO_THROW(SparsePlanner(SparsePlanConfig{.spec = {.draft_token_num = 8, .topk = 2}}, Device::cpu()));
  EXPECT_THROW(SparsePlanner(SparsePlanConfig{.spec = {.draft_token_num = 65, .topk = 2}}, Device::cpu()), Error);
}

TEST(DraftTree, PlanHoldsPrefixMetadataAndTheTreePart) {
  PlannerFixture f;
  // Request 0: 0 root, 1 and 2 children of 0, 3 child of 1. Request 1: a forest, token 1 the second
  // root; 0 child of 2, 3 child of 1.
  const std::vector<int32_t> p = {-1, 0, 0, 1, 2, -1, 1, 1};
  const DenseMetadata& m = f.planner.plan(f.batch(p));
  ASSERT_TRUE(m.tree.enabled);
  EXPECT_EQ(m.num_q_rows, 8);
  EXPECT_EQ(m.max_seq_len_q, 4);
  EXPECT_EQ(m.max_seq_len_k, 9);  // the prefix only
  EXPECT_EQ(m.tree.max_keys, 4);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(m.cache_seqlens_int32.ptr<int32_t>()[r], f.s.seq_lens[std::size_t(r)]);
    EXPECT_EQ(m.cu_seqlens_q.ptr<int32_t>()[r + 1], 4 * (r + 1));
    EXPECT_EQ(m.tree.num_keys.ptr<int32_t>()[r], 4);
    const std::vector<int32_t> pr(p.begin() + 4 * r, p.begin() + 4 * r + 4);
    const std::vector<int64_t> anc = ancestor_masks(pr);
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(m.tree.key_slots.ptr<int32_t>()[r * 4 + t], f.s.slot(r, f.s.seq_lens[std::size_t(r)] + t));
      EXPECT_EQ(m.tree.mask.ptr<int64_t>()[r * 4 + t], anc[std::size_t(t)]) << r << " " << t;
      EXPECT_EQ(m.tree.positions.ptr<int32_t>()[r * 4 + t], f.s.seq_lens[std::size_t(r)] + depth_of(pr, t));
    }
    for (int j = 0; j < f.s.seq_lens[std::size_t(r)]; ++j)
      EXPECT_EQ(m.page_table.ptr<int32_t>()[r * 9 + j], f.s.slot(r, j));
  }
  // An empty batch plans (no rows).
  BatchSpec empty = f.batch({});
  empty.seq_lens = {}, empty.req_pool_indices = {};
  EXPECT_EQ(f.planner.plan(empty).num_q_rows, 0);
  const DenseMetadata& m1 = f.planner.plan(f.batch(p));
  ASSERT_EQ(&m1, &m);
  // The same trees as packed masks give the same metadata.
  std::vector<int64_t> masks;
  for (int r = 0; r < 2; ++r) {
    const auto a = ancestor_masks(std::vector<int32_t>(p.begin() + 4 * r, p.begin() + 4 * r + 4));
    masks.insert(masks.end(), a.begin(), a.end());
  }
  const std::vector<int64_t> mask_before(m.tree.mask.ptr<int64_t>(), m.tree.mask.ptr<int64_t>() + 8);
  const std::vector<int32_t> pos_before(m.tree.positions.ptr<int32_t>(), m.tree.positions.ptr<int32_t>() + 8);
  BatchSpec b = f.batch({});
  b.tree_mask = masks;
  const DenseMetadata& m2 = f.planner.plan(b);
  EXPECT_EQ(std::vector<int64_t>(m2.tree.mask.ptr<int64_t>(), m2.tree.mask.ptr<int64_t>() + 8), mask_before);
  EXPECT_EQ(std::vector<int32_t>(m2.tree.positions.ptr<int32_t>(), m2.tree.positions.ptr<int32_t>() + 8), pos_before);
}

// ---- Backend: tree verify ----------------------------------------------------------------------------

struct Shape {
  const char* name;
  int n;
  std::vector<int32_t> (*make)(int, std::mt19937_64&);
};

TEST(DraftTreeBackend, VerifyMatchesBruteForceForEveryTreeShape) {
  auto g = rng_for_test();
  const std::vector<Shape> shapes = {
      {"chain", 7, [](int n, std::mt19937_64&) { return chain_tree(n); }},
      {"star", 9, [](int n, std::mt19937_64&) { return star_tree(n); }},
      {"binary", 15, [](int n, std::mt19937_64&) { return kary_tree(n, 2); }},
      {"ternary", 13, [](int n, std::mt19937_64&) { return kary_tree(n, 3); }},
      {"random", 64, [](int n, std::mt19937_64& gg) { return random_tree(n, gg); }},
      {"shuffled", 16, [](int n, std::mt19937_64& gg) { return shuffled_tree(random_tree(n, gg), gg); }},
  };
  for (int page : {1, 16})
    for (const Shape& sh : shapes) {
      TreeSetup s({37, 0, 100}, sh.n, page, 192, g);
      std::vector<int32_t> parents;
      for (int r = 0; r < s.bs; ++r) {
        const auto p = sh.make(sh.n, g);
        parents.insert(parents.end(), p.begin(), p.end());
      }
      DenseBackend be(s.backend_config({.draft_token_num = sh.n, .topk = 4}));
      const HostTensor q = random_q(int64_t(s.bs) * s.n, s.h_q, s.d, g);
      const auto out = run_backend(be, s.verify_batch(parents), q, s.h_q, s.dv);
      EXPECT_LT(rel_l2(out, verify_reference(s, parents, q, be.config().softmax_scale)), kTol)
          << sh.name << " page " << page;
    }
}

TEST(DraftTreeBackend, OneTokenTreeAndChainTreeEqualLinearVerify) {
  auto g = rng_for_test();
  for (int n : {1, 6}) {
    TreeSetup s({12, 30, 3}, n, 16, 64, g, 8, 2, 32, 32);
    std::vector<int32_t> parents;
    for (int r = 0; r < s.bs; ++r) {
      const auto p = chain_tree(n);
      parents.insert(parents.end(), p.begin(), p.end());
    }
    const HostTensor q = random_q(int64_t(s.bs) * n, s.h_q, s.d, g);
    DenseBackend tree(s.backend_config({.draft_token_num = n, .topk = 2}));
    DenseBackend linear(s.backend_config({.draft_token_num = n}));
    BatchSpec lb = s.verify_batch({});
    const auto a = run_backend(tree, s.verify_batch(parents), q, s.h_q, s.dv);
    const auto b = run_backend(linear, lb, q, s.h_q, s.dv);
    EXPECT_LT(rel_l2(a, b), kTol) << "n " << n;
  }
}

TEST(DraftTreeBackend, MlaVerifyMatchesTheMhaFormOfTheSameLatents) {
  // MLA absorbed: keys are the latent rows [kv_c | k_rope], values kv_c. The same math as MHA with one
  // kv head, d = 576 and v = the first 512 columns: compare with the brute force on that view.
  auto g = rng_for_test();
  TreeSetup s({20, 7}, 10, 1, 40, g, 4, 1, 576, 512);
  std::vector<int32_t> parents;
  for (int r = 0; r < s.bs; ++r) {
    const auto p = random_tree(s.n, g);
    parents.insert(parents.end(), p.begin(), p.end());
  }
  // One latent cache [slots, 576]; the reference's K is it, V its first 512 columns.
  HostTensor latent(DType::f32, {s.num_slots, 576});
  fill_view(latent.view, g, 1.0);
  for (int64_t i = 0; i < s.num_slots; ++i)
    for (int c = 0; c < 576; ++c) {
      s.k.set(i * 576 + c, latent.get(i * 576 + c));
      if (c < 512) s.v.set(i * 512 + c, latent.get(i * 576 + c));
    }
  DenseBackendConfig c = s.backend_config({.draft_token_num = s.n, .topk = 3});
  c.arch = AttentionArch::mla;
  c.kv_buffers = {KvLayerBuffers{.k = latent.view}};
  DenseBackend be(c);
  const HostTensor q = random_q(int64_t(s.bs) * s.n, s.h_q, 576, g);  // packed [q_nope | q_rope]
  const auto out = run_backend(be, s.verify_batch(parents), q, s.h_q, 512);
  EXPECT_LT(rel_l2(out, verify_reference(s, parents, q, c.softmax_scale)), kTol);
}

TEST(DraftTreeBackend, UnsupportedLayersAndCachesAreClearErrors) {
  auto g = rng_for_test();
  TreeSetup s({8}, 4, 1, 32, g);
  const std::vector<int32_t> parents = star_tree(4);
  DenseBackend be(s.backend_config({.draft_token_num = 4, .topk = 2}));
  be.init_forward_metadata(s.verify_batch(parents));
  const HostTensor q = random_q(4, s.h_q, s.d, g);
  HostTensor out(DType::f32, {4, s.h_q, s.dv});
  EXPECT_NO_THROW(be.forward({.q = q.view, .out = out.view}, LayerSpec{.layer_id = 0}));
  try {
    be.forward({.q = q.view, .out = out.view}, LayerSpec{.layer_id = 0, .sliding_window_size = 3});
    ADD_FAILURE() << "a sliding-window layer with draft trees was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window"), std::string::npos) << e.what();
  }
  // An fp8 cache: refused at construction (the tree part reads bf16 | f16).
  HostTensor k8(DType::fp8_e4m3, {s.num_slots, s.h_kv, s.d}), v8(DType::fp8_e4m3, {s.num_slots, s.h_kv, s.dv});
  DenseBackendConfig c = s.backend_config({.draft_token_num = 4, .topk = 2});
  c.kv_dtype = DType::fp8_e4m3;
  c.kv_buffers = {KvLayerBuffers{.k = k8.view, .v = v8.view}};
  try {
    DenseBackend fp8(c);
    ADD_FAILURE() << "an fp8 cache with draft trees was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft trees"), std::string::npos) << e.what();
  }
}

// ---- Backend: draft decode with topk branches ---------------------------------------------------------

TEST(DraftTreeBackend, DraftDecodeBranchesSeeThePrefixAndTheirOwnPath) {
  auto g = rng_for_test();
  const int topk = 4, steps = 4;
  TreeSetup s({9, 33, 1}, 0, 16, 64, g);
  // Draft slots [bs, topk, steps]: fresh slots past every request's table entries.
  std::vector<int32_t> draft;
  std::vector<int32_t> free_slots(std::size_t(s.num_slots));
  std::iota(free_slots.begin(), free_slots.end(), 0);
  std::shuffle(free_slots.begin(), free_slots.end(), g);
  for (int i = 0; i < s.bs * topk * steps; ++i) draft.push_back(free_slots[std::size_t(i)]);
  for (int step = 0; step + 1 < steps; ++step) {
    DenseBackend be(s.backend_config({.num_steps = steps, .step_id = step, .topk = topk}));
    BatchSpec b;
    b.mode = ForwardMode::draft_decode;
    b.seq_lens = s.seq_lens;
    b.req_pool_indices = s.pool_rows;
    b.draft_slots = draft;
    be.init_forward_metadata(b);
    const DenseMetadata& m = be.forward_metadata();
    ASSERT_TRUE(m.tree.enabled);
    ASSERT_EQ(m.num_q_rows, s.bs * topk);
    const HostTensor q = random_q(m.num_q_rows, s.h_q, s.d, g);
    HostTensor out(DType::f32, {m.num_q_rows, s.h_q, s.dv});
    poison(out);
    be.forward_decode({.q = q.view, .out = out.view}, LayerSpec{.layer_id = 0});
    std::vector<double> ref;
    for (int r = 0; r < s.bs; ++r)
      for (int br = 0; br < topk; ++br) {
        std::vector<int32_t> slots;
        for (int j = 0; j < s.seq_lens[std::size_t(r)]; ++j) slots.push_back(s.slot(r, j));
        for (int st = 0; st <= step; ++st) slots.push_back(draft[std::size_t((r * topk + br) * steps + st)]);
        s.reference_row(q, int64_t(r) * topk + br, slots, be.config().softmax_scale, 0.f, ref);
        EXPECT_EQ(m.tree.positions.ptr<int32_t>()[r * topk + br], s.seq_lens[std::size_t(r)] + step);
      }
    EXPECT_LT(rel_l2(to_doubles(out), ref), kTol) << "step " << step;
  }
}

TEST(DraftTreeBackend, MultiStepBackendEqualsSingleStepBackendsEagerAndCaptured) {
  auto g = rng_for_test();
  const int topk = 3, steps = 4, graph_bs = 4;
  TreeSetup s({6, 21, 50}, 0, 16, 64, g);
  std::vector<int32_t> draft;
  for (int i = 0; i < s.bs * topk * steps; ++i) draft.push_back(int32_t(s.num_slots - 1 - 2 * i));
  BatchSpec b;
  b.mode = ForwardMode::draft_decode;
  b.seq_lens = s.seq_lens;
  b.req_pool_indices = s.pool_rows;
  b.draft_slots = draft;
  const SpeculativeConfig spec{.num_steps = steps, .topk = topk};
  DenseMultiStepBackend multi(s.backend_config(spec, graph_bs)), captured(s.backend_config(spec, graph_bs));
  multi.init_forward_metadata(b);
  captured.init_cuda_graph_state(graph_bs, graph_bs * topk);
  captured.init_forward_metadata_capture_cuda_graph(graph_bs);
  captured.init_forward_metadata_replay_cuda_graph(graph_bs, b);
  const int64_t rows = int64_t(s.bs) * topk;
  for (int i = 0; i + 1 < steps; ++i) {
    SpeculativeConfig one = spec;
    one.step_id = i;
    DenseBackend single(s.backend_config(one, graph_bs));
    const HostTensor q = random_q(int64_t(graph_bs) * topk, s.h_q, s.d, g);
    const HostTensor q_live = [&] {
      HostTensor t(DType::f32, {rows, s.h_q, s.d});
      std::memcpy(t.bytes.data(), q.bytes.data(), t.view.nbytes());
      return t;
    }();
    const auto want = run_backend(single, b, q_live, s.h_q, s.dv);
    HostTensor out(DType::f32, {rows, s.h_q, s.dv});
    multi.step(i).forward_decode({.q = q_live.view, .out = out.view}, LayerSpec{.layer_id = 0});
    EXPECT_EQ(to_doubles(out), want) << "step " << i;
    HostTensor out_g(DType::f32, {int64_t(graph_bs) * topk, s.h_q, s.dv});
    captured.step(i).forward_decode({.q = q.view, .out = out_g.view}, LayerSpec{.layer_id = 0});
    EXPECT_EQ(leading_bytes(out_g, out.view.nbytes()), leading_bytes(out, out.view.nbytes())) << "step " << i;
  }
}

// ---- Graphs: replay = eager -----------------------------------------------------------------------------

TEST(DraftTreeBackend, GraphReplayEqualsEager) {
  auto g = rng_for_test();
  const int n = 8, topk = 2, steps = 3, graph_bs = 4;
  TreeSetup s({14, 3, 40}, n, 16, 64, g);
  std::vector<int32_t> parents;
  for (int r = 0; r < s.bs; ++r) {
    const auto p = random_tree(n, g);
    parents.insert(parents.end(), p.begin(), p.end());
  }
  std::vector<int32_t> draft;
  for (int i = 0; i < s.bs * topk * steps; ++i) draft.push_back(int32_t(s.num_slots - 1 - i));
  for (ForwardMode mode : {ForwardMode::target_verify, ForwardMode::draft_decode}) {
    const SpeculativeConfig spec{.draft_token_num = n, .num_steps = steps, .step_id = 1, .topk = topk};
    DenseBackend eager(s.backend_config(spec, graph_bs)), graph(s.backend_config(spec, graph_bs));
    BatchSpec b = s.verify_batch(parents);
    b.mode = mode;
    b.draft_slots = draft;
    if (mode == ForwardMode::draft_decode) b.tree_parents = {};
    const int rows_per = mode == ForwardMode::target_verify ? n : topk;
    graph.init_cuda_graph_state(graph_bs, graph_bs * rows_per);
    graph.init_forward_metadata_capture_cuda_graph(graph_bs, graph_bs * rows_per, mode);
    graph.init_forward_metadata_replay_cuda_graph(graph_bs, b);
    const HostTensor q = random_q(int64_t(graph_bs) * rows_per, s.h_q, s.d, g);
    HostTensor out_g(DType::f32, {int64_t(graph_bs) * rows_per, s.h_q, s.dv});
    poison(out_g);
    graph.forward({.q = q.view, .out = out_g.view}, LayerSpec{.layer_id = 0});
    eager.init_forward_metadata(b);
    const int64_t live = eager.forward_metadata().num_q_rows;
    HostTensor out_e(DType::f32, {live, s.h_q, s.dv});
    eager.forward({.q = q.view.slice(0, 0, live), .out = out_e.view}, LayerSpec{.layer_id = 0});
    EXPECT_EQ(leading_bytes(out_g, out_e.view.nbytes()), leading_bytes(out_e, out_e.view.nbytes())) << to_string(mode);
    // Padding rows see no key: zeros.
    for (int64_t i = live * s.h_q * s.dv; i < out_g.numel(); ++i) ASSERT_EQ(out_g.get(i), 0.f) << to_string(mode);
  }
}

// tree_attention with the prefix part's state (prefix_out / prefix_lse) equals the tree part alone
// merged with that state by merge_state, in place (prefix_out = out) and into another tensor; prefix
// states without keys (lse -inf and +inf) contribute nothing.
TEST(TreeAttentionOp, MergesThePrefixStateAsMergeStateDoes) {
  auto g = rng_for_test();
  const int b = 2, h_q = 4, h_kv = 2, d = 32, dv = 32, max_keys = 16;
  const int64_t slots = 64, rows = 10;
  HostTensor q(DType::f32, {rows, h_q, d}), k(DType::f32, {slots, h_kv, d}), v(DType::f32, {slots, h_kv, dv});
  fill_view(q.view, g, 2.0);
  fill_view(k.view, g, 1.5);
  fill_view(v.view, g, 1.0);
  HostTensor ks(DType::i32, {b, max_keys}), nk(DType::i32, {b}), cuq(DType::i32, {b + 1}), mask(DType::i64, {rows});
  for (int j = 0; j < b * max_keys; ++j) ks.ptr<int32_t>()[j] = (j * 7) % int(slots);
  nk.ptr<int32_t>()[0] = 5, nk.ptr<int32_t>()[1] = 16;
  cuq.ptr<int32_t>()[0] = 0, cuq.ptr<int32_t>()[1] = 4, cuq.ptr<int32_t>()[2] = int32_t(rows);
  for (int64_t i = 0; i < rows; ++i) mask.ptr<int64_t>()[i] = int64_t(g());
  mask.ptr<int64_t>()[1] = 0;  // no tree key: the prefix state alone
  HostTensor prefix(DType::f32, {rows, h_q, dv}), prefix_lse(DType::f32, {rows, h_q});
  fill_view(prefix.view, g, 1.0);
  fill_view(prefix_lse.view, g, 3.0);
  prefix_lse.set(2 * h_q, -INFINITY), prefix_lse.set(3 * h_q + 1, INFINITY);  // prefix states without keys
  prefix_lse.set(1 * h_q + 2, -INFINITY);                                     // row 1: neither part has a key
  TreeAttentionArgs a{.q = q.view,
                      .k_cache = k.view,
                      .v_cache = v.view,
                      .key_slots = ks.view,
                      .num_keys = nk.view,
                      .cu_seqlens_q = cuq.view,
                      .mask = mask.view,
                      .max_seqlen_q = 6,
                      .softmax_scale = 0.2f};
  HostTensor tree_out(DType::f32, {rows, h_q, dv}), tree_lse(DType::f32, {rows, h_q});
  a.out = tree_out.view, a.lse = tree_lse.view;
  tree_attention(a);
  HostTensor want(DType::f32, {rows, h_q, dv}), want_lse(DType::f32, {rows, h_q});
  merge_state({.v_a = prefix.view,
               .s_a = prefix_lse.view,
               .v_b = tree_out.view,
               .s_b = tree_lse.view,
               .v_out = want.view,
               .s_out = want_lse.view});
  for (bool in_place : {true, false}) {
    SCOPED_TRACE(in_place ? "in place" : "separate");
    HostTensor out = prefix, lse(DType::f32, {rows, h_q});
    if (!in_place) poison(out);
    poison(lse);
    a.out = out.view, a.lse = lse.view, a.prefix_out = in_place ? out.view : prefix.view;
    a.prefix_lse = prefix_lse.view;
    tree_attention(a);
    EXPECT_LT(rel_l2(to_doubles(out), to_doubles(want)), kTol);
    for (int64_t i = 0; i < rows * h_q; ++i) {
      if (std::isinf(want_lse.get(i))) EXPECT_EQ(lse.get(i), want_lse.get(i)) << i;
      else EXPECT_NEAR(lse.get(i), want_lse.get(i), 1e-5) << i;
    }
  }
}

}  // namespace
}  // namespace attnserve::test
