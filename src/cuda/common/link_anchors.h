// Why these exist: the CUDA entry points (cuda_ops.h) have weak fallbacks in
// src/ops/cuda_fallback.cpp, and libattnserve is a static archive in which that object comes
// first. A linker that resolves a symbol with the archive's first (weak) definition never pulls
// a later member for it, so the real kernels would silently be left out. runtime.cu is always
// linked (host code calls it); it references one anchor in each CUDA op object, which pulls those
// objects in, and their strong definitions then replace the weak ones.
#pragma once

namespace attnserve::cuda::link {
extern int store_kv_anchor;
extern int store_mla_anchor;
extern int merge_anchor;
extern int attention_anchor;
extern int mla_anchor;
int keep_cuda_ops();  // sums the anchors; never needs calling
}  // namespace attnserve::cuda::link
