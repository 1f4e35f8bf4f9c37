// Internal: the paged-attention selector and launcher with optional overrides, for benchmarks and
// tests that sweep split counts or pipeline depths. The public entry is cuda::paged_attention.
#pragma once
#include "attnserve/ops.h"
#include "cuda/common/host_util.cuh"
#include "cuda/attention/params.cuh"

namespace attnserve::cuda::attn {

// The one selector: support checks, workspace sizing and launch all use it.
Config select(const PagedAttentionArgs& a, const DeviceCaps& caps, const Tuning& tune = {});
void run(const PagedAttentionArgs& a, Workspace ws, Stream stream, const Tuning& tune);

using cuda::current_device_caps;  // host_util.cuh (the attention launcher's selector was its first user)

}  // namespace attnserve::cuda::attn
