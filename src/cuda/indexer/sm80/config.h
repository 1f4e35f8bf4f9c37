// The lightning-indexer kernel (sm80+ mma.sync): its CTA shape. Host-visible (plain C++): the plan
// (../plan.cpp) sizes the grid with it, the kernel (indexer.cu) is built from it.
#pragma once

namespace attnserve::cuda::indexer {

constexpr int kDim = 128;
constexpr int kWarps = 4;         // per CTA
constexpr int kColsPerWarp = 32;  // two m16 tiles of keys
constexpr int kColsPerCta = kWarps * kColsPerWarp;
constexpr int kRaggedGroupRows = 4;  // ragged rows sharing one CTA's key fragments

}  // namespace attnserve::cuda::indexer
