// CPU oracle of paged attention (MHA/GQA/MQA): one score part, q . k.
#include "cpu/attention_core.h"
#include "cpu/cpu_ops.h"

namespace attnserve::cpu {

void paged_attention(const PagedAttentionArgs& a, bool fp64) {
  PagedAttentionProblem p;
  p.parts[0] = {a.q, a.k_cache};
  p.num_parts = 1;
  p.v = a.v_cache;
  p.page_table = a.page_table;
  p.cache_seqlens = a.cache_seqlens;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.out = a.out;
  p.lse = a.lse;
  p.q_descale = a.q_descale;
  p.k_descale = a.k_descale;
  p.v_descale = a.v_descale;
  p.softmax_scale = a.softmax_scale;
  p.causal = a.causal;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.softcap = a.softcap;
  run_paged_attention(p, fp64);
}

}  // namespace attnserve::cpu
