// Internal: the op dispatchers with a plan the caller made once for these shapes (the backends: one per
// batch, reused in every layer). They validate like the public ones, then run the CPU oracle (which
// needs no plan) or the plan on CUDA.
#pragma once
#include "cuda/cuda_ops.h"

namespace attnserve {

void paged_attention(const PagedAttentionArgs& a, const cuda::attn::Plan& plan, Workspace ws, Stream stream);
void mla_attention(const MlaAttentionArgs& a, const cuda::mla::Plan& plan, Workspace ws, Stream stream);
void sparse_mla(const SparseMlaArgs& a, const cuda::sparse_mla_op::Plan& plan, Workspace ws, Stream stream);

}  // namespace attnserve
