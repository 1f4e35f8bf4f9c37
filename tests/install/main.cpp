// Runs one op of the installed library on the CPU: merging two halves of a softmax state must give
// the state of the whole (values chosen so the answer is known in closed form). Exit 0 = pass.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "attnserve/ops.h"
#include "attnserve/version.h"

int main() {
  using namespace attnserve;
  // One token, one head, d = 2. Part a: lse 0, values (1, 2); part b: lse log(3), values (5, 6).
  // Weights 1/4 and 3/4: merged = (4, 5), lse = log(4).
  float v_a[2] = {1, 2}, v_b[2] = {5, 6}, v_out[2] = {0, 0};
  float s_a[1] = {0.f}, s_b[1] = {std::log(3.f)}, s_out[1] = {0.f};
  merge_state({.v_a = TensorView::contiguous(v_a, DType::f32, {1, 1, 2}),
               .s_a = TensorView::contiguous(s_a, DType::f32, {1, 1}),
               .v_b = TensorView::contiguous(v_b, DType::f32, {1, 1, 2}),
               .s_b = TensorView::contiguous(s_b, DType::f32, {1, 1}),
               .v_out = TensorView::contiguous(v_out, DType::f32, {1, 1, 2}),
               .s_out = TensorView::contiguous(s_out, DType::f32, {1, 1})});
  const bool ok = std::fabs(v_out[0] - 4.f) < 1e-5f && std::fabs(v_out[1] - 5.f) < 1e-5f &&
                  std::fabs(s_out[0] - std::log(4.f)) < 1e-5f;
  // A bad argument must come back as attnserve::Error naming it.
  bool named = false;
  try {
    merge_state({.v_a = TensorView::contiguous(v_a, DType::f32, {1, 1, 2}),
                 .s_a = TensorView::contiguous(s_a, DType::f32, {1, 2}),
                 .v_b = TensorView::contiguous(v_b, DType::f32, {1, 1, 2}),
                 .s_b = TensorView::contiguous(s_b, DType::f32, {1, 1}),
                 .v_out = TensorView::contiguous(v_out, DType::f32, {1, 1, 2})});
  } catch (const Error& e) {
    named = std::strstr(e.what(), "s_a") != nullptr;
  }
  std::printf("attnserve %s (%d): merged (%g, %g) lse %g, bad s_a named: %s\n", ATTNSERVE_VERSION_STRING,
              ATTNSERVE_VERSION, v_out[0], v_out[1], s_out[0], named ? "yes" : "no");
  return ok && named ? 0 : 1;
}
