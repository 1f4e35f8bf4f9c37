// Argument validation of paged_attention, mla_attention, merge_state(s): each bad argument raises
// attnserve::Error whose message names the argument (and, for page ids, the request and position).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cpu/attention_cases.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

void expect_error(const std::function<void()>& f, std::initializer_list<std::string> needles,
                  const std::string& label) {
  try {
    f();
    ADD_FAILURE() << label << ": expected an attnserve::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(m.find(n), std::string::npos) << label << ": '" << n << "' not in: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": wrong exception type: " << e.what();
  }
}

PagedSpec small_spec() {
  PagedSpec s;
  s.q_lens = {2, 1};
  s.k_lens = {20, 9};
  s.page_size = 4;
  s.h_q = 4;
  s.h_kv = 2;
  return s;
}

// Runs f on fresh args of a valid case and expects an error naming `needles`.
void expect_paged_error(const std::function<void(PagedAttentionArgs&)>& mutate,
                        std::initializer_list<std::string> needles, const std::string& label,
                        PagedSpec s = small_spec()) {
  auto g = rng_for_test();
  PagedCase c = make_paged_case(s, g);
  PagedAttentionArgs a = c.args;
  mutate(a);
  expect_error([&] { paged_attention(a); }, needles, label);
}

}  // namespace

TEST(AttentionArgs, ValidCaseRuns) {
  auto g = rng_for_test();
  PagedCase c = make_paged_case(small_spec(), g);
  EXPECT_NO_THROW(paged_attention(c.args));
}

TEST(AttentionArgs, PagedShapesAndHeads) {
  HostTensor q3(DType::f32, {5, 3, 64}), out3(DType::f32, {5, 3, 64});
  expect_paged_error(
      [&](PagedAttentionArgs& a) {
        a.q = q3.view;
        a.out = out3.view;
        a.lse = {};
      },
      {"h_q = 3", "h_kv = 2"}, "wrong head ratio");
  HostTensor q_d(DType::f32, {5, 4, 32});
  expect_paged_error([&](PagedAttentionArgs& a) { a.q = q_d.view; }, {"'k_cache'", "[*, *, *, 32]"},
                     "head dim mismatch");
  HostTensor out_d(DType::f32, {5, 4, 48});
  expect_paged_error([&](PagedAttentionArgs& a) { a.out = out_d.view; }, {"'out'", "[5, 4, 64]"}, "out shape");
  expect_paged_error([&](PagedAttentionArgs& a) { a.v_cache = a.v_cache.slice(0, 0, 2); }, {"'v_cache'"},
                     "v_cache pages");
  expect_paged_error([&](PagedAttentionArgs& a) { a.cu_seqlens_q = a.cu_seqlens_q.slice(0, 0, 2); },
                     {"'cu_seqlens_q'", "[3]"}, "cu_seqlens_q length");
  expect_paged_error([&](PagedAttentionArgs& a) { a.cache_seqlens = a.cache_seqlens.slice(0, 0, 1); },
                     {"'cache_seqlens'"}, "cache_seqlens length");
  HostTensor lse(DType::f32, {5, 3});
  expect_paged_error([&](PagedAttentionArgs& a) { a.lse = lse.view; }, {"'lse'"}, "lse shape");
  expect_paged_error([&](PagedAttentionArgs& a) { a.q = TensorView{}; }, {"'q'", "required"}, "missing q");
  HostTensor q_wide(DType::f32, {5, 4, 128});
  expect_paged_error(
      [&](PagedAttentionArgs& a) {
        a.q = q_wide.view;
        a.q.shape[2] = 64;
        a.q.strides[2] = 2;
      },
      {"'q'", "contiguous"}, "q last dim not contiguous");
}

TEST(AttentionArgs, PagedDtypes) {
  HostTensor out_bf16(DType::bf16, {5, 4, 64}), table64(DType::i64, {2, 7}), kv_f16(DType::f16, {9, 4, 2, 64});
  expect_paged_error([&](PagedAttentionArgs& a) { a.out = out_bf16.view; }, {"'out'", "bf16"}, "out dtype");
  expect_paged_error([&](PagedAttentionArgs& a) { a.k_cache = kv_f16.view; }, {"'k_cache'", "f16"}, "k_cache dtype");
  expect_paged_error([&](PagedAttentionArgs& a) { a.page_table = table64.view; }, {"'page_table'", "i64"},
                     "page_table dtype");
  HostTensor desc(DType::f32, {2, 2});
  expect_paged_error([&](PagedAttentionArgs& a) { a.k_descale = desc.view; }, {"'k_descale'", "fp8"},
                     "descale without fp8 cache");
  PagedSpec fp8 = small_spec();
  fp8.kv_fp8 = true;
  HostTensor desc_bad(DType::f32, {2, 3});
  expect_paged_error([&](PagedAttentionArgs& a) { a.v_descale = desc_bad.view; }, {"'v_descale'", "[2, 2]"},
                     "descale shape", fp8);
  expect_paged_error([&](PagedAttentionArgs& a) { a.v_cache = a.v_cache.with_dtype(DType::u8); }, {"'v_cache'"},
                     "v_cache dtype differs from k_cache", fp8);
}

TEST(AttentionArgs, PagedIndexValues) {
  auto set = [](const TensorView& t, int64_t i, int32_t v) { t.ptr<int32_t>()[i] = v; };
  // Request 1 (k_len 9, page size 4) uses page positions 0..2; make position 2 out of range.
  expect_paged_error([&](PagedAttentionArgs& a) { set(a.page_table, 1 * a.page_table.strides[0] + 2, 999); },
                     {"'page_table'", "request 1", "position 2", "999"}, "page id out of range");
  expect_paged_error([&](PagedAttentionArgs& a) { set(a.page_table, 0, -3); }, {"'page_table'", "request 0", "-3"},
                     "negative page id");
  expect_paged_error([&](PagedAttentionArgs& a) { set(a.cache_seqlens, 1, -1); }, {"'cache_seqlens'", "-1"},
                     "negative seqlen");
  expect_paged_error([&](PagedAttentionArgs& a) { set(a.cache_seqlens, 0, 1000); }, {"'cache_seqlens'", "1000"},
                     "seqlen beyond the page table");
  expect_paged_error(
      [&](PagedAttentionArgs& a) {
        set(a.cu_seqlens_q, 1, 3);
        set(a.cu_seqlens_q, 2, 1);
      },
      {"'cu_seqlens_q'", "non-decreasing"}, "cu_seqlens_q decreasing");
  expect_paged_error([&](PagedAttentionArgs& a) { set(a.cu_seqlens_q, 2, 6); }, {"'cu_seqlens_q'", "total_q"},
                     "cu_seqlens_q past total_q");
  expect_paged_error([&](PagedAttentionArgs& a) { set(a.cu_seqlens_q, 0, -1); }, {"'cu_seqlens_q'"},
                     "cu_seqlens_q negative start");
  expect_paged_error([&](PagedAttentionArgs& a) { a.max_seqlen_q = 1; }, {"'max_seqlen_q'"}, "max_seqlen_q too small");
  // Garbage in the page table past the pages a request uses is never read (make_paged_case puts it there).
  auto g = rng_for_test();
  PagedCase c = make_paged_case(small_spec(), g);
  c.page_table.ptr<int32_t>()[c.args.page_table.size(1) - 1] = -77;
  EXPECT_NO_THROW(paged_attention(c.args));
}

TEST(AttentionArgs, PagedScalars) {
  expect_paged_error([](PagedAttentionArgs& a) { a.softmax_scale = 0.f; }, {"'softmax_scale'"}, "scale 0");
  expect_paged_error([](PagedAttentionArgs& a) { a.softmax_scale = NAN; }, {"'softmax_scale'"}, "scale nan");
  expect_paged_error([](PagedAttentionArgs& a) { a.window_left = -2; }, {"'window_left'", "-2"}, "window_left");
  expect_paged_error([](PagedAttentionArgs& a) { a.window_right = -5; }, {"'window_right'", "-5"}, "window_right");
  expect_paged_error([](PagedAttentionArgs& a) { a.softcap = -1.f; }, {"'softcap'"}, "softcap");
  expect_paged_error([](PagedAttentionArgs& a) { a.max_seqlen_q = -1; }, {"'max_seqlen_q'"}, "max_seqlen_q");
}

TEST(AttentionArgs, Devices) {
  expect_paged_error([](PagedAttentionArgs& a) { a.out.device = Device::cuda(0); }, {"different devices"},
                     "out on another device");
  expect_paged_error([](PagedAttentionArgs& a) { a.cache_seqlens.device = Device::cuda(0); }, {"different devices"},
                     "index tensor on another device");
  // All on CUDA: f32 is CPU-only, and max_seqlen_q is required there.
  auto to_cuda = [](PagedAttentionArgs& a) {
    for (TensorView* t :
         {&a.q, &a.k_cache, &a.v_cache, &a.page_table, &a.cache_seqlens, &a.cu_seqlens_q, &a.out, &a.lse})
      t->device = Device::cuda(0);
  };
  expect_paged_error([&](PagedAttentionArgs& a) { to_cuda(a); }, {"'q'", "f32"}, "f32 on cuda");
  PagedSpec bf = small_spec();
  bf.dtype = DType::bf16;
  expect_paged_error(
      [&](PagedAttentionArgs& a) {
        to_cuda(a);
        a.max_seqlen_q = 0;
      },
      {"'max_seqlen_q'", "CUDA"}, "max_seqlen_q on cuda", bf);
  if (!cuda_available())
    expect_paged_error([&](PagedAttentionArgs& a) { to_cuda(a); }, {"paged_attention", "CUDA"}, "no cuda kernel", bf);
}

TEST(AttentionArgs, Mla) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {1, 2};
  s.k_lens = {10, 5};
  s.page_size = 4;
  s.h_q = 2;
  s.h_kv = 1;
  s.d = 64 + 16;
  s.d_v = 64;
  PagedCase c = make_paged_case(s, g);
  EXPECT_NO_THROW(mla_attention(mla_args_of(c)));
  auto expect_mla_error = [&](const std::function<void(MlaAttentionArgs&)>& mutate,
                              std::initializer_list<std::string> needles, const std::string& label) {
    MlaAttentionArgs m = mla_args_of(c);
    mutate(m);
    expect_error([&] { mla_attention(m); }, needles, "mla " + label);
  };
  expect_mla_error([](MlaAttentionArgs& m) { m.kv_cache = m.kv_cache.slice(3, 0, 72); }, {"'kv_cache'", "80"},
                   "kv_cache width");
  expect_mla_error([](MlaAttentionArgs& m) { m.q_rope = m.q_rope.with_dtype(DType::i32); }, {"'q_rope'"},
                   "q_rope dtype");
  expect_mla_error([](MlaAttentionArgs& m) { m.q_rope = m.q_rope.slice(1, 0, 1); }, {"'q_rope'"}, "q_rope heads");
  HostTensor kv2(DType::f32, {20, 4, 2, 80});
  expect_mla_error([&](MlaAttentionArgs& m) { m.kv_cache = kv2.view; }, {"'kv_cache'", "[*, *, 1, 80]"},
                   "two kv heads");
  expect_mla_error([](MlaAttentionArgs& m) { m.out = m.out.slice(2, 0, 32); }, {"'out'"}, "out width");
  expect_mla_error([](MlaAttentionArgs& m) { m.page_table.ptr<int32_t>()[0] = 12345; },
                   {"'page_table'", "request 0", "position 0"}, "page id");
  expect_mla_error([](MlaAttentionArgs& m) { m.softmax_scale = -1.f; }, {"'softmax_scale'"}, "scale");
  expect_mla_error([](MlaAttentionArgs& m) { m.window_left = -3; }, {"'window_left'"}, "window");
}

TEST(AttentionArgs, Merge) {
  HostTensor v(DType::f32, {3, 2, 8}), s(DType::f32, {3, 2}), s_bad(DType::f32, {3, 3}), v_bf(DType::bf16, {3, 2, 8});
  HostTensor out(DType::f32, {3, 2, 8});
  auto g = rng_for_test();
  fill_uniform(v, g);
  fill_uniform(s, g);
  const MergeStateArgs ok{.v_a = v.view, .s_a = s.view, .v_b = v.view, .s_b = s.view, .v_out = out.view};
  EXPECT_NO_THROW(merge_state(ok));
  auto expect_merge_error = [&](const std::function<void(MergeStateArgs&)>& mutate,
                                std::initializer_list<std::string> needles, const std::string& label) {
    MergeStateArgs m = ok;
    mutate(m);
    expect_error([&] { merge_state(m); }, needles, "merge_state " + label);
  };
  expect_merge_error([&](MergeStateArgs& m) { m.s_a = s_bad.view; }, {"'s_a'", "[3, 2]"}, "s_a shape");
  expect_merge_error([&](MergeStateArgs& m) { m.v_b = v_bf.view; }, {"'v_b'", "bf16"}, "v_b dtype");
  expect_merge_error([&](MergeStateArgs& m) { m.v_out = m.v_out.slice(2, 0, 4); }, {"'v_out'"}, "v_out shape");
  expect_merge_error([&](MergeStateArgs& m) { m.s_out = s_bad.view; }, {"'s_out'"}, "s_out shape");
  expect_merge_error([&](MergeStateArgs& m) { m.s_b.device = Device::cuda(0); }, {"different devices"}, "device");

  HostTensor vp(DType::f32, {4, 3, 2, 8}), sp(DType::f32, {3, 3, 2});
  expect_error([&] { merge_states({.v_parts = vp.view, .s_parts = sp.view, .v_out = out.view}); },
               {"merge_states", "'s_parts'", "[4, 3, 2]"}, "merge_states s_parts");
  HostTensor sp4(DType::f32, {4, 3, 2});
  expect_error([&] { merge_states({.v_parts = vp.view, .s_parts = sp4.view, .v_out = v.view.slice(0, 0, 2)}); },
               {"'v_out'"}, "merge_states v_out");
}
