// Draft trees on the GPU, every tree shape (scripts/gpu_check.sh; skipped without a GPU):
//   - tree_attention on CUDA (the tensor-core kernel at these MHA / GQA shapes) against the CPU oracle on the
//     same inputs, one request per tree shape (chain, star, full k-ary, random, relabelled, one token, an
//     empty request), bf16 and f16, group 1 / 4 / 6, d 64 / 128, without a prefix state, with one in a
//     separate tensor and merged in place; run twice: identical bits;
//   - the dense backend's tree verify on CUDA for every tree shape against the CPU backend, and a tree of
//     one token or a chain against linear verify on CUDA (the same attention, computed another way).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <string>

#include "attnserve/ops.h"
#include "gpu/tree_gpu_util.h"

namespace attnserve::test {
namespace {

struct TreeShape {
  const char* name;
  std::function<std::vector<int32_t>(std::mt19937_64&)> make;
};

// One request per shape (n <= 64 tokens each); the empty request has no rows and no keys.
std::vector<TreeShape> every_shape() {
  return {
      {"chain 64", [](std::mt19937_64&) { return chain_tree(64); }},
      {"star 64", [](std::mt19937_64&) { return star_tree(64); }},
      {"4-ary 64", [](std::mt19937_64&) { return kary_tree(64, 4); }},
      {"random 64", [](std::mt19937_64& g) { return random_tree(64, g); }},
      {"empty", [](std::mt19937_64&) { return std::vector<int32_t>{}; }},
      {"relabelled random 37", [](std::mt19937_64& g) { return shuffled_tree(random_tree(37, g), g); }},
      {"one token", [](std::mt19937_64&) { return chain_tree(1); }},
      {"binary 16", [](std::mt19937_64&) { return kary_tree(16, 2); }},
      {"ternary 9", [](std::mt19937_64&) { return kary_tree(9, 3); }},
  };
}

HostTensor random_of(DType dt, std::initializer_list<int64_t> shape, std::mt19937_64& g, double range) {
  HostTensor h(dt, shape);
  fill_view(h.view, g, range);
  return h;
}

// Non-finite positions must agree; the finite LSEs within f32 accuracy.
void expect_lse_close(const HostTensor& got, const HostTensor& want) {
  std::vector<double> a = to_doubles(got), b = to_doubles(want);
  int64_t mismatched = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    mismatched += std::isinf(a[i]) != std::isinf(b[i]) || (std::isinf(a[i]) && a[i] != b[i]);
    if (std::isinf(b[i])) a[i] = b[i] = 0;
  }
  EXPECT_EQ(mismatched, 0);
  EXPECT_LT(rel_l2(a, b), 1e-5);
}

enum class Prefix { none, separate, in_place };

struct KernelCase {
  DType dt;
  int h_q, h_kv, d;
  Prefix prefix;
};

TEST(TreeGpu, TensorCoreKernelMatchesCpuOracleForEveryTreeShape) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  const std::vector<TreeShape> shapes = every_shape();
  for (const KernelCase& c :
       {KernelCase{DType::bf16, 32, 8, 128, Prefix::in_place}, KernelCase{DType::bf16, 8, 8, 64, Prefix::none},
        KernelCase{DType::f16, 12, 2, 128, Prefix::separate}, KernelCase{DType::f16, 32, 8, 128, Prefix::none},
        KernelCase{DType::bf16, 12, 2, 64, Prefix::in_place}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dt)) + " h_q " + std::to_string(c.h_q) + " h_kv " + std::to_string(c.h_kv) +
                 " d " + std::to_string(c.d) + " prefix " + std::to_string(int(c.prefix)));
    const int b = int(shapes.size()), max_keys = kTreeMaxKeys;
    const int64_t slots = 1000;
    std::vector<int32_t> perm(slots);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), g);
    HostTensor ks(DType::i32, {b, max_keys}), nk(DType::i32, {b}), cuq(DType::i32, {b + 1});
    std::vector<int64_t> masks;
    cuq.ptr<int32_t>()[0] = 0;
    int max_rows = 1;
    for (int r = 0; r < b; ++r) {
      const auto parents = shapes[std::size_t(r)].make(g);
      const auto m = ancestor_masks(parents);
      const int n = int(parents.size());
      masks.insert(masks.end(), m.begin(), m.end());
      nk.ptr<int32_t>()[r] = n;
      cuq.ptr<int32_t>()[r + 1] = cuq.ptr<int32_t>()[r] + n;
      max_rows = std::max(max_rows, n);
      for (int j = 0; j < max_keys; ++j) ks.ptr<int32_t>()[r * max_keys + j] = perm[std::size_t(r * max_keys + j)];
    }
    const int64_t rows = int64_t(masks.size());
    HostTensor mask(DType::i64, {rows});
    std::memcpy(mask.bytes.data(), masks.data(), masks.size() * 8);
    HostTensor q = random_of(c.dt, {rows, c.h_q, c.d}, g, 2.0);
    HostTensor k = random_of(c.dt, {slots, c.h_kv, c.d}, g, 1.5), v = random_of(c.dt, {slots, c.h_kv, c.d}, g, 1.0);
    HostTensor prefix = random_of(c.dt, {rows, c.h_q, c.d}, g, 1.0), plse(DType::f32, {rows, c.h_q});
    fill_view(plse.view, g, 4.0);
    for (int64_t i = 0; i < rows * c.h_q; i += 13) plse.set(i, (i / 13) % 2 ? INFINITY : -INFINITY);
    HostTensor out(c.dt, {rows, c.h_q, c.d}), lse(DType::f32, {rows, c.h_q});
    if (c.prefix == Prefix::in_place) out = prefix;
    else poison(out);

    TreeAttentionArgs a{.q = q.view,
                        .k_cache = k.view,
                        .v_cache = v.view,
                        .key_slots = ks.view,
                        .num_keys = nk.view,
                        .cu_seqlens_q = cuq.view,
                        .mask = mask.view,
                        .out = out.view,
                        .lse = lse.view,
                        .max_seqlen_q = max_rows,
                        .softmax_scale = 1.f / std::sqrt(float(c.d))};
    if (c.prefix != Prefix::none) {
      a.prefix_out = c.prefix == Prefix::in_place ? out.view : prefix.view;
      a.prefix_lse = plse.view;
    }
    tree_attention(a);  // the CPU oracle

    DeviceTensor dq(q), dk(k), dv(v), dks(ks), dnk(nk), dcu(cuq), dmask(mask), dprefix(prefix), dplse(plse), dout(out),
        dlse(lse);
    TreeAttentionArgs da = a;
    da.q = dq.view, da.k_cache = dk.view, da.v_cache = dv.view, da.key_slots = dks.view, da.num_keys = dnk.view;
    da.cu_seqlens_q = dcu.view, da.mask = dmask.view, da.out = dout.view, da.lse = dlse.view;
    if (c.prefix != Prefix::none) {
      da.prefix_out = c.prefix == Prefix::in_place ? dout.view : dprefix.view;
      da.prefix_lse = dplse.view;
    }
    HostTensor first[2];
    for (int run = 0; run < 2; ++run) {
      if (c.prefix == Prefix::in_place) dout.upload(prefix);
      else dout.poison();
      dlse.poison();
      tree_attention(da);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const HostTensor gout = dout.download(out), glse = dlse.download(lse);
      if (run == 0) {
        // P is rounded to the input dtype for the P V mma, as the output is: within twice its rounding.
        EXPECT_LT(rel_l2(to_doubles(gout), to_doubles(out)), 2 * unit_roundoff(c.dt));
        expect_lse_close(glse, lse);
        for (int r = 0; r < b; ++r) {  // per shape, so a failure names its tree
          const int64_t r0 = cuq.ptr<int32_t>()[r], r1 = cuq.ptr<int32_t>()[r + 1];
          if (r0 == r1) continue;
          EXPECT_LT(rel_l2(rows_as_doubles(gout, r0, r1), rows_as_doubles(out, r0, r1)), 2 * unit_roundoff(c.dt))
              << shapes[std::size_t(r)].name;
        }
        first[0] = gout, first[1] = glse;
      } else {
        EXPECT_TRUE(same_bytes(gout, first[0]) && same_bytes(glse, first[1])) << "a second run changed bits";
      }
    }
  }
}

// Through the dense backend on CUDA (prefix part + the fused tree part): every tree shape against the CPU
// backend, h_q 32 / h_kv 8 / d 128 (the bench's heads), pages of 16.
TEST(TreeGpu, BackendVerifyForEveryTreeShapeMatchesCpuBackend) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (const TreeShape& sh : every_shape()) {
    const int n = int(sh.make(g).size());
    if (n == 0) continue;
    SCOPED_TRACE(sh.name);
    TreeSetup s({150, 0, 33, 260}, n, 16, 330, g, 32, 8, 128, 128, DType::bf16);
    BackendPair p(s, s.backend_config({.draft_token_num = n, .topk = 4}), nullptr);
    std::vector<int32_t> parents;
    for (int r = 0; r < s.bs; ++r) {
      const auto t = sh.make(g);
      parents.insert(parents.end(), t.begin(), t.end());
    }
    const BatchSpec b = s.verify_batch(parents);
    const HostTensor q = bf16_random({int64_t(s.bs) * n, s.h_q, s.d}, g, 2.0);
    EXPECT_LT(gpu_vs_cpu(p, b, q), 3 * unit_roundoff(DType::bf16));
  }
}

// A tree of one token, and a chain, attend exactly as linear verify does: tree verify on CUDA (prefix part +
// tree kernel) against linear verify on CUDA (one causal paged attention).
TEST(TreeGpu, OneTokenTreeAndChainEqualLinearVerify) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int n : {1, 16, 64}) {
    SCOPED_TRACE("n " + std::to_string(n));
    TreeSetup s({300, 17, 1000, 64}, n, 16, 1200, g, 32, 8, 128, 128, DType::bf16);
    BackendPair tree(s, s.backend_config({.draft_token_num = n, .topk = 2}), nullptr);
    BackendPair linear(s, s.backend_config({.draft_token_num = n}), nullptr);
    std::vector<int32_t> parents;
    for (int r = 0; r < s.bs; ++r) {
      const auto t = chain_tree(n);
      parents.insert(parents.end(), t.begin(), t.end());
    }
    BatchSpec tb = s.verify_batch(parents), lb = s.verify_batch({});
    tb.req_to_token = tree.dtable.view, lb.req_to_token = linear.dtable.view;
    const HostTensor q = bf16_random({int64_t(s.bs) * n, s.h_q, s.d}, g, 2.0);
    // Two bf16 computations of the same rows (each within a bf16 rounding of the exact result).
    EXPECT_LT(rel_l2(forward_device(tree.gpu, tb, q, s.h_q, s.dv), forward_device(linear.gpu, lb, q, s.h_q, s.dv)),
              3 * unit_roundoff(DType::bf16));
  }
}

}  // namespace
}  // namespace attnserve::test
