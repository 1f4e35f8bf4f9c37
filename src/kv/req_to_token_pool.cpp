// ReqToTokenPool: the request -> token-slot table and its free list of request rows.
#include <limits>

#include "attnserve/kv_cache.h"

namespace attnserve {

static std::size_t table_bytes(int64_t size, int64_t max_context_len) {
  ATTNSERVE_CHECK(size >= 1, "ReqToTokenPool: size must be >= 1, got ", size);
  ATTNSERVE_CHECK(max_context_len >= 1, "ReqToTokenPool: max_context_len must be >= 1, got ", max_context_len);
  ATTNSERVE_CHECK(size <= std::numeric_limits<int64_t>::max() / 4 / max_context_len, "ReqToTokenPool: size ", size,
                  " x max_context_len ", max_context_len, " overflows");
  return std::size_t(size) * std::size_t(max_context_len) * sizeof(int32_t);
}

ReqToTokenPool::ReqToTokenPool(int64_t size, int64_t max_context_len, Device device)
    : size_(size),
      max_context_len_(max_context_len),
      buffer_(table_bytes(size, max_context_len), device),
      table_(buffer_.view(DType::i32, {size, max_context_len})),
      allocated_(std::size_t(size), 0) {
  memset_async(table_, 0);
  for (int64_t r = 0; r < size; ++r) free_.insert(free_.end(), r);
}

TensorView ReqToTokenPool::row(int64_t req) const {
  ATTNSERVE_CHECK(req >= 0 && req < size_, "ReqToTokenPool::row: request index ", req, " out of range [0, ", size_,
                  ")");
  return table_.select(0, req);
}

bool ReqToTokenPool::is_allocated(int64_t req) const { return req >= 0 && req < size_ && allocated_[std::size_t(req)]; }

int64_t ReqToTokenPool::alloc() {
  ATTNSERVE_CHECK(!free_.empty(), "ReqToTokenPool::alloc: all ", size_, " request slots are in use");
  int64_t r = *free_.begin();
  free_.erase(free_.begin());
  allocated_[std::size_t(r)] = 1;
  return r;
}

void ReqToTokenPool::free(int64_t req) {
  ATTNSERVE_CHECK(req >= 0 && req < size_, "ReqToTokenPool::free: request index ", req, " out of range [0, ", size_,
                  ")");
  ATTNSERVE_CHECK(allocated_[std::size_t(req)], "ReqToTokenPool::free: request ", req,
                  " is not allocated (double free?)");
  allocated_[std::size_t(req)] = 0;
  free_.insert(req);
}

void ReqToTokenPool::write(int64_t req, int64_t start, std::span<const int32_t> slots, Stream stream) {
  ATTNSERVE_CHECK(req >= 0 && req < size_, "ReqToTokenPool::write: request index ", req, " out of range [0, ", size_,
                  ")");
  ATTNSERVE_CHECK(allocated_[std::size_t(req)], "ReqToTokenPool::write: request ", req, " is not allocated");
  const int64_t n = int64_t(slots.size());
  ATTNSERVE_CHECK(start >= 0 && start <= max_context_len_ - n, "ReqToTokenPool::write: tokens [", start, ", ",
                  start + n, ") of request ", req, " do not fit in max_context_len ", max_context_len_);
  if (n == 0) return;
  TensorView dst = table_.select(0, req).slice(0, start, start + n);
  TensorView src = TensorView::contiguous(const_cast<int32_t*>(slots.data()), DType::i32, {n}, Device::cpu());
  copy_async(dst, src, stream);
}

}  // namespace attnserve
