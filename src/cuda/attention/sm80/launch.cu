// Host side of the portable paged-attention kernel: dtype x head dim x fp8 cache x tile rows dispatch
// to the instantiations (instantiations/*.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attnserve/error.h"
#include "cuda/attention/sm80/attention_sm80.h"

namespace attnserve::cuda::attn {
namespace {

template <typename T, int D, int DV>
void dispatch_fp8_mt(const Params& p, const Plan& c, int b, bool fp8, cudaStream_t s) {
  if (fp8) {
    if (c.mt == 1) launch<T, D, DV, true, 1>(p, c, b, s);
    else launch<T, D, DV, true, 4>(p, c, b, s);
  } else {
    if (c.mt == 1) launch<T, D, DV, false, 1>(p, c, b, s);
    else launch<T, D, DV, false, 4>(p, c, b, s);
  }
}

template <typename T>
void dispatch_d(const Params& p, const Plan& c, int b, cudaStream_t s) {
  const bool fp8 = c.problem.kv_dtype == DType::fp8_e4m3;
  const bool done = HeadDims::dispatch(c.problem.d, c.problem.d_v, [&](auto dims) {
    using Dims = decltype(dims);
    dispatch_fp8_mt<T, Dims::d, Dims::d_v>(p, c, b, fp8, s);
  });
  ATTNSERVE_CHECK(done, "paged_attention (sm80): no kernel for head dims ", c.problem.d, "/", c.problem.d_v);
}

}  // namespace

void launch_sm80(const Params& p, const Plan& plan, int batch, cudaStream_t stream) {
  // out's dtype: q's, or what an fp8 q was widened to (launch_widen_fp8_q)
  if (plan.problem.out_dtype == DType::bf16) dispatch_d<__nv_bfloat16>(p, plan, batch, stream);
  else dispatch_d<__half>(p, plan, batch, stream);
}

}  // namespace attnserve::cuda::attn
