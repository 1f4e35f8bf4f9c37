// Python bindings of context parallelism (include/attnserve/context_parallel.h, communicator.h):
// the per-rank plan and top-k routing (host arrays), the communicators (ranks as threads in one
// process; NCCL from an ncclUniqueId) and the per-rank ops cp_paged_attention / cp_mla_attention /
// cp_sparse_mla. The ops release the GIL: with InProcessGroup every rank's thread blocks in the
// exchange until all ranks arrive.
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "attnserve/context_parallel.h"
#include "convert.h"

namespace attnserve::py {
namespace {

using nb::arg;

// A NumPy i32 array owning a copy of v, shaped [rows, cols] (cols < 0: 1-D).
nb::object np_i32(const std::vector<int32_t>& v, int64_t rows, int64_t cols = -1) {
  auto* data = new std::vector<int32_t>(v);
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<int32_t>*>(p); });
  const size_t shape[2] = {size_t(rows), size_t(cols < 0 ? 0 : cols)};
  return nb::cast(nb::ndarray<nb::numpy, int32_t>(data->data(), cols < 0 ? 1 : 2, shape, owner));
}

// A host i32 array [bs, width] as a span (C-contiguous required).
std::span<const int32_t> host_i32_2d(const RoArray& a, const char* name, int& width, int& rows) {
  TensorView v = to_view(a);
  check_tensor("plan_context_parallel", name, v, {DType::i32}, {-1, -1});
  ATTNSERVE_CHECK(v.device.is_cpu() && v.is_contiguous(), "argument '", name,
                  "' must be a C-contiguous host (CPU) i32 array");
  rows = int(v.size(0));
  width = int(v.size(1));
  return {static_cast<const int32_t*>(v.data), size_t(v.numel())};
}

Workspace to_workspace(const OptArray& a) {
  if (!a) return {};
  TensorView v = to_view(*a);
  return Workspace{v.data, v.nbytes()};
}

}  // namespace

void bind_context_parallel(nb::module_& m) {
  nb::class_<Communicator>(m, "Communicator", "An all-gather over the ranks of a group (context parallelism).")
      .def_prop_ro("rank", &Communicator::rank)
      .def_prop_ro("world_size", &Communicator::world_size);

  nb::class_<InProcessGroup>(m, "InProcessGroup",
                             "Ranks as threads of one process (CPU tensors, or CUDA tensors of one process; not\n"
                             "graph-capturable): take communicator(rank) once per rank, one thread per rank.")
      .def(nb::init<int>(), arg("world_size"))
      .def_prop_ro("world_size", &InProcessGroup::world_size)
      .def("communicator", &InProcessGroup::communicator, arg("rank"), nb::keep_alive<0, 1>(),
           "The communicator of `rank` (once per rank); keeps the group alive.")
      .def("abort", &InProcessGroup::abort,
           "Fail every waiting and later exchange (call it when a rank fails before its exchange).");

  m.def("nccl_available", &nccl_available, "Built with NCCL (ATTNSERVE_NCCL).");
  nb::class_<NcclCommunicator, Communicator>(m, "NcclCommunicator",
                                             "NCCL communicator (ncclAllGather on the given stream).")
      .def_static(
          "new_unique_id",
          [] {
            const NcclUniqueId id = NcclCommunicator::new_unique_id();
            return nb::bytes(reinterpret_cast<const char*>(id.data()), id.size());
          },
          "ncclGetUniqueId: 128 bytes to send to every rank.")
      .def_static(
          "create",
          [](nb::bytes unique_id, int rank, int world_size) {
            NcclUniqueId id{};
            ATTNSERVE_CHECK(unique_id.size() == id.size(), "NcclCommunicator.create: unique_id must be ", id.size(),
                            " bytes, got ", unique_id.size());
            std::memcpy(id.data(), unique_id.c_str(), id.size());
            nb::gil_scoped_release release;  // ncclCommInitRank waits for every rank
            return NcclCommunicator::create(id, rank, world_size);
          },
          arg("unique_id"), arg("rank"), arg("world_size"),
          "ncclCommInitRank on the current CUDA device (set it first, e.g. torch.cuda.set_device).");

  m.def(
      "plan_context_parallel",
      [](int world_size, int page_size, int rank, ForwardMode mode, std::vector<int32_t> seq_lens, RoArray page_table,
         int draft_token_num, int step_id, int padding_slot) {
        int width = 0, rows = 0;
        const std::span<const int32_t> table = host_i32_2d(page_table, "page_table", width, rows);
        ATTNSERVE_CHECK(rows == int(seq_lens.size()), "plan_context_parallel: page_table has ", rows,
                        " rows, seq_lens ", seq_lens.size());
        const CpRankPlan p =
            plan_context_parallel({.world_size = world_size, .page_size = page_size, .padding_slot = padding_slot},
                                  {.mode = mode,
                                   .seq_lens = seq_lens,
                                   .page_table = table,
                                   .page_table_width = width,
                                   .spec = {.draft_token_num = draft_token_num, .num_steps = 0, .step_id = step_id}},
                                  rank);
        nb::dict d;
        d["rank"] = p.rank;
        d["num_rows"] = p.num_rows;
        d["local_width"] = p.local_width;
        d["max_seqlen_q"] = p.max_seqlen_q;
        d["max_local_kv"] = p.max_local_kv;
        d["page_table"] = np_i32(p.page_table, p.num_rows, p.local_width);
        d["cache_seqlens"] = np_i32(p.cache_seqlens, p.num_rows);
        d["cu_seqlens_q"] = np_i32(p.cu_seqlens_q, p.num_rows + 1);
        d["row_request"] = np_i32(p.row_request, p.num_rows);
        d["row_position"] = np_i32(p.row_position, p.num_rows);
        d["request_local_len"] = np_i32(p.request_local_len, p.batch_size);
        d["store_loc"] = np_i32(p.store_loc, p.num_rows);
        std::vector<int32_t> here(p.stores_here.begin(), p.stores_here.end());
        d["stores_here"] = np_i32(here, p.num_rows);
        return d;
      },
      arg("world_size"), arg("page_size"), arg("rank"), arg("mode"), arg("seq_lens"), arg("page_table"), nb::kw_only(),
      arg("draft_token_num") = 0, arg("step_id") = 0, arg("padding_slot") = 0,
      "One rank's context-parallel metadata (host NumPy i32 arrays): page g of a request lives on rank\n"
      "g % world_size. page_table [bs, width] host i32: global page g -> page id in rank g % W's pool.\n"
      "Modes decode, draft_decode (step_id), target_verify (draft_token_num). Returns a dict: page_table\n"
      "[num_rows, local_width], cache_seqlens, cu_seqlens_q, row_request, row_position, store_loc,\n"
      "stores_here [num_rows], request_local_len [bs], and ints; feed cp_paged_attention with\n"
      "max_seqlen_q=1 (every query row its own request).");

  m.def(
      "cp_route_topk",
      [](int world_size, int page_size, int rank, RoArray topk_positions, std::vector<int32_t> row_request,
         std::vector<int32_t> kv_lens, RoArray page_table, Array out) {
        int width = 0, bs = 0, rows = 0, topk = 0;
        const std::span<const int32_t> table = host_i32_2d(page_table, "page_table", width, bs);
        const std::span<const int32_t> pos = host_i32_2d(topk_positions, "topk_positions", topk, rows);
        TensorView o = to_view(out);
        check_tensor("cp_route_topk", "out", o, {DType::i32}, {rows, topk});
        ATTNSERVE_CHECK(o.device.is_cpu() && o.is_contiguous(), "argument 'out' must be a C-contiguous host i32 array");
        cp_route_topk({.world_size = world_size, .page_size = page_size}, rank,
                      {.topk_positions = pos,
                       .topk = topk,
                       .row_request = row_request,
                       .kv_lens = kv_lens,
                       .page_table = table,
                       .page_table_width = width},
                      {static_cast<int32_t*>(o.data), size_t(o.numel())});
      },
      arg("world_size"), arg("page_size"), arg("rank"), arg("topk_positions"), arg("row_request"), arg("kv_lens"),
      arg("page_table"), arg("out"),
      "Top-k key positions [rows, topk] -> this rank's slots in out [rows, topk] (host i32): the slot\n"
      "where the position's page lives on `rank`, -1 elsewhere and for positions outside [0, kv_len).");

  m.def(
      "cp_paged_attention",
      [](Communicator& comm, RoArray q, RoArray k_cache, RoArray v_cache, RoArray page_table, RoArray cache_seqlens,
         RoArray cu_seqlens_q, Array out, float softmax_scale, OptArray lse, OptRoArray k_descale, OptRoArray v_descale,
         float softcap, bool deterministic, bool by_head, OptArray workspace, uintptr_t stream,
         bool query_workspace) -> nb::object {
        TensorView kc = to_view(k_cache), vc = to_view(v_cache);
        if (kc.dtype == DType::u8) kc = kc.with_dtype(DType::fp8_e4m3);
        if (vc.dtype == DType::u8) vc = vc.with_dtype(DType::fp8_e4m3);
        PagedAttentionArgs a{.q = to_view(q),
                             .k_cache = kc,
                             .v_cache = vc,
                             .page_table = to_view(page_table),
                             .cache_seqlens = to_view(cache_seqlens),
                             .cu_seqlens_q = to_view(cu_seqlens_q),
                             .out = to_view(out),
                             .lse = to_view(lse),
                             .k_descale = to_view(k_descale),
                             .v_descale = to_view(v_descale),
                             .max_seqlen_q = 1,
                             .softmax_scale = softmax_scale,
                             .softcap = softcap,
                             .deterministic = deterministic};
        const DeviceCaps caps = query_device_caps(a.q.device);
        if (query_workspace)
          return nb::int_(by_head ? cp_paged_attention_by_head_workspace_size(a, caps, comm.world_size())
                                  : cp_paged_attention_workspace_size(a, caps, comm.world_size()));
        nb::gil_scoped_release release;
        if (by_head) cp_paged_attention_by_head(a, comm, to_workspace(workspace), to_stream(stream));
        else cp_paged_attention(a, comm, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("comm"), arg("q"), arg("k_cache"), arg("v_cache"), arg("page_table"), arg("cache_seqlens"),
      arg("cu_seqlens_q"), arg("out"), nb::kw_only(), arg("softmax_scale"), arg("lse") = nb::none(),
      arg("k_descale") = nb::none(), arg("v_descale") = nb::none(), arg("softcap") = 0.f, arg("deterministic") = false,
      arg("by_head") = false, arg("workspace") = nb::none(), arg("stream") = 0, arg("query_workspace") = false,
      "One rank's context-parallel paged attention: the rank's metadata (plan_context_parallel) and caches;\n"
      "out [rows, h_q, d_v] / lse [rows, h_q] receive the merged result (the same on every rank).\n"
      "Pass the workspace query_workspace=True asks for (uint8 array on q's device). by_head=True: the\n"
      "head-sliced exchange (one all-to-all); out / lse then hold this rank's heads slice only\n"
      "[rows, h_q / W, ...].");

  m.def(
      "cp_mla_attention",
      [](Communicator& comm, RoArray q_nope, RoArray q_rope, RoArray kv_cache, RoArray page_table,
         RoArray cache_seqlens, RoArray cu_seqlens_q, Array out, float softmax_scale, OptArray lse, float softcap,
         bool deterministic, bool by_head, OptArray workspace, uintptr_t stream, bool query_workspace) -> nb::object {
        MlaAttentionArgs a{.q_nope = to_view(q_nope),
                           .q_rope = to_view(q_rope),
                           .kv_cache = to_view(kv_cache),
                           .page_table = to_view(page_table),
                           .cache_seqlens = to_view(cache_seqlens),
                           .cu_seqlens_q = to_view(cu_seqlens_q),
                           .out = to_view(out),
                           .lse = to_view(lse),
                           .max_seqlen_q = 1,
                           .softmax_scale = softmax_scale,
                           .softcap = softcap,
                           .deterministic = deterministic};
        const DeviceCaps caps = query_device_caps(a.q_nope.device);
        if (query_workspace)
          return nb::int_(by_head ? cp_mla_attention_by_head_workspace_size(a, caps, comm.world_size())
                                  : cp_mla_attention_workspace_size(a, caps, comm.world_size()));
        nb::gil_scoped_release release;
        if (by_head) cp_mla_attention_by_head(a, comm, to_workspace(workspace), to_stream(stream));
        else cp_mla_attention(a, comm, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("comm"), arg("q_nope"), arg("q_rope"), arg("kv_cache"), arg("page_table"), arg("cache_seqlens"),
      arg("cu_seqlens_q"), arg("out"), nb::kw_only(), arg("softmax_scale"), arg("lse") = nb::none(),
      arg("softcap") = 0.f, arg("deterministic") = false, arg("by_head") = false, arg("workspace") = nb::none(),
      arg("stream") = 0, arg("query_workspace") = false,
      "One rank's context-parallel MLA attention (as cp_paged_attention, by_head included).");

  m.def(
      "cp_sparse_mla",
      [](Communicator& comm, RoArray q, RoArray kv, RoArray indices, Array out, float softmax_scale,
         OptRoArray topk_length, OptRoArray attn_sink, OptArray lse, bool deterministic, OptArray workspace,
         uintptr_t stream, bool query_workspace) -> nb::object {
        SparseMlaArgs a{.q = to_view(q),
                        .kv = to_view(kv),
                        .indices = to_view(indices),
                        .out = to_view(out),
                        .topk_length = to_view(topk_length),
                        .attn_sink = to_view(attn_sink),
                        .lse = to_view(lse),
                        .softmax_scale = softmax_scale,
                        .deterministic = deterministic};
        if (query_workspace)
          return nb::int_(cp_sparse_mla_workspace_size(a, query_device_caps(a.q.device), comm.world_size()));
        nb::gil_scoped_release release;
        cp_sparse_mla(a, comm, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("comm"), arg("q"), arg("kv"), arg("indices"), arg("out"), nb::kw_only(), arg("softmax_scale"),
      arg("topk_length") = nb::none(), arg("attn_sink") = nb::none(), arg("lse") = nb::none(),
      arg("deterministic") = false, arg("workspace") = nb::none(), arg("stream") = 0, arg("query_workspace") = false,
      "One rank's context-parallel sparse MLA: indices are this rank's slots (cp_route_topk); attn_sink\n"
      "enters the merge once; lse excludes it.");
}

}  // namespace attnserve::py
