// Outputs with a zero stride (a broadcast view) are refused, naming the argument: their rows would
// overwrite each other silently. Inputs may be broadcast (a stride-0 descale is fine).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attnserve/ops.h"
#include "common/test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

TensorView broadcast_rows(TensorView v) {  // every row aliases row 0
  v.strides[0] = 0;
  return v;
}

void expect_error_with(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one naming " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(OutputChecks, ZeroStrideOutputIsAnErrorNamingIt) {
  const TensorView ok = TensorView::contiguous(nullptr, DType::f32, {3, 2});
  EXPECT_NO_THROW(check_output("op", "out", ok));
  EXPECT_NO_THROW(check_output("op", "out", TensorView{}));  // absent optional output
  TensorView one_row = TensorView::contiguous(nullptr, DType::f32, {1, 2});
  one_row.strides[0] = 0;  // size-1 dims may have any stride
  EXPECT_NO_THROW(check_output("op", "out", one_row));
  expect_error_with([&] { check_output("op", "lse", broadcast_rows(ok)); }, "output 'lse' has stride 0 in dim 0");
}

TEST(OutputChecks, MergeStateRefusesBroadcastOutputs) {
  HostTensor v(DType::f32, {4, 2, 8}), s(DType::f32, {4, 2}), v_out(DType::f32, {4, 2, 8}), s_out(DType::f32, {4, 2});
  MergeStateArgs a{
      .v_a = v.view, .s_a = s.view, .v_b = v.view, .s_b = s.view, .v_out = v_out.view, .s_out = s_out.view};
  EXPECT_NO_THROW(merge_state(a));
  MergeStateArgs bad = a;
  bad.v_out = broadcast_rows(v_out.view);
  expect_error_with([&] { merge_state(bad); }, "'v_out'");
  bad = a;
  bad.s_out = broadcast_rows(s_out.view);
  expect_error_with([&] { merge_state(bad); }, "'s_out'");
  bad = a;
  bad.v_a = broadcast_rows(v.view);  // an input may be broadcast
  EXPECT_NO_THROW(merge_state(bad));
}

TEST(OutputChecks, KvStoreRefusesABroadcastCache) {
  HostTensor k(DType::f32, {2, 1, 4}), k_cache(DType::f16, {8, 1, 4}), v_cache(DType::f16, {8, 1, 4}),
      loc(DType::i32, {2});
  loc.ptr<int32_t>()[0] = 1, loc.ptr<int32_t>()[1] = 5;
  StoreKvArgs a{.k = k.view, .v = k.view, .k_cache = k_cache.view, .v_cache = v_cache.view, .loc = loc.view};
  EXPECT_NO_THROW(set_kv_buffer(a));
  a.v_cache = broadcast_rows(v_cache.view);
  expect_error_with([&] { set_kv_buffer(a); }, "'v_cache'");
}
