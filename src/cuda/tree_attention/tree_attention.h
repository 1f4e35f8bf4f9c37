// Internal: CUDA entry point of tree_attention (called by src/ops/tree_attention.cpp after validation;
// defined in sm80/tree_attention.cu, a throwing fallback in CPU-only builds). Plain C++, no CUDA headers.
#pragma once
#include "attnserve/ops/tree_attention.h"

namespace attnserve::cuda {
void tree_attention(const TreeAttentionArgs& a, Stream stream);
}  // namespace attnserve::cuda
