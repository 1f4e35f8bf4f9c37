// CPU sparse MLA (DeepSeek sparse attention over an MLA cache): the oracle and the CPU default.
// Per query row: gather the row's valid top-k keys once (dequantizing FP8 tokens), then for a group
// of heads at a time compute scores, the softmax and the weighted sum of values with plain loops
// over contiguous arrays. Work items are rows, or (row, head block) when rows are too few to keep
// every core busy. float32 math, or double with fp64 = true. Arguments were validated by the
// dispatcher (src/ops/sparse_mla.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/load.h"
#include "cpu/parallel.h"
#include "cpu/sparse_key_gather.h"

namespace attnserve::cpu {
namespace {

using sparse::kDimQk;
using sparse::kDimV;

// Heads processed together: each key is read once per group from cache, not once per head.
constexpr int64_t kHeadGroup = 8;

template <typename T>
T load_value(const void* base, DType t, int64_t i) {
  if constexpr (std::is_same_v<T, double>) {
    if (t == DType::f64) return static_cast<const double*>(base)[i];
  }
  return T(load_as_float(base, t, i));
}

template <typename T>
void store_value(void* base, DType t, int64_t i, T v) {
  if constexpr (std::is_same_v<T, double>) {
    if (t == DType::f64) {
      static_cast<double*>(base)[i] = v;
      return;
    }
  }
  store_from_float(base, t, i, float(v));
}

template <typename T>
T dot(const T* a, const T* b) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < kDimQk; ++d) s += a[d] * b[d];
  return s;
}

// Four heads against one key: four independent sums (no single add chain), each key load shared.
template <typename T>
void dot4(const T* q, const T* k, T* out) {
  const T *q0 = q, *q1 = q + kDimQk, *q2 = q + 2 * kDimQk, *q3 = q + 3 * kDimQk;
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int d = 0; d < kDimQk; ++d) {
    s0 += q0[d] * k[d];
    s1 += q1[d] * k[d];
    s2 += q2[d] * k[d];
    s3 += q3[d] * k[d];
  }
  out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

template <typename T>
void add_scaled(T p, const T* v, T* y) {
#pragma omp simd
  for (int d = 0; d < kDimV; ++d) y[d] += p * v[d];
}

// y += p0 v0 + p1 v1 + p2 v2 + p3 v3 for four consecutive keys (stride kDimQk): one pass over y.
template <typename T>
void add_scaled4(const T* p, const T* v, T* y) {
  const T *v0 = v, *v1 = v + kDimQk, *v2 = v + 2 * kDimQk, *v3 = v + 3 * kDimQk;
#pragma omp simd
  for (int d = 0; d < kDimV; ++d) y[d] += p[0] * v0[d] + p[1] * v1[d] + p[2] * v2[d] + p[3] * v3[d];
}

// Per-work-item scratch: the row's keys, then per head group q, probabilities and accumulators.
template <typename T>
struct Scratch {
  std::vector<T> keys;   // [count, 576]
  std::vector<T> q;      // [group, 576]
  std::vector<T> probs;  // [group, count]
  std::vector<T> acc;    // [group, 512]
};

void write_empty_heads(const SparseMlaArgs& a, int64_t r, int64_t h0, int64_t h1) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t d = 0; d < kDimV; ++d) store_from_float(a.out.data, a.out.dtype, offset_of(a.out, r, h, d), 0.f);
    if (!a.lse.empty_view()) a.lse.ptr<float>()[offset_of(a.lse, r, h)] = neg_inf;
    if (!a.max_logits.empty_view()) a.max_logits.ptr<float>()[offset_of(a.max_logits, r, h)] = neg_inf;
  }
}

// Heads [h0, h0 + g) of row r against the row's `count` gathered keys (count > 0).
template <typename T>
void attend_head_group(const SparseMlaArgs& a, int64_t r, int64_t h0, int64_t g, int64_t count, Scratch<T>& s) {
  const T scale = T(a.softmax_scale);
  const T* keys = s.keys.data();
  T* q = s.q.data();
  T* probs = s.probs.data();
  T* acc = s.acc.data();

  for (int64_t i = 0; i < g; ++i)
    for (int64_t d = 0; d < kDimQk; ++d)
      q[i * kDimQk + d] = load_value<T>(a.q.data, a.q.dtype, offset_of(a.q, r, h0 + i, d));

  // Scores, key-major so each key is loaded once for the whole group. A head's arithmetic depends
  // only on its place in the group, and groups start at multiples of kHeadGroup: bits do not
  // depend on how heads were split into blocks.
  for (int64_t j = 0; j < count; ++j) {
    const T* k = keys + j * kDimQk;
    int64_t i = 0;
    for (; i + 4 <= g; i += 4) {
      T s4[4];
      dot4(q + i * kDimQk, k, s4);
      for (int u = 0; u < 4; ++u) probs[(i + u) * count + j] = scale * s4[u];
    }
    for (; i < g; ++i) probs[i * count + j] = scale * dot(q + i * kDimQk, k);
  }

  // Softmax numerators; m and l per head.
  T m[kHeadGroup], l[kHeadGroup];
  for (int64_t i = 0; i < g; ++i) {
    T* p = probs + i * count;
    T mi = p[0];
    for (int64_t j = 1; j < count; ++j) mi = std::max(mi, p[j]);
    T li = 0;
    for (int64_t j = 0; j < count; ++j) {
      p[j] = std::exp(p[j] - mi);
      li += p[j];
    }
    m[i] = mi;
    l[i] = li;
  }

  // Weighted sum of values (the first 512 dims of each key), four keys at a time, key-major.
  std::fill(acc, acc + g * kDimV, T(0));
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    for (int64_t i = 0; i < g; ++i) add_scaled4(probs + i * count + j, keys + j * kDimQk, acc + i * kDimV);
  }
  for (; j < count; ++j) {
    for (int64_t i = 0; i < g; ++i) add_scaled(probs[i * count + j], keys + j * kDimQk, acc + i * kDimV);
  }

  for (int64_t i = 0; i < g; ++i) {
    const int64_t h = h0 + i;
    T denom = l[i];
    // The sink joins the denominator only; exp may overflow to inf, correctly giving out -> 0.
    if (!a.attn_sink.empty_view())
      denom += std::exp(T(a.attn_sink.ptr<const float>()[h * a.attn_sink.strides[0]]) - m[i]);
    const T inv = T(1) / denom;
    for (int64_t d = 0; d < kDimV; ++d)
      store_value<T>(a.out.data, a.out.dtype, offset_of(a.out, r, h, d), acc[i * kDimV + d] * inv);
    if (!a.lse.empty_view()) a.lse.ptr<float>()[offset_of(a.lse, r, h)] = float(m[i] + std::log(l[i]));
    if (!a.max_logits.empty_view()) a.max_logits.ptr<float>()[offset_of(a.max_logits, r, h)] = float(m[i]);
  }
}

// Row r, heads [h0, h1).
template <typename T>
void attend_row_heads(const SparseMlaArgs& a, int64_t r, int64_t h0, int64_t h1) {
  const int64_t topk = a.indices.size(1);
  int64_t n = topk;
  if (!a.topk_length.empty_view()) {
    n = a.topk_length.ptr<const int32_t>()[r * a.topk_length.strides[0]];
    n = std::clamp<int64_t>(n, 0, topk);
  }
  Scratch<T> s;
  s.keys.resize(size_t(n * kDimQk));
  const int32_t* slots = a.indices.ptr<const int32_t>() + r * a.indices.strides[0];
  const int64_t count = sparse::gather_row_keys(a.kv, slots, a.indices.strides[1], n, s.keys.data());
  if (count == 0) {
    write_empty_heads(a, r, h0, h1);
    return;
  }
  s.q.resize(size_t(kHeadGroup * kDimQk));
  s.probs.resize(size_t(kHeadGroup * count));
  s.acc.resize(size_t(kHeadGroup * kDimV));
  for (int64_t h = h0; h < h1; h += kHeadGroup) attend_head_group(a, r, h, std::min(kHeadGroup, h1 - h), count, s);
}

template <typename T>
void run(const SparseMlaArgs& a) {
  const int64_t rows = a.q.size(0), h_q = a.q.size(1);
  if (rows == 0 || h_q == 0) return;
  // Few rows (decode): split heads into blocks so every core has work. Each block re-gathers its
  // row's keys, a small cost next to the block's arithmetic (at least kHeadGroup heads).
  const int64_t threads = std::max(1, omp_get_max_threads());
  const int64_t wanted_blocks = rows >= 2 * threads ? 1 : (2 * threads + rows - 1) / rows;
  int64_t block = (h_q + wanted_blocks - 1) / wanted_blocks;
  block = std::max(kHeadGroup, (block + kHeadGroup - 1) / kHeadGroup * kHeadGroup);
  const int64_t blocks = (h_q + block - 1) / block;
  parallel_for(rows * blocks, [&](int64_t item) {
    const int64_t r = item / blocks, b = item % blocks;
    attend_row_heads<T>(a, r, b * block, std::min(h_q, (b + 1) * block));
  });
}

}  // namespace

void sparse_mla(const SparseMlaArgs& a, bool fp64) {
  if (fp64) {
    run<double>(a);
  } else {
    run<float>(a);
  }
}

}  // namespace attnserve::cpu
