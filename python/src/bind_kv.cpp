// Python bindings of the KV cache: request table, slot allocator and the per-layer pools.
// Pool views are returned as arrays that share the pool's memory and keep the pool alive.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "attnserve/kv_cache.h"
#include "views.h"

namespace attnserve::py {

using nb::arg;

void bind_kv(nb::module_& m) {
  nb::class_<ReqToTokenPool>(m, "ReqToTokenPool", "Request slots x max context: token slots per request.")
      .def(
          "__init__",
          [](ReqToTokenPool* self, int64_t size, int64_t max_context_len, const std::string& device) {
            new (self) ReqToTokenPool(size, max_context_len, parse_device(device));
          },
          arg("size"), arg("max_context_len"), arg("device") = "cpu")
      .def_prop_ro("table", [](nb::handle self) { return to_python(nb::cast<ReqToTokenPool&>(self).table(), self); })
      .def("alloc", &ReqToTokenPool::alloc)
      .def("free", &ReqToTokenPool::free, arg("req"))
      .def("available", &ReqToTokenPool::available)
      .def(
          "write",
          [](ReqToTokenPool& p, int64_t req, int64_t start, const std::vector<int32_t>& slots) {
            p.write(req, start, slots);
          },
          arg("req"), arg("start"), arg("slots"))
      .def_prop_ro("size", &ReqToTokenPool::size)
      .def_prop_ro("max_context_len", &ReqToTokenPool::max_context_len);

  nb::class_<SlotAllocator>(m, "SlotAllocator",
                            "Page-aware token-slot allocator (page 0 is reserved as the padding page).")
      .def(nb::init<int64_t, int>(), arg("num_slots"), arg("page_size"))
      .def(
          "alloc_extend",
          [](SlotAllocator& a, const std::vector<int64_t>& prefix_lens, const std::vector<int64_t>& last_locs,
             const std::vector<int64_t>& extend_lens) {
            ATTNSERVE_CHECK(prefix_lens.size() == last_locs.size() && prefix_lens.size() == extend_lens.size(),
                            "alloc_extend: prefix_lens, last_locs and extend_lens must have the same length");
            std::vector<SlotAllocator::ExtendRequest> reqs(prefix_lens.size());
            for (size_t i = 0; i < reqs.size(); ++i) reqs[i] = {prefix_lens[i], last_locs[i], extend_lens[i]};
            return a.alloc_extend(reqs);
          },
          arg("prefix_lens"), arg("last_locs"), arg("extend_lens"))
      .def(
          "alloc_decode",
          [](SlotAllocator& a, const std::vector<int64_t>& seq_lens, const std::vector<int64_t>& last_locs) {
            ATTNSERVE_CHECK(seq_lens.size() == last_locs.size(),
                            "alloc_decode: seq_lens and last_locs differ in length");
            std::vector<SlotAllocator::DecodeRequest> reqs(seq_lens.size());
            for (size_t i = 0; i < reqs.size(); ++i) reqs[i] = {seq_lens[i], last_locs[i]};
            return a.alloc_decode(reqs);
          },
          arg("seq_lens"), arg("last_locs"))
      .def(
          "free", [](SlotAllocator& a, const std::vector<int32_t>& slots) { a.free(slots); }, arg("slots"))
      .def("reset", &SlotAllocator::reset)
      .def_prop_ro("page_size", &SlotAllocator::page_size)
      .def_prop_ro("num_slots", &SlotAllocator::num_slots)
      .def("available_pages", &SlotAllocator::available_pages)
      .def("available_slots", &SlotAllocator::available_slots);

  nb::class_<MhaKvPool>(m, "MhaKvPool", "Per-layer K and V pools for MHA/GQA: [num_slots, h_kv, d].")
      .def(
          "__init__",
          [](MhaKvPool* self, int64_t layers, int64_t slots, int64_t h_kv, int64_t d, int64_t d_v,
             const std::string& dtype, const std::string& device, float k_scale, float v_scale) {
            new (self)
                MhaKvPool(layers, slots, h_kv, d, d_v, parse_dtype(dtype), parse_device(device), k_scale, v_scale);
          },
          arg("num_layers"), arg("num_slots"), arg("h_kv"), arg("head_dim"), arg("head_dim_v"), arg("dtype") = "bf16",
          arg("device") = "cpu", arg("k_scale") = 1.f, arg("v_scale") = 1.f)
      .def(
          "k", [](nb::handle self, int64_t l) { return to_python(nb::cast<MhaKvPool&>(self).k(l), self); },
          arg("layer"),
          "K of one layer: [num_slots, h_kv, head_dim] in the pool's dtype."
          " A view of the pool's memory (no copy) that keeps the pool alive: a NumPy array on the CPU (bf16 as "
          "ml_dtypes.bfloat16, fp8 as ml_dtypes.float8_e4m3fn), an attnserve.ArrayView on a GPU.")
      .def(
          "v", [](nb::handle self, int64_t l) { return to_python(nb::cast<MhaKvPool&>(self).v(l), self); },
          arg("layer"),
          "V of one layer: [num_slots, h_kv, head_dim_v] in the pool's dtype."
          " A view of the pool's memory (no copy) that keeps the pool alive: a NumPy array on the CPU (bf16 as "
          "ml_dtypes.bfloat16, fp8 as ml_dtypes.float8_e4m3fn), an attnserve.ArrayView on a GPU.")
      .def(
          "k_paged",
          [](nb::handle self, int64_t l, int ps) { return to_python(nb::cast<MhaKvPool&>(self).k_paged(l, ps), self); },
          arg("layer"), arg("page_size"),
          "K as pages: [num_slots / page_size, page_size, h_kv, head_dim]."
          " A view of the pool's memory (no copy) that keeps the pool alive: a NumPy array on the CPU (bf16 as "
          "ml_dtypes.bfloat16, fp8 as ml_dtypes.float8_e4m3fn), an attnserve.ArrayView on a GPU.")
      .def(
          "v_paged",
          [](nb::handle self, int64_t l, int ps) { return to_python(nb::cast<MhaKvPool&>(self).v_paged(l, ps), self); },
          arg("layer"), arg("page_size"),
          "V as pages: [num_slots / page_size, page_size, h_kv, head_dim_v]."
          " A view of the pool's memory (no copy) that keeps the pool alive: a NumPy array on the CPU (bf16 as "
          "ml_dtypes.bfloat16, fp8 as ml_dtypes.float8_e4m3fn), an attnserve.ArrayView on a GPU.")
      .def("k_scale", &MhaKvPool::k_scale)
      .def("v_scale", &MhaKvPool::v_scale)
      .def_prop_ro("num_layers", &MhaKvPool::num_layers)
      .def_prop_ro("num_slots", &MhaKvPool::num_slots)
      .def_prop_ro("bytes", &MhaKvPool::bytes);

  nb::enum_<MlaCacheFormat>(m, "MlaCacheFormat")
      .value("bf16", MlaCacheFormat::bf16)
      .value("fp8_656", MlaCacheFormat::fp8_656);

  nb::class_<MlaKvPool>(m, "MlaKvPool", "Per-layer MLA latent pool: [num_slots, 576] bf16 or [num_slots, 656] FP8.")
      .def(
          "__init__",
          [](MlaKvPool* self, int64_t layers, int64_t slots, MlaCacheFormat f, const std::string& device) {
            new (self) MlaKvPool(layers, slots, f, parse_device(device));
          },
          arg("num_layers"), arg("num_slots"), arg("format") = MlaCacheFormat::bf16, arg("device") = "cpu")
      .def(
          "cache", [](nb::handle self, int64_t l) { return to_python(nb::cast<MlaKvPool&>(self).cache(l), self); },
          arg("layer"),
          "The latent cache of one layer: [num_slots, 576] bf16 or [num_slots, 656] uint8 (FP8-656)."
          " A view of the pool's memory (no copy) that keeps the pool alive: a NumPy array on the CPU (bf16 as "
          "ml_dtypes.bfloat16, fp8 as ml_dtypes.float8_e4m3fn), an attnserve.ArrayView on a GPU.")
      .def_prop_ro("num_layers", &MlaKvPool::num_layers)
      .def_prop_ro("num_slots", &MlaKvPool::num_slots)
      .def_prop_ro("bytes", &MlaKvPool::bytes);

  nb::class_<IndexerKeyPool>(m, "IndexerKeyPool", "Per-layer indexer keys: [num_pages, page_size * 132] bytes.")
      .def(
          "__init__",
          [](IndexerKeyPool* self, int64_t layers, int64_t pages, int ps, const std::string& device) {
            new (self) IndexerKeyPool(layers, pages, ps, parse_device(device));
          },
          arg("num_layers"), arg("num_pages"), arg("page_size"), arg("device") = "cpu")
      .def(
          "cache", [](nb::handle self, int64_t l) { return to_python(nb::cast<IndexerKeyPool&>(self).cache(l), self); },
          arg("layer"),
          "The indexer keys of one layer: [num_pages, page_size * 132] uint8."
          " A view of the pool's memory (no copy) that keeps the pool alive: a NumPy array on the CPU (bf16 as "
          "ml_dtypes.bfloat16, fp8 as ml_dtypes.float8_e4m3fn), an attnserve.ArrayView on a GPU.")
      .def_prop_ro("num_layers", &IndexerKeyPool::num_layers)
      .def_prop_ro("num_pages", &IndexerKeyPool::num_pages)
      .def_prop_ro("num_slots", &IndexerKeyPool::num_slots)
      .def_prop_ro("bytes", &IndexerKeyPool::bytes);
}

}  // namespace attnserve::py
