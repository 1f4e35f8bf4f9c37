// Hopper (sm_90a) dense paged attention for prefill/extend: tile shapes and shared-memory size.
// Host-visible (no device code) so the selector in sm80/attention/launch.cu can size and choose.
#pragma once
#include <cstddef>

namespace attnserve::cuda::attn90 {

constexpr int kThreads = 256;        // 2 consumer warpgroups, each 64 packed rows; all threads load
constexpr int kRows = 128;           // packed (q_row * group + head) rows per CTA
constexpr int kTileKeys = 128;       // keys per pipeline stage: the N of S = Q K^T (m64n128k16)
constexpr int kStages = 2;           // cp.async double buffer: 160 KB at d 128, one CTA per SM
constexpr std::size_t kAlignSlack = 1024;  // dynamic smem rounded up to the 1024-byte swizzle atom

// Q tile + stages x {K, V} tiles, each stored as d/64 SW128 panels of rows x 128 bytes.
constexpr std::size_t smem_bytes(int d) {
  const std::size_t panel_rows = std::size_t(d / 64) * 128;
  return kAlignSlack + std::size_t(kRows) * panel_rows + std::size_t(kStages) * 2 * kTileKeys * panel_rows;
}

// Whether this build carries the sm_90a kernels (CMake defines ATTNSERVE_HAVE_SM90).
#ifdef ATTNSERVE_HAVE_SM90
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

}  // namespace attnserve::cuda::attn90
