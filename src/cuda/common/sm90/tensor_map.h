// Host side of Hopper TMA: a 2-D tensor map (CUtensorMap) of a row-major global array, encoded through the
// driver's cuTensorMapEncodeTiled, reached by the runtime's entry-point query (no link against libcuda).
// The kernel takes the map as a __grid_constant__ parameter and loads boxes with sm90::tma_load_2d (tma.cuh).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <cstdint>

namespace attnserve::cuda::sm90 {

// The driver's cuTensorMapEncodeTiled, or null where the driver has no such entry point.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// [rows][cols] elements of `type` at `base`, `row_bytes` apart; boxes of box_cols x box_rows elements.
// False where the driver refuses it (e.g. base or row_bytes not 16-byte aligned) or has no entry point.
inline bool encode_tensor_map_2d(CUtensorMap& map, const void* base, CUtensorMapDataType type, uint64_t cols,
                                 uint64_t rows, uint64_t row_bytes, uint32_t box_cols, uint32_t box_rows,
                                 CUtensorMapSwizzle swizzle) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode || reinterpret_cast<uintptr_t>(base) % 16 != 0 || row_bytes % 16 != 0) return false;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows}, elem[2] = {1, 1};
  return encode(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace attnserve::cuda::sm90
