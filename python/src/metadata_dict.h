// Planner metadata as a Python dict of arrays (views of the planner's buffers, kept alive by `owner`)
// and host values, with the seeds' field names. Shared by the planner and backend bindings.
#pragma once
#include "attnserve/plan.h"
#include "views.h"

namespace attnserve::py {

nb::dict metadata_dict(const DenseMetadata& m, nb::handle owner);
nb::dict metadata_dict(const SparseMetadata& m, nb::handle owner);

}  // namespace attnserve::py
