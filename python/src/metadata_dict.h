// Planner metadata as a Python dict of arrays and host values, with the seeds' field names. Shared by
// the planner and backend bindings. By default the arrays are views of the planner's buffers (kept
// alive by `owner`) that the planner's next call overwrites; copied_metadata gives an owning copy.
#pragma once
#include "attnserve/plan.h"
#include "views.h"

namespace attnserve::py {

nb::dict metadata_dict(const DenseMetadata& m, nb::handle owner);
nb::dict metadata_dict(const SparseMetadata& m, nb::handle owner);

// The same dict over fresh buffers (same device) holding copies of every array; waits for the copies
// on `stream`, so the result is valid at once and stays valid after later plan() calls.
nb::dict copied_metadata(const DenseMetadata& m, Stream stream);
nb::dict copied_metadata(const SparseMetadata& m, Stream stream);

void bind_metadata_copy(nb::module_& m);

}  // namespace attnserve::py
