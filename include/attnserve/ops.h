// One function per op. Each takes an Args aggregate (designated initializers), validates it once,
// and runs on the device its tensors live on (CPU oracle or CUDA). Ops never allocate or sync.
#pragma once
#include "attnserve/ops/attention.h"
#include "attnserve/ops/index_k_gather.h"
#include "attnserve/ops/indexer.h"
#include "attnserve/ops/kv_store.h"
#include "attnserve/ops/sparse_mla.h"
#include "attnserve/ops/topk.h"
#include "attnserve/ops/tree_attention.h"
