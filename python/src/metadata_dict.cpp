#include "metadata_dict.h"

#include <nanobind/stl/vector.h>

#include <memory>
#include <vector>

namespace attnserve::py {
namespace {

// Owns the buffers of a copied metadata dict (the arrays' owner on the Python side).
struct MetadataCopy {
  std::vector<Buffer> buffers;
  MetadataCopy() = default;
  MetadataCopy(const MetadataCopy&) = delete;  // owns device memory (vector<Buffer> only looks copyable)

  // A contiguous copy of v on its device (rows copied one by one when v is a strided table).
  TensorView copy_of(const TensorView& v, Stream stream) {
    if (v.empty_view()) return v;
    Buffer& b = buffers.emplace_back(std::max<size_t>(v.nbytes(), 1), v.device);
    TensorView dst = TensorView::contiguous(b.data(), v.dtype, v.shape.data(), v.ndim, v.device);
    if (v.is_contiguous() || v.numel() == 0) {
      copy_async(dst, v, stream);
    } else {
      ATTNSERVE_CHECK(v.ndim == 2, "metadata copy: a strided view of ", v.ndim, " dims");
      for (int64_t r = 0; r < v.shape[0]; ++r) copy_async(dst.select(0, r), v.select(0, r), stream);
    }
    return dst;
  }
};

// Copies aliased views once, so aliases stay aliases in the copy (cu_seqlens_q may be cu_seqlens_k).
struct CopyAll {
  MetadataCopy& c;
  Stream stream;
  std::vector<std::pair<const void*, TensorView>> done;
  void operator()(TensorView& v) {
    for (auto& [src, dst] : done)
      if (src == v.data && !v.empty_view() && dst.ndim == v.ndim && dst.shape == v.shape) {
        v = dst;
        return;
      }
    const void* src = v.data;
    v = c.copy_of(v, stream);
    done.emplace_back(src, v);
  }
};

template <class Meta, class Fn>
nb::dict copied(Meta m, Stream stream, Fn&& visit_views) {
  auto holder = std::make_unique<MetadataCopy>();
  CopyAll copy{*holder, stream, {}};
  visit_views(m, copy);
  stream_synchronize(stream);
  nb::object owner = nb::cast(holder.release(), nb::rv_policy::take_ownership);
  return metadata_dict(m, owner);
}

}  // namespace

void bind_metadata_copy(nb::module_& m) {
  nb::class_<MetadataCopy>(m, "_MetadataCopy", "Owns the buffers of a plan(copy=True) result.");
}

nb::dict copied_metadata(const DenseMetadata& md, Stream stream) {
  return copied(md, stream, [](DenseMetadata& m, CopyAll& c) {
    c(m.cache_seqlens_int32), c(m.cu_seqlens_q), c(m.cu_seqlens_k), c(m.page_table);
    if (m.tree.enabled) c(m.tree.key_slots), c(m.tree.num_keys), c(m.tree.mask), c(m.tree.positions);
    if (m.has_local_attn) {
      LocalAttentionMetadata& l = m.local_attn_metadata;
      c(l.local_query_start_loc), c(l.local_seqused_k), c(l.local_block_table);
    }
  });
}

nb::dict copied_metadata(const SparseMetadata& md, Stream stream) {
  return copied(md, stream, [](SparseMetadata& m, CopyAll& c) {
    c(m.cache_seqlens_int32), c(m.cu_seqlens_q), c(m.cu_seqlens_k), c(m.page_table_1), c(m.real_page_table);
    c(m.nsa_seqlens_expanded), c(m.nsa_cache_seqlens_int32), c(m.nsa_cu_seqlens_q), c(m.nsa_cu_seqlens_k);
    if (m.tree.enabled) {
      if (m.tree.path_width > 0) c(m.tree.path);
      c(m.tree.topk_lengths), c(m.tree.positions);
    }
  });
}

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
  if (m.tree.enabled) {  // draft trees (spec.topk > 1): the tree part of the two-part attention
    nb::dict td;
    td["max_keys"] = m.tree.max_keys;
    td["key_slots"] = to_python(m.tree.key_slots, owner);
    td["num_keys"] = to_python(m.tree.num_keys, owner);
    td["mask"] = to_python(m.tree.mask, owner);
    td["positions"] = to_python(m.tree.positions, owner);
    d["tree"] = td;
  } else {
    d["tree"] = nb::none();
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
  if (m.tree.enabled) {  // draft trees (spec.topk > 1): each row's causal set (plan.h SparseDraftTreeMetadata)
    nb::dict td;
    td["path_width"] = m.tree.path_width;
    if (m.tree.path_width > 0) td["path"] = to_python(m.tree.path, owner);
    else td["path"] = nb::none();
    td["topk_lengths"] = to_python(m.tree.topk_lengths, owner);
    td["positions"] = to_python(m.tree.positions, owner);
    d["tree"] = td;
  } else {
    d["tree"] = nb::none();
  }
  return d;
}

}  // namespace attnserve::py
