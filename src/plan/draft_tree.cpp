#include "plan/draft_tree.h"

#include <bit>

#include "attnserve/error.h"
#include "attnserve/ops/tree_attention.h"  // kTreeMaxKeys

namespace attnserve::plan_detail {

void tree_from_parents(const char* who, int r, std::span<const int32_t> parents, uint64_t* mask, int32_t* depth) {
  const int n = int(parents.size());
  ATTNSERVE_CHECK(n <= kTreeMaxKeys, who, ": request ", r, "'s draft tree has ", n, " tokens, at most ", kTreeMaxKeys,
                  " are supported");
  for (int i = 0; i < n; ++i)
    ATTNSERVE_CHECK(parents[i] >= -1 && parents[i] < n, who, ": tree_parents[", r, ", ", i, "] = ", parents[i],
                    " is out of range (a parent is a draft token of the same request, 0 .. ", n - 1,
                    ", or -1 for a root)");
  for (int i = 0; i < n; ++i) {
    uint64_t bits = uint64_t(1) << i;
    int steps = 0;
    for (int p = parents[i]; p != -1; p = parents[p]) {
      ATTNSERVE_CHECK(++steps < n && p != i, who, ": tree_parents of request ", r, " has a cycle through draft token ",
                      i, " (following parents from it never reaches a root)");
      bits |= uint64_t(1) << p;
    }
    mask[i] = bits;
    depth[i] = steps;
  }
}

void tree_from_masks(const char* who, int r, std::span<const int64_t> masks, uint64_t* mask, int32_t* depth) {
  const int n = int(masks.size());
  ATTNSERVE_CHECK(n <= kTreeMaxKeys, who, ": request ", r, "'s draft tree has ", n, " tokens, at most ", kTreeMaxKeys,
                  " are supported");
  const uint64_t valid = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
  for (int i = 0; i < n; ++i) {
    const uint64_t m = uint64_t(masks[i]), self = uint64_t(1) << i;
    ATTNSERVE_CHECK((m & self) != 0, who, ": tree_mask[", r, ", ", i, "] lacks bit ", i,
                    " (a draft token sees itself)");
    ATTNSERVE_CHECK((m & ~valid) == 0, who, ": tree_mask[", r, ", ", i, "] has bits past the ", n, " draft tokens");
    // The parent: among the others the mask holds, the one whose own mask has the most bits.
    int parent = -1;
    for (uint64_t rest = m & ~self; rest; rest &= rest - 1) {
      const int j = std::countr_zero(rest);
      if (parent < 0 || std::popcount(uint64_t(masks[j])) > std::popcount(uint64_t(masks[parent]))) parent = j;
    }
    ATTNSERVE_CHECK(parent < 0 || ((uint64_t(masks[parent]) | self) == m && (uint64_t(masks[parent]) & self) == 0), who,
                    ": tree_mask[", r, ", ", i, "] is not the ancestor set of a tree (it must equal its parent ",
                    parent, "'s mask plus bit ", i, ")");
    mask[i] = m;
    depth[i] = std::popcount(m) - 1;
  }
}

}  // namespace attnserve::plan_detail
