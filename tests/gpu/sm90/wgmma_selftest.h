// Tiny GEMMs through exactly the wgmma primitives and shared-memory layouts of the Hopper
// attention kernel (src/cuda/common/sm90/wgmma.cuh), so a device failure names the primitive.
// Built only with sm_90a (ATTNSERVE_HAVE_SM90); the host wrappers allocate, launch and copy back.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnserve::test::sm90 {

// S[128 x 128] = A[128 x 128] B[128 x 128]^T, A and B row-major with K contiguous (16-bit values,
// bf16 or f16 bits), both stored as SW128 K-major panels; each of two warpgroups computes 64 rows
// with m64n128k16 SS wgmmas (the S = Q K^T step). Returns "" or a CUDA error.
std::string run_qk_ss(bool f16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, std::vector<float>& s);

// O[64 x d] = P[64 x 128] V[128 x d]: P given as f32 values (exactly representable in the dtype),
// loaded into the m64n128 accumulator fragment and converted to A registers (acc_to_a); V
// row-major [keys][d] stored as SW128 panels, read MN-major (trans-b) with m64n{d}k16 RS wgmmas.
std::string run_pv_rs(bool f16, int d, const std::vector<float>& p, const std::vector<uint16_t>& v,
                      std::vector<float>& o);

// Both steps chained in one warpgroup as the kernel does: S = A B^T (SS), then O = S V (RS) with
// S converted to A registers in place (no rescale, no softmax).
std::string run_qk_pv(bool f16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                      const std::vector<uint16_t>& v, std::vector<float>& o);

}  // namespace attnserve::test::sm90
