// Context-parallel plan: which pages of each request live on which rank (page g on rank g % W),
// and one rank's attention metadata for decode, draft_decode and target_verify. Pure host code.
#include <algorithm>
#include <string>

#include "attnserve/context_parallel.h"

namespace attnserve {
namespace {

constexpr const char* kWho = "plan_context_parallel";

void check_config(const char* who, const CpConfig& c, int rank) {
  ATTNSERVE_CHECK(c.world_size >= 1, who, ": world_size must be >= 1, got ", c.world_size);
  ATTNSERVE_CHECK(c.page_size >= 1, who, ": page_size must be >= 1, got ", c.page_size);
  ATTNSERVE_CHECK(c.padding_slot >= 0, who, ": padding_slot must be >= 0, got ", c.padding_slot);
  ATTNSERVE_CHECK(rank >= 0 && rank < c.world_size, who, ": rank ", rank, " is outside [0, ", c.world_size, ")");
}

void check_page_table(const char* who, std::span<const int32_t> page_table, int width, int bs) {
  ATTNSERVE_CHECK(width >= 0, who, ": page_table_width must be >= 0, got ", width);
  ATTNSERVE_CHECK(page_table.size() == size_t(bs) * size_t(width), who, ": page_table holds ", page_table.size(),
                  " entries, expected bs * page_table_width = ", bs, " * ", width);
}

// Query rows per request and the keys of the whole context (the new tokens included) for `mode`.
struct ModeShape {
  int q_len = 1;
  int extra_keys = 0;  // kv_len = seq_lens[r] + extra_keys
};

ModeShape shape_of(const CpBatch& b) {
  switch (b.mode) {
    case ForwardMode::decode: return {1, 0};
    case ForwardMode::draft_decode:
      ATTNSERVE_CHECK(b.spec.step_id >= 0, kWho, ": draft_decode needs spec.step_id >= 0, got ", b.spec.step_id);
      return {1, b.spec.step_id + 1};
    case ForwardMode::target_verify:
      ATTNSERVE_CHECK(b.spec.draft_token_num >= 1, kWho, ": target_verify needs spec.draft_token_num >= 1, got ",
                      b.spec.draft_token_num);
      return {b.spec.draft_token_num, b.spec.draft_token_num};
    default:
      ATTNSERVE_FAIL(kWho, ": mode ", to_string(b.mode),
                     " is not planned for context parallelism (decode, draft_decode, target_verify)");
  }
}

}  // namespace

int cp_owner_rank(int64_t key_position, const CpConfig& c) {
  ATTNSERVE_CHECK(key_position >= 0, "cp_owner_rank: key position must be >= 0, got ", key_position);
  check_config("cp_owner_rank", c, 0);
  return int((key_position / c.page_size) % c.world_size);
}

int32_t cp_local_key_count(int64_t num_keys, int rank, const CpConfig& c) {
  check_config("cp_local_key_count", c, rank);
  ATTNSERVE_CHECK(num_keys >= 0, "cp_local_key_count: num_keys must be >= 0, got ", num_keys);
  const int64_t cycle = int64_t(c.page_size) * c.world_size;  // one page on every rank
  const int64_t full = num_keys / cycle, rest = num_keys - full * cycle;
  const int64_t tail = std::clamp<int64_t>(rest - int64_t(rank) * c.page_size, 0, c.page_size);
  return narrow_i32(full * c.page_size + tail, "cp_local_key_count");
}

CpRankPlan plan_context_parallel(const CpConfig& c, const CpBatch& b, int rank) {
  check_config(kWho, c, rank);
  const int bs = b.batch_size(), width = b.page_table_width, P = c.page_size, W = c.world_size;
  check_page_table(kWho, b.page_table, width, bs);
  const ModeShape shape = shape_of(b);

  CpRankPlan p;
  p.rank = rank;
  p.mode = b.mode;
  p.batch_size = bs;
  p.local_width = std::max(1, (width + W - 1) / W);
  p.request_local_len.resize(size_t(bs));

  // Validate every request before building anything (the whole batch or nothing).
  for (int r = 0; r < bs; ++r) {
    const int64_t kv = int64_t(b.seq_lens[size_t(r)]) + shape.extra_keys;
    ATTNSERVE_CHECK(b.seq_lens[size_t(r)] >= 0, kWho, ": seq_lens[", r, "] = ", b.seq_lens[size_t(r)], " < 0");
    ATTNSERVE_CHECK(kv >= shape.q_len, kWho, ": request ", r, " has ", kv, " keys, fewer than its ", shape.q_len,
                    " query rows (", to_string(b.mode), ")");
    ATTNSERVE_CHECK(kv <= int64_t(width) * P, kWho, ": request ", r, " has ", kv, " keys but page_table_width ", width,
                    " * page_size ", P, " holds ", int64_t(width) * P);
    const int64_t pages = (kv + P - 1) / P;
    for (int64_t g = rank; g < pages; g += W) {
      const int32_t id = b.page_table[size_t(r) * size_t(width) + size_t(g)];
      ATTNSERVE_CHECK(id >= 0, kWho, ": page_table[", r, ", ", g, "] = ", id, " (a page of rank ", rank, ") < 0");
    }
  }

  p.num_rows = narrow_i32(int64_t(bs) * shape.q_len, "plan_context_parallel: query rows");
  narrow_i32(int64_t(p.num_rows) * p.local_width, "plan_context_parallel: local page-table entries");
  p.page_table.assign(size_t(p.num_rows) * size_t(p.local_width), 0);
  p.cache_seqlens.resize(size_t(p.num_rows));
  p.cu_seqlens_q.resize(size_t(p.num_rows) + 1);
  p.row_request.resize(size_t(p.num_rows));
  p.row_position.resize(size_t(p.num_rows));
  p.store_loc.resize(size_t(p.num_rows));
  p.stores_here.resize(size_t(p.num_rows));
  for (int r = 0; r < bs; ++r) {
    const int64_t kv = int64_t(b.seq_lens[size_t(r)]) + shape.extra_keys;
    p.request_local_len[size_t(r)] = cp_local_key_count(kv, rank, c);
    const int32_t* row_pages = b.page_table.data() + size_t(r) * size_t(width);
    for (int t = 0; t < shape.q_len; ++t) {
      const int row = r * shape.q_len + t;
      const int64_t pos = kv - shape.q_len + t;  // causal: sees global keys 0 .. pos
      const int32_t local_kv = cp_local_key_count(pos + 1, rank, c);
      p.cache_seqlens[size_t(row)] = local_kv;
      p.max_local_kv = std::max(p.max_local_kv, local_kv);
      p.row_request[size_t(row)] = r;
      p.row_position[size_t(row)] = narrow_i32(pos, "row position");
      // Local page l of this rank is global page rank + l * W; only the pages the row sees.
      int32_t* out = p.page_table.data() + size_t(row) * size_t(p.local_width);
      const int64_t local_pages = (local_kv + P - 1) / P;
      for (int64_t l = 0; l < local_pages; ++l) out[l] = row_pages[size_t(rank + l * W)];
      const int64_t page = pos / P;
      const bool here = page % W == rank;
      p.stores_here[size_t(row)] = here ? 1 : 0;
      p.store_loc[size_t(row)] =
          here ? narrow_i32(int64_t(row_pages[size_t(page)]) * P + pos % P, "store slot") : c.padding_slot;
    }
  }
  for (int i = 0; i <= p.num_rows; ++i) p.cu_seqlens_q[size_t(i)] = i;
  return p;
}

void cp_route_topk(const CpConfig& c, int rank, const CpTopkRouting& t, std::span<int32_t> out) {
  constexpr const char* who = "cp_route_topk";
  check_config(who, c, rank);
  const int bs = int(t.kv_lens.size()), width = t.page_table_width, P = c.page_size, W = c.world_size;
  check_page_table(who, t.page_table, width, bs);
  ATTNSERVE_CHECK(t.topk >= 0, who, ": topk must be >= 0, got ", t.topk);
  const size_t rows = t.row_request.size();
  ATTNSERVE_CHECK(t.topk_positions.size() == rows * size_t(t.topk), who, ": topk_positions holds ",
                  t.topk_positions.size(), " entries, expected rows * topk = ", rows, " * ", t.topk);
  ATTNSERVE_CHECK(out.size() == t.topk_positions.size(), who, ": out holds ", out.size(), " entries, expected ",
                  t.topk_positions.size());
  for (size_t i = 0; i < rows; ++i) {
    const int32_t r = t.row_request[i];
    ATTNSERVE_CHECK(r >= 0 && r < bs, who, ": row_request[", i, "] = ", r, " is outside [0, ", bs, ")");
  }
  for (int r = 0; r < bs; ++r)
    ATTNSERVE_CHECK(t.kv_lens[size_t(r)] >= 0 && int64_t(t.kv_lens[size_t(r)]) <= int64_t(width) * P, who, ": kv_lens[",
                    r, "] = ", t.kv_lens[size_t(r)],
                    " is outside [0, page_table_width * page_size = ", int64_t(width) * P, "]");
  for (size_t i = 0; i < rows; ++i) {
    const int32_t r = t.row_request[i];
    const int32_t* row_pages = t.page_table.data() + size_t(r) * size_t(width);
    for (int j = 0; j < t.topk; ++j) {
      const size_t e = i * size_t(t.topk) + size_t(j);
      const int32_t pos = t.topk_positions[e];
      const bool valid = pos >= 0 && pos < t.kv_lens[size_t(r)];
      if (!valid || (pos / P) % W != rank) {
        out[e] = -1;
        continue;
      }
      const int32_t id = row_pages[pos / P];
      ATTNSERVE_CHECK(id >= 0, who, ": page_table[", r, ", ", pos / P, "] = ", id, " < 0");
      out[e] = narrow_i32(int64_t(id) * P + pos % P, "routed slot");
    }
  }
}

}  // namespace attnserve
