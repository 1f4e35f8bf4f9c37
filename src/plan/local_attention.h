// Internal: local (chunked) attention as virtual batches. A query at absolute position p sees the
// keys of its own chunk only: positions floor(p / chunk) * chunk .. p. Cutting each request at
// multiples of the chunk gives virtual requests whose queries are again aligned bottom-right with
// their keys, so a plain causal varlen kernel computes local attention over them.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace attnserve::plan_detail {

struct VirtualBatch {
  int32_t request;  // index in the batch
  int32_t q_len;    // query rows (consecutive rows of the request)
  int32_t k_len;    // keys: positions k_start .. k_start + k_len - 1
  int32_t k_start;  // a multiple of the chunk
};

// Request-major, chunks ascending. A request with no keys (graph padding) or no queries gives one
// virtual batch {q_len, 0 keys}. Worked example (seed 001, chunk 4): q = [4, 10, 5], kv = [6, 17, 9]
// gives q_len [2, 2, 1, 4, 4, 1, 4, 1], k_len [4, 2, 4, 4, 4, 1, 4, 1], k_start
// [0, 4, 4, 8, 12, 16, 4, 8] (so cu_seqlens_q_local = [0, 2, 4, 5, 9, 13, 14, 18, 19]).
void split_virtual_batches(std::span<const int32_t> q_len, std::span<const int32_t> kv_len, int chunk,
                           std::vector<VirtualBatch>& out);

// The chunk an eager plan uses: min(chunk, max_kv rounded up to a page), at least one page. Smaller
// than `chunk` only when every request fits in one chunk anyway, so the attention is the same; it
// only narrows the block table. (The seed rounds max_kv DOWN to a page, which splits requests that
// should not be split when page_size > 1 and max_kv is not a page multiple.)
int effective_chunk_size(int chunk, int max_kv, int page_size);

// Virtual batches of one request with q query rows at most: 1 + ceil((q - 1) / chunk).
int64_t max_virtual_batches_per_request(int64_t q, int chunk);
// Bound for an eager plan of at most max_bs requests and max_q_rows query rows.
int64_t max_virtual_batches_eager(int64_t max_bs, int64_t max_q_rows, int chunk);

}  // namespace attnserve::plan_detail
