// Host side and the instantiations of the Hopper MLA decode kernel for a bf16 cache: the cp.async
// producer (any page size) and the TMA producer (producer_tma.cuh: page_size % 64 == 0).
#include "attnserve/error.h"
#include "cuda/common/check.cuh"
#include "cuda/common/sm90/tensor_map.h"
#include "kernel.cuh"
#include "mla_sm90.h"

namespace attnserve::cuda::mla90 {

namespace {

// The TMA producer's tensor map of the cache: [num_pages * page_size rows][576] bf16 with the slot
// stride, 64 x 64 boxes, 128-byte swizzle; false where TMA cannot take it (page size not a multiple of
// 64, a slot stride or base address not 16-byte aligned, no driver entry point).
bool kv_tensor_map(const mla::Params& p, CUtensorMap& map) {
  if (p.page_size % kTileKeys != 0) return false;
  return sm90::encode_tensor_map_2d(map, p.kv, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, kDqk,
                                    uint64_t(p.num_pages) * uint64_t(p.page_size), uint64_t(p.kv_stok), 64, kTileKeys,
                                    CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

void launch_mla_sm90(const mla::Params& p, int m_blocks, int batch, bool tma, cudaStream_t stream) {
  const dim3 grid(unsigned(m_blocks), unsigned(p.num_splits), unsigned(batch));
  KvMaps maps{};
  if (tma && kv_tensor_map(p, maps.map[0])) launch_fill<Fill::kTma>(p, maps, grid, stream);
  else launch_fill<Fill::kCpAsync>(p, maps, grid, stream);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::mla90
