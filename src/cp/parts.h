// Internal: the partial-state packets of context-parallel attention inside a workspace (shared by
// src/cp/attention.cpp and src/cp/attention_by_head.cpp).
// A packet is one rank's partial state for every row: [out rows x h x d_v, out dtype | pad to 16 B]
// [lse rows x h, f32 | pad to 16 B], so one exchange moves both and merge_states reads the parts
// through strides. The packets start at the workspace's first 256-byte boundary (the size queries
// add the slack), the op's own workspace follows them.
#pragma once
#include <cstdint>

#include "attnserve/runtime.h"

namespace attnserve::cp_detail {

inline constexpr std::size_t kAlign = 256;
inline std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// The partial-state layout of one call: rows x heads x d_v in `dtype`, plus the f32 lse.
struct PartLayout {
  int64_t rows = 0, heads = 0, d_v = 0;
  DType dtype = DType::f32;
  int world_size = 1;
  int extra_parts = 0;  // after the W gathered parts: the sink part, then the scratch part

  std::size_t out_bytes() const { return align_up(std::size_t(rows * heads * d_v) * dtype_size(dtype), 16); }
  std::size_t packet_bytes() const { return out_bytes() + align_up(std::size_t(rows * heads) * 4, 16); }
  std::size_t gather_bytes() const { return align_up(packet_bytes() * std::size_t(world_size + extra_parts), kAlign); }

  // Views of part `r` (out, lse) and of the first n parts as [n, rows, heads, d_v] / [n, rows, heads].
  TensorView out_part(void* gather, Device dev, int r) const {
    return TensorView::contiguous(static_cast<uint8_t*>(gather) + packet_bytes() * std::size_t(r), dtype,
                                  {rows, heads, d_v}, dev);
  }
  TensorView lse_part(void* gather, Device dev, int r) const {
    return TensorView::contiguous(static_cast<uint8_t*>(gather) + packet_bytes() * std::size_t(r) + out_bytes(),
                                  DType::f32, {rows, heads}, dev);
  }
  TensorView all_out(void* gather, Device dev, int n) const {
    TensorView v = TensorView::contiguous(gather, dtype, {n, rows, heads, d_v}, dev);
    v.strides[0] = int64_t(packet_bytes() / dtype_size(dtype));  // packet_bytes is a multiple of 16
    return v;
  }
  TensorView all_lse(void* gather, Device dev, int n) const {
    TensorView v =
        TensorView::contiguous(static_cast<uint8_t*>(gather) + out_bytes(), DType::f32, {n, rows, heads}, dev);
    v.strides[0] = int64_t(packet_bytes() / 4);
    return v;
  }
};

inline PartLayout layout_of(const char* who, const TensorView& out, int world_size, int extra_parts = 0) {
  ATTNSERVE_CHECK(world_size >= 1, who, ": world_size must be >= 1, got ", world_size);
  check_tensor(who, "out", out, {DType::bf16, DType::f16, DType::f32}, {-1, -1, -1});
  return {out.size(0), out.size(1), out.size(2), out.dtype, world_size, extra_parts};
}

inline void check_single_query(const char* who, int max_seqlen_q) {
  ATTNSERVE_CHECK(max_seqlen_q <= 1, who, ": argument 'max_seqlen_q' must be 1 (every query row is its own ",
                  "request in a context-parallel plan), got ", max_seqlen_q);
}

inline void check_no_window(const char* who, int window_left, int window_right) {
  ATTNSERVE_CHECK(window_left < 0 && window_right < 0, who,
                  ": sliding windows are not supported with context parallelism (a window is in global "
                  "positions), got window (",
                  window_left, ", ", window_right, ")");
}

struct Split {
  void* gather = nullptr;
  Workspace op{};
};

// Splits the workspace: the gather buffer at the first 256-byte boundary (the size query adds the
// slack, so any allocation works), the op gets the rest (it checks its own size; no device query).
inline Split split(const char* who, const PartLayout& l, Workspace ws) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(ws.data);
  const std::size_t skip = std::size_t(align_up(base, kAlign) - base);
  const std::size_t need = skip + l.gather_bytes();
  ATTNSERVE_CHECK(ws.bytes >= need && (l.gather_bytes() == 0 || ws.data != nullptr), who, ": workspace holds ",
                  ws.bytes, " bytes, the gather buffer alone needs ", need,
                  " (size it with the *_workspace_size query)");
  uint8_t* gather = static_cast<uint8_t*>(ws.data) + skip;
  return {gather, Workspace{gather + l.gather_bytes(), ws.bytes - need}};
}

}  // namespace attnserve::cp_detail
