// Python bindings of the planners. Batch inputs are host integer sequences (lists or NumPy arrays);
// the metadata comes back as a dict of arrays that view the planner's buffers (kept alive by it) and
// host ints. Eager metadata is valid until the planner's next call, as in C++ (plan.h), unless
// plan(copy=True) asked for arrays of their own.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "attnserve/plan.h"
#include "metadata_dict.h"
#include "views.h"

namespace attnserve::py {
namespace {

using nb::arg;
using IntList = std::optional<std::vector<int32_t>>;

// Owns the host arrays a BatchSpec points into for the duration of one call.
struct BatchArgs {
  std::vector<int32_t> seq_lens, req_pool_indices, extend_seq_lens, extend_prefix_lens, draft_slots;
  BatchSpec spec(ForwardMode mode, const RoArray& req_to_token) const {
    return BatchSpec{.mode = mode,
                     .seq_lens = seq_lens,
                     .req_pool_indices = req_pool_indices,
                     .extend_seq_lens = extend_seq_lens,
                     .extend_prefix_lens = extend_prefix_lens,
                     .draft_slots = draft_slots,
                     .req_to_token = to_view(req_to_token)};
  }
};

BatchArgs batch_args(std::vector<int32_t> seq_lens, std::vector<int32_t> req_pool_indices, IntList extend_seq_lens,
                     IntList extend_prefix_lens, IntList draft_slots) {
  return {std::move(seq_lens), std::move(req_pool_indices), extend_seq_lens.value_or(std::vector<int32_t>{}),
          extend_prefix_lens.value_or(std::vector<int32_t>{}), draft_slots.value_or(std::vector<int32_t>{})};
}

// The methods both planners share.
template <class Planner>
void bind_planner_methods(nb::class_<Planner>& c) {
  c.def(
       "init",
       [](Planner& p, int max_bs, int max_num_tokens, int max_context_len, uintptr_t stream) {
         p.init(PlanCapacity{max_bs, max_num_tokens, max_context_len}, to_stream(stream));
       },
       arg("max_bs"), arg("max_num_tokens"), arg("max_context_len"), nb::kw_only(), arg("stream") = 0,
       "Allocate every buffer once, sized by capacity.")
      .def(
          "plan",
          [](nb::handle self, ForwardMode mode, std::vector<int32_t> seq_lens, std::vector<int32_t> req_pool_indices,
             RoArray req_to_token, IntList extend_seq_lens, IntList extend_prefix_lens, IntList draft_slots,
             uintptr_t stream, bool copy) {
            Planner& p = nb::cast<Planner&>(self);
            BatchArgs b = batch_args(std::move(seq_lens), std::move(req_pool_indices), std::move(extend_seq_lens),
                                     std::move(extend_prefix_lens), std::move(draft_slots));
            const auto& md = p.plan(b.spec(mode, req_to_token), to_stream(stream));
            return copy ? copied_metadata(md, to_stream(stream)) : metadata_dict(md, self);
          },
          arg("mode"), arg("seq_lens"), arg("req_pool_indices"), arg("req_to_token"), nb::kw_only(),
          arg("extend_seq_lens") = nb::none(), arg("extend_prefix_lens") = nb::none(), arg("draft_slots") = nb::none(),
          arg("stream") = 0, arg("copy") = false,
          "Eager metadata for one batch: a dict of arrays and ints with the seeds' field names.\n\n"
          "seq_lens [bs], req_pool_indices [bs] (and extend_seq_lens / extend_prefix_lens [bs] for extend,\n"
          "draft_slots for draft modes) are host int sequences; req_to_token is the [rows, max_context] i32\n"
          "table (ReqToTokenPool.table). The arrays (i32, on the planner's device) are VIEWS of the\n"
          "planner's buffers: the planner's next plan/capture/replay overwrites them. Pass copy=True for\n"
          "arrays of their own (fresh buffers; waits for the copy on `stream`), or copy them yourself.\n"
          "A planner is not thread-safe: one thread per planner.")
      .def(
          "capture",
          [](nb::handle self, int bs, ForwardMode mode, uintptr_t stream) {
            return metadata_dict(nb::cast<Planner&>(self).capture(bs, mode, to_stream(stream)), self);
          },
          arg("bs"), arg("mode"), nb::kw_only(), arg("stream") = 0,
          "Metadata in the static buffers for a CUDA graph of batch size bs.")
      .def(
          "replay",
          [](nb::handle self, int bs, ForwardMode mode, std::vector<int32_t> seq_lens,
             std::vector<int32_t> req_pool_indices, RoArray req_to_token, IntList extend_seq_lens,
             IntList extend_prefix_lens, IntList draft_slots, uintptr_t stream) {
            Planner& p = nb::cast<Planner&>(self);
            BatchArgs b = batch_args(std::move(seq_lens), std::move(req_pool_indices), std::move(extend_seq_lens),
                                     std::move(extend_prefix_lens), std::move(draft_slots));
            return metadata_dict(p.replay(bs, mode, b.spec(mode, req_to_token), to_stream(stream)), self);
          },
          arg("bs"), arg("mode"), arg("seq_lens"), arg("req_pool_indices"), arg("req_to_token"), nb::kw_only(),
          arg("extend_seq_lens") = nb::none(), arg("extend_prefix_lens") = nb::none(), arg("draft_slots") = nb::none(),
          arg("stream") = 0, "Rewrite the captured buffers in place for a new batch (no allocation, same addresses).")
      .def_prop_ro("device_bytes", &Planner::device_bytes);
}

}  // namespace

void bind_plan(nb::module_& m) {
  nb::enum_<ForwardMode>(m, "ForwardMode")
      .value("idle", ForwardMode::idle)
      .value("decode", ForwardMode::decode)
      .value("extend", ForwardMode::extend)
      .value("draft_decode", ForwardMode::draft_decode)
      .value("target_verify", ForwardMode::target_verify)
      .value("draft_extend", ForwardMode::draft_extend);

  nb::class_<DensePlanner> dense(m, "DensePlanner", "FlashAttention-backend metadata for every forward mode.");
  dense.def(
      "__init__",
      [](DensePlanner* self, int page_size, int attention_chunk_size, int sliding_window_size, int draft_token_num,
         int num_steps, int step_id, const std::string& device) {
        new (self) DensePlanner(DensePlanConfig{page_size, attention_chunk_size, sliding_window_size,
                                                SpeculativeConfig{draft_token_num, num_steps, step_id}},
                                parse_device(device));
      },
      nb::kw_only(), arg("page_size") = 1, arg("attention_chunk_size") = 0, arg("sliding_window_size") = -1,
      arg("draft_token_num") = 0, arg("num_steps") = 0, arg("step_id") = 0, arg("device") = "cpu");
  bind_planner_methods(dense);

  nb::class_<SparsePlanner> sparse(m, "SparsePlanner", "DeepSeek sparse-attention (NSA) metadata.");
  sparse.def(
      "__init__",
      [](SparsePlanner* self, int page_size, int topk, int draft_token_num, int num_steps, int step_id,
         const std::string& device) {
        new (self)
            SparsePlanner(SparsePlanConfig{page_size, topk, SpeculativeConfig{draft_token_num, num_steps, step_id}},
                          parse_device(device));
      },
      nb::kw_only(), arg("page_size") = 64, arg("topk") = 2048, arg("draft_token_num") = 0, arg("num_steps") = 0,
      arg("step_id") = 0, arg("device") = "cpu");
  bind_planner_methods(sparse);

  m.def(
      "transform_index_page_table",
      [](RoArray page_table_1, RoArray topk_indices, Array out, OptRoArray cu_seqlens_q, uintptr_t stream) {
        transform_index_page_table({.page_table_1 = to_view(page_table_1),
                                    .topk_indices = to_view(topk_indices),
                                    .out = to_view(out),
                                    .cu_seqlens_q = to_view(cu_seqlens_q)},
                                   to_stream(stream));
      },
      arg("page_table_1"), arg("topk_indices"), arg("out"), arg("cu_seqlens_q") = nb::none(), nb::kw_only(),
      arg("stream") = 0,
      "Top-k positions -> token slots through page_table_1 (-1 kept).\n\n"
      "page_table_1 [b, W] i32; topk_indices [rows, topk] i32; out [rows, topk] i32 (written);\n"
      "cu_seqlens_q [b + 1] i32 (rows of each request; without it row i uses page_table_1 row i).");
}

}  // namespace attnserve::py
