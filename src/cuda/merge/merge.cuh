// Merging partial attention states on CUDA: the public merge_state / merge_states and the split-KV
// combine of the attention kernels share one device routine, so a single finite part passes
// through bit-exactly (weight exp(0) = 1), which the deterministic mode relies on.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attnserve/dtype.h"

namespace attnserve::cuda {

// n parts of [tokens, heads, d] values and [tokens, heads] natural-log LSEs, any element strides.
struct MergeInput {
  const void* v;
  int64_t v_sn, v_st, v_sh;  // strides in elements (part, token, head); last dim contiguous
  const float* s;
  int64_t s_sn, s_st, s_sh;
  int n;
  // Optional row range from device memory: only tokens in [cu[0], cu[b]) are merged (the split
  // combine of attention leaves rows outside the batch untouched, as the kernels do).
  const int* cu = nullptr;
  int b = 0;
};
struct MergeOutput {
  void* v;
  int64_t v_st, v_sh;
  float* s;  // may be null
  int64_t s_st, s_sh;
};

void launch_merge_states(const MergeInput& in, DType in_dtype, const MergeOutput& out, DType out_dtype, int64_t tokens,
                         int heads, int d, cudaStream_t stream);

}  // namespace attnserve::cuda
