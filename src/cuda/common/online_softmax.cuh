// One 32-key step of the online softmax (base 2) for the two rows (g, g + 8) a lane holds in an m16
// mma tile, shared by the MLA and sparse MLA kernels. The quad of lanes owning a row agrees on its
// running max; each lane keeps a partial row sum (summed over the quad at the end).
#pragma once
#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace attnserve::cuda {

// sv[row][k-step kk][4]: scaled scores of cols 16kk + 2tig + {0,1} and 16kk + 8 + 2tig + {0,1}, -inf
// where masked; they become probabilities. m_run / l_run: running max and partial sum per row. o: the
// lane's NT P·V accumulators, rescaled when a row's max moved (skipped when no row of the warp moved).
// pa: P as the A fragments (T) of the P·V mma over the 32 keys.
template <typename T, int NT>
__device__ __forceinline__ void online_softmax_step(float (&sv)[2][2][4], float (&m_run)[2], float (&l_run)[2],
                                                    float (&o)[NT][4], uint32_t (&pa)[2][4]) {
  float alpha[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float tmax = -INFINITY;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) tmax = fmaxf(tmax, sv[i][kk][e]);
    tmax = ptx::quad_max(tmax);
    const float m_new = fmaxf(m_run[i], tmax);
    alpha[i] = m_run[i] == -INFINITY ? 0.f : exp2f(m_run[i] - m_new);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    float sum = 0.f;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sv[i][kk][e] = exp2f(sv[i][kk][e] - m_use);
        sum += sv[i][kk][e];
      }
    l_run[i] = l_run[i] * alpha[i] + sum;
    m_run[i] = m_new;
  }
  if (!__all_sync(ptx::kFullMask, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
  }
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    pa[kk][0] = ptx::pack2<T>(sv[0][kk][0], sv[0][kk][1]);  // row g, cols 16kk + 2tig
    pa[kk][1] = ptx::pack2<T>(sv[1][kk][0], sv[1][kk][1]);  // row g + 8
    pa[kk][2] = ptx::pack2<T>(sv[0][kk][2], sv[0][kk][3]);  // row g, cols + 8
    pa[kk][3] = ptx::pack2<T>(sv[1][kk][2], sv[1][kk][3]);  // row g + 8, cols + 8
  }
}

}  // namespace attnserve::cuda
