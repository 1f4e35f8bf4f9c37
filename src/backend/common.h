// Internal pieces both backends use: the shared kernel workspace, argument views (heads, rows, pages),
// KV buffer validation, per-layer parameter resolution and the fp8 scale table.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "attnserve/backend/config.h"

namespace attnserve::backend_detail {

// The kernels' scratch memory. Grows only when asked (init_forward_metadata, capture, construction),
// never during forward; a replaced buffer is kept alive so graphs captured with it stay valid.
class SharedWorkspace {
 public:
  explicit SharedWorkspace(Device device);
  const DeviceCaps& caps() const { return caps_; }
  Device device() const { return device_; }
  void reserve(std::size_t bytes);
  // The whole reserved workspace, for one op call. Sizing happens in reserve() (init_forward_metadata /
  // capture); the op checks the size itself, so forward calls do not query it again.
  Workspace view() const { return Workspace{current_.data(), current_.bytes()}; }
  std::size_t bytes() const { return current_.bytes(); }
  std::size_t total_bytes() const;  // current + retired

 private:
  Device device_;
  DeviceCaps caps_;
  Buffer current_;
  std::vector<Buffer> retired_;
};

// ---- Views -----------------------------------------------------------------------------------------

// t as [rows, heads, dim]: a 3-D [rows, heads, dim] view as is, or a 2-D [rows, heads * dim] view whose
// rows are contiguous. Messages name `who` and `arg`.
TensorView as_heads(const TensorView& t, int64_t heads, int64_t dim, const char* who, const char* arg);
// t as [rows, dim]: [rows, dim] or [rows, 1, dim].
TensorView as_rows(const TensorView& t, int64_t dim, const char* who, const char* arg);
// A slot-major view [num_slots, ...] as pages [num_slots / page_size, page_size, ...] (same memory).
TensorView as_pages(const TensorView& slots, int64_t page_size);
// A [n, ...] view with one more dim of extent 1 inserted at `dim`.
TensorView unsqueeze(const TensorView& t, int dim);

// ---- Layers ----------------------------------------------------------------------------------------

struct ResolvedLayer {
  float scale = 0.f;
  float softcap = 0.f;
  int window_left = -1;  // sliding window (w, 0), or (-1, -1)
  int window_right = -1;
};
ResolvedLayer resolve_layer(const char* who, const LayerSpec& layer, float default_scale, float default_softcap,
                            int default_window);

// Checks layer_id against the layer count.
void check_layer_id(const char* who, const LayerSpec& layer, int num_layers);

// fp8 MHA caches: per-layer (k_scale, v_scale) in device memory, read by the attention kernels as
// [b, h_kv] descale views with zero strides. Uploaded at construction and again when a layer's scales
// change (LayerSpec::k_scale / v_scale): change them before capturing a CUDA graph, not during.
class ScaleTable {
 public:
  ScaleTable() = default;
  ScaleTable(const std::vector<KvLayerBuffers>& layers, Device device, Stream stream);
  void update(int layer, float k_scale, float v_scale, Stream stream);
  TensorView k_descale(int layer, int64_t b, int64_t h_kv) const;
  TensorView v_descale(int layer, int64_t b, int64_t h_kv) const;
  std::size_t bytes() const { return buf_.bytes(); }

 private:
  TensorView at(int64_t index, int64_t b, int64_t h_kv) const;
  Buffer buf_;
  std::vector<float> host_;  // [num_layers * 2]: k, v
};

// ---- Modes -----------------------------------------------------------------------------------------

bool is_decode_call_mode(ForwardMode m);  // decode, draft_decode: forward_decode; the rest forward_extend
// Throws when forward_decode / forward_extend does not serve `m`.
void check_call_mode(const char* who, ForwardMode m, bool decode_call);

// ---- Construction and graphs -------------------------------------------------------------------------

// A workspace for a backend's device, after checking the device can run (the message says what to do).
std::shared_ptr<SharedWorkspace> make_workspace(const char* who, Device device);
// Query rows per request of a captured graph of `mode` (its q has bs times this).
int graph_rows_per_request(ForwardMode mode, const SpeculativeConfig& spec);
// init_cuda_graph_state's sizes against the construction capacity.
void check_graph_capacity(const char* who, int max_bs, int max_num_tokens, const PlanCapacity& cap);

}  // namespace attnserve::backend_detail
