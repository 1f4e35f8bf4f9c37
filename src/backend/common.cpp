#include "backend/common.h"

#include <algorithm>
#include <cmath>

namespace attnserve::backend_detail {

// ---- SharedWorkspace ---------------------------------------------------------------------------------

SharedWorkspace::SharedWorkspace(Device device) : device_(device), caps_(query_device_caps(device)) {}

void SharedWorkspace::reserve(std::size_t bytes) {
  if (bytes <= current_.bytes()) return;
  // Grow by at least half again, so a run of slightly larger batches allocates a few times only.
  std::size_t grown = std::max(bytes, current_.bytes() + current_.bytes() / 2);
  grown = (grown + 255) / 256 * 256;
  Buffer next(grown, device_);
  if (current_.bytes()) retired_.push_back(std::move(current_));
  current_ = std::move(next);
}

std::size_t SharedWorkspace::total_bytes() const {
  std::size_t n = current_.bytes();
  for (const Buffer& b : retired_) n += b.bytes();
  return n;
}

// ---- Views -------------------------------------------------------------------------------------------

TensorView as_heads(const TensorView& t, int64_t heads, int64_t dim, const char* who, const char* arg) {
  ATTNSERVE_CHECK(!t.empty_view(), who, ": argument '", arg, "' is required (expected [rows, ", heads, ", ", dim, "])");
  if (t.ndim == 3) {
    ATTNSERVE_CHECK(t.shape[1] == heads && t.shape[2] == dim, who, ": argument '", arg, "' has shape ",
                    t.shape_string(), ", expected [rows, ", heads, ", ", dim, "]");
    return t;
  }
  ATTNSERVE_CHECK(t.ndim == 2 && t.shape[1] == heads * dim, who, ": argument '", arg, "' has shape ", t.shape_string(),
                  ", expected [rows, ", heads, ", ", dim, "] or [rows, ", heads * dim, "]");
  ATTNSERVE_CHECK(t.shape[1] <= 1 || t.strides[1] == 1, who, ": argument '", arg,
                  "' must have contiguous rows to be read as [rows, heads, dim]");
  TensorView v = t;
  v.ndim = 3;
  v.shape[1] = heads, v.shape[2] = dim;
  v.strides[1] = dim, v.strides[2] = 1;
  return v;
}

TensorView as_rows(const TensorView& t, int64_t dim, const char* who, const char* arg) {
  ATTNSERVE_CHECK(!t.empty_view(), who, ": argument '", arg, "' is required (expected [rows, ", dim, "])");
  if (t.ndim == 3 && t.shape[1] == 1 && t.shape[2] == dim) return t.select(1, 0);
  ATTNSERVE_CHECK(t.ndim == 2 && t.shape[1] == dim, who, ": argument '", arg, "' has shape ", t.shape_string(),
                  ", expected [rows, ", dim, "] or [rows, 1, ", dim, "]");
  return t;
}

TensorView as_pages(const TensorView& slots, int64_t page_size) {
  ATTNSERVE_CHECK(slots.ndim >= 1 && slots.ndim < kMaxDims, "as_pages: bad view ", slots.shape_string());
  ATTNSERVE_CHECK(page_size >= 1 && slots.shape[0] % page_size == 0, "as_pages: ", slots.shape[0],
                  " slots are not a whole number of pages of ", page_size);
  TensorView v = slots;
  v.ndim = slots.ndim + 1;
  for (int d = slots.ndim; d >= 1; --d) {
    v.shape[d] = slots.shape[d - 1];
    v.strides[d] = slots.strides[d - 1];
  }
  v.shape[0] = slots.shape[0] / page_size;
  v.shape[1] = page_size;
  v.strides[0] = slots.strides[0] * page_size;
  return v;
}

TensorView unsqueeze(const TensorView& t, int dim) {
  ATTNSERVE_CHECK(t.ndim < kMaxDims && dim >= 0 && dim <= t.ndim, "unsqueeze: bad dim ", dim);
  TensorView v = t;
  v.ndim = t.ndim + 1;
  for (int d = t.ndim; d > dim; --d) {
    v.shape[d] = t.shape[d - 1];
    v.strides[d] = t.strides[d - 1];
  }
  v.shape[dim] = 1;
  v.strides[dim] = dim < t.ndim ? t.strides[dim] * t.shape[dim] : 1;
  return v;
}

// ---- Layers ----------------------------------------------------------------------------------------

ResolvedLayer resolve_layer(const char* who, const LayerSpec& layer, float default_scale, float default_softcap,
                            int default_window) {
  ResolvedLayer r;
  r.scale = layer.scaling.value_or(default_scale);
  ATTNSERVE_CHECK(std::isfinite(r.scale) && r.scale > 0.f, who, ": layer ", layer.layer_id,
                  " has no usable softmax scale (got ", r.scale,
                  "): set LayerSpec::scaling or the config's softmax_scale (> 0)");
  r.softcap = layer.logit_cap.value_or(default_softcap);
  ATTNSERVE_CHECK(std::isfinite(r.softcap) && r.softcap >= 0.f, who, ": layer ", layer.layer_id, " logit_cap ",
                  r.softcap, " must be >= 0 (0 = off)");
  const int w = layer.sliding_window_size.value_or(default_window);
  ATTNSERVE_CHECK(w >= -1, who, ": layer ", layer.layer_id, " sliding_window_size ", w, " (use -1 for none)");
  if (w >= 0) r.window_left = w, r.window_right = 0;
  return r;
}

void check_layer_id(const char* who, const LayerSpec& layer, int num_layers) {
  ATTNSERVE_CHECK(layer.layer_id >= 0 && layer.layer_id < num_layers, who, ": layer_id ", layer.layer_id,
                  " out of range: config.kv_buffers has ", num_layers, " layers");
}

// ---- ScaleTable --------------------------------------------------------------------------------------

ScaleTable::ScaleTable(const std::vector<KvLayerBuffers>& layers, Device device, Stream stream)
    : buf_(std::max<std::size_t>(1, layers.size() * 2) * sizeof(float), device) {
  host_.reserve(layers.size() * 2);
  for (const KvLayerBuffers& l : layers) host_.push_back(l.k_scale), host_.push_back(l.v_scale);
  if (!host_.empty()) {
    copy_async(TensorView::contiguous(buf_.data(), DType::f32, {int64_t(host_.size())}, device),
               TensorView::contiguous(host_.data(), DType::f32, {int64_t(host_.size())}), stream);
  }
}

void ScaleTable::update(int layer, float k_scale, float v_scale, Stream stream) {
  float* h = host_.data() + 2 * layer;
  if (h[0] == k_scale && h[1] == v_scale) return;
  ATTNSERVE_CHECK(std::isfinite(k_scale) && k_scale > 0.f && std::isfinite(v_scale) && v_scale > 0.f, "layer ", layer,
                  ": fp8 scales must be finite and > 0, got k_scale ", k_scale, ", v_scale ", v_scale);
  h[0] = k_scale, h[1] = v_scale;
  copy_async(TensorView::contiguous(static_cast<float*>(buf_.data()) + 2 * layer, DType::f32, {2}, buf_.device()),
             TensorView::contiguous(h, DType::f32, {2}), stream);
}

TensorView ScaleTable::at(int64_t index, int64_t b, int64_t h_kv) const {
  TensorView v = TensorView::contiguous(static_cast<float*>(buf_.data()) + index, DType::f32, {b, h_kv}, buf_.device());
  v.strides[0] = 0, v.strides[1] = 0;  // one value for every request and head
  return v;
}
TensorView ScaleTable::k_descale(int layer, int64_t b, int64_t h_kv) const { return at(2 * int64_t(layer), b, h_kv); }
TensorView ScaleTable::v_descale(int layer, int64_t b, int64_t h_kv) const {
  return at(2 * int64_t(layer) + 1, b, h_kv);
}

// ---- Modes -----------------------------------------------------------------------------------------

bool is_decode_call_mode(ForwardMode m) { return m == ForwardMode::decode || m == ForwardMode::draft_decode; }

void check_call_mode(const char* who, ForwardMode m, bool decode_call) {
  if (m == ForwardMode::idle) return;  // an idle batch has no rows: either call does nothing
  ATTNSERVE_CHECK(is_decode_call_mode(m) == decode_call, who, ": the current metadata is for a ", to_string(m),
                  " batch, which goes through ", is_decode_call_mode(m) ? "forward_decode" : "forward_extend",
                  " (or forward(), which picks by mode)");
}

// ---- Construction and graphs ----------------------------------------------------------------------

std::shared_ptr<SharedWorkspace> make_workspace(const char* who, Device device) {
  ATTNSERVE_CHECK(device.is_cpu() || cuda_available(), who, ": config.device is ", to_string(device),
                  " but this build has no CUDA or no GPU is present: use Device::cpu()");
  return std::make_shared<SharedWorkspace>(device);
}

int graph_rows_per_request(ForwardMode mode, const SpeculativeConfig& spec) {
  if (mode == ForwardMode::target_verify || mode == ForwardMode::draft_extend) return spec.draft_token_num;
  return mode == ForwardMode::draft_decode && spec.topk > 1 ? spec.topk : 1;  // draft trees: one row per branch
}

void check_graph_capacity(const char* who, int max_bs, int max_num_tokens, const PlanCapacity& cap) {
  ATTNSERVE_CHECK(max_bs >= 1 && max_bs <= cap.max_bs, who, ": max_bs ", max_bs,
                  " must be in [1, capacity.max_bs = ", cap.max_bs,
                  "] (buffers are allocated once, at construction: raise config.capacity)");
  ATTNSERVE_CHECK(max_num_tokens >= max_bs && max_num_tokens <= cap.max_num_tokens, who, ": max_num_tokens ",
                  max_num_tokens, " must be in [max_bs, capacity.max_num_tokens = ", cap.max_num_tokens, "]");
}

}  // namespace attnserve::backend_detail
