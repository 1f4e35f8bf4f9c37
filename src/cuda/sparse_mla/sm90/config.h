// Hopper (sm_90a) sparse MLA: the kernel's compile-time shape and shared-memory layout. Host-visible
// (plain C++): the plan (../plan.cpp) sizes and chooses with it, the kernel (kernel.cuh) is built from it.
#pragma once
#include <cstddef>

#include "cuda/common/plan_util.h"

namespace attnserve::cuda::sparse_mla90 {

using HeadBlocks = IntList<64>;  // heads per CTA (the M of wgmma); fewer heads are zero rows of Q
constexpr int kHeadBlock = 64;
constexpr int kDimQk = 576, kDimV = 512;
constexpr int kTileKeys = 64;  // gathered keys per ring stage
constexpr int kStages = 2;
constexpr int kFp8TokenBytes = 656;  // Fp8MlaLayout::kBytes

// 384 threads: a producer warpgroup (gathers / dequantizes the key tiles) and two consumer
// warpgroups. setmaxnreg moves registers inside the launch allocation (168 per thread for 384
// threads): a split that needs more makes the consumers' setmaxnreg.inc wait forever.
constexpr int kThreads = 384;
constexpr int kProducerRegs = 120;
constexpr int kConsumerRegs = 192;
constexpr int kEntryRegs = 168;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kEntryRegs * kThreads,
              "setmaxnreg split exceeds the CTA's registers");

// SW128 panels (common/sm90/wgmma.cuh): 64 rows x 64 bf16 = 8 KB; a 576-wide tile is 9 panels.
constexpr std::size_t kPanelBytes = 64 * 128;
constexpr std::size_t kTileBytes = 9 * kPanelBytes;  // Q block or one key tile: 72 KB
struct SmemLayout {
  std::size_t q = 0;                            // [9 panels][64 heads][128 B]
  std::size_t ring = q + kTileBytes;            // [kStages][9 panels][64 keys][128 B]
  std::size_t p = ring + kStages * kTileBytes;  // P [64 heads][64 keys] bf16, one panel
  std::size_t max = p + kPanelBytes;            // f32 [2 warpgroups][64 heads]: row maxima exchanged
  std::size_t sum = max + 512;                  // f32 [2][64]: row sums exchanged at the end
  std::size_t valid = sum + 512;                // u8 [kStages][64 keys]: the key's slot is valid
  std::size_t bars = valid + kStages * 64;      // u64 mbarriers: full[kStages], empty[kStages], q
  std::size_t total = bars + (2 * kStages + 1) * 8;
};
constexpr std::size_t kAlignSlack = 1024;  // dynamic smem rounded up to the 1024-byte swizzle atom
constexpr std::size_t smem_bytes() { return kAlignSlack + SmemLayout{}.total; }

// Whether this build carries the sm_90a kernels (CMake defines ATTNSERVE_HAVE_SM90).
#ifdef ATTNSERVE_HAVE_SM90
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

}  // namespace attnserve::cuda::sparse_mla90
