// Host side of the producer kernels' TMA K/V loads: the tensor maps of the paged caches (kv_tma.h).
#include "config.h"
#include "cuda/common/sm90/tensor_map.h"
#include "kv_tma.h"

namespace attnserve::cuda::attn90 {

namespace {

// One cache [slots][heads][dim] of 2-byte elements; strides in bytes.
bool encode_one(CUtensorMap& map, const char* base, int dim, int heads, int64_t slots, int64_t head_stride,
                int64_t slot_stride, int box_rows) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || head_stride % 16 != 0 || slot_stride % 16 != 0) return false;
  const cuuint64_t dims[3] = {cuuint64_t(dim), cuuint64_t(heads), cuuint64_t(slots)};
  const cuuint64_t strides[2] = {cuuint64_t(head_stride), cuuint64_t(slot_stride)};
  const cuuint32_t box[3] = {64, 1, cuuint32_t(box_rows)}, elem[3] = {1, 1, 1};
  return sm90::tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<char*>(base), dims, strides,
                                    box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

bool encode_kv_tma(const attn::Params& p, int d, int d_v, int tile_keys, KvTma& out) {
  out.box_rows = 0;
  if (!tma_applies(p.page_size) || !sm90::tensor_map_encoder()) return false;
  int shift = 4;  // 16 | page_size
  while ((1 << (shift + 1)) <= tile_keys && p.page_size % (1 << (shift + 1)) == 0) ++shift;
  const int box_rows = 1 << shift;
  const int64_t slots = int64_t(p.num_pages) * p.page_size;
  if (!encode_one(out.k, p.k, d, p.h_kv, slots, p.k_sh, p.k_stok, box_rows) ||
      !encode_one(out.v, p.v, d_v, p.h_kv, slots, p.v_sh, p.v_stok, box_rows))
    return false;
  out.box_rows = box_rows;
  out.box_shift = shift;
  return true;
}

}  // namespace attnserve::cuda::attn90
