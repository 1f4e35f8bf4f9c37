#include "plan/staged_arena.h"

#include <algorithm>
#include <cstring>

namespace attnserve::plan_detail {

int64_t StagedArena::reserve(int64_t count) {
  ATTNSERVE_CHECK(device_.data() == nullptr && host_.data() == nullptr, "StagedArena: reserve after allocate");
  ATTNSERVE_CHECK(count >= 0, "StagedArena: negative reservation ", count);
  int64_t offset = size_;
  size_ += (count + 15) / 16 * 16;  // 64-byte aligned arrays
  return offset;
}

void StagedArena::allocate(Device device, Stream stream) {
  std::size_t bytes = std::size_t(std::max<int64_t>(size_, 16)) * sizeof(int32_t);
  host_ = Buffer(bytes, Device::cpu());
  device_ = Buffer(bytes, device);
  std::memset(host_.data(), 0, bytes);
  memset_async(device_.view(DType::i32, {int64_t(bytes / sizeof(int32_t))}), 0, stream);
  lo_ = hi_ = -1;
}

TensorView StagedArena::view(int64_t offset, std::initializer_list<int64_t> shape) const {
  TensorView t = TensorView::contiguous(const_cast<int32_t*>(device_base()) + offset, DType::i32, shape,
                                        device_.device());
  ATTNSERVE_CHECK(offset >= 0 && offset + t.numel() <= size_, "StagedArena: view ", t.shape_string(), " at ",
                  offset, " exceeds the arena (", size_, " elements)");
  return t;
}

void StagedArena::mark(int64_t offset, int64_t count) {
  if (count <= 0) return;
  lo_ = lo_ < 0 ? offset : std::min(lo_, offset);
  hi_ = std::max(hi_, offset + count);
}

void StagedArena::upload(Stream stream) {
  if (lo_ < 0) return;
  int64_t n = hi_ - lo_;
  copy_async(TensorView::contiguous(const_cast<int32_t*>(device_base()) + lo_, DType::i32, {n}, device_.device()),
             TensorView::contiguous(host_base() + lo_, DType::i32, {n}), stream);
  lo_ = hi_ = -1;
}

}  // namespace attnserve::plan_detail
