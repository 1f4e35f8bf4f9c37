// Host side and the instantiations of the Hopper MLA decode kernel over an FP8-656 cache (bf16 q): the
// cp.async producer (any page size) and its TMA variant (page_size % 64 == 0), both in producer_fp8.cuh.
#include "attnserve/error.h"
#include "cuda/common/check.cuh"
#include "cuda/common/fp8_mla.cuh"
#include "cuda/common/sm90/tensor_map.h"
#include "kernel.cuh"
#include "mla_sm90.h"

namespace attnserve::cuda::mla90 {

namespace {

// The FP8 TMA producer's three maps of the cache as [num_pages * page_size][656] bytes (produce_fp8_tma): latent
// boxes of 64 bytes x 64 keys, scale boxes of 16 x 64, rope boxes of 128 x 64 with 128-byte swizzle.
bool fp8_tensor_maps(const mla::Params& p, KvMaps& maps) {
  if (p.page_size % kTileKeys != 0) return false;
  const uint64_t rows = uint64_t(p.num_pages) * uint64_t(p.page_size), stride = uint64_t(p.kv_stok);
  const auto u8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  return sm90::encode_tensor_map_2d(maps.map[0], p.kv, u8, kFp8MlaBytes, rows, stride, 64, kTileKeys,
                                    CU_TENSOR_MAP_SWIZZLE_NONE) &&
         sm90::encode_tensor_map_2d(maps.map[1], p.kv, u8, kFp8MlaBytes, rows, stride, 16, kTileKeys,
                                    CU_TENSOR_MAP_SWIZZLE_NONE) &&
         sm90::encode_tensor_map_2d(maps.map[2], p.kv, u8, kFp8MlaBytes, rows, stride, 128, kTileKeys,
                                    CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

void launch_mla_sm90_fp8(const mla::Params& p, int m_blocks, int batch, bool tma, cudaStream_t stream) {
  const dim3 grid(unsigned(m_blocks), unsigned(p.num_splits), unsigned(batch));
  KvMaps maps{};
  if (tma && fp8_tensor_maps(p, maps)) launch_fill<Fill::kFp8Tma>(p, maps, grid, stream);
  else launch_fill<Fill::kFp8>(p, maps, grid, stream);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::mla90
