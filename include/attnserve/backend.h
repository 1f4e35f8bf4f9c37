// Attention backends: the objects an engine drives each step (the seeds' AttentionBackend), built on
// the planners (plan.h), the KV cache (kv_cache.h) and the ops (ops.h).
//   backend/config.h      DenseBackendConfig, SparseBackendConfig, LayerSpec, ForwardArgs, KvLayerBuffers
//   backend/dense.h       DenseBackend   (MHA/GQA/MQA, MLA absorbed; local attention; spec decoding)
//   backend/sparse.h      SparseBackend  (DeepSeek sparse attention) and NsaIndexerMetadata
//   backend/multi_step.h  MultiStepBackend<B>: one backend per EAGLE draft step
// A guide to wiring them into an engine: docs/backends.md.
#pragma once
#include "attnserve/backend/config.h"
#include "attnserve/backend/dense.h"
#include "attnserve/backend/multi_step.h"
#include "attnserve/backend/sparse.h"
