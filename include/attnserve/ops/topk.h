// Exact top-k per row over score[row, start : start + len], with optional fused slot transforms.
#pragma once
#include "attnserve/runtime.h"

namespace attnserve {

enum class TopkTransform : uint8_t {
  none,     // out = position j in [0, len) (relative to the row's start)
  decode,   // out = page_table_1[row, j]
  prefill,  // out = page_table_1[r, j], r the request of this row (from cu_seqlens_q)
  ragged,   // out = j + offsets[row]
};

// If len <= topk: out = 0..len-1 (transformed) then -1 padding. Otherwise the exact top-k set,
// nothing dropped whatever the length or score distribution; ties at the k-th value are broken by
// the lower position. The order within a row's k entries is unspecified (compare as sets).
struct TopkArgs {
  TensorView scores;   // [rows, width] f32
  TensorView lengths;  // [rows] i32, start + len <= width
  TensorView out;      // [rows, topk] i32
  int topk = 2048;
  TensorView row_starts{};  // optional [rows] i32 (default 0)
  TopkTransform transform = TopkTransform::none;
  TensorView page_table_1{};  // decode: [rows, W] i32; prefill: [b, W] i32
  TensorView cu_seqlens_q{};  // prefill: [b + 1] i32
  TensorView offsets{};       // ragged: [rows] i32
};
std::size_t topk_workspace_size(const TopkArgs& a, const DeviceCaps& caps);
void topk(const TopkArgs& a, Workspace ws = {}, Stream stream = {});

}  // namespace attnserve
