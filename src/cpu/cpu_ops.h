// Internal: CPU implementations (the oracle) of every op, called by the dispatchers in src/ops/
// after validation. float32 math; `fp64 = true` computes in double (to check the oracle itself).
#pragma once
#include "attnserve/ops.h"

namespace attnserve::cpu {

void paged_attention(const PagedAttentionArgs& a, bool fp64 = false);
void mla_attention(const MlaAttentionArgs& a, bool fp64 = false);
void merge_state(const MergeStateArgs& a);
void merge_states(const MergeStatesArgs& a);
void sparse_mla(const SparseMlaArgs& a, bool fp64 = false);
void quantize_fp8_groups(const QuantizeFp8Args& a);
void indexer_ragged(const IndexerRaggedArgs& a);
void indexer_paged(const IndexerPagedArgs& a);
void topk(const TopkArgs& a);
void set_kv_buffer(const StoreKvArgs& a);
void set_mla_kv_buffer(const StoreMlaArgs& a);
void set_index_k(const StoreIndexKArgs& a);

}  // namespace attnserve::cpu
