// The model stand-in: there are no weights, so every activation a layer would compute for a token
// (q, k, v, the MLA latent, the indexer's q / weights / key) is random, uniform in [-1, 1), and a pure
// function of (seed, worker, layer, tensor, token id, position). A forward pass generates them for
// its query rows; the oracle regenerates any key of a request's context the same way, so a step can
// be recomputed without keeping anything.
#pragma once
#include <cstdint>

#include "attnserve/numeric.h"

namespace demo {

enum class Worker : uint8_t { target, draft };
inline const char* to_string(Worker w) { return w == Worker::target ? "target" : "draft"; }

enum class Act : uint8_t { q, k, v, latent, rope, index_q, index_w, index_k };

inline uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The stream of one activation of one token.
inline uint64_t act_key(uint64_t seed, Worker w, int layer, Act a, uint64_t token, int64_t pos) {
  uint64_t h = mix64(seed ^ 0xa77e5e7dull);
  h = mix64(h ^ (uint64_t(w) << 48 | uint64_t(uint32_t(layer)) << 8 | uint64_t(a)));
  h = mix64(h ^ token);
  return mix64(h ^ uint64_t(pos));
}

// Element i of a stream: uniform in [-1, 1) on a grid of 2^-23.
inline float act_value(uint64_t key, int64_t i) {
  return float(mix64(key + uint64_t(i) * 0xd1b54a32d192ed03ull) >> 40) * 0x1p-23f - 1.f;
}

inline void fill_act(float* dst, int64_t n, uint64_t key) {
  for (int64_t i = 0; i < n; ++i) dst[i] = act_value(key, i);
}
inline void fill_act(attnserve::bf16_t* dst, int64_t n, uint64_t key) {
  for (int64_t i = 0; i < n; ++i) dst[i] = attnserve::to_bf16(act_value(key, i));
}
// The bf16 value the model stores, as a float (what the oracle reads back).
inline void fill_act_bf16_rounded(float* dst, int64_t n, uint64_t key) {
  for (int64_t i = 0; i < n; ++i) dst[i] = attnserve::to_float(attnserve::to_bf16(act_value(key, i)));
}

}  // namespace demo
