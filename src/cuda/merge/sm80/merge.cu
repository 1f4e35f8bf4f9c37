// merge_state / merge_states on CUDA, and the split-KV combine (launch_merge_states).
// One thread per VEC contiguous elements of a (token, head) row (VEC = 16 bytes of input where the
// dims, strides and pointers allow it, else 1); parts are visited in order 0..n-1 with the same
// arithmetic at either width, so results are deterministic and equal across widths.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/host_util.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/merge/merge.cuh"

namespace attnserve::cuda {
namespace {

// An infinite LSE of either sign means "no keys": FlashMLA reports +inf for an empty row
// (SEED_NOTES 14, 19), FA3 and attnserve -inf. Both contribute nothing (never NaN).
__device__ __forceinline__ float part_lse(float s) { return isinf(s) ? -INFINITY : s; }

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T x[VEC];
};

// Thread i merges elements [c * VEC, c * VEC + VEC) of row i / (d / VEC), c = i % (d / VEC) (d = 0: one
// thread per row, the LSE only).
template <typename TIn, typename TOut, int VEC>
__global__ void merge_states_kernel(MergeInput in, MergeOutput out, int64_t tokens, int heads, int d) {
  const int chunks = d > 0 ? d / VEC : 1;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row = i / chunks;
  if (row >= tokens * heads) return;
  const int c = int(i - row * chunks);
  const int64_t t = row / heads;
  const int h = int(row - t * heads);
  if (in.cu && (t < in.cu[0] || t >= in.cu[in.b])) return;
  const float* s = in.s + t * in.s_st + h * in.s_sh;
  float m = -INFINITY;
  for (int p = 0; p < in.n; ++p) m = fmaxf(m, part_lse(s[p * in.s_sn]));
  auto* vo = reinterpret_cast<Pack<TOut, VEC>*>(static_cast<TOut*>(out.v) + t * out.v_st + h * out.v_sh + c * VEC);
  Pack<TOut, VEC> res;
  if (m == -INFINITY) {  // nothing seen by any part (or all parts are NaN-free empties)
#pragma unroll
    for (int e = 0; e < VEC; ++e) res.x[e] = from_f32<TOut>(0.f);
    if (d > 0) *vo = res;
    if (out.s && c == 0) out.s[t * out.s_st + h * out.s_sh] = -INFINITY;
    return;
  }
  const TIn* vbase = static_cast<const TIn*>(in.v) + t * in.v_st + h * in.v_sh + c * VEC;
  float acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc[e] = 0.f;
  float sum = 0.f;
  for (int p = 0; p < in.n; ++p) {
    const float sp = part_lse(s[p * in.s_sn]);
    if (sp == -INFINITY) continue;  // an empty part contributes nothing (its values are not read)
    const float w = expf(sp - m);
    sum += w;
    if (d == 0) continue;
    const Pack<TIn, VEC> vp = *reinterpret_cast<const Pack<TIn, VEC>*>(vbase + p * in.v_sn);
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[e] += w * to_f32(vp.x[e]);
  }
  const float inv = 1.f / sum;
#pragma unroll
  for (int e = 0; e < VEC; ++e) res.x[e] = from_f32<TOut>(acc[e] * inv);
  if (d > 0) *vo = res;
  if (out.s && c == 0) out.s[t * out.s_st + h * out.s_sh] = m + logf(sum);
}

bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// 16 bytes of input per thread where d, every element stride and both base pointers allow it, else 1.
template <typename TIn, typename TOut>
int vector_width(const MergeInput& in, const MergeOutput& out, int d) {
  constexpr int v = 16 / int(sizeof(TIn));
  const bool ok = d % v == 0 && in.v_sn % v == 0 && in.v_st % v == 0 && in.v_sh % v == 0 && out.v_st % v == 0 &&
                  out.v_sh % v == 0 && aligned_to(in.v, sizeof(TIn) * v) && aligned_to(out.v, sizeof(TOut) * v);
  return ok ? v : 1;
}

template <typename TIn, typename TOut>
void launch_typed(const MergeInput& in, const MergeOutput& out, int64_t tokens, int heads, int d, cudaStream_t stream) {
  constexpr int kVec = 16 / int(sizeof(TIn));
  constexpr int kThreads = 256;
  const int vec = vector_width<TIn, TOut>(in, out, d);
  const int64_t threads = tokens * heads * (d > 0 ? d / vec : 1);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  ATTNSERVE_CHECK(blocks < (int64_t(1) << 31), "merge: too many rows");
  if (vec == kVec)
    merge_states_kernel<TIn, TOut, kVec><<<unsigned(blocks), kThreads, 0, stream>>>(in, out, tokens, heads, d);
  else merge_states_kernel<TIn, TOut, 1><<<unsigned(blocks), kThreads, 0, stream>>>(in, out, tokens, heads, d);
}

template <typename TIn>
void dispatch_out(const MergeInput& in, const MergeOutput& out, DType out_dtype, int64_t tokens, int heads, int d,
                  cudaStream_t stream) {
  switch (out_dtype) {
    case DType::bf16: launch_typed<TIn, __nv_bfloat16>(in, out, tokens, heads, d, stream); break;
    case DType::f16: launch_typed<TIn, __half>(in, out, tokens, heads, d, stream); break;
    case DType::f32: launch_typed<TIn, float>(in, out, tokens, heads, d, stream); break;
    default: ATTNSERVE_FAIL("merge: output dtype ", dtype_name(out_dtype), " not supported on CUDA");
  }
}

}  // namespace

void launch_merge_states(const MergeInput& in, DType in_dtype, const MergeOutput& out, DType out_dtype, int64_t tokens,
                         int heads, int d, cudaStream_t stream) {
  if (tokens * heads == 0) return;
  switch (in_dtype) {
    case DType::bf16: dispatch_out<__nv_bfloat16>(in, out, out_dtype, tokens, heads, d, stream); break;
    case DType::f16: dispatch_out<__half>(in, out, out_dtype, tokens, heads, d, stream); break;
    case DType::f32: dispatch_out<float>(in, out, out_dtype, tokens, heads, d, stream); break;
    default: ATTNSERVE_FAIL("merge: input dtype ", dtype_name(in_dtype), " not supported on CUDA");
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

void merge_states(const MergeStatesArgs& a, Stream stream) {
  ATTNSERVE_CHECK(a.v_parts.stride(-1) == 1 || a.v_parts.size(-1) <= 1,
                  "merge_states: v_parts last dim must be contiguous");
  ATTNSERVE_CHECK(a.v_out.stride(-1) == 1 || a.v_out.size(-1) <= 1, "merge_states: v_out last dim must be contiguous");
  MergeInput in{a.v_parts.data,
                a.v_parts.stride(0),
                a.v_parts.stride(1),
                a.v_parts.stride(2),
                static_cast<const float*>(a.s_parts.data),
                a.s_parts.stride(0),
                a.s_parts.stride(1),
                a.s_parts.stride(2),
                int(a.v_parts.size(0))};
  MergeOutput out{a.v_out.data, a.v_out.stride(0), a.v_out.stride(1), nullptr, 0, 0};
  if (!a.s_out.empty_view()) {
    out.s = static_cast<float*>(a.s_out.data);
    out.s_st = a.s_out.stride(0);
    out.s_sh = a.s_out.stride(1);
  }
  launch_merge_states(in, a.v_parts.dtype, out, a.v_out.dtype, a.v_parts.size(1), int(a.v_parts.size(2)),
                      int(a.v_parts.size(3)), to_cuda(stream));
}

// Two parts given as separate tensors: viewed as n = 2 parts with the part stride equal to the
// distance between the two bases (in elements), which is exact whatever the allocation.
void merge_state(const MergeStateArgs& a, Stream stream) {
  for (auto* t : {&a.v_a, &a.v_b, &a.v_out})
    ATTNSERVE_CHECK(t->stride(-1) == 1 || t->size(-1) <= 1, "merge_state: value last dims must be contiguous");
  ATTNSERVE_CHECK(a.v_a.strides == a.v_b.strides && a.s_a.strides == a.s_b.strides,
                  "merge_state: on CUDA v_a/v_b and s_a/s_b must have the same strides");
  const int64_t esz = int64_t(dtype_size(a.v_a.dtype));
  const int64_t dv = (static_cast<const char*>(a.v_b.data) - static_cast<const char*>(a.v_a.data));
  const int64_t ds = (static_cast<const char*>(a.s_b.data) - static_cast<const char*>(a.s_a.data));
  ATTNSERVE_CHECK(dv % esz == 0 && ds % 4 == 0, "merge_state: v_b/s_b must be element-aligned relative to v_a/s_a");
  MergeInput in{a.v_a.data,
                dv / esz,
                a.v_a.stride(0),
                a.v_a.stride(1),
                static_cast<const float*>(a.s_a.data),
                ds / 4,
                a.s_a.stride(0),
                a.s_a.stride(1),
                2};
  MergeOutput out{a.v_out.data, a.v_out.stride(0), a.v_out.stride(1), nullptr, 0, 0};
  if (!a.s_out.empty_view()) {
    out.s = static_cast<float*>(a.s_out.data);
    out.s_st = a.s_out.stride(0);
    out.s_sh = a.s_out.stride(1);
  }
  ATTNSERVE_CHECK(a.v_out.dtype == a.v_a.dtype, "merge_state: v_out must have v_a's dtype");
  launch_merge_states(in, a.v_a.dtype, out, a.v_out.dtype, a.v_a.size(0), int(a.v_a.size(1)), int(a.v_a.size(2)),
                      to_cuda(stream));
}

}  // namespace attnserve::cuda
