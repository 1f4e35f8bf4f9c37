// Split-K combine of sparse MLA: merges the num_splits partial states (O, m, l) of every (row, head)
// that sparse_mla_kernel.cuh left in the workspace and writes what the unsplit kernel writes:
//   m = max_s m_s,  O = sum_s 2^(m_s - m) O_s,  l = sum_s 2^(m_s - m) l_s   (splits in order 0..S-1)
//   out = O / (l + 2^(sink log2e - m)),  lse = (m + log2 l) ln 2,  max_logits = m ln 2
// The sink joins the denominator once, here (the splits never see it). Splits with m = -inf (past
// topk_length, or only invalid slots) are skipped without reading their O; a row where every split is
// empty gets out 0 and lse = max_logits = -inf. Deterministic: fixed order, no atomics.
// The merge kernel of src/cuda/merge takes normalized parts and natural-log LSEs and knows no sink
// or max_logits, hence this small kernel of its own.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sparse_mla/sm80/sparse_mla_sm80.h"

namespace attnserve::cuda::sparse_mla_op {
namespace {

constexpr int kCombineThreads = 256;  // 8 warps, one (row, head) each
constexpr float kLog2eC = 1.4426950408889634f;
constexpr float kLn2C = 0.6931471805599453f;

// Lane l covers dims 4l + 128i (i < 4): float4 loads, a warp reads 512 contiguous bytes per step.
__global__ void __launch_bounds__(kCombineThreads) sparse_mla_combine_kernel(const Params p) {
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * (kCombineThreads / 32) + threadIdx.x / 32;
  if (item >= p.rows * p.h_q) return;
  const int64_t row = item / p.h_q;
  const int head = int(item - row * p.h_q);

  float m = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m = fmaxf(m, p.part_ml[part_index(s, row, head, p.rows, p.h_q)].x);

  float acc[4][4] = {};
  float l = 0.f;
  if (m != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) {
      const int64_t part = part_index(s, row, head, p.rows, p.h_q);
      const float2 ml = p.part_ml[part];
      if (ml.x == -INFINITY) continue;  // empty split: its O was never written
      const float w = exp2f(ml.x - m);
      l += w * ml.y;
      const float4* src = reinterpret_cast<const float4*>(p.part_o + part * kDimV) + lane;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 v = src[32 * i];
        acc[i][0] += w * v.x;
        acc[i][1] += w * v.y;
        acc[i][2] += w * v.z;
        acc[i][3] += w * v.w;
      }
    }
  }
  const bool empty = m == -INFINITY;
  float inv = 0.f;
  if (!empty) {
    float denom = l;
    if (p.sink) denom += exp2f(p.sink[int64_t(head) * p.sink_stride] * kLog2eC - m);
    inv = 1.f / denom;
  }
  uint16_t* out = p.out + row * p.out_row_stride + int64_t(head) * p.out_head_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + 4 * lane + 128 * i);  // out rows are 4-byte aligned
    dst[0] = ptx::pack2<__nv_bfloat16>(acc[i][0] * inv, acc[i][1] * inv);
    dst[1] = ptx::pack2<__nv_bfloat16>(acc[i][2] * inv, acc[i][3] * inv);
  }
  if (lane == 0) {
    if (p.lse)
      p.lse[row * p.lse_row_stride + int64_t(head) * p.lse_head_stride] = empty ? -INFINITY : (m + log2f(l)) * kLn2C;
    if (p.max_logits)
      p.max_logits[row * p.ml_row_stride + int64_t(head) * p.ml_head_stride] = empty ? -INFINITY : m * kLn2C;
  }
}

}  // namespace

void launch_combine(const Params& p, void* stream) {
  const int64_t items = p.rows * p.h_q;
  if (items == 0) return;
  const int64_t blocks = (items + kCombineThreads / 32 - 1) / (kCombineThreads / 32);
  ATTNSERVE_CHECK(blocks < (int64_t(1) << 31), "sparse_mla: too many rows for the split combine");
  sparse_mla_combine_kernel<<<unsigned(blocks), kCombineThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::sparse_mla_op
