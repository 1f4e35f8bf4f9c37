#include "metadata_dict.h"

#include <nanobind/stl/vector.h>

namespace attnserve::py {

nb::dict metadata_dict(const DenseMetadata& m, nb::handle owner) {
  nb::dict d;
  d["mode"] = m.mode;
  d["batch_size"] = m.batch_size;
  d["num_q_rows"] = m.num_q_rows;
  d["page_size"] = m.page_size;
  d["cache_seqlens_int32"] = to_python(m.cache_seqlens_int32, owner);
  d["cu_seqlens_q"] = to_python(m.cu_seqlens_q, owner);
  d["cu_seqlens_k"] = to_python(m.cu_seqlens_k, owner);
  d["max_seq_len_q"] = m.max_seq_len_q;
  d["max_seq_len_k"] = m.max_seq_len_k;
  d["page_table"] = to_python(m.page_table, owner);
  d["window_left"] = m.window_left;
  d["window_right"] = m.window_right;
  d["window_size"] = nb::make_tuple(m.window_left, m.window_right);  // the seeds' name
  d["captured"] = m.captured;
  if (m.has_local_attn) {
    const LocalAttentionMetadata& l = m.local_attn_metadata;
    nb::dict ld;
    ld["local_query_start_loc"] = to_python(l.local_query_start_loc, owner);
    ld["local_seqused_k"] = to_python(l.local_seqused_k, owner);
    ld["local_block_table"] = to_python(l.local_block_table, owner);
    ld["local_max_query_len"] = l.local_max_query_len;
    ld["local_max_seq_len"] = l.local_max_seq_len;
    ld["num_virtual_batches"] = l.num_virtual_batches;
    ld["effective_chunk_size"] = l.effective_chunk_size;
    d["local_attn_metadata"] = ld;
  } else {
    d["local_attn_metadata"] = nb::none();
  }
  return d;
}

nb::dict metadata_dict(const SparseMetadata& m, nb::handle owner) {
  nb::dict d;
  d["mode"] = m.mode;
  d["batch_size"] = m.batch_size;
  d["num_rows"] = m.num_rows;
  d["page_size"] = m.page_size;
  d["topk"] = m.topk;
  d["cache_seqlens_int32"] = to_python(m.cache_seqlens_int32, owner);
  d["cu_seqlens_q"] = to_python(m.cu_seqlens_q, owner);
  d["cu_seqlens_k"] = to_python(m.cu_seqlens_k, owner);
  d["max_seq_len_q"] = m.max_seq_len_q;
  d["max_seq_len_k"] = m.max_seq_len_k;
  d["page_table_1"] = to_python(m.page_table_1, owner);
  d["real_page_table"] = to_python(m.real_page_table, owner);
  d["nsa_seqlens_expanded"] = to_python(m.nsa_seqlens_expanded, owner);
  d["nsa_cache_seqlens_int32"] = to_python(m.nsa_cache_seqlens_int32, owner);
  d["nsa_cu_seqlens_q"] = to_python(m.nsa_cu_seqlens_q, owner);
  d["nsa_cu_seqlens_k"] = to_python(m.nsa_cu_seqlens_k, owner);
  d["nsa_extend_seq_lens_list"] = m.nsa_extend_seq_lens_list;
  d["nsa_max_seqlen_q"] = m.nsa_max_seqlen_q;
  d["captured"] = m.captured;
  return d;
}

}  // namespace attnserve::py
