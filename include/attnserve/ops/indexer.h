// DeepSeek-V3.2 lightning indexer: FP8 activation quantization and index scores.
//   logit[i, j] = sum_h relu(q[i,h,:] . k[j,:]) * weights[i,h] * k_scale[j]
// with q and k in fp8 e4m3. q's quantization scale multiplies weights: either folded in by the caller
// (as DeepSeek does) or passed as `q_scale` (quantize_fp8_groups' scales), which keeps it on the device.
#pragma once
#include "attnserve/runtime.h"

namespace attnserve {

// Per 1 x group quantization: scale = fp8_pow2_scale(amax of the group) (floor 1e-4), q = x / scale.
struct QuantizeFp8Args {
  TensorView x;       // [rows, dim] bf16 | f16 | f32, dim % group == 0
  TensorView out;     // [rows, dim] fp8_e4m3
  TensorView scales;  // [rows, dim / group] f32
  int group = 128;
};
void quantize_fp8_groups(const QuantizeFp8Args& a, Stream stream = {});

// Ragged (prefill): row i scores keys [ks[i], ke[i]) of a contiguous key buffer.
// logits[i, j] for j outside [ks[i], ke[i]) is -inf (every column is written).
struct IndexerRaggedArgs {
  TensorView q;        // [rows, n_heads, 128] fp8_e4m3
  TensorView weights;  // [rows, n_heads] f32
  TensorView k;        // [num_keys, 128] fp8_e4m3
  TensorView k_scale;  // [num_keys] f32
  TensorView ks;       // [rows] i32
  TensorView ke;       // [rows] i32
  TensorView logits;   // [rows, num_keys] f32
  TensorView q_scale;  // optional [rows, n_heads] f32: weights[i, h] * q_scale[i, h] is the weight used
};
void indexer_ragged(const IndexerRaggedArgs& a, Workspace ws = {}, Stream stream = {});

// Paged (decode, target verify, draft extend): next_n query rows per request; keys come from the
// indexer-key pool (cache_formats.h IndexerKeyLayout) through the real page table.
// Row t (0-based) of request r sees keys j < seqlens[r] - next_n + t + 1; other columns are -inf.
struct IndexerPagedArgs {
  TensorView q;              // [b * next_n, n_heads, 128] fp8_e4m3
  TensorView weights;        // [b * next_n, n_heads] f32
  TensorView index_k_cache;  // [num_pages, page_size * 132] u8
  TensorView page_table;     // [b, max_pages] i32
  TensorView seqlens;        // [b] i32 (keys of the request, including its next_n new tokens)
  TensorView logits;         // [b * next_n, max_context] f32 (max_context >= every seqlens[r])
  int page_size = 64;
  int next_n = 1;
  TensorView q_scale;  // optional [b * next_n, n_heads] f32: multiplies weights (see above)
};
void indexer_paged(const IndexerPagedArgs& a, Workspace ws = {}, Stream stream = {});

}  // namespace attnserve
