// The KV cache: which token slots a request owns (ReqToTokenPool), which slots are free
// (SlotAllocator, page aware), and the per-layer pools the slots index (MHA/GQA, MLA latent,
// DeepSeek-V3.2 FP8-656, indexer keys). Writing new tokens into the pools: ops/kv_store.h.
//
// Vocabulary: a *slot* is a token's row in every pool; slots come in pages of `page_size`
// consecutive slots (slot s lives in page s / page_size). Pools know nothing about requests.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "attnserve/runtime.h"

namespace attnserve {

// ---- Request -> token slots: an i32 table [size, max_context_len]; row r holds the slots of
// request r's tokens in order. Rows are handed out lowest index first. The table starts zeroed
// (slot 0 lies in the padding page, see SlotAllocator), so unwritten entries never point at a
// live token.
class ReqToTokenPool {
 public:
  ReqToTokenPool(int64_t size, int64_t max_context_len, Device device);

  TensorView table() const { return table_; }  // [size, max_context_len] i32
  TensorView row(int64_t req) const;           // [max_context_len] i32 (bounds-checked)
  int64_t size() const { return size_; }
  int64_t max_context_len() const { return max_context_len_; }
  Device device() const { return buffer_.device(); }

  int64_t alloc();         // a free request index; error when none is left
  void free(int64_t req);  // error on a free / out-of-range index (nothing changes)
  int64_t available() const { return int64_t(free_.size()); }
  bool is_allocated(int64_t req) const;

  // table[req, start : start + slots.size()] = slots. `req` must be allocated and the range must
  // fit in max_context_len. On CUDA the copy is async on `stream`; the host span may be reused
  // when this returns (CUDA stages pageable host memory before cudaMemcpyAsync returns).
  void write(int64_t req, int64_t start, std::span<const int32_t> slots, Stream stream = {});

 private:
  int64_t size_, max_context_len_;
  Buffer buffer_;
  TensorView table_;
  std::set<int64_t> free_;
  std::vector<uint8_t> allocated_;
};

// ---- Token-slot allocator by page (host bookkeeping only: it hands out integers, so it serves
// pools on any device).
//
// num_slots = num_pages * page_size. Page 0 (slots [0, page_size)) is RESERVED as the padding
// page: padded/dummy rows of a CUDA-graph batch write their KV there, so it is never handed out
// and can never be freed. Usable pages are 1 .. num_pages-1; the lowest free page goes first,
// so allocation is deterministic.
//
// A request's tokens fill its pages in order: token t of a request sits at in-page offset
// t % page_size. Extending a request whose length is not a multiple of page_size first fills the
// rest of its last page (continuing after `last_loc`), then takes fresh whole pages.
//
// Every batch call is all-or-nothing: on an error (exhaustion, bad argument) nothing changes.
// Pages are not reference counted: sharing a page between requests (prefix caching) is the
// caller's bookkeeping; free() returns pages to the free list unconditionally.
class SlotAllocator {
 public:
  struct ExtendRequest {
    int64_t prefix_len = 0;  // tokens already in the cache
    int64_t last_loc = -1;   // slot of the last cached token; -1 when prefix_len == 0
    int64_t extend_len = 0;  // new tokens to place
  };
  struct DecodeRequest {
    int64_t seq_len = 0;    // tokens already in the cache (>= 1)
    int64_t last_loc = -1;  // slot of the last cached token
  };

  SlotAllocator(int64_t num_slots, int page_size);

  // Slots of the new tokens, request after request (the batch's out_cache_loc order).
  // On exhaustion: an Error saying how many pages were needed and how many are free.
  std::vector<int32_t> alloc_extend(std::span<const ExtendRequest> reqs);
  // One new token per request.
  std::vector<int32_t> alloc_decode(std::span<const DecodeRequest> reqs);

  // Returns the pages these slots live in (all slots of a request at once; duplicates of a page
  // are fine). A slot out of range, in page 0, or in a page that is not allocated (double free,
  // never allocated) is an error and nothing is freed.
  void free(std::span<const int32_t> slots);
  void reset();  // every usable page free again

  int page_size() const { return page_size_; }
  int64_t num_slots() const { return num_pages_ * page_size_; }
  int64_t num_pages() const { return num_pages_; }  // including the reserved page 0
  int64_t available_pages() const { return int64_t(free_.size()); }
  int64_t available_slots() const { return available_pages() * page_size_; }
  bool page_allocated(int64_t page) const;

 private:
  void check_last_loc(const char* op, size_t i, int64_t prefix_len, int64_t last_loc) const;
  // alloc_extend's work; `op` names the public call in errors (alloc_decode goes through it too).
  std::vector<int32_t> alloc_slots(const char* op, std::span<const ExtendRequest> reqs);

  int page_size_;
  int64_t num_pages_;
  std::set<int32_t> free_;          // free usable pages, ascending
  std::vector<uint8_t> allocated_;  // per page
};

// ---- Per-layer pools. Each allocates all its layers at construction (zero-filled) and hands out
// views; a layer index out of range is an error. Paged views need num_slots % page_size == 0.

// MHA/GQA: K [num_slots, h_kv, d] and V [num_slots, h_kv, d_v] per layer, bf16 | f16 | fp8_e4m3.
// An fp8 pool keeps a per-layer (k_scale, v_scale): stored = fp8(x / scale).
class MhaKvPool {
 public:
  MhaKvPool(int64_t num_layers, int64_t num_slots, int64_t h_kv, int64_t d, int64_t d_v, DType dtype, Device device,
            float k_scale = 1.f, float v_scale = 1.f);

  TensorView k(int64_t layer) const;                       // [num_slots, h_kv, d]
  TensorView v(int64_t layer) const;                       // [num_slots, h_kv, d_v]
  TensorView k_paged(int64_t layer, int page_size) const;  // [num_pages, page_size, h_kv, d]
  TensorView v_paged(int64_t layer, int page_size) const;  // [num_pages, page_size, h_kv, d_v]

  float k_scale(int64_t layer) const;
  float v_scale(int64_t layer) const;
  void set_scales(int64_t layer, float k_scale, float v_scale);  // finite and > 0

  int64_t num_layers() const { return num_layers_; }
  int64_t num_slots() const { return num_slots_; }
  int64_t h_kv() const { return h_kv_; }
  int64_t head_dim() const { return d_; }
  int64_t head_dim_v() const { return d_v_; }
  DType dtype() const { return dtype_; }
  Device device() const { return k_buf_.device(); }
  std::size_t bytes() const { return k_buf_.bytes() + v_buf_.bytes(); }

 private:
  int64_t num_layers_, num_slots_, h_kv_, d_, d_v_;
  DType dtype_;
  Buffer k_buf_, v_buf_;  // [num_layers, num_slots, h_kv, d | d_v]
  std::vector<float> k_scales_, v_scales_;
};

// MLA latent cache, one row per slot: bf16 [kv_c (512) | k_rope (64)] = 576 values, or the
// DeepSeek-V3.2 FP8 format of 656 bytes (cache_formats.h, Fp8MlaLayout).
enum class MlaCacheFormat : uint8_t { bf16, fp8_656 };

class MlaKvPool {
 public:
  static constexpr int64_t kLatentDim = 512, kRopeDim = 64, kRowDim = 576;

  MlaKvPool(int64_t num_layers, int64_t num_slots, MlaCacheFormat format, Device device);

  TensorView cache(int64_t layer) const;                       // [num_slots, 576] bf16 | [num_slots, 656] u8
  TensorView cache_paged(int64_t layer, int page_size) const;  // [num_pages, page_size, 576 | 656]

  MlaCacheFormat format() const { return format_; }
  int64_t row_elems() const;  // 576 or 656
  DType dtype() const { return format_ == MlaCacheFormat::bf16 ? DType::bf16 : DType::u8; }
  int64_t num_layers() const { return num_layers_; }
  int64_t num_slots() const { return num_slots_; }
  Device device() const { return buf_.device(); }
  std::size_t bytes() const { return buf_.bytes(); }

 private:
  int64_t num_layers_, num_slots_;
  MlaCacheFormat format_;
  Buffer buf_;
};

// Indexer keys (DeepSeek-V3.2 lightning indexer): per page [page_size x 128 fp8 | page_size x f32
// scale] (cache_formats.h, IndexerKeyLayout). Slot s of the pool: page s / page_size.
class IndexerKeyPool {
 public:
  IndexerKeyPool(int64_t num_layers, int64_t num_pages, int page_size, Device device);

  TensorView cache(int64_t layer) const;  // [num_pages, page_size * 132] u8

  int page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t num_slots() const { return num_pages_ * page_size_; }
  int64_t num_layers() const { return num_layers_; }
  Device device() const { return buf_.device(); }
  std::size_t bytes() const { return buf_.bytes(); }

 private:
  int64_t num_layers_, num_pages_;
  int page_size_;
  Buffer buf_;
};

}  // namespace attnserve
