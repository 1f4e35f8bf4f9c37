#include "plan/local_attention.h"

#include <algorithm>

namespace attnserve::plan_detail {

void split_virtual_batches(std::span<const int32_t> q_len, std::span<const int32_t> kv_len, int chunk,
                           std::vector<VirtualBatch>& out) {
  out.clear();
  const int64_t C = chunk;
  for (std::size_t r = 0; r < q_len.size(); ++r) {
    const int64_t q = q_len[r], kv = kv_len[r];
    if (q == 0 || kv == 0) {
      out.push_back({int32_t(r), int32_t(q), 0, 0});
      continue;
    }
    const int64_t first_pos = kv - q;  // position of the first query row
    for (int64_t c = first_pos / C; c <= (kv - 1) / C; ++c) {
      const int64_t chunk_begin = c * C;
      const int64_t rows_begin = std::max(chunk_begin, first_pos);
      const int64_t rows_end = std::min(chunk_begin + C, kv);  // the last row is the last key
      out.push_back(
          {int32_t(r), int32_t(rows_end - rows_begin), int32_t(rows_end - chunk_begin), int32_t(chunk_begin)});
    }
  }
}

int effective_chunk_size(int chunk, int max_kv, int page_size) {
  const int64_t rounded_up = (int64_t(max_kv) + page_size - 1) / page_size * page_size;
  return int(std::max<int64_t>(page_size, std::min<int64_t>(chunk, rounded_up)));
}

int64_t max_virtual_batches_per_request(int64_t q, int chunk) {
  if (q <= 1) return 1;
  return 1 + (q - 1 + chunk - 1) / chunk;
}

int64_t max_virtual_batches_eager(int64_t max_bs, int64_t max_q_rows, int chunk) {
  // Per request 1 + ceil((q - 1) / chunk) <= 2 + (q - 1) / chunk; summed: 2 bs + rows / chunk.
  return 2 * max_bs + (max_q_rows + chunk - 1) / chunk;
}

}  // namespace attnserve::plan_detail
