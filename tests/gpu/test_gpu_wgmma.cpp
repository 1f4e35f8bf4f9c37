// The Hopper attention kernel's wgmma primitives, one at a time, on random data against an fp64
// CPU product of the same (exactly representable) inputs: S = Q K^T with both operands K-major
// SW128 (SS), O = P V with P from registers and V MN-major (RS), and the two chained. A failure
// here names the primitive (descriptor, layout or fragment map) before the attention tests run.
// Skips unless built with sm_90a and run on a compute capability 9.0 device.
#include <cuda_runtime.h>

#include <cmath>
#include <random>

#include "attnserve/numeric.h"
#include "gpu_sm90_util.h"
#ifdef ATTNSERVE_HAVE_SM90
#include "gpu/sm90/wgmma_selftest.h"
#endif

using namespace attnserve;
using namespace attnserve::test;

namespace {

// Random 16-bit values (bits) and their exact float values.
struct Mat {
  std::vector<uint16_t> bits;
  std::vector<double> val;
};
Mat random_mat(std::mt19937_64& g, bool f16, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Mat m;
  m.bits.resize(n);
  m.val.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = u(g);
    if (f16) {
      const f16_t h = to_f16(x);
      m.bits[i] = h.bits;
      m.val[i] = to_float(h);
    } else {
      const bf16_t b = to_bf16(x);
      m.bits[i] = b.bits;
      m.val[i] = to_float(b);
    }
  }
  return m;
}

// C[m x n] = A[m x k] * B, B given as [n x k] (b_nk) or [k x n].
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int m, int n, int k, bool b_nk) {
  std::vector<double> c(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int x = 0; x < k; ++x) acc += a[size_t(i) * k + x] * (b_nk ? b[size_t(j) * k + x] : b[size_t(x) * n + j]);
      c[size_t(i) * n + j] = acc;
    }
  return c;
}

// f32 accumulation of <= 256 products of magnitude <= 1: absolute error well under 1e-4. Reports
// the first mismatch with its (row, col): a wrong fragment map shows as a permutation pattern.
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, int cols, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    if (!(err <= 1e-3 + 1e-3 * std::fabs(ref[i]))) {
      if (bad++ < 5)
        ADD_FAILURE() << what << ": (" << i / cols << ", " << i % cols << ") got " << got[i] << " want " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " elements wrong";
}

}  // namespace

TEST(WgmmaSm90, QkSsBothKMajor) {
  ATTNSERVE_REQUIRE_SM90();
#ifdef ATTNSERVE_HAVE_SM90
  auto g = rng_for_test();
  for (bool f16 : {false, true}) {
    SCOPED_TRACE(f16 ? "f16" : "bf16");
    const Mat a = random_mat(g, f16, 128 * 128), b = random_mat(g, f16, 128 * 128);
    std::vector<float> s;
    const std::string err = sm90::run_qk_ss(f16, a.bits, b.bits, s);
    ASSERT_EQ(err, "");
    expect_close(s, matmul(a.val, b.val, 128, 128, 128, /*b_nk=*/true), 128, "S = A B^T (SS, K-major, 2 warpgroups)");
  }
#endif
}

TEST(WgmmaSm90, PvRsVMnMajor) {
  ATTNSERVE_REQUIRE_SM90();
#ifdef ATTNSERVE_HAVE_SM90
  auto g = rng_for_test();
  for (bool f16 : {false, true})
    for (int d : {128, 64}) {
      SCOPED_TRACE(std::string(f16 ? "f16" : "bf16") + " d " + std::to_string(d));
      const Mat p = random_mat(g, f16, 64 * 128, 0.f, 1.f), v = random_mat(g, f16, size_t(128) * d);
      std::vector<float> pf(p.val.begin(), p.val.end()), o;
      const std::string err = sm90::run_pv_rs(f16, d, pf, v.bits, o);
      ASSERT_EQ(err, "");
      expect_close(o, matmul(p.val, v.val, 64, d, 128, /*b_nk=*/false), d, "O = P V (RS, acc->A fragment, V MN-major)");
    }
#endif
}

TEST(WgmmaSm90, QkThenPvChained) {
  ATTNSERVE_REQUIRE_SM90();
#ifdef ATTNSERVE_HAVE_SM90
  auto g = rng_for_test();
  for (bool f16 : {false, true}) {
    SCOPED_TRACE(f16 ? "f16" : "bf16");
    // S is rounded to the dtype when converted to A registers; the reference rounds it the same way.
    const Mat a = random_mat(g, f16, 64 * 128, -0.25f, 0.25f), b = random_mat(g, f16, 128 * 128, -0.25f, 0.25f);
    const Mat v = random_mat(g, f16, 128 * 128);
    std::vector<float> o;
    const std::string err = sm90::run_qk_pv(f16, a.bits, b.bits, v.bits, o);
    ASSERT_EQ(err, "");
    std::vector<double> s = matmul(a.val, b.val, 64, 128, 128, true);
    for (double& x : s) x = f16 ? to_float(to_f16(float(x))) : to_float(to_bf16(float(x)));
    // S rounding can differ by one ulp where f32 and fp64 sums straddle a rounding boundary:
    // allow the resulting O deviation (|V| <= 1, 128 terms, ulp of |S| <= 2 is <= 2^-7 for bf16).
    const std::vector<double> ref = matmul(s, v.val, 64, 128, 128, false);
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (!(std::fabs(double(o[i]) - ref[i]) <= 0.05 + 0.01 * std::fabs(ref[i]))) ++bad;
    EXPECT_EQ(bad, 0) << "S = A B^T then O = S V: " << bad << " elements wrong";
    std::vector<double> od(o.begin(), o.end());
    EXPECT_LE(rel_l2(od, ref), 5e-3);
  }
#endif
}
