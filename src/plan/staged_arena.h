// Internal: the planner's small i32 arrays, at fixed offsets (sized by capacity) in one device buffer,
// mirrored by a host staging buffer. A plan writes the live parts of the arrays it uses on the host,
// marks them, and upload() sends the marked span with ONE copy_async on the caller's stream.
//
// The staging area is plain host memory: a pageable->device cudaMemcpyAsync has consumed its source
// when it returns, so the next plan may overwrite the staging area at once (no event, no sync).
// Between uploads the device region equals the staging area wherever anything was ever written, so
// copying the gaps inside the marked span changes nothing.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "attnserve/runtime.h"

namespace attnserve::plan_detail {

class StagedArena {
 public:
  // Before allocate(): reserves `count` i32 elements, returns their offset (64-byte aligned).
  int64_t reserve(int64_t count);
  void allocate(Device device, Stream stream);  // zero-filled, host and device

  int32_t* host(int64_t offset) { return host_base() + offset; }
  const int32_t* device_ptr(int64_t offset) const { return device_base() + offset; }
  TensorView view(int64_t offset, std::initializer_list<int64_t> shape) const;

  void mark(int64_t offset, int64_t count);  // [offset, offset + count) was written on the host
  void upload(Stream stream);                // one copy of the marked span; clears the marks
  void discard_marks() { lo_ = hi_ = -1; }

  std::size_t device_bytes() const { return device_.bytes(); }

 private:
  int32_t* host_base() { return static_cast<int32_t*>(host_.data()); }
  const int32_t* device_base() const { return static_cast<const int32_t*>(device_.data()); }
  int64_t size_ = 0;
  int64_t lo_ = -1, hi_ = -1;
  Buffer host_, device_;
};

}  // namespace attnserve::plan_detail
