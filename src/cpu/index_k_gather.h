// Internal: CPU entry point of gather_index_k (called by src/ops/index_k_gather.cpp after validation).
#pragma once
#include "attnserve/ops/index_k_gather.h"

namespace attnserve::cpu {
// Checks every slot against the pool first (an Error names 'slots'; nothing is written), then copies.
void gather_index_k(const GatherIndexKArgs& a);
}  // namespace attnserve::cpu
