// Gathering DeepSeek-V3.2 indexer keys out of the paged indexer-key pool (cache_formats.h
// IndexerKeyLayout) into the contiguous [num_keys, 128] fp8 + [num_keys] f32 layout that
// indexer_ragged takes (prefill / draft extend over the keys of a batch).
#pragma once
#include "attnserve/runtime.h"

namespace attnserve {

// out_k[j] / out_scale[j] = the indexer key of token slot slots[j] (any page size). A slot < 0 or >= the
// pool's slots gives a zero key and scale 0 on CUDA (skipped rows), an error on the CPU (checked first).
struct GatherIndexKArgs {
  TensorView index_k_cache;  // [num_pages, page_size * 132] u8
  TensorView slots;          // [n] i32 | i64 token slots (e.g. the concatenated page_table_1 rows of a batch)
  TensorView out_k;          // [n, 128] fp8_e4m3 (or u8)
  TensorView out_scale;      // [n] f32
  int page_size = 64;
};
void gather_index_k(const GatherIndexKArgs& a, Stream stream = {});

}  // namespace attnserve
