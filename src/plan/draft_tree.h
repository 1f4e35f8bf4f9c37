// Internal: one request's EAGLE draft tree, validated, as the tree part of attention reads it: per
// draft token i, the bit mask of the draft tokens it sees (its ancestors and itself) and its depth
// (distance from its root: the token's position is seq_len + depth).
#pragma once
#include <cstdint>
#include <span>

namespace attnserve::plan_detail {

// From parent indices: parents[i] in [-1, n) (-1: a root; a forest is allowed). Throws attnserve::Error
// naming `who`, request r and the token for a parent out of range or a cycle.
void tree_from_parents(const char* who, int r, std::span<const int32_t> parents, uint64_t* mask, int32_t* depth);
// From the engine's packed ancestor masks (bit j of masks[i]: token i sees draft token j). Each mask
// must hold bit i, no bit >= n, and equal its parent's mask plus bit i (the parent: the other token of
// the mask with the most bits), i.e. be the ancestor set of a tree. Throws naming the first bad token.
void tree_from_masks(const char* who, int r, std::span<const int64_t> masks, uint64_t* mask, int32_t* depth);

}  // namespace attnserve::plan_detail
