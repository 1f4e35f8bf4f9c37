// Host side and the instantiations of the Hopper MLA decode kernel for a bf16 cache: the cp.async
// producer (any page size) and the TMA producer (producer_tma.cuh: page_size % 64 == 0).
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "attnserve/error.h"
#include "cuda/common/check.cuh"
#include "kernel.cuh"
#include "mla_sm90.h"

namespace attnserve::cuda::mla90 {

namespace {

template <Fill kFill>
void launch_fill(const mla::Params& p, const CUtensorMap& map, const dim3& grid, cudaStream_t stream) {
  static const bool configured = [] {  // once per instantiation: the dynamic shared-memory limit
    ATTNSERVE_CUDA_CHECK(
        cudaFuncSetAttribute(mla_sm90_kernel<kFill>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes())));
    return true;
  }();
  (void)configured;
  mla_sm90_kernel<kFill><<<grid, kThreads, smem_bytes(), stream>>>(p, map);
}

// The TMA producer's tensor map of the cache: [num_pages * page_size rows][576] bf16 with the slot
// stride, 64 x 64 boxes, 128-byte swizzle; false where TMA cannot take it (page size not a multiple of
// 64, a slot stride or base address not 16-byte aligned, no driver entry point).
bool kv_tensor_map(const mla::Params& p, CUtensorMap& map) {
  if (p.page_size % kTileKeys != 0 || p.kv_stok % 16 != 0 || reinterpret_cast<uintptr_t>(p.kv) % 16 != 0) return false;
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) return false;
  const cuuint64_t dims[2] = {cuuint64_t(kDqk), cuuint64_t(p.num_pages) * cuuint64_t(p.page_size)};
  const cuuint64_t strides[1] = {cuuint64_t(p.kv_stok)};  // bytes from one slot to the next
  const cuuint32_t box[2] = {64, cuuint32_t(kTileKeys)}, elem[2] = {1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<char*>(p.kv), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

void launch_mla_sm90(const mla::Params& p, int m_blocks, int batch, bool tma, cudaStream_t stream) {
  const dim3 grid(unsigned(m_blocks), unsigned(p.num_splits), unsigned(batch));
  CUtensorMap map{};
  if (tma && kv_tensor_map(p, map)) launch_fill<Fill::kTma>(p, map, grid, stream);
  else launch_fill<Fill::kCpAsync>(p, map, grid, stream);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::mla90
