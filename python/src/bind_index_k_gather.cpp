// Python binding of gather_index_k (paged indexer-key pool -> contiguous keys + scales for
// indexer_ragged). out_k may be a uint8 array when the framework has no fp8 dtype.
#include "attnserve/ops/index_k_gather.h"
#include "convert.h"

namespace attnserve::py {

void bind_index_k_gather(nb::module_& m) {
  m.def(
      "gather_index_k",
      [](RoArray index_k_cache, RoArray slots, Array out_k, Array out_scale, int page_size, uintptr_t stream) {
        gather_index_k({.index_k_cache = to_view(index_k_cache),
                        .slots = to_view(slots),
                        .out_k = to_view(out_k),
                        .out_scale = to_view(out_scale),
                        .page_size = page_size},
                       to_stream(stream));
      },
      nb::arg("index_k_cache"), nb::arg("slots"), nb::arg("out_k"), nb::arg("out_scale"), nb::kw_only(),
      nb::arg("page_size") = 64, nb::arg("stream") = 0,
      "Gather indexer keys of token slots from the paged indexer-key pool into out_k [n, 128] (fp8 or uint8) "
      "and out_scale [n] f32. Out-of-range slots: an error on CPU, a zero key and scale 0 on CUDA.");
}

}  // namespace attnserve::py
