// Backend tests: KV pools in pairs (one for the backend, one for the hand-composed path, same random
// contents), the new tokens' slots of a batch, and small host-tensor helpers.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "attnserve/backend.h"
#include "attnserve/cache_formats.h"
#include "common/test_util.h"
#include "cpu/attention_cases.h"
#include "cpu/plan_test_util.h"

namespace attnserve::test {

// Query rows of a batch (request-major: request r's rows, then r + 1's).
inline int64_t batch_rows(const TestBatch& b, const SpeculativeConfig& spec) {
  int64_t n = 0;
  for (int r = 0; r < b.bs(); ++r) n += request_shape(b, r, spec).q;
  return n;
}

// The slot of every query row's token (its out_cache_loc): row t of request r is the token at
// position kv_len - q_len + t.
inline std::vector<int32_t> new_token_slots(const TestBatch& b, const TestPool& pool, const SpeculativeConfig& spec) {
  std::vector<int32_t> slots;
  for (int r = 0; r < b.bs(); ++r) {
    const ReqShape s = request_shape(b, r, spec);
    for (int t = 0; t < s.q; ++t) slots.push_back(expected_slot(b, pool, r, s.kv - s.q + t));
  }
  return slots;
}

// Every slot a TestPool's table can name (page ids 1 .. pool_size * pages_per_row; page 0 unused).
inline int64_t pool_slots(const TestPool& p) {
  const int64_t pages_per_row = (p.max_ctx + p.page - 1) / p.page;
  return (int64_t(p.pool_size) * pages_per_row + 1) * p.page;
}

inline HostTensor random_tensor(DType t, std::initializer_list<int64_t> shape, std::mt19937_64& g, double range = 1.0) {
  HostTensor h(t, shape);
  fill_view(h.view, g, range);
  return h;
}

inline HostTensor i32_tensor(const std::vector<int32_t>& v) {
  HostTensor h(DType::i32, {int64_t(v.size())});
  if (!v.empty()) std::memcpy(h.bytes.data(), v.data(), v.size() * sizeof(int32_t));
  return h;
}

inline HostTensor poisoned(DType t, std::initializer_list<int64_t> shape) {
  HostTensor h(t, shape);
  poison(h);
  return h;
}

// Bytes of a contiguous host view.
inline std::vector<uint8_t> bytes_of(const TensorView& v) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  return std::vector<uint8_t>(p, p + v.nbytes());
}

// Rows [begin, end) of a contiguous [rows, ...] host view, as bytes.
inline std::vector<uint8_t> row_bytes(const TensorView& v, int64_t begin, int64_t end) {
  const std::size_t row = v.nbytes() / std::size_t(std::max<int64_t>(1, v.shape[0]));
  const auto* p = static_cast<const uint8_t*>(v.data);
  return std::vector<uint8_t>(p + begin * row, p + end * row);
}

// Two MHA or MLA pools with the same random contents: [0] for the backend, [1] for the reference path.
struct KvPair {
  std::unique_ptr<MhaKvPool> mha[2];
  std::unique_ptr<MlaKvPool> mla[2];

  static KvPair mha_pools(int layers, int64_t slots, int h_kv, int d, int d_v, DType dtype, std::mt19937_64& g) {
    KvPair p;
    for (auto& m : p.mha) m = std::make_unique<MhaKvPool>(layers, slots, h_kv, d, d_v, dtype, Device::cpu());
    for (int l = 0; l < layers; ++l) {
      fill_view(p.mha[0]->k(l), g, 1.5);
      fill_view(p.mha[0]->v(l), g, 1.0);
      copy_async(p.mha[1]->k(l), p.mha[0]->k(l));
      copy_async(p.mha[1]->v(l), p.mha[0]->v(l));
    }
    return p;
  }
  static KvPair mla_pools(int layers, int64_t slots, MlaCacheFormat format, std::mt19937_64& g) {
    KvPair p;
    for (auto& m : p.mla) m = std::make_unique<MlaKvPool>(layers, slots, format, Device::cpu());
    for (int l = 0; l < layers; ++l) {
      if (format == MlaCacheFormat::bf16) {
        fill_view(p.mla[0]->cache(l), g, 1.0);
      } else {  // valid FP8-656 rows: encode random tokens
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        std::vector<float> nope(512), rope(64);
        const TensorView c = p.mla[0]->cache(l);
        for (int64_t s = 0; s < c.shape[0]; ++s) {
          for (float& x : nope) x = u(g);
          for (float& x : rope) x = u(g);
          encode_fp8_mla_token(nope.data(), rope.data(), static_cast<uint8_t*>(c.data) + s * c.strides[0]);
        }
      }
      copy_async(p.mla[1]->cache(l), p.mla[0]->cache(l));
    }
    return p;
  }
  std::vector<KvLayerBuffers> buffers(int which) const {
    return mha[which] ? kv_buffers_of(*mha[which]) : kv_buffers_of(*mla[which]);
  }
  // Every layer's caches hold the same bytes in both pools.
  bool same_contents() const {
    const int layers = int(mha[0] ? mha[0]->num_layers() : mla[0]->num_layers());
    for (int l = 0; l < layers; ++l) {
      if (mha[0]) {
        if (bytes_of(mha[0]->k(l)) != bytes_of(mha[1]->k(l))) return false;
        if (bytes_of(mha[0]->v(l)) != bytes_of(mha[1]->v(l))) return false;
      } else if (bytes_of(mla[0]->cache(l)) != bytes_of(mla[1]->cache(l))) {
        return false;
      }
    }
    return true;
  }
};

inline const ForwardMode kAllModes[] = {ForwardMode::decode,       ForwardMode::extend,
                                        ForwardMode::draft_decode, ForwardMode::target_verify,
                                        ForwardMode::draft_extend, ForwardMode::idle};
inline const ForwardMode kGraphModes[] = {ForwardMode::decode, ForwardMode::draft_decode, ForwardMode::target_verify,
                                          ForwardMode::draft_extend};

}  // namespace attnserve::test
