// The CuTe toolchain check: a GEMM made of exactly the pieces the Hopper kernels of the next issues
// build on, from CUTLASS/CuTe (the pinned nvidia-cutlass headers) rather than hand-written PTX:
// TMA tile loads (SM90_TMA_LOAD via make_tma_copy) completing on an mbarrier, and SM90 GMMA
// (wgmma, bf16 x bf16 -> f32) reading both operands from the swizzled shared-memory tiles.
// Built only with sm_90a (ATTNSERVE_HAVE_SM90); this header carries no CuTe so the test's .cpp
// stays plain C++.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnserve::test::sm90 {

// Tile of one CTA (one warpgroup): a 64 x 64 block of C, K consumed 64 at a time.
inline constexpr int kCuteTile = 64;

// C[m x n] = A[m x k] * B[n x k]^T, f32 row-major. A and B are row-major bf16 bits (K contiguous);
// m, n, k are multiples of kCuteTile. C on the device is poisoned (NaN) before the launch, so an
// element the kernel never writes shows. Returns "" or the CUDA / shape error.
std::string run_cute_tma_wgmma_gemm(int m, int n, int k, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                                    std::vector<float>& c);

}  // namespace attnserve::test::sm90
