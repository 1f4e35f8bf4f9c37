// attnserve demo: a small end-to-end run on the CPU.
// Allocates a paged KV cache, prefills a few requests (storing their K/V at allocated slots),
// decodes a few steps, runs paged attention for each step and checks it against brute force.
// (Grows into the serving-trace demo: scheduler, speculative steps, DeepSeek sparse attention.)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnserve/kv_cache.h"
#include "attnserve/numeric.h"
#include "attnserve/ops.h"

using namespace attnserve;

namespace {

struct Options {
  int requests = 6, h_q = 32, h_kv = 8, d = 128, page_size = 16, decode_steps = 4;
  int min_prompt = 17, max_prompt = 300;
  uint64_t seed = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](int& v) { if (i + 1 < argc) v = std::atoi(argv[++i]); };
    if (a == "--requests") next(o.requests);
    else if (a == "--page-size") next(o.page_size);
    else if (a == "--steps") next(o.decode_steps);
    else if (a == "--seed" && i + 1 < argc) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--help" || a == "-h") {
      std::printf("usage: attnserve_demo [--requests N] [--page-size P] [--steps S] [--seed X]\n");
      std::exit(0);
    }
  }
  return o;
}

struct Request {
  int64_t req_index = 0;
  std::vector<int32_t> slots;  // all tokens' slots, in order
};

// Brute-force attention of the last q_len tokens of a request (bf16-rounded inputs, double math).
double max_error_vs_brute_force(const Options& o, const MhaKvPool& pool, const Request& r, int q_len,
                                const std::vector<bf16_t>& q, const std::vector<bf16_t>& out, int64_t row0) {
  const auto k = pool.k(0), v = pool.v(0);
  const int g = o.h_q / o.h_kv;
  const int64_t n = int64_t(r.slots.size());
  double worst = 0;
  std::vector<double> s(n);
  for (int i = 0; i < q_len; ++i) {
    const int64_t visible = n - q_len + i + 1;
    for (int h = 0; h < o.h_q; ++h) {
      const bf16_t* qh = &q[((row0 + i) * o.h_q + h) * o.d];
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        const bf16_t* kj = k.ptr<bf16_t>() + (int64_t(r.slots[j]) * o.h_kv + h / g) * o.d;
        double dot = 0;
        for (int c = 0; c < o.d; ++c) dot += double(to_float(qh[c])) * to_float(kj[c]);
        s[j] = dot / std::sqrt(double(o.d));
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j < visible; ++j) sum += std::exp(s[j] - m);
      for (int c = 0; c < o.d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < visible; ++j)
          acc += std::exp(s[j] - m) * to_float(v.ptr<bf16_t>()[(int64_t(r.slots[j]) * o.h_kv + h / g) * o.d + c]);
        worst = std::max(worst, std::fabs(acc / sum - to_float(out[((row0 + i) * o.h_q + h) * o.d + c])));
      }
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> prompt_len(o.min_prompt, o.max_prompt);

  const int64_t max_ctx = o.max_prompt + o.decode_steps + o.page_size;
  const int64_t num_slots = (int64_t(o.requests) * max_ctx / o.page_size + 2) * o.page_size;
  ReqToTokenPool req_to_token(o.requests, max_ctx, Device::cpu());
  SlotAllocator allocator(num_slots, o.page_size);
  MhaKvPool pool(1, num_slots, o.h_kv, o.d, o.d, DType::bf16, Device::cpu());
  std::printf("attnserve demo (CPU): %d requests, h_q %d, h_kv %d, d %d, page size %d, %lld slots (%.1f MB KV)\n",
              o.requests, o.h_q, o.h_kv, o.d, o.page_size, (long long)num_slots, pool.bytes() / 1e6);

  std::vector<Request> reqs(o.requests);
  auto run_step = [&](const char* phase, const std::vector<int>& q_lens) {
    // New tokens: allocate slots, store random K/V there, then attend over the whole context.
    const int b = o.requests;
    std::vector<int32_t> cu(b + 1, 0), seqlens(b);
    std::vector<SlotAllocator::ExtendRequest> ext(b);
    for (int r = 0; r < b; ++r) {
      int64_t prefix = int64_t(reqs[r].slots.size());
      ext[r] = {prefix, prefix ? reqs[r].slots.back() : -1, q_lens[r]};
      cu[r + 1] = cu[r] + q_lens[r];
    }
    std::vector<int32_t> loc = allocator.alloc_extend(ext);
    const int64_t total = cu[b];
    std::vector<bf16_t> q(total * o.h_q * o.d), k(total * o.h_kv * o.d), v(k.size()), out(q.size());
    for (auto* t : {&q, &k, &v})
      for (auto& x : *t) x = to_bf16(normal(rng));
    for (int r = 0; r < b; ++r) {
      std::vector<int32_t> mine(loc.begin() + cu[r], loc.begin() + cu[r + 1]);
      req_to_token.write(reqs[r].req_index, int64_t(reqs[r].slots.size()), mine);
      reqs[r].slots.insert(reqs[r].slots.end(), mine.begin(), mine.end());
      seqlens[r] = int32_t(reqs[r].slots.size());
    }
    set_kv_buffer({.k = TensorView::contiguous(k.data(), DType::bf16, {total, o.h_kv, o.d}),
                   .v = TensorView::contiguous(v.data(), DType::bf16, {total, o.h_kv, o.d}),
                   .k_cache = pool.k(0), .v_cache = pool.v(0),
                   .loc = TensorView::contiguous(loc.data(), DType::i32, {total})});
    // Page table: the first slot of each page / page_size (what the planner produces).
    int max_pages = 0;
    for (int r = 0; r < b; ++r) max_pages = std::max(max_pages, (seqlens[r] + o.page_size - 1) / o.page_size);
    std::vector<int32_t> page_table(int64_t(b) * max_pages, 0);
    for (int r = 0; r < b; ++r)
      for (int p = 0; p * o.page_size < seqlens[r]; ++p) page_table[r * max_pages + p] = reqs[r].slots[p * o.page_size] / o.page_size;

    auto t0 = std::chrono::steady_clock::now();
    paged_attention({.q = TensorView::contiguous(q.data(), DType::bf16, {total, o.h_q, o.d}),
                     .k_cache = pool.k_paged(0, o.page_size), .v_cache = pool.v_paged(0, o.page_size),
                     .page_table = TensorView::contiguous(page_table.data(), DType::i32, {b, max_pages}),
                     .cache_seqlens = TensorView::contiguous(seqlens.data(), DType::i32, {b}),
                     .cu_seqlens_q = TensorView::contiguous(cu.data(), DType::i32, {b + 1}),
                     .out = TensorView::contiguous(out.data(), DType::bf16, {total, o.h_q, o.d}),
                     .max_seqlen_q = *std::max_element(q_lens.begin(), q_lens.end()),
                     .softmax_scale = 1.f / std::sqrt(float(o.d))});
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double err = 0;
    for (int r = 0; r < b; ++r) err = std::max(err, max_error_vs_brute_force(o, pool, reqs[r], q_lens[r], q, out, cu[r]));
    std::printf("  %-8s %4lld new tokens, context %5lld tokens, attention %7.2f ms, max |err| vs brute force %.2e %s\n",
                phase, (long long)total, (long long)std::accumulate(seqlens.begin(), seqlens.end(), 0LL), ms, err,
                err < 2e-2 ? "ok" : "MISMATCH");
    return err < 2e-2;
  };

  for (auto& r : reqs) r.req_index = req_to_token.alloc();
  bool ok = true;
  std::vector<int> prompts(o.requests);
  for (int& p : prompts) p = prompt_len(rng);
  ok &= run_step("prefill", prompts);
  for (int s = 0; s < o.decode_steps; ++s) ok &= run_step("decode", std::vector<int>(o.requests, 1));

  for (auto& r : reqs) {
    allocator.free(r.slots);
    req_to_token.free(r.req_index);
  }
  std::printf("done: %s; all pages returned: %s\n", ok ? "all steps match" : "MISMATCH",
              allocator.available_pages() == allocator.num_pages() - 1 ? "yes" : "no");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "attnserve_demo: error: %s\n", e.what());
  return 2;
}
