// CPU lightning-indexer scores, ragged (prefill) and paged (decode / target verify / draft extend):
//   logit[i, j] = sum_h relu(q[i,h,:] . k[j,:]) * w[i,h] * k_scale[j]   (fp32 accumulation)
// Work items are (row, block of key columns), so one long row still uses every core.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnserve/cache_formats.h"
#include "cpu/cpu_ops.h"
#include "cpu/indexer_common.h"
#include "cpu/load.h"
#include "cpu/parallel.h"

namespace attnserve::cpu {
namespace {

constexpr int64_t kColumnBlock = 512;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Decoded q (n_heads x 128) and weights (n_heads) of one query row, in per-thread scratch.
struct QueryRow {
  std::vector<float> q, w;
  void load(const TensorView& qv, const TensorView& wv, const TensorView& q_scale, int64_t row) {
    const int64_t n_heads = qv.size(1);
    q.resize(size_t(n_heads * kIndexDim));
    w.resize(size_t(n_heads));
    for (int64_t h = 0; h < n_heads; ++h) {
      decode_fp8_row(qv.ptr<uint8_t>() + offset_of(qv, row, h, 0), kIndexDim, q.data() + h * kIndexDim);
      w[size_t(h)] = wv.ptr<float>()[offset_of(wv, row, h)];
      if (!q_scale.empty_view()) w[size_t(h)] *= q_scale.ptr<float>()[offset_of(q_scale, row, h)];
    }
  }
};

}  // namespace

void indexer_ragged(const IndexerRaggedArgs& a) {
  const int64_t rows = a.q.size(0), n_heads = a.q.size(1), num_keys = a.k.size(0);
  const int64_t blocks = (num_keys + kColumnBlock - 1) / kColumnBlock;
  parallel_for(rows * blocks, [&](int64_t item) {
    const int64_t i = item / blocks, c0 = (item % blocks) * kColumnBlock, c1 = std::min(c0 + kColumnBlock, num_keys);
    const int64_t ks = a.ks.ptr<int32_t>()[offset_of(a.ks, i)], ke = a.ke.ptr<int32_t>()[offset_of(a.ke, i)];
    float* out = a.logits.ptr<float>();
    thread_local QueryRow qr;
    bool loaded = false;
    float k[kIndexDim];
    for (int64_t j = c0; j < c1; ++j) {
      if (j < ks || j >= ke) {
        out[offset_of(a.logits, i, j)] = kNegInf;
        continue;
      }
      if (!loaded) qr.load(a.q, a.weights, a.q_scale, i), loaded = true;
      decode_fp8_row(a.k.ptr<uint8_t>() + offset_of(a.k, j, 0), kIndexDim, k);
      const float k_scale = a.k_scale.ptr<float>()[offset_of(a.k_scale, j)];
      out[offset_of(a.logits, i, j)] = index_score(qr.q.data(), qr.w.data(), int(n_heads), k) * k_scale;
    }
  });
}

void indexer_paged(const IndexerPagedArgs& a) {
  const int64_t rows = a.q.size(0), n_heads = a.q.size(1), max_context = a.logits.size(1);
  const int64_t next_n = a.next_n, page_size = a.page_size;
  const int64_t blocks = (max_context + kColumnBlock - 1) / kColumnBlock;
  const auto* pool = a.index_k_cache.ptr<uint8_t>();
  parallel_for(rows * blocks, [&](int64_t item) {
    const int64_t row = item / blocks, c0 = (item % blocks) * kColumnBlock,
                  c1 = std::min(c0 + kColumnBlock, max_context);
    const int64_t r = row / next_n, t = row % next_n;
    const int64_t seqlen = a.seqlens.ptr<int32_t>()[offset_of(a.seqlens, r)];
    const int64_t visible = std::clamp<int64_t>(seqlen - next_n + t + 1, 0, max_context);  // causal length
    float* out = a.logits.ptr<float>();
    thread_local QueryRow qr;
    bool loaded = false;
    float k[kIndexDim];
    for (int64_t j = c0; j < c1; ++j) {
      if (j >= visible) {
        out[offset_of(a.logits, row, j)] = kNegInf;
        continue;
      }
      if (!loaded) qr.load(a.q, a.weights, a.q_scale, row), loaded = true;
      const int64_t page = a.page_table.ptr<int32_t>()[offset_of(a.page_table, r, j / page_size)];
      const int64_t slot = page * page_size + j % page_size;
      decode_fp8_row(pool + IndexerKeyLayout::key_offset(slot, int(page_size)), kIndexDim, k);
      float k_scale;
      std::memcpy(&k_scale, pool + IndexerKeyLayout::scale_offset(slot, int(page_size)), 4);
      out[offset_of(a.logits, row, j)] = index_score(qr.q.data(), qr.w.data(), int(n_heads), k) * k_scale;
    }
  });
}

}  // namespace attnserve::cpu
