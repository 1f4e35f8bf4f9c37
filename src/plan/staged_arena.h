// Internal: the planner's small i32 arrays, at fixed offsets (sized by capacity) in one device buffer,
// mirrored by a host staging area. A plan writes the live parts of the arrays it uses on the host,
// marks them, and upload() sends the marked span with ONE copy_async on the caller's stream.
//
// On a CUDA device the staging area is a ring of kCudaSlots pinned buffers: a copy from pinned memory
// is truly asynchronous (a pageable source may make the driver wait for the stream), and a slot is
// written again only after the event recorded behind its last copy has completed - the host waits
// only when it runs more than kCudaSlots plans ahead of the GPU. On the CPU device: one plain buffer,
// the copy is a memmove.
//
// Every plan writes every array its metadata reads, so the gaps inside an uploaded span (stale data of
// this slot) only ever land in arrays nobody reads before they are rewritten; constants are written
// into every slot (write_constant).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "attnserve/runtime.h"

namespace attnserve::plan_detail {

class StagedArena {
 public:
  static constexpr int kCudaSlots = 4;

  StagedArena() = default;
  ~StagedArena();
  StagedArena(const StagedArena&) = delete;
  StagedArena& operator=(const StagedArena&) = delete;

  // Before allocate(): reserves `count` i32 elements, returns their offset (64-byte aligned).
  int64_t reserve(int64_t count);
  void allocate(Device device, Stream stream);  // zero-filled, host and device

  // Starts a plan: waits (if ever) until the current slot's previous copy has run.
  void begin();
  int32_t* host(int64_t offset) { return slot_base(cur_) + offset; }
  void write_constant(int64_t offset, const int32_t* data, int64_t count);  // every slot, marked
  const int32_t* device_ptr(int64_t offset) const { return device_base() + offset; }
  TensorView view(int64_t offset, std::initializer_list<int64_t> shape) const;

  void mark(int64_t offset, int64_t count);  // [offset, offset + count) was written on the host
  void upload(Stream stream);                // one copy of the marked span; next slot

  std::size_t device_bytes() const { return device_.bytes(); }

 private:
  int32_t* slot_base(int s) { return static_cast<int32_t*>(host_) + int64_t(s) * size_; }
  const int32_t* device_base() const { return static_cast<const int32_t*>(device_.data()); }
  int64_t size_ = 0;
  int64_t lo_ = -1, hi_ = -1;
  int slots_ = 1, cur_ = 0;
  Buffer device_;
  Buffer plain_host_;     // CPU device (or when pinned memory is unavailable)
  void* host_ = nullptr;  // slots_ * size_ i32
  bool pinned_ = false;
  std::vector<void*> events_;  // CUDA: one per slot
};

}  // namespace attnserve::plan_detail
