#include "plan/staged_arena.h"

#include <algorithm>
#include <cstring>

#include "plan/plan_device.h"

namespace attnserve::plan_detail {

StagedArena::~StagedArena() {
  try {
    for (void* e : events_) plan_cuda::event_destroy(e);
    if (pinned_) plan_cuda::pinned_free(host_);
  } catch (...) {
  }
}

int64_t StagedArena::reserve(int64_t count) {
  ATTNSERVE_CHECK(host_ == nullptr, "StagedArena: reserve after allocate");
  ATTNSERVE_CHECK(count >= 0, "StagedArena: negative reservation ", count);
  int64_t offset = size_;
  size_ += (count + 15) / 16 * 16;  // 64-byte aligned arrays
  return offset;
}

void StagedArena::allocate(Device device, Stream stream) {
  size_ = std::max<int64_t>(size_, 16);
  const std::size_t bytes = std::size_t(size_) * sizeof(int32_t);
  device_ = Buffer(bytes, device);
  memset_async(device_.view(DType::i32, {size_}), 0, stream);
  if (device.is_cuda()) {
    slots_ = kCudaSlots;
    host_ = plan_cuda::pinned_alloc(bytes * slots_);
    pinned_ = true;
    for (int s = 0; s < slots_; ++s) events_.push_back(plan_cuda::event_create());
  } else {
    slots_ = 1;
    plain_host_ = Buffer(bytes, Device::cpu());
    host_ = plain_host_.data();
  }
  std::memset(host_, 0, bytes * slots_);
  cur_ = 0;
  lo_ = hi_ = -1;
}

void StagedArena::begin() {
  if (!events_.empty()) plan_cuda::event_synchronize(events_[std::size_t(cur_)]);  // at once unless far behind
}

void StagedArena::write_constant(int64_t offset, const int32_t* data, int64_t count) {
  for (int s = 0; s < slots_; ++s) std::memcpy(slot_base(s) + offset, data, std::size_t(count) * sizeof(int32_t));
  mark(offset, count);
}

TensorView StagedArena::view(int64_t offset, std::initializer_list<int64_t> shape) const {
  TensorView t =
      TensorView::contiguous(const_cast<int32_t*>(device_base()) + offset, DType::i32, shape, device_.device());
  ATTNSERVE_CHECK(offset >= 0 && offset + t.numel() <= size_, "StagedArena: view ", t.shape_string(), " at ", offset,
                  " exceeds the arena (", size_, " elements)");
  return t;
}

void StagedArena::mark(int64_t offset, int64_t count) {
  if (count <= 0) return;
  lo_ = lo_ < 0 ? offset : std::min(lo_, offset);
  hi_ = std::max(hi_, offset + count);
}

void StagedArena::upload(Stream stream) {
  if (lo_ < 0) return;
  const int64_t n = hi_ - lo_;
  copy_async(TensorView::contiguous(const_cast<int32_t*>(device_base()) + lo_, DType::i32, {n}, device_.device()),
             TensorView::contiguous(slot_base(cur_) + lo_, DType::i32, {n}), stream);
  if (!events_.empty()) {
    plan_cuda::event_record(events_[std::size_t(cur_)], stream);
    cur_ = (cur_ + 1) % slots_;
  }
  lo_ = hi_ = -1;
}

}  // namespace attnserve::plan_detail
