// Dispatcher of gather_index_k: validates shapes, dtypes and devices for every device. Slot values live
// with the tensors, so their range is checked by the implementation: the CPU one checks every slot
// before writing (an Error), the CUDA one writes a zero key and scale 0 for an out-of-range slot.
#include "attnserve/ops/index_k_gather.h"
#include "attnserve/cache_formats.h"
#include "cpu/index_k_gather.h"
#include "cuda/cuda_ops.h"  // require_cuda_device
#include "cuda/index_k_gather/index_k_gather.h"

namespace attnserve {

void gather_index_k(const GatherIndexKArgs& a, Stream stream) {
  constexpr const char* op = "gather_index_k";
  constexpr int64_t kDim = IndexerKeyLayout::kDim;
  ATTNSERVE_CHECK(a.page_size >= 1, op, ": argument 'page_size' must be >= 1, got ", a.page_size);
  check_tensor(op, "index_k_cache", a.index_k_cache, {DType::u8},
               {-1, int64_t(IndexerKeyLayout::bytes_per_page(a.page_size))});
  check_tensor(op, "slots", a.slots, {DType::i32, DType::i64}, {-1});
  const int64_t n = a.slots.size(0);
  check_tensor(op, "out_k", a.out_k, {DType::fp8_e4m3, DType::u8}, {n, kDim});
  check_output(op, "out_k", a.out_k);
  check_tensor(op, "out_scale", a.out_scale, {DType::f32}, {n});
  check_output(op, "out_scale", a.out_scale);
  check_same_device(op, {&a.index_k_cache, &a.slots, &a.out_k, &a.out_scale});
  // Pages may be strided (e.g. a slice of a wider pool), but each page's bytes must be contiguous.
  check_last_dim_contiguous(op, "index_k_cache", a.index_k_cache);
  check_last_dim_contiguous(op, "out_k", a.out_k);
  if (a.index_k_cache.device.is_cpu()) cpu::gather_index_k(a);
  else {
    require_cuda_device(op);
    cuda::gather_index_k(a, stream);
  }
}

}  // namespace attnserve
