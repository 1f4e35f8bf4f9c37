// Hopper (sm_90a) sparse MLA on the dense MLA decode kernel's schedule (Kernel::sm90_bf16_dense / sm90_fp8_dense,
// SparseMlaTuning::dense_schedule / dense_schedule_fp8): sparse attention of one query row over its top-k list is the
// dense kernel with page size 1 where the "page table" is the row's index list. The consumers are the dense kernel's
// (src/cuda/mla/sm90/kernel.cuh: WG 1 S = Q K^T of 64 heads x 64 keys, the online softmax and O[:, 0:256), WG 2
// O[:, 256:512) from WG 1's P); this file gives them the sparse problem (the policy SparseTopk), producer_topk.cuh
// the producer (bf16 rows by cp.async, or FP8-656 tokens dequantized in the stage as the dense FP8 producer does).
//
// One CTA = (query row, block of 64 heads, split of the top-k list): grid (rows x head_blocks, num_splits), the
// head blocks of a row adjacent (they gather the same keys, the second from L2).
//   producer (WG 0)  Q of the 64 heads, then per 64-key tile of the row's list (positions [64 t, 64 t + 64) of the
//                    split) the gather into the ring, the slot being the index itself. Invalid positions (index < 0
//                    or >= num_slots, past topk_length) land as zero rows and clear their bit of the stage's 64-bit
//                    key mask (producer_topk.cuh).
//   WG 1 softmax     masks by key from that mask (a uniform skip when all 64 keys are valid), base-2 online
//                    softmax on raw scores x scale_log2 (the dense kernel's), then what the other sparse kernels
//                    write: out = O / (l + 2^(sink log2e - m)), lse = (m + log2 l) ln 2, max_logits = m ln 2;
//                    rows without a valid key: out 0, lse = max_logits = -inf. Split CTAs store (O, m, l)
//                    unnormalized in the sparse plan's workspace (params.cuh: part_o, part_ml) for its combine.
// Repeated indices count each time (each position is its own key). h_q: any count (heads past h_q are zero rows
// of Q, never stored); the plan takes it for h_q % 64 == 0.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/check.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/wgmma.cuh"
#include "cuda/mla/sm90/kernel.cuh"
#include "cuda/sparse_mla/params.cuh"
#include "producer_topk.cuh"

namespace attnserve::cuda::sparse_mla90 {

namespace dense_schedule {

using mla90::kHalfDv;

#if defined(ATTNSERVE_SM90_DEVICE)

// WG 1's masked online softmax (mla90::online_softmax) with the key mask of the tile's stage.
struct TopkSoftmax {
  float u;  // scale_log2: base-2 units per raw score (softmax_scale > 0, so the raw max is the scaled one)
  float m0, m1, l0, l1;

  __device__ __forceinline__ void init(const Params& p, const TopkBlock&, const mla90::Rows&) {
    u = p.scale_log2;
    m0 = m1 = -INFINITY;
    l0 = l1 = 0.f;
  }

  // Element i of the m64n64 fragment is key c = 8 j + 2 q + e (j = i / 4, q = lane % 4, e = i % 2), whose mask bit
  // 16 ((c % 16) / 4) + 4 (c / 16) + c % 4 is 32 (j % 2) + 4 (j / 2) + e past the thread's base 16 (q / 2) + 2 (q % 2).
  __device__ __forceinline__ void step(float (&s)[32], uint32_t mask_addr, int lane, float& al0, float& al1) {
    uint64_t mask;
    asm volatile("ld.shared.u64 %0, [%1];\n" : "=l"(mask) : "r"(mask_addr));
    if (mask != ~uint64_t(0)) {  // the same word in every thread: a uniform branch
      const uint64_t mine = mask >> (16 * ((lane & 3) >> 1) + 2 * (lane & 1));
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int j = i / 4, bit = 32 * (j & 1) + 4 * (j >> 1) + (i & 1);
        s[i] = (mine >> bit) & 1 ? s[i] : -INFINITY;
      }
    }
    mla90::online_softmax(s, u, m0, m1, l0, l1, al0, al1);
  }
};

// O[:, col0 .. col0 + 256) of the thread's two heads times inv per head: bf16 to out (one split) or f32 to the
// split's partial state (inv = 1 there: unnormalized).
__device__ __forceinline__ void store_topk_half(const Params& p, const TopkBlock& b, const mla90::Rows& rw,
                                                const float (&o)[128], int col0, float inv0, float inv1) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int head = b.h0 + (half ? rw.r1 : rw.r0);
    if (head >= p.h_q) continue;
    const float inv = half ? inv1 : inv0;
    if (p.num_splits == 1) {
      uint16_t* orow = p.out + b.row * p.out_row_stride + int64_t(head) * p.out_head_stride + col0;
#pragma unroll
      for (int i = 0; i < 128; i += 4) {
        const int c = sm90::acc_col(rw.lane, i);
        *reinterpret_cast<uint32_t*>(orow + c) =
            ptx::pack2<__nv_bfloat16>(o[i + 2 * half] * inv, o[i + 2 * half + 1] * inv);
      }
    } else {
      float* orow = p.part_o + sparse_mla_op::part_index(b.split, b.row, head, p.rows, p.h_q) * 512 + col0;
#pragma unroll
      for (int i = 0; i < 128; i += 4) {
        const int c = sm90::acc_col(rw.lane, i);
        *reinterpret_cast<float2*>(orow + c) = make_float2(o[i + 2 * half] * inv, o[i + 2 * half + 1] * inv);
      }
    }
  }
}

// The consumer roles' policy (mla90::PagedDecode's interface) for the sparse problem.
struct SparseTopk {
  using Params = sparse_mla_op::Params;
  using Block = TopkBlock;
  using Softmax = TopkSoftmax;

  __device__ __forceinline__ static void step(Softmax& st, const Block&, const mla90::Smem& sm, int t, float (&s)[32],
                                              int lane, float& al0, float& al1) {
    st.step(s, sm.key_mask(t), lane, al0, al1);
  }
  // 1 / (l + 2^(sink log2e - m)) unsplit (0 for a row without a valid key), 1 for a split's partial state.
  __device__ __forceinline__ static float inverse_of(const Params& p, int head, float m_raw, float u, float L) {
    if (p.num_splits > 1) return 1.f;
    if (m_raw == -INFINITY || head >= p.h_q) return 0.f;
    float denom = L;
    if (p.sink) denom += exp2f(p.sink[int64_t(head) * p.sink_stride] * 1.4426950408889634f - m_raw * u);
    return 1.f / denom;
  }
  __device__ __forceinline__ static void inverse(const Params& p, const Block& b, const mla90::Rows& rw,
                                                 const Softmax& st, float L0, float L1, float& inv0, float& inv1) {
    inv0 = inverse_of(p, b.h0 + rw.r0, st.m0, st.u, L0);
    inv1 = inverse_of(p, b.h0 + rw.r1, st.m1, st.u, L1);
  }
  // WG 1's half of O and the row statistics: lse and max_logits, or the split's (m, l) in base-2 scaled units.
  __device__ __forceinline__ static void store_lead(const Params& p, const Block& b, const mla90::Rows& rw,
                                                    const float (&o)[128], const Softmax& st, float L0, float L1,
                                                    float inv0, float inv1) {
    store_topk_half(p, b, rw, o, 0, inv0, inv1);
    if ((rw.lane & 3) != 0) return;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int head = b.h0 + (half ? rw.r1 : rw.r0);
      if (head >= p.h_q) continue;
      const float m_raw = half ? st.m1 : st.m0, L = half ? L1 : L0;
      const bool empty = m_raw == -INFINITY;
      const float m = empty ? -INFINITY : m_raw * st.u;
      if (p.num_splits > 1) {
        p.part_ml[sparse_mla_op::part_index(b.split, b.row, head, p.rows, p.h_q)] = make_float2(m, L);
        continue;
      }
      if (p.lse)
        p.lse[b.row * p.lse_row_stride + int64_t(head) * p.lse_head_stride] =
            empty ? -INFINITY : (m + log2f(L)) * 0.6931471805599453f;
      if (p.max_logits)
        p.max_logits[b.row * p.ml_row_stride + int64_t(head) * p.ml_head_stride] =
            empty ? -INFINITY : m * 0.6931471805599453f;
    }
  }
  __device__ __forceinline__ static void store_rest(const Params& p, const Block& b, const mla90::Rows& rw,
                                                    const float (&o)[128], float inv0, float inv1) {
    store_topk_half(p, b, rw, o, kHalfDv, inv0, inv1);
  }
};

#endif  // ATTNSERVE_SM90_DEVICE

// kFp8: the FP8-656 cache (produce_topk_fp8), else bf16 (produce_topk_bf16).
template <bool kFp8>
__global__ void __launch_bounds__(mla90::kThreads, 1) sparse_mla90_dense_kernel(const Params p) {
#if defined(ATTNSERVE_SM90_DEVICE)
  char* smem = mla90::smem_base();
  TopkBlock b;
  b.init(p);
  mla90::run_cta<SparseTopk>(p, b, smem, kFp8 ? kFullArrivalsFp8 : kFullArrivalsBf16,
                             [&](const mla90::Smem& sm, int tid) {
                               if constexpr (kFp8) produce_topk_fp8(p, b, sm, tid);
                               else produce_topk_bf16(p, b, sm, tid);
                             });
#endif
}

// Grid (rows x head_blocks, num_splits) of 384-thread CTAs; the dynamic shared-memory limit set once per cache kind.
template <bool kFp8>
void launch_dense_schedule(const Params& p, cudaStream_t stream) {
  auto* kernel = sparse_mla90_dense_kernel<kFp8>;
  constexpr int kSmem = int(mla90::smem_bytes_with_key_mask());
  static const bool configured = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(p.rows * p.head_blocks), unsigned(p.num_splits));
  kernel<<<grid, mla90::kThreads, kSmem, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace dense_schedule

}  // namespace attnserve::cuda::sparse_mla90
