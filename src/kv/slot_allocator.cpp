// SlotAllocator: page-aware token-slot allocation with all-or-nothing batch calls.
#include <algorithm>
#include <limits>

#include "attnserve/kv_cache.h"

namespace attnserve {

SlotAllocator::SlotAllocator(int64_t num_slots, int page_size) : page_size_(page_size), num_pages_(0) {
  ATTNSERVE_CHECK(page_size >= 1, "SlotAllocator: page_size must be >= 1, got ", page_size);
  ATTNSERVE_CHECK(num_slots % page_size == 0, "SlotAllocator: num_slots ", num_slots,
                  " must be a multiple of page_size ", page_size);
  // Slots travel as i32 (req_to_token table, out_cache_loc).
  ATTNSERVE_CHECK(num_slots <= std::numeric_limits<int32_t>::max(), "SlotAllocator: num_slots ", num_slots,
                  " does not fit in int32");
  num_pages_ = num_slots / page_size;
  ATTNSERVE_CHECK(num_pages_ >= 2, "SlotAllocator: need at least 2 pages (page 0 is the reserved padding page), got ",
                  num_pages_, " (num_slots ", num_slots, ", page_size ", page_size, ")");
  reset();
}

void SlotAllocator::reset() {
  allocated_.assign(std::size_t(num_pages_), 0);
  free_.clear();
  for (int64_t p = 1; p < num_pages_; ++p) free_.insert(free_.end(), int32_t(p));
}

bool SlotAllocator::page_allocated(int64_t page) const {
  return page >= 1 && page < num_pages_ && allocated_[std::size_t(page)];
}

// last_loc must be the slot of the request's last cached token: in an allocated page, at in-page
// offset (prefix_len - 1) % page_size; -1 exactly when prefix_len == 0.
void SlotAllocator::check_last_loc(const char* op, size_t i, int64_t prefix_len, int64_t last_loc) const {
  ATTNSERVE_CHECK(prefix_len >= 0, op, ": request ", i, " has prefix_len ", prefix_len, " < 0");
  if (prefix_len == 0) {
    ATTNSERVE_CHECK(last_loc == -1, op, ": request ", i, " has prefix_len 0 but last_loc ", last_loc, " (expected -1)");
    return;
  }
  ATTNSERVE_CHECK(last_loc >= 0 && last_loc < num_slots(), op, ": request ", i, " has last_loc ", last_loc,
                  " out of range [0, ", num_slots(), ") with prefix_len ", prefix_len);
  ATTNSERVE_CHECK(page_allocated(last_loc / page_size_), op, ": request ", i, " has last_loc ", last_loc, " in page ",
                  last_loc / page_size_, ", which is not allocated");
  ATTNSERVE_CHECK(last_loc % page_size_ == (prefix_len - 1) % page_size_, op, ": request ", i, " has last_loc ",
                  last_loc, " at in-page offset ", last_loc % page_size_, ", but its token ", prefix_len - 1,
                  " belongs at offset ", (prefix_len - 1) % page_size_, " (page_size ", page_size_, ")");
}

std::vector<int32_t> SlotAllocator::alloc_extend(std::span<const ExtendRequest> reqs) {
  return alloc_slots("SlotAllocator::alloc_extend", reqs);
}

std::vector<int32_t> SlotAllocator::alloc_slots(const char* op, std::span<const ExtendRequest> reqs) {
  // Pass 1: validate and count; nothing changes until every request checks out and pages suffice.
  int64_t pages_needed = 0, total_tokens = 0;
  std::vector<int64_t> continued_pages;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ExtendRequest& r = reqs[i];
    check_last_loc(op, i, r.prefix_len, r.last_loc);
    ATTNSERVE_CHECK(r.extend_len >= 0, op, ": request ", i, " has extend_len ", r.extend_len, " < 0");
    int64_t in_page = r.prefix_len % page_size_;
    int64_t tail = in_page == 0 ? 0 : std::min<int64_t>(r.extend_len, page_size_ - in_page);
    if (tail > 0) continued_pages.push_back(r.last_loc / page_size_);
    pages_needed += (r.extend_len - tail + page_size_ - 1) / page_size_;
    total_tokens += r.extend_len;
  }
  std::sort(continued_pages.begin(), continued_pages.end());
  auto dup = std::adjacent_find(continued_pages.begin(), continued_pages.end());
  ATTNSERVE_CHECK(dup == continued_pages.end(), op, ": two requests of the batch continue the same page ",
                  dup == continued_pages.end() ? 0 : *dup, " (their slots would overlap)");
  ATTNSERVE_CHECK(pages_needed <= available_pages(), op, ": out of KV cache pages: the batch of ", reqs.size(),
                  " requests (", total_tokens, " new tokens) needs ", pages_needed, " new pages of ", page_size_,
                  " slots, only ", available_pages(), " are free");

  // Pass 2: hand out slots (cannot fail).
  std::vector<int32_t> out;
  out.reserve(std::size_t(total_tokens));
  for (const ExtendRequest& r : reqs) {
    int64_t left = r.extend_len;
    int64_t in_page = r.prefix_len % page_size_;
    for (int64_t s = r.last_loc + 1; in_page != 0 && in_page < page_size_ && left > 0; ++s, ++in_page, --left)
      out.push_back(int32_t(s));
    while (left > 0) {
      int32_t page = *free_.begin();
      free_.erase(free_.begin());
      allocated_[std::size_t(page)] = 1;
      int64_t base = int64_t(page) * page_size_;
      for (int64_t j = 0; j < page_size_ && left > 0; ++j, --left) out.push_back(int32_t(base + j));
    }
  }
  return out;
}

std::vector<int32_t> SlotAllocator::alloc_decode(std::span<const DecodeRequest> reqs) {
  for (size_t i = 0; i < reqs.size(); ++i)
    ATTNSERVE_CHECK(reqs[i].seq_len >= 1, "SlotAllocator::alloc_decode: request ", i, " has seq_len ", reqs[i].seq_len,
                    " (decode needs at least one cached token)");
  std::vector<ExtendRequest> ext(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) ext[i] = {reqs[i].seq_len, reqs[i].last_loc, 1};
  return alloc_slots("SlotAllocator::alloc_decode", ext);
}

void SlotAllocator::free(std::span<const int32_t> slots) {
  std::vector<int32_t> pages;
  pages.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    int64_t s = slots[i];
    ATTNSERVE_CHECK(s >= 0 && s < num_slots(), "SlotAllocator::free: slots[", i, "] = ", s, " out of range [0, ",
                    num_slots(), ")");
    int32_t page = int32_t(s / page_size_);
    ATTNSERVE_CHECK(page != 0, "SlotAllocator::free: slots[", i, "] = ", s,
                    " is in the reserved padding page 0, which is never allocated");
    ATTNSERVE_CHECK(allocated_[std::size_t(page)], "SlotAllocator::free: slots[", i, "] = ", s, " is in page ", page,
                    ", which is not allocated (double free, or never allocated)");
    pages.push_back(page);
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  for (int32_t p : pages) {
    allocated_[std::size_t(p)] = 0;
    free_.insert(p);
  }
}

}  // namespace attnserve
