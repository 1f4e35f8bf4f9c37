// The portable paged-attention kernel (sm80+, mma.sync m16n8k16, cp.async pipeline).
//
// One CTA = (m-block, kv head, split, request). Its M rows are "packed" rows of one request and
// one KV head: packed row pr = q_row * group + head_in_group, so the query heads that share a KV
// head (and, for verify/extend, the query rows) form the M dimension and each K/V byte is read
// once per CTA. Keys stream through shared memory in tiles of 64 with a `stages`-deep cp.async
// pipeline; the page table is looked up per token (any page size), one tile ahead.
//
// Warps: 4. MT = 1 (<= 16 packed rows: decode, verify, deterministic mode): the 4 warps split each
// 64-key tile into 4 slices of 16 keys and combine at the end. MT = 4 (<= 64 rows: extend,
// prefill): each warp owns 16 rows and all 64 keys of a tile (FlashAttention-2 style). The code
// also supports splitting output columns across warps (DH), unused since 32-key tiles lost.
// Online softmax in base 2.
//
// Head dims: q/k D and v DV (192/128 for DeepSeek's non-absorbed MLA). K and V rows share one
// shared-memory width, row_elems(D, DV) (config.h), so one thread mapping loads both; a thread's
// chunk past a tensor's own head dim is not loaded (d 96: 12 of 16 chunks) and never read.
//
// FP8 KV: the e4m3 tile lands in shared memory as bytes and is widened to T (exact) before the
// tensor cores read it; k_descale scales the scores and v_descale the output. DIRECT (Plan::fp8_direct,
// 16-row tiles, d = d_v in {64, 128}): no widening pass; the MMA operands come from ldmatrix reads of the raw
// (swizzled) e4m3 tiles, converted to f16 in registers, both products on f16 tensor cores (fp8_operands.cuh).
//
// Tried and measured (bench/NOTES.md, session 2): one sm_90 bulk copy (cp.async.bulk on an mbarrier)
// per token row instead of 16-byte cp.async chunks ran decode at 3107 GB/s against 3915: removed.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/attention/sm80/attention_sm80.h"
#include "cuda/attention/sm80/fp8_operands.cuh"
#include "cuda/common/masking.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"

namespace attnserve::cuda::attn {

constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }

template <typename T, int D, int DV, bool FP8, int MT>
struct Traits {
  static constexpr int kRows = 16 * MT;        // packed rows per CTA
  static constexpr int kTile = tile_keys(MT);  // keys per pipeline stage
  static constexpr int KS = MT == 1 ? 4 : 1;   // key slices per tile
  static constexpr int DH = 1;                 // output-column parts
  static constexpr int NKW = kTile / KS;       // keys per warp per tile (16 or 64)
  static constexpr int DW = DV / DH;           // output columns per warp
  static_assert(MT * KS * DH == 4, "4 warps");
  static constexpr int kP = row_elems(D, DV);  // elements of a Q, K or V row in shared memory
  static constexpr int kRowBytes = kP * 2;     // a T row in shared memory
  static constexpr int kQChunks = D / 8;       // 16-byte chunks of a q row
  static constexpr int kRawRowBytes = FP8 ? kP : kP * 2;
  static constexpr int kRawChunks = kRawRowBytes / 16;
  static constexpr int kKRawChunks = (FP8 ? D : D * 2) / 16;  // chunks a K row has (the rest: padding)
  static constexpr int kVRawChunks = (FP8 ? DV : DV * 2) / 16;
  static constexpr int kRawTileBytes = kTile * kRawRowBytes;
  static constexpr int kLoadStep = kThreads / kRawChunks;   // tile rows covered per pass
  static constexpr int kRowsPerThread = kTile / kLoadStep;  // tile rows each thread loads
  static constexpr int kLoadStepLog = ilog2(kLoadStep), kRowsPerThreadLog = ilog2(kRowsPerThread);
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kConvBytes = FP8 ? 2 * kTile * kRowBytes : 0;
  static constexpr bool kQInRegs = D <= 128;
  static constexpr int kOStride = DV + 8;  // f32 row stride of the epilogue buffer (bank spread)
  static_assert(kThreads % kRawChunks == 0 && kTile % kLoadStep == 0, "tile load mapping");
  static_assert(kRowsPerThread >= 2 && kRowsPerThread <= 16 && (1 << kRowsPerThreadLog) == kRowsPerThread,
                "page runs: 2..16 rows per thread, a power of two");
  static_assert(D % 16 == 0 && DV % 16 == 0, "head dims must be multiples of 16");
};

// Byte offset of 16-byte chunk `c` of row `r` in a swizzled T tile (rows of D*2 bytes): XOR of the
// chunk with the row's low 3 bits keeps ldmatrix's 8-row reads on distinct banks.
template <int ROW_BYTES>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return uint32_t(r * ROW_BYTES + ((c ^ (r & 7)) << 4));
}

// A pointer as a 64-bit value the compiler cannot split or re-associate (one register pair: the lean kernel's
// row addresses become one IMAD.WIDE.U32 off it).
__device__ __forceinline__ uint64_t opaque_address(const char* ptr) {
  uint64_t x = reinterpret_cast<uint64_t>(ptr);
  asm("mov.b64 %0, %0;\n" : "+l"(x));
  return x;
}

template <typename T>
__device__ __forceinline__ uint32_t widen_fp8x2(uint16_t two) {
  const float2 f = fp8x2_to_float2(two);
  return ptx::pack2<T>(f.x, f.y);  // exact: every e4m3 value is representable in bf16 and f16
}

// MIN_CTAS: the CTAs per SM the register allocation must allow (__launch_bounds__); 3 caps MT = 1
// at d <= 128 to 168 registers so three 2-stage CTAs (12 warps) share an SM (Plan::ctas_per_sm).
// RC (Plan::ring_counters, MT = 1 only): the ring slots of the K/V stages and the page-id ring are
// counters carried through the key loop instead of `tile % stages` / `tile % ring` (runtime divisors:
// ~20 SASS instructions each, four per tile), and the page-id prefetch's page indices are shifts on
// power-of-two pages instead of two integer divisions; the wait takes compares instead of a jump table;
// and the page-run / lane-page addresses are 32 x 32 -> 64-bit products (a page's bytes fit 32 bits:
// ring_counters_apply); O's rescale is skipped when no row of the warp raised its max (every factor
// exactly 1); FP8's widening loop is unrolled. Same slots, same loads, same arithmetic: the bits equal
// RC = false's (tested).
// DIRECT (FP8 only, Plan::fp8_direct): S and P V read the raw e4m3 tiles (swizzled by fp8_swz) as f16 operands.
// LEAN (DIRECT and RC only, Plan::fp8_direct == 2; opt-in, not the default's bits): fewer fixed instructions per
// tile: the score scale folded into the exponent's FFMA (2^(s * sc - m), m in base 2: one FFMA a score instead of
// FMUL + FADD; the max taken on the raw scores, exact for sc > 0), the softcap (or a score scale <= 0 / NaN) as one
// uniform branch a tile that makes base-2 scores first (sc = 1 there: the direct kernel's bits), the mask as a real
// branch (only edge tiles pay it), and the lane-page loads with one IMAD.WIDE.U32 per row and tensor and the
// zero fill as cp.async's ignore-src predicate.
template <typename T, int D, int DV, bool FP8, int MT, int MIN_CTAS, bool RC, bool DIRECT = false, bool LEAN = false>
__global__ void __launch_bounds__(kThreads, MIN_CTAS) paged_attention_kernel(const Params p) {
  static_assert(!RC || MT == 1, "ring counters: decode / verify tiles only");
  static_assert(!DIRECT || (FP8 && supports_fp8_direct(D, DV, MT)), "direct FP8 operands: see supports_fp8_direct");
  static_assert(!LEAN || (DIRECT && RC), "lean key loop: direct FP8 operands with ring counters");
  using Tr = Traits<T, D, DV, FP8, MT>;
  static_assert(!DIRECT || (Tr::kQInRegs && Tr::NKW == 16 && Tr::kP == D), "direct: Q in registers, 16-key slices");
  // The raw K/V tile's byte offset of chunk c of row r (DIRECT: swizzled for its ldmatrix reads).
  auto raw_off = [](int r, int c) {
    if constexpr (!FP8) return swz<Tr::kRawRowBytes>(r, c);
    else if constexpr (DIRECT) return fp8_swz<Tr::kRawRowBytes>(r, c);
    else return uint32_t(r * Tr::kRawRowBytes + c * 16);
  };
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mb = blockIdx.x;
  const int hk = blockIdx.y % p.h_kv, split = blockIdx.y / p.h_kv;
  const int r = blockIdx.z;

  const int q_start = p.cu_seqlens_q[r];
  const int q_len = p.cu_seqlens_q[r + 1] - q_start;
  const int k_len = p.cache_seqlens[r];
  const int rows_total = q_len * p.group;
  const int row0 = mb * Tr::kRows;
  if (row0 >= rows_total) return;  // uniform: this m-block has no rows for this request

  // ---- keys this CTA visits: the rows' union, cut to this split; tiles start at multiples of 64.
  int blo, bhi, unused;
  {
    const int qr_first = row0 / p.group;
    const int qr_last = (min(row0 + Tr::kRows, rows_total) - 1) / p.group;
    row_bounds(p, qr_first, q_len, k_len, blo, unused);
    row_bounds(p, qr_last, q_len, k_len, unused, bhi);
  }
  int k_begin, k_end;
  if (p.split_keys > 0) {
    k_begin = max(split * p.split_keys, blo & ~(Tr::kTile - 1));
    k_end = min((split + 1) * p.split_keys, bhi + 1);
  } else {
    const int start = blo & ~(Tr::kTile - 1);
    const int span = bhi + 1 - start;
    const int per = span > 0 ? ((span + p.num_splits - 1) / p.num_splits + Tr::kTile - 1) & ~(Tr::kTile - 1) : 0;
    k_begin = start + split * per;
    k_end = min(k_begin + per, bhi + 1);
  }
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + Tr::kTile - 1) / Tr::kTile : 0;

  // ---- shared memory
  char* sQ = smem;
  char* sKV = smem + Tr::kQBytes;  // stages x {K, V} raw tiles
  char* sConv = sKV + p.stages * 2 * Tr::kRawTileBytes;
  // DIRECT: no conversion tiles, the padding (if any) that makes room for the epilogue's sO (config.h)
  const int conv = DIRECT ? int(conv_bytes(Tr::kP, true, MT, p.stages, true)) : Tr::kConvBytes;
  float* sStat = reinterpret_cast<float*>(sConv + conv);
  float* sM = sStat;               // [4][64]
  float* sL = sStat + 256;         // [4][64]
  float* sRowScale = sStat + 512;  // [64]
  float* sRowLse = sStat + 576;    // [64]

  // ---- Q: packed rows -> swizzled tile (zeros for rows past the request)
  for (int idx = tid; idx < Tr::kRows * Tr::kQChunks; idx += kThreads) {
    const int row = idx / Tr::kQChunks, ch = idx % Tr::kQChunks;
    const int pr = row0 + row;
    const bool valid = pr < rows_total;
    const char* src = p.q;
    if (valid) {
      const int qr = pr / p.group, h = hk * p.group + (pr - qr * p.group);
      src = p.q + ((int64_t(q_start + qr) * p.q_st + int64_t(h) * p.q_sh) * 2 + ch * 16);
    }
    ptx::cp_async_16(ptx::smem_addr(sQ + swz<Tr::kRowBytes>(row, ch)), src, valid ? 16 : 0);
  }
  ptx::cp_async_commit();

  // ---- Page ids: cp.async'ed into a shared ring `stages` tiles ahead of their K/V loads, so no
  // thread ever waits on a page-table read (measured: register prefetch one tile ahead left
  // page_size 1 at 2.0 TB/s; the reads queue behind the bulk traffic). 2 * stages entries: the
  // prologue reads slots with no barrier before the loop's first writes (racecheck).
  const int ring = 2 * p.stages;
  int* sPage = reinterpret_cast<int*>(sStat + 640);  // [ring][Tr::kTile]
  const int* pt = p.page_table + int64_t(r) * p.pt_st;
  // slot (RC): the ring entry of `tile`, tile % ring.
  auto issue_pages = [&](int tile, int slot) {
    if (tile >= n_tiles) return;
    const int j0 = k_begin + tile * Tr::kTile;
    const bool shift = RC && p.page_shift >= 0;  // j0 >= 0: shifts equal the divisions
    const int p0 = shift ? j0 >> p.page_shift : j0 / p.page_size,
              p1 = shift ? (min(j0 + Tr::kTile, k_end) - 1) >> p.page_shift
                         : (min(j0 + Tr::kTile, k_end) - 1) / p.page_size;
    if (tid <= p1 - p0) {
      const int pi = p0 + tid;
      const bool ok = pi < p.max_pages;
      ptx::cp_async_4(ptx::smem_addr(sPage + (RC ? slot : tile % ring) * Tr::kTile + tid), pt + (ok ? pi : 0),
                      ok ? 4 : 0);
    }
  };

  // ---- K/V tile loads: thread owns chunk `lch` of rows lrow0 + i * kLoadStep.
  const int lch = tid % Tr::kRawChunks, lrow0 = tid / Tr::kRawChunks;
  // RC: a page's bytes (page_size * token stride) fit 32 bits (ring_counters_apply(), checked at launch;
  // any real cache: 16 slots x 8 heads x 256 B = 32 KB), so a row's address is one 32 x 32 -> 64-bit
  // multiply-add (IMAD.WIDE.U32) of the page id (runs) or slot (lane page ids) onto a 64-bit base instead
  // of a signed 64-bit product and add; slots < 2^31 (can_implement): the same addresses.
  constexpr bool narrow = RC;
  const uint32_t k_stok32 = uint32_t(p.k_stok), v_stok32 = uint32_t(p.v_stok);
  const uint32_t k_page32 = uint32_t(p.page_size) * k_stok32, v_page32 = uint32_t(p.page_size) * v_stok32;
  // This thread's first row in a page, a 32-bit offset (lrow0 < kLoadStep slots: < a page's bytes).
  const uint32_t k_lane32 = uint32_t(lrow0) * k_stok32, v_lane32 = uint32_t(lrow0) * v_stok32;
  // LEAN: this thread's chunk of head hk as one opaque 64-bit base (the compiler otherwise keeps it in two parts
  // and adds both to every row's slot product: 3 instructions a row and tensor instead of one IMAD.WIDE.U32).
  const uint64_t k_chunk64 = LEAN ? opaque_address(p.k + int64_t(hk) * p.k_sh + lch * 16) : 0;
  const uint64_t v_chunk64 = LEAN ? opaque_address(p.v + int64_t(hk) * p.v_sh + lch * 16) : 0;
  // Whether this thread's chunk is part of a K / V row (compile-time true when no row is padded).
  const bool k_chunk = Tr::kKRawChunks == Tr::kRawChunks || lch < Tr::kKRawChunks;
  const bool v_chunk = Tr::kVRawChunks == Tr::kRawChunks || lch < Tr::kVRawChunks;
  // stage (RC): tile % stages; slot (RC): its page ids' ring entry, tile % ring.
  auto issue = [&](int tile, int stage, int slot) {
    if constexpr (!RC) {
      stage = tile % p.stages;
      slot = tile % ring;
    }
    char* dK = sKV + stage * 2 * Tr::kRawTileBytes;
    char* dV = dK + Tr::kRawTileBytes;
    const char* gK = p.k + int64_t(hk) * p.k_sh + lch * 16;
    const char* gV = p.v + int64_t(hk) * p.v_sh + lch * 16;
    const int j0 = k_begin + tile * Tr::kTile;
    const int* pages = sPage + slot * Tr::kTile;
    auto load_row = [&](int i, int j, int pi, int in_page, int p0) {
      const int row = lrow0 + i * Tr::kLoadStep;
      int slot = -1;
      if (j < k_end && pi < p.max_pages) {
        const int page = pages[pi - p0];
        if (page >= 0 && page < p.num_pages) slot = page * p.page_size + in_page;
      }
      const uint32_t off = raw_off(row, lch);
      const int bytes = slot >= 0 ? 16 : 0;
      const int64_t s = slot >= 0 ? slot : 0;
      if (k_chunk) ptx::cp_async_16(ptx::smem_addr(dK + off), gK + s * p.k_stok, bytes);
      if (v_chunk) ptx::cp_async_16(ptx::smem_addr(dV + off), gV + s * p.v_stok, bytes);
    };
    // Decode is bound by instructions per tile (ncu: issue-bound at 8 warps/SM): power-of-two
    // page sizes use shifts (measured +30% over integer division on one H200). The branch is
    // taken once per tile, outside the unrolled row loop (a per-row select measured slower).
    const int sh = p.page_shift;
    // Page runs: a thread's rows are kLoadStep apart, so a page of ps >= 2 * kLoadStep slots holds
    // RUN = ps / kLoadStep of them (all of them when ps >= kTile). One page-table entry, one bounds
    // check and one 64-bit slot product per run instead of per row; the rows of a run are constant
    // offsets from its first.
    if (p.page_runs && sh >= Tr::kLoadStepLog + 1) {
      const int run_log = min(sh - Tr::kLoadStepLog, Tr::kRowsPerThreadLog);
      auto runs = [&](auto run_c) {
        constexpr int RUN = decltype(run_c)::value;
        const int off0 = j0 & (p.page_size - 1);  // > 0 only when one page holds several tiles
        const int p0 = j0 >> sh;
        const int64_t k_step = int64_t(Tr::kLoadStep) * p.k_stok, v_step = int64_t(Tr::kLoadStep) * p.v_stok;
        // narrow: this tile's offset in its page once (off0 < page_size), then per run one IMAD.WIDE.U32
        // per tensor (the same addresses).
        const char* k_base = gK + (k_lane32 + uint32_t(off0) * k_stok32);  // off0 + lrow0 < page_size
        const char* v_base = gV + (v_lane32 + uint32_t(off0) * v_stok32);
#pragma unroll
        for (int g = 0; g < Tr::kRowsPerThread / RUN; ++g) {
          const int page = pages[g];  // tile-aligned j0: run g lies in page p0 + g (p0 alone if RUN is all rows)
          const char* k_row;
          const char* v_row;
          bool page_ok;
          if (narrow) {
            page_ok = p0 + g < p.max_pages && uint32_t(page) < uint32_t(p.num_pages);  // 0 <= page < num_pages
            const uint32_t pg = page_ok ? uint32_t(page) : 0u;
            k_row = k_base + uint64_t(pg) * k_page32;
            v_row = v_base + uint64_t(pg) * v_page32;
          } else {
            page_ok = p0 + g < p.max_pages && page >= 0 && page < p.num_pages;
            const int64_t slot0 = int64_t(page_ok ? page : 0) * p.page_size + off0 + lrow0;
            k_row = gK + slot0 * p.k_stok;
            v_row = gV + slot0 * p.v_stok;
          }
#pragma unroll
          for (int r = 0; r < RUN; ++r) {
            const int i = g * RUN + r, row = lrow0 + i * Tr::kLoadStep;
            const int bytes = page_ok && j0 + row < k_end ? 16 : 0;
            const uint32_t off = raw_off(row, lch);
            if (k_chunk) ptx::cp_async_16(ptx::smem_addr(dK + off), k_row + r * k_step, bytes);
            if (v_chunk) ptx::cp_async_16(ptx::smem_addr(dV + off), v_row + r * v_step, bytes);
          }
        }
      };
      if (run_log == 1) runs(std::integral_constant<int, 2>{});
      else if (run_log == 2) runs(std::integral_constant<int, (Tr::kRowsPerThread >= 4 ? 4 : 2)>{});
      else if (run_log == 3) runs(std::integral_constant<int, (Tr::kRowsPerThread >= 8 ? 8 : 2)>{});
      else runs(std::integral_constant<int, (Tr::kRowsPerThread >= 16 ? 16 : 2)>{});
    } else if (MT == 1 && p.lane_pages) {
      // Lane page ids (decode / verify tiles on pages too small for runs, any page size; MT = 4 keeps
      // the per-row path: its d 256 build spills already, and more with this one): the kRawChunks lanes
      // that load one row's chunks are an aligned segment of the warp and share their kRowsPerThread
      // (= segment / 2) rows, so lane `mine` of a segment looks up row `mine` alone (page id, bounds,
      // slot: once per tile instead of once per row in every lane) and each lane takes its rows' slots
      // by shuffle. Same slots and byte counts as the per-row path below: identical bits (tested).
      static_assert(Tr::kRawChunks <= 32 && 2 * Tr::kRowsPerThread == Tr::kRawChunks, "a row group is half a segment");
      const int mine = lane & (Tr::kRowsPerThread - 1);
      const int j = j0 + lrow0 + mine * Tr::kLoadStep;
      const int pi = sh >= 0 ? j >> sh : j / p.page_size;
      const int p0 = sh >= 0 ? j0 >> sh : j0 / p.page_size;
      int slot = -1;
      if (j < k_end && pi < p.max_pages) {
        const int page = pages[pi - p0];
        if (page >= 0 && page < p.num_pages) slot = page * p.page_size + (j - pi * p.page_size);
      }
#pragma unroll
      for (int i = 0; i < Tr::kRowsPerThread; ++i) {
        const int row_slot = __shfl_sync(0xffffffffu, slot, i, Tr::kRawChunks);
        const int row = lrow0 + i * Tr::kLoadStep;
        const uint32_t off = raw_off(row, lch);
        const int bytes = row_slot >= 0 ? 16 : 0;
        const uint64_t s = uint32_t(max(row_slot, 0));  // zero-extended: no sign word in the products
        if constexpr (LEAN) {                           // the same slots and zero fills
          const uint32_t s32 = uint32_t(max(row_slot, 0));
          if (k_chunk)
            ptx::cp_async_16_unless_negative(ptx::smem_addr(dK + off),
                                             reinterpret_cast<const char*>(k_chunk64 + uint64_t(s32) * k_stok32),
                                             row_slot);
          if (v_chunk)
            ptx::cp_async_16_unless_negative(ptx::smem_addr(dV + off),
                                             reinterpret_cast<const char*>(v_chunk64 + uint64_t(s32) * v_stok32),
                                             row_slot);
        } else if (narrow) {  // one IMAD.WIDE.U32 per row and tensor
          if (k_chunk) ptx::cp_async_16(ptx::smem_addr(dK + off), gK + s * k_stok32, bytes);
          if (v_chunk) ptx::cp_async_16(ptx::smem_addr(dV + off), gV + s * v_stok32, bytes);
        } else {
          if (k_chunk) ptx::cp_async_16(ptx::smem_addr(dK + off), gK + int64_t(s) * p.k_stok, bytes);
          if (v_chunk) ptx::cp_async_16(ptx::smem_addr(dV + off), gV + int64_t(s) * p.v_stok, bytes);
        }
      }
    } else if (sh >= 0) {
      const int p0 = j0 >> sh, mask = (1 << sh) - 1;
#pragma unroll
      for (int i = 0; i < Tr::kRowsPerThread; ++i) {
        const int j = j0 + lrow0 + i * Tr::kLoadStep;
        load_row(i, j, j >> sh, j & mask, p0);
      }
    } else {
      const int p0 = j0 / p.page_size;
#pragma unroll
      for (int i = 0; i < Tr::kRowsPerThread; ++i) {
        const int j = j0 + lrow0 + i * Tr::kLoadStep;
        const int pi = j / p.page_size;
        load_row(i, j, pi, j - pi * p.page_size, p0);
      }
    }
  };

  // ---- per-thread rows: warp owns m-tile mt and key slice ks; rows rr0 = mt*16 + lane/4, rr0 + 8.
  const int mt = warp % MT, ks = (warp / MT) % Tr::KS, dh = warp / (MT * Tr::KS);
  const int rr0 = mt * 16 + (lane >> 2), rr1 = rr0 + 8;
  int lo0, hi0, lo1, hi1;
  {
    const int pr0 = row0 + rr0, pr1 = row0 + rr1;
    if (pr0 < rows_total) row_bounds(p, pr0 / p.group, q_len, k_len, lo0, hi0);
    else {
      lo0 = 0;
      hi0 = -1;
    }
    if (pr1 < rows_total) row_bounds(p, pr1 / p.group, q_len, k_len, lo1, hi1);
    else {
      lo1 = 0;
      hi1 = -1;
    }
    hi0 = min(hi0, k_end - 1);
    hi1 = min(hi1, k_end - 1);
  }
  const int lo_max = max(lo0, lo1), hi_min = min(hi0, hi1);

  const float kds = (p.k_descale ? p.k_descale[int64_t(r) * p.kds_sb + int64_t(hk) * p.kds_sh] : 1.f) *
                    (p.q_descale ? p.q_descale[int64_t(r) * p.qds_sb + int64_t(hk) * p.qds_sh] : 1.f);
  const float vds = p.v_descale ? p.v_descale[int64_t(r) * p.vds_sb + int64_t(hk) * p.vds_sh] : 1.f;
  const float s_log2 = p.scale_log2 * kds;  // plain scores
  const float s_cap_in = p.softcap > 0.f ? p.scale_log2 * kds / (p.softcap * 1.4426950408889634f) : 0.f;
  const float s_cap_out = p.softcap * 1.4426950408889634f;  // softcap * log2(e)

  float o[Tr::DW / 8][4];
#pragma unroll
  for (int i = 0; i < Tr::DW / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  uint32_t qf[Tr::kQInRegs ? D / 16 : 1][4];

  // ---- pipeline prologue: group 0 = Q + page ids of the first `stages` tiles (waited for here);
  // then each group = one K/V tile + the page ids of the tile `stages` further on.
  for (int s = 0; s < p.stages; ++s) issue_pages(s, s);  // s < ring
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  const uint32_t sQa = ptx::smem_addr(sQ);
  if constexpr (DIRECT) {  // f16 fragments in the K fragments' d order (fp8_operands.cuh)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) q_fragments<T, Tr::kRowBytes>(sQ, mt * 16, kk, lane, qf[kk]);
  } else if constexpr (Tr::kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ptx::ldmatrix_x4(sQa + swz<Tr::kRowBytes>(mt * 16 + (lane & 15), 2 * kk + (lane >> 4)), qf[kk][0], qf[kk][1],
                       qf[kk][2], qf[kk][3]);
  }
  for (int s = 0; s < p.stages - 1; ++s) {
    if (s < n_tiles) issue(s, s, s);  // s < stages <= ring
    issue_pages(s + p.stages, s + p.stages);
    ptx::cp_async_commit();
  }

  // RC's counters at tile t: cs = t % stages (the stage read), is = (t + stages - 1) % stages (the
  // stage refilled), rs = (t + stages - 1) % ring (its page ids' slot; the prefetch of tile
  // t + 2 * stages - 1 takes the other half of the ring, rs +- stages).
  // LEAN: scores stay raw and the exponent's FFMA scales them (sc = s_log2), except with a softcap or a scale
  // the max of raw scores cannot take (<= 0, NaN): there one uniform branch a tile makes base-2 scores (sc = 1).
  const bool pre_scale = !LEAN || p.softcap > 0.f || !(s_log2 > 0.f);
  const float sc = pre_scale ? 1.f : s_log2;
  int cs = 0, is = p.stages - 1, rs = p.stages - 1;
  for (int t = 0; t < n_tiles; ++t) {
    {
      const int nt = t + p.stages - 1;
      if (nt < n_tiles) issue(nt, is, rs);
      issue_pages(nt + p.stages, rs < p.stages ? rs + p.stages : rs - p.stages);
      ptx::cp_async_commit();
    }
    if constexpr (LEAN) {  // the default depth (4 stages) first: one compare
      if (p.stages == 4) ptx::cp_async_wait<3>();
      else ptx::cp_async_wait_by_compare(p.stages - 1);
    } else if constexpr (RC) ptx::cp_async_wait_by_compare(p.stages - 1);
    else ptx::cp_async_wait_dyn(p.stages - 1);
    __syncthreads();

    const char* tK = sKV + (RC ? cs : t % p.stages) * 2 * Tr::kRawTileBytes;
    const char* tV = tK + Tr::kRawTileBytes;
    if constexpr (FP8 && !DIRECT) {  // widen e4m3 -> T into the swizzled conversion tiles
      char* cK = sConv;
      char* cV = sConv + Tr::kTile * Tr::kRowBytes;
      // One 16-byte chunk (row, c) of tensor `which`: 16 e4m3 -> 16 T (exact), two swizzled 16-byte stores.
      auto widen_chunk = [&](int which, int row, int c) {
        const uint4 raw = *reinterpret_cast<const uint4*>((which ? tV : tK) + row * Tr::kRawRowBytes + c * 16);
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
        uint32_t o8[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          o8[2 * i] = widen_fp8x2<T>(uint16_t(w[i] & 0xffffu));
          o8[2 * i + 1] = widen_fp8x2<T>(uint16_t(w[i] >> 16));
        }
        char* dst = which ? cV : cK;
        *reinterpret_cast<uint4*>(dst + swz<Tr::kRowBytes>(row, 2 * c)) = make_uint4(o8[0], o8[1], o8[2], o8[3]);
        *reinterpret_cast<uint4*>(dst + swz<Tr::kRowBytes>(row, 2 * c + 1)) = make_uint4(o8[4], o8[5], o8[6], o8[7]);
      };
      if constexpr (RC) {
        // The default loop's chunks per thread (idx = tid + i * kThreads), unrolled: c = tid % kRawChunks and
        // the rows step by kThreads / kRawChunks (a multiple of 8: the swizzle's XOR term is the thread's), so
        // the source and swizzled destination offsets are immediates off one base (~25 fewer instructions a
        // chunk, 8 chunks a tile at d 128).
        constexpr int kRowStep = kThreads / Tr::kRawChunks, kPerTensor = Tr::kTile / kRowStep;
        static_assert(kRowStep % 8 == 0 && Tr::kTile % kRowStep == 0, "widening: whole passes, thread-constant XOR");
#pragma unroll
        for (int which = 0; which < 2; ++which)
#pragma unroll
          for (int k = 0; k < kPerTensor; ++k) widen_chunk(which, lrow0 + k * kRowStep, lch);
      }
      for (int idx = tid; !RC && idx < 2 * Tr::kTile * Tr::kRawChunks; idx += kThreads) {  // RC: unrolled above
        const int which = idx / (Tr::kTile * Tr::kRawChunks);
        const int rem = idx - which * (Tr::kTile * Tr::kRawChunks);
        widen_chunk(which, rem / Tr::kRawChunks, rem % Tr::kRawChunks);
      }
      __syncthreads();
      tK = cK;
      tV = cV;
    }
    const uint32_t sKa = ptx::smem_addr(tK), sVa = ptx::smem_addr(tV);

    // S = Q K^T for this warp's 16 rows x NKW keys.
    float s[Tr::NKW / 8][4];
#pragma unroll
    for (int i = 0; i < Tr::NKW / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    if constexpr (DIRECT) {
      // Per pair of 16-byte chunks: one ldmatrix x4 = {keys 0-7, 8-15} x {chunk 2 c2, 2 c2 + 1} of the slice.
      const int krow = ks * Tr::NKW + (lane & 15);
#pragma unroll
      for (int c2 = 0; c2 < D / 32; ++c2) {
        uint32_t w[4], b[4][2];
        ptx::ldmatrix_x4(sKa + fp8_swz<Tr::kRawRowBytes>(krow, 2 * c2 + (lane >> 4)), w[0], w[1], w[2], w[3]);
#pragma unroll
        for (int m = 0; m < 4; ++m) k_fragment(w[m], b[m][0], b[m][1]);
        ptx::mma_16816<__half>(s[0], qf[2 * c2], b[0][0], b[0][1]);
        ptx::mma_16816<__half>(s[1], qf[2 * c2], b[1][0], b[1][1]);
        ptx::mma_16816<__half>(s[0], qf[2 * c2 + 1], b[2][0], b[2][1]);
        ptx::mma_16816<__half>(s[1], qf[2 * c2 + 1], b[3][0], b[3][1]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < (DIRECT ? 0 : D / 16); ++kk) {
      uint32_t a[4];
      if constexpr (Tr::kQInRegs) {
        a[0] = qf[kk][0];
        a[1] = qf[kk][1];
        a[2] = qf[kk][2];
        a[3] = qf[kk][3];
      } else {
        ptx::ldmatrix_x4(sQa + swz<Tr::kRowBytes>(mt * 16 + (lane & 15), 2 * kk + (lane >> 4)), a[0], a[1], a[2], a[3]);
      }
#pragma unroll
      for (int np = 0; np < Tr::NKW / 16; ++np) {
        uint32_t b0, b1, b2, b3;
        const int krow = ks * Tr::NKW + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        ptx::ldmatrix_x4(sKa + swz<Tr::kRowBytes>(krow, 2 * kk + ((lane >> 3) & 1)), b0, b1, b2, b3);
        ptx::mma_16816<T>(s[2 * np], a, b0, b1);
        ptx::mma_16816<T>(s[2 * np + 1], a, b2, b3);
      }
    }

    // Scores in base 2, masked; online softmax.
    const int kbase = k_begin + t * Tr::kTile + ks * Tr::NKW;
    const bool need_mask = kbase < lo_max || kbase + Tr::NKW - 1 > hi_min;
    if constexpr (LEAN) {
      if (pre_scale) {  // uniform: softcap, or a scale the fold cannot take (sc = 1)
#pragma unroll
        for (int nt = 0; nt < Tr::NKW / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float x = s[nt][e];
            s[nt][e] = p.softcap > 0.f ? s_cap_out * tanhf(x * s_cap_in) : x * s_log2;
          }
      }
      // Uniform in the warp: only the edge tiles of a row's key range. The empty asm keeps ptxas from
      // if-converting the block (predicated, its ~4 instructions a score would issue on every tile).
      if (need_mask) {
        asm volatile("" ::: "memory");
#pragma unroll
        for (int nt = 0; nt < Tr::NKW / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = kbase + nt * 8 + 2 * (lane & 3) + (e & 1);
            const bool vis = e < 2 ? (j >= lo0 && j <= hi0) : (j >= lo1 && j <= hi1);
            s[nt][e] = vis ? s[nt][e] : -INFINITY;
          }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < Tr::NKW / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nt][e];
          x = p.softcap > 0.f ? s_cap_out * tanhf(x * s_cap_in) : x * s_log2;
          if (need_mask) {
            const int j = kbase + nt * 8 + 2 * (lane & 3) + (e & 1);
            const bool vis = e < 2 ? (j >= lo0 && j <= hi0) : (j >= lo1 && j <= hi1);
            x = vis ? x : -INFINITY;
          }
          s[nt][e] = x;
        }
      }
    }
    // LEAN: the first pair seeds the max (no max with -inf: the same value for every score but NaN).
    float mx0 = LEAN ? fmaxf(s[0][0], s[0][1]) : -INFINITY, mx1 = LEAN ? fmaxf(s[0][2], s[0][3]) : -INFINITY;
#pragma unroll
    for (int nt = LEAN ? 1 : 0; nt < Tr::NKW / 8; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = ptx::quad_max(mx0);
    mx1 = ptx::quad_max(mx1);
    if constexpr (LEAN) {  // the raw maxima in base 2 (sc > 0: the max of the scaled scores; -inf stays -inf)
      mx0 *= sc;
      mx1 *= sc;
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float b0 = mn0 == -INFINITY ? 0.f : mn0, b1 = mn1 == -INFINITY ? 0.f : mn1;
    // DIRECT: 2^x by the SFU alone (ex2.approx.ftz, ~2 ulp): its P are rounded to f16, which flushes everything
    // ftz flushes (< 2^-126) and more; the default keeps exp2f (its bits).
    auto exp2_ = [](float x) {
      if constexpr (DIRECT) {
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
        return y;
      } else {
        return exp2f(x);
      }
    };
    const float al0 = exp2_(m0 - b0), al1 = exp2_(m1 - b1);
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.f, ps1 = 0.f;  // LEAN: no 0 + first pair (2^x >= +0: the same sums)
    // The exponent's argument: the base-2 score less the row's max (LEAN: one FFMA, sc = 1 gives the FADD's bits).
    auto arg = [&](float x, float b) {
      if constexpr (LEAN) return fmaf(x, sc, -b);
      else return x - b;
    };
#pragma unroll
    for (int nt = 0; nt < Tr::NKW / 8; ++nt) {
      s[nt][0] = exp2_(arg(s[nt][0], b0));
      s[nt][1] = exp2_(arg(s[nt][1], b0));
      s[nt][2] = exp2_(arg(s[nt][2], b1));
      s[nt][3] = exp2_(arg(s[nt][3], b1));
      ps0 = LEAN && nt == 0 ? s[0][0] + s[0][1] : ps0 + (s[nt][0] + s[nt][1]);
      ps1 = LEAN && nt == 0 ? s[0][2] + s[0][3] : ps1 + (s[nt][2] + s[nt][3]);
    }
    l0 = l0 * al0 + ps0;
    l1 = l1 * al1 + ps1;
    // RC: no row of the warp raised its max, so every factor is exactly 1 (exp2f(0)) and the rescale
    // would leave O's bits as they are: skip its DV / 2 multiplies (a warp-uniform branch; after the
    // first tiles most tiles raise no max).
    if (!RC || __any_sync(0xffffffffu, al0 != 1.f || al1 != 1.f)) {
#pragma unroll
      for (int i = 0; i < Tr::DW / 8; ++i) {
        o[i][0] *= al0;
        o[i][1] *= al0;
        o[i][2] *= al1;
        o[i][3] *= al1;
      }
    }

    // O += P V
    if constexpr (DIRECT) {  // P in f16; o[2c] / o[2c + 1]: the even / odd columns of chunk c (fp8_operands.cuh)
      uint32_t a[4];
      a[0] = ptx::pack2<__half>(s[0][0], s[0][1]);
      a[1] = ptx::pack2<__half>(s[0][2], s[0][3]);
      a[2] = ptx::pack2<__half>(s[1][0], s[1][1]);
      a[3] = ptx::pack2<__half>(s[1][2], s[1][3]);
      const int vrow = ks * Tr::NKW + (lane & 15);
#pragma unroll
      for (int c2 = 0; c2 < DV / 32; ++c2) {
        uint32_t w[4];  // {keys 0-7, keys 8-15} x {chunk 2 c2, 2 c2 + 1}
        ptx::ldmatrix_x4_trans(sVa + fp8_swz<Tr::kRawRowBytes>(vrow, 2 * c2 + (lane >> 4)), w[0], w[1], w[2], w[3]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int c = 2 * c2 + h;
          uint32_t even0, odd0, even1, odd1;
          v_pairs(w[2 * h], even0, odd0);      // keys 2t, 2t+1: b0
          v_pairs(w[2 * h + 1], even1, odd1);  // keys 2t+8, 2t+9: b1
          ptx::mma_16816<__half>(o[2 * c], a, even0, even1);
          ptx::mma_16816<__half>(o[2 * c + 1], a, odd0, odd1);
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < (DIRECT ? 0 : Tr::NKW / 16); ++kk) {
      uint32_t a[4];
      a[0] = ptx::pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = ptx::pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = ptx::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = ptx::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const int vrow = ks * Tr::NKW + kk * 16 + (lane & 15);
#pragma unroll
      for (int dp = 0; dp < Tr::DW / 16; ++dp) {
        uint32_t v0, v1, v2, v3;
        ptx::ldmatrix_x4_trans(sVa + swz<Tr::kRowBytes>(vrow, dh * (Tr::DW / 8) + 2 * dp + (lane >> 4)), v0, v1, v2,
                               v3);
        ptx::mma_16816<T>(o[2 * dp], a, v0, v1);
        ptx::mma_16816<T>(o[2 * dp + 1], a, v2, v3);
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's issue
    if constexpr (RC) {
      is = cs;
      cs = cs + 1 == p.stages ? 0 : cs + 1;
      rs = rs + 1 == ring ? 0 : rs + 1;
    }
  }

  // ---- epilogue: combine the key slices of each m-tile, normalize, write out (or the split part).
  l0 = ptx::quad_sum(l0);
  l1 = ptx::quad_sum(l1);
  ptx::cp_async_wait<0>();
  __syncthreads();
  float* sO = reinterpret_cast<float*>(sKV);  // [KS][kRows][kOStride] f32 over the tile buffers
  if ((lane & 3) == 0 && dh == 0) {           // both column halves hold the same row statistics
    sM[ks * 64 + rr0] = m0;
    sL[ks * 64 + rr0] = l0;
    sM[ks * 64 + rr1] = m1;
    sL[ks * 64 + rr1] = l1;
  }
  __syncthreads();
  {
    float M0 = -INFINITY, M1 = -INFINITY;
#pragma unroll
    for (int k = 0; k < Tr::KS; ++k) {
      M0 = fmaxf(M0, sM[k * 64 + rr0]);
      M1 = fmaxf(M1, sM[k * 64 + rr1]);
    }
    const float f0 = m0 == -INFINITY ? 0.f : exp2f(m0 - M0);
    const float f1 = m1 == -INFINITY ? 0.f : exp2f(m1 - M1);
    if constexpr (DIRECT) {  // (even c0, odd c0, even c1, odd c1) = columns 16c + 4t .. 4t+3
      float* o0 = sO + (ks * Tr::kRows + rr0) * Tr::kOStride + 4 * (lane & 3);
      float* o1 = sO + (ks * Tr::kRows + rr1) * Tr::kOStride + 4 * (lane & 3);
#pragma unroll
      for (int c = 0; c < DV / 16; ++c) {
        const float* e = o[2 * c];
        const float* d = o[2 * c + 1];
        *reinterpret_cast<float4*>(o0 + 16 * c) = make_float4(e[0] * f0, d[0] * f0, e[1] * f0, d[1] * f0);
        *reinterpret_cast<float4*>(o1 + 16 * c) = make_float4(e[2] * f1, d[2] * f1, e[3] * f1, d[3] * f1);
      }
    }
    float* o0 = sO + (ks * Tr::kRows + rr0) * Tr::kOStride + dh * Tr::DW + 2 * (lane & 3);
    float* o1 = sO + (ks * Tr::kRows + rr1) * Tr::kOStride + dh * Tr::DW + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < (DIRECT ? 0 : Tr::DW / 8); ++i) {
      *reinterpret_cast<float2*>(o0 + i * 8) = make_float2(o[i][0] * f0, o[i][1] * f0);
      *reinterpret_cast<float2*>(o1 + i * 8) = make_float2(o[i][2] * f1, o[i][3] * f1);
    }
  }
  if (tid < Tr::kRows) {
    float M = -INFINITY;
#pragma unroll
    for (int k = 0; k < Tr::KS; ++k) M = fmaxf(M, sM[k * 64 + tid]);
    float L = 0.f;
#pragma unroll
    for (int k = 0; k < Tr::KS; ++k) {
      const float mk = sM[k * 64 + tid];
      if (mk != -INFINITY) L += sL[k * 64 + tid] * exp2f(mk - M);
    }
    sRowScale[tid] = L > 0.f ? (1.f / L) * vds : 0.f;
    sRowLse[tid] = L > 0.f ? (M + log2f(L)) * 0.6931471805599453f : -INFINITY;
  }
  __syncthreads();

  const bool direct = p.num_splits == 1;
  constexpr int kC4 = DV / 4;
  for (int idx = tid; idx < Tr::kRows * kC4; idx += kThreads) {
    const int row = idx / kC4, c4 = idx % kC4;
    const int pr = row0 + row;
    if (pr >= rows_total) continue;
    float4 acc = *reinterpret_cast<const float4*>(sO + row * Tr::kOStride + c4 * 4);
#pragma unroll
    for (int k = 1; k < Tr::KS; ++k) {
      const float4 v = *reinterpret_cast<const float4*>(sO + (k * Tr::kRows + row) * Tr::kOStride + c4 * 4);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const float sc = sRowScale[row];
    acc.x *= sc;
    acc.y *= sc;
    acc.z *= sc;
    acc.w *= sc;
    const int qr = pr / p.group, h = hk * p.group + (pr - qr * p.group);
    const int tok = q_start + qr;
    if (direct) {
      uint2 w;
      w.x = ptx::pack2<T>(acc.x, acc.y);
      w.y = ptx::pack2<T>(acc.z, acc.w);
      *reinterpret_cast<uint2*>(p.out + (int64_t(tok) * p.o_st + int64_t(h) * p.o_sh + c4 * 4) * 2) = w;
    } else {
      *reinterpret_cast<float4*>(p.part_o + ((int64_t(split) * p.total_q + tok) * p.h_q + h) * DV + c4 * 4) = acc;
    }
  }
  if (tid < Tr::kRows) {
    const int pr = row0 + tid;
    if (pr < rows_total) {
      const int qr = pr / p.group, h = hk * p.group + (pr - qr * p.group);
      const int tok = q_start + qr;
      if (direct) {
        if (p.lse) p.lse[int64_t(tok) * p.lse_st + int64_t(h) * p.lse_sh] = sRowLse[tid];
      } else {
        p.part_lse[(int64_t(split) * p.total_q + tok) * p.h_q + h] = sRowLse[tid];
      }
    }
  }
}

template <typename T, int D, int DV, bool FP8, int MT, int MIN_CTAS, bool RC, bool DIRECT, bool LEAN = false>
void launch_occ(const Params& p, const Config& c, int batch, cudaStream_t stream) {
  auto kernel = paged_attention_kernel<T, D, DV, FP8, MT, MIN_CTAS, RC, DIRECT, LEAN>;
  static bool configured = [&] {
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(c.m_blocks), unsigned(p.h_kv * c.num_splits), unsigned(batch));
  kernel<<<grid, kThreads, c.smem, stream>>>(p);
}

template <typename T, int D, int DV, bool FP8, int MT, bool RC, bool DIRECT = false, bool LEAN = false>
void launch_rc(const Params& p, const Config& c, int batch, cudaStream_t stream) {
  if constexpr (supports_three_ctas(row_elems(D, DV), MT)) {
    if (c.ctas_per_sm == 3) return launch_occ<T, D, DV, FP8, MT, 3, RC, DIRECT, LEAN>(p, c, batch, stream);
  }
  launch_occ<T, D, DV, FP8, MT, 1, RC, DIRECT, LEAN>(p, c, batch, stream);
}

// The ring-counter kernel's 32-bit page products: a page's bytes fit 32 bits (the plan checks the same).
inline bool ring_counters_apply(const Params& p) {
  const auto fits = [&](int64_t stok) { return stok >= 0 && int64_t(p.page_size) * stok <= int64_t(0xffffffffu); };
  return fits(p.k_stok) && fits(p.v_stok);
}

template <typename T, int D, int DV, bool FP8, int MT>
void launch(const Params& p, const Config& c, int batch, cudaStream_t stream) {
  if constexpr (FP8 && supports_fp8_direct(D, DV, MT)) {
    if (c.fp8_direct) {
      if (c.ring_counters && ring_counters_apply(p)) {
        // Plan::fp8_direct 2: the lean key loop (ring counters only; without them the direct kernel runs).
        if (c.fp8_direct == 2) return launch_rc<T, D, DV, FP8, MT, true, true, true>(p, c, batch, stream);
        return launch_rc<T, D, DV, FP8, MT, true, true>(p, c, batch, stream);
      }
      return launch_rc<T, D, DV, FP8, MT, false, true>(p, c, batch, stream);
    }
  }
  if constexpr (MT == 1) {
    if (c.ring_counters && ring_counters_apply(p)) return launch_rc<T, D, DV, FP8, MT, true>(p, c, batch, stream);
  }
  launch_rc<T, D, DV, FP8, MT, false>(p, c, batch, stream);
}

}  // namespace attnserve::cuda::attn
