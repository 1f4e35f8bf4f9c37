// Internal: CPU entry point (the oracle) of tree_attention, called by src/ops/tree_attention.cpp after
// validation. Checks every index value (row ranges, key counts, slots) before writing anything.
#pragma once
#include "attnserve/ops/tree_attention.h"

namespace attnserve::cpu {
void tree_attention(const TreeAttentionArgs& a);
}  // namespace attnserve::cpu
