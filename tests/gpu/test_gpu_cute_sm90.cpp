// The CUTLASS/CuTe toolchain on Hopper: a CuTe kernel (TMA tile loads on an mbarrier + the SM90
// GMMA atom, bf16 -> f32; tests/gpu/sm90/cute_tma_wgmma.cu) against a CPU matmul on random inputs.
// Several CTAs in M and N and several K steps, so tile coordinates, the barrier's phase and the
// accumulation across K steps are all exercised. Skips unless built with sm_90a and run on a
// compute capability 9.0 device.
#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "attnserve/numeric.h"
#include "gpu_sm90_util.h"
#ifdef ATTNSERVE_HAVE_SM90
#include "gpu/sm90/cute_tma_wgmma.h"
#endif

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Operand {
  std::vector<uint16_t> bits;  // bf16
  std::vector<double> val;     // the exact values of those bits
};

Operand random_bf16(std::mt19937_64& g, size_t n) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Operand o{std::vector<uint16_t>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    const bf16_t b = to_bf16(u(g));
    o.bits[i] = b.bits;
    o.val[i] = to_float(b);
  }
  return o;
}

// C = A B^T with A [m x k], B [n x k]: in fp64 (the reference) and in f32 with sequential
// accumulation (the same-precision reference of the tolerance rule; bf16 products are exact in f32).
void matmul_abt(const Operand& a, const Operand& b, int m, int n, int k, std::vector<double>& c64,
                std::vector<double>& c32) {
  c64.assign(size_t(m) * n, 0.0);
  c32.assign(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      float acc32 = 0;
      for (int x = 0; x < k; ++x) {
        const double p = a.val[size_t(i) * k + x] * b.val[size_t(j) * k + x];
        acc += p;
        acc32 += float(p);
      }
      c64[size_t(i) * n + j] = acc;
      c32[size_t(i) * n + j] = acc32;
    }
}

}  // namespace

TEST(CuteSm90, TmaLoadThenWgmmaMatchesCpuMatmul) {
  ATTNSERVE_REQUIRE_SM90();
#ifdef ATTNSERVE_HAVE_SM90
  auto g = rng_for_test();
  // (m, n, k): one tile; 2 x 3 CTAs with 4 K steps; a tall one with an odd number of K steps.
  for (auto [m, n, k] : {std::array{64, 64, 64}, std::array{128, 192, 256}, std::array{256, 64, 320}}) {
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
    const Operand a = random_bf16(g, size_t(m) * k), b = random_bf16(g, size_t(n) * k);
    std::vector<float> c, c_again;
    ASSERT_EQ(sm90::run_cute_tma_wgmma_gemm(m, n, k, a.bits, b.bits, c), "");
    ASSERT_EQ(c.size(), size_t(m) * n);

    std::vector<double> ref, ref32;
    matmul_abt(a, b, m, n, k, ref, ref32);
    std::vector<double> got(c.begin(), c.end());
    // Poisoned NaN left anywhere means an element was never written; rel_l2 also turns it into inf.
    EXPECT_EQ(count_nonfinite(got), 0) << "elements not written";
    const double err = rel_l2(got, ref), tol = tolerance_by_rule(rel_l2(ref32, ref), DType::f32);
    EXPECT_LE(err, tol) << "relative L2 error against the fp64 matmul";
    // A wrong tile coordinate or fragment map is a large error at a position: name the first one.
    for (size_t i = 0; i < ref.size(); ++i)
      if (!(std::fabs(got[i] - ref[i]) <= 1e-3)) {
        ADD_FAILURE() << "first bad element (" << i / n << ", " << i % n << "): got " << got[i] << " want " << ref[i];
        break;
      }

    ASSERT_EQ(sm90::run_cute_tma_wgmma_gemm(m, n, k, a.bits, b.bits, c_again), "");
    EXPECT_EQ(std::memcmp(c.data(), c_again.data(), c.size() * sizeof(float)), 0) << "two runs differ";
  }
#endif
}

TEST(CuteSm90, RejectsShapesThatAreNotWholeTiles) {
  ATTNSERVE_REQUIRE_SM90();
#ifdef ATTNSERVE_HAVE_SM90
  std::vector<uint16_t> a(64 * 96, 0x3f80), b(64 * 96, 0x3f80);  // bf16 1.0
  std::vector<float> c;
  EXPECT_NE(sm90::run_cute_tma_wgmma_gemm(64, 64, 96, a, b, c), "");
#endif
}
