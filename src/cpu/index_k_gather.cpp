// CPU gather_index_k: every slot is range-checked first (so a bad slot raises an Error and leaves the
// outputs untouched), then each row copies its 128 key bytes and its f32 scale out of the page.
#include <cstring>
#include <vector>

#include "attnserve/cache_formats.h"
#include "cpu/index_k_gather.h"
#include "cpu/load.h"
#include "cpu/parallel.h"

namespace attnserve::cpu {

void gather_index_k(const GatherIndexKArgs& a) {
  const int64_t n = a.slots.size(0), page_size = a.page_size;
  const int64_t num_slots = a.index_k_cache.size(0) * page_size;
  std::vector<int64_t> slots(static_cast<std::size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t s = load_index(a.slots.data, a.slots.dtype, offset_of(a.slots, j));
    ATTNSERVE_CHECK(s >= 0 && s < num_slots, "gather_index_k: argument 'slots' has slots[", j, "] = ", s,
                    ", out of range [0, ", num_slots, ") of the pool's token slots ('index_k_cache' of ",
                    a.index_k_cache.size(0), " pages x page_size ", page_size, ")");
    slots[std::size_t(j)] = s;
  }
  const auto* pool = static_cast<const uint8_t*>(a.index_k_cache.data);
  auto* out_k = static_cast<uint8_t*>(a.out_k.data);
  auto* out_scale = static_cast<float*>(a.out_scale.data);
  parallel_for(n, [&](int64_t j) {
    const int64_t slot = slots[std::size_t(j)], in_page = slot % page_size;
    // The layout's offsets within one page (page 0), then the page's own (possibly strided) base.
    const uint8_t* page = pool + offset_of(a.index_k_cache, slot / page_size, 0);
    std::memcpy(out_k + offset_of(a.out_k, j, 0), page + IndexerKeyLayout::key_offset(in_page, int(page_size)),
                IndexerKeyLayout::kDim);
    std::memcpy(out_scale + offset_of(a.out_scale, j), page + IndexerKeyLayout::scale_offset(in_page, int(page_size)),
                sizeof(float));
  });
}

}  // namespace attnserve::cpu
