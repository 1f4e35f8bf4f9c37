// Builds without CUDA: the planners' CUDA entry points fail with a clear error. (Only compiled into
// CPU-only builds: in a static library a weak definition found first would shadow the kernel.)
#include "plan/plan_device.h"

#ifndef ATTNSERVE_WITH_CUDA
#define ATTNSERVE_WEAK __attribute__((weak))

namespace attnserve::plan_cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  ATTNSERVE_FAIL(what, ": attnserve was built without CUDA; plan on the CPU device");
}
}  // namespace

ATTNSERVE_WEAK void* pinned_alloc(std::size_t) { unavailable("planner staging"); }
ATTNSERVE_WEAK void pinned_free(void*) {}
ATTNSERVE_WEAK void* event_create() { unavailable("planner staging"); }
ATTNSERVE_WEAK void event_destroy(void*) {}
ATTNSERVE_WEAK void event_record(void*, Stream) { unavailable("planner staging"); }
ATTNSERVE_WEAK void event_synchronize(void*) {}
ATTNSERVE_WEAK void gather_page_table(const plan_detail::GatherPageTableArgs&, Stream) {
  unavailable("planner page-table gather");
}
ATTNSERVE_WEAK void expand_rows(const plan_detail::ExpandRowsArgs&, Stream) { unavailable("planner expand_rows"); }
ATTNSERVE_WEAK void tree_logits(const plan_detail::TreeLogitsArgs&, Stream) { unavailable("planner tree_logits"); }
ATTNSERVE_WEAK void transform_index(const TransformIndexArgs&, Stream) { unavailable("transform_index_page_table"); }

}  // namespace attnserve::plan_cuda
#endif
