// The warp-specialized Hopper lightning-indexer kernel (sm_90a FP8 wgmma; config.h: kWs*):
//   logit[row, j] = sum_h relu(q[row,h,:] . k[j,:]) * w[row,h] * k_scale[j],  -inf outside row's window
//
// CTA = 384 threads over one query group (paged: a request's next_n rows; ragged: kWsRaggedRows rows) and
// p.cols_per_cta logit columns:
//  - warpgroup 0, the producer (setmaxnreg down): q rows once, then the CTA's 64-key blocks through a ring
//    of kWsStages stages by cp.async (16-byte copies; 4-byte ones for pages that break 16-byte alignment).
//    Thread (key = tid / 2, half = tid % 2) copies half a key row per block; its page ids are loaded
//    kWsPageAhead blocks ahead, so the page-table round trips overlap each other and the copies. A stage's full
//    barrier completes when every producer thread's copies landed (cp.async.mbarrier.arrive) and its
//    validity flags were stored (a plain arrive: release of the st.shared).
//  - warpgroups 1 and 2, the math (setmaxnreg up; four of them with kWsQuad, below): block i goes to
//    warpgroup 1 + i % 2, which runs 4 wgmma m64nNk32 (its 64 keys = M, the group's rows * 64 heads = N,
//    both K-major SW128 in shared memory), frees the stage (empty barrier) as soon as its wgmmas are done, and then
//    reduces in registers while the other warpgroup's wgmmas run: relu * w over the thread's 16 heads of a row (the
//    weights sit in registers), then over the quad (one exchange + one shuffle), the key scale, the mask.
//  - kWsQuad (config.h; the paged default at next_n 2 / 4): 640 threads, math warpgroups 1..4, each scoring kWgRows <=
//  2 of the group's
//    rows (N <= 128, so 64 accumulators and 32 weights fit in 112 registers): rows 4 split over a pair of
//    warpgroups (1 + 2 l, 2 + 2 l score rows 0-1, 2-3 of block i, l = i % 2; the stage is freed when both
//    arrived), rows 2 give each warpgroup its own block (i % 4). Twice the math warps a scheduler to hide
//    each one's wgmma wait and epilogue latency.
// Keys outside the union of the group's windows are never read (zero-filled, their columns -inf); page
// ids outside the pool are skipped (-inf), as the portable kernel does. Ragged groups run in reverse
// order: in a causal prefill the last rows see the most keys, so the longest CTAs start first.
//
// Per block of 64 keys and warpgroup: wgmma 64 * N * 128 * 2 FLOP (N = 256: 512 cycles of one SM's
// tensor cores at the FP8 dense rate), epilogue ~2 instructions per accumulator (N / 2 a thread).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/wgmma.cuh"
#include "cuda/indexer/params.cuh"
#include "cuda/indexer/sm90/config.h"
#include "cuda/indexer/sm90/keys.cuh"

namespace attnserve::cuda::indexer90 {

// kMode (config.h, WsMode): how the math warpgroups overlap their wgmmas with their epilogues.
//  bit 0, ping-pong: the two warpgroups issue their wgmmas strictly in turn (named barriers 1 and 2: a
//    warpgroup issues block i only after the other issued block i - 1), so the tensor cores run one
//    warpgroup's block while the other reduces, instead of both blocks at once and then both epilogues.
//  bit 1, split (kRows even): the wgmmas of a block go in two commit groups of kRows / 2 rows each (N / 2);
//    the warpgroup reduces the first half's rows while the second half's wgmmas still run (wait_group 1).
//  bit 3, quad (kWsQuad): four math warpgroups (above); only as kWsQuadMode (batched, no split / ping-pong).
//  bit 2, batched epilogue: the rows of a commit group are reduced together — all their FMA chains, then all
//    their quad shuffles, then their stores — instead of one row after the other (each row's shuffle and
//    store latency then hides under the next row's work); the rows' windows live in registers and the key
//    scale / flag are read with ld.shared. The same arithmetic per row: the same bits as without it.
template <int kRows, bool kPaged, bool kQScale, bool kVec16, int kMode>
__global__ void __launch_bounds__(ws_threads(kMode), 1) indexer_ws_kernel(const Params p) {
#if defined(ATTNSERVE_SM90_DEVICE)
  constexpr int kS = kWsStages, kB = kWsBlockKeys;
  constexpr bool kQuad = (kMode & kWsQuad) != 0;
  static_assert(!kQuad || (kMode == kWsQuadMode && ws_quad_rows(kRows)), "quad: mode kWsQuadMode, rows 2 or 4");
  constexpr int kThreads = ws_threads(kMode);
  constexpr int kRowSplit = kQuad && kRows == 4 ? 2 : 1;  // math warpgroups sharing a block (its rows split)
  constexpr int kWgRows = kRows / kRowSplit;              // rows a math warpgroup scores
  constexpr int kLanes = ws_math_wgs(kMode) / kRowSplit;  // blocks in flight: block i to lane i % kLanes
  constexpr bool kPingPong = (kMode & kWsPingPong) != 0;
  constexpr bool kSplit = (kMode & kWsSplit) != 0 && kWgRows % 2 == 0;
  constexpr bool kBatched = (kMode & kWsBatched) != 0;
  constexpr int kBanks = kSplit ? 2 : 1;       // commit groups of a block
  constexpr int kBankRows = kWgRows / kBanks;  // rows a bank scores
  constexpr int kBankN = kHeads * kBankRows;   // its wgmma N
  constexpr float kNegInf = -INFINITY;

  char* smem = smem_base();
  uint8_t* sQ = reinterpret_cast<uint8_t*>(smem);                  // [kRows * 64 (row, head)][128 B] SW128
  uint8_t* sK = sQ + ws_q_bytes(kRows);                            // [kS][64 keys][128 B] SW128
  float* sScale = reinterpret_cast<float*>(sK + kS * kB * kDim);   // [kS][64]
  uint8_t* sOk = reinterpret_cast<uint8_t*>(sScale + kS * kB);     // [kS][64] key read (page valid)
  const uint32_t bars = ptx::smem_addr(sOk + kS * kB);             // full[kS], empty[kS]
  int* sWin = reinterpret_cast<int*>(sOk + kS * kB + 2 * kS * 8);  // [kRows][lo, hi)
  auto full = [&](int s) { return bars + uint32_t(s * 8); };
  auto empty = [&](int s) { return bars + uint32_t((kS + s) * 8); };

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(ptx::kFullMask, tid / 128, 0);  // warp-uniform for the compiler
  const int64_t gi = int64_t(blockIdx.x) / p.col_blocks;
  const int64_t group = kPaged ? gi : p.num_groups - 1 - gi;
  const int64_t c0 = (int64_t(blockIdx.x) % p.col_blocks) * p.cols_per_cta;
  const int64_t c1 = min(c0 + p.cols_per_cta, p.num_cols);
  const int64_t row0 = group * kRows;

  // The union of the group's windows: keys outside it are never read.
  int64_t umin = p.num_cols, umax = 0;
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    int64_t lo, hi;
    indexer::row_window<kPaged>(p, group, kRows, t, lo, hi);
    if (lo < hi) umin = min(umin, lo), umax = max(umax, hi);
  }
  // Blocks [first, end) of the CTA's columns meet the union; the columns of the others are only -inf.
  int first = 0, end = 0;
  {
    const int64_t a = max(umin, c0), b = min(umax, c1);
    if (a < b) first = int((a - c0) / kB), end = int((b - c0 + kB - 1) / kB);
  }
  for (int t = 0; t < kRows; ++t) {
    if (row0 + t >= p.rows) break;
    float* out = p.logits + (row0 + t) * p.logit_row_stride;
    for (int64_t c = c0 + tid; c < c0 + int64_t(first) * kB; c += kThreads) out[c * p.logit_col_stride] = kNegInf;
    for (int64_t c = c0 + int64_t(end) * kB + tid; c < c1; c += kThreads) out[c * p.logit_col_stride] = kNegInf;
  }
  const int n = end - first;  // blocks of this CTA
  if (n <= 0) return;         // uniform over the CTA

  if (tid == 0) {
    for (int s = 0; s < kS; ++s) {
      sm90::mbar_init(full(s), 256);               // 128 producer threads: their copies landed + their flags stored
      sm90::mbar_init(empty(s), 128 * kRowSplit);  // the consuming math warpgroup(s), after their wgmmas
    }
    for (int t = 0; t < kRows; ++t) {
      int64_t lo, hi;
      indexer::row_window<kPaged>(p, group, kRows, t, lo, hi);
      sWin[2 * t] = int(lo), sWin[2 * t + 1] = int(hi);
    }
  }
  __syncthreads();

  const int64_t cfirst = c0 + int64_t(first) * kB;  // first column of block 0
  if (wg == 0) {
    sm90::setmaxnreg_dec<kQuad ? kWsQuadProducerRegs : kWsProducerRegs>();
    // q rows (smem row r = t * 64 + h; rows past the batch are zeros): tracked by block 0's arrivals.
    for (int i = tid; i < kRows * kHeads * 8; i += 128) {
      const int r = i >> 3, c = i & 7;
      const int64_t row = row0 + r / kHeads;
      const bool ok = row < p.rows;
      const uint8_t* src = ok ? p.q + row * p.q_row_stride + int64_t(r % kHeads) * p.q_head_stride + c * 16 : p.q;
      ptx::cp_async_16(ptx::smem_addr(sQ) + sm90::sw128_offset(r, c), src, ok ? 16 : 0);
    }
    const int key = tid >> 1, half = tid & 1;
    if constexpr (kQuad) {
      // The quad producer (32 registers): the same copies, flags and arrivals as the loop below, with the
      // per-block address arithmetic made incremental (the thread's key column advances by 64 a block) and
      // waits that sleep (suspend-time hint) instead of spinning.
      uint32_t dst[4];  // this thread's 4 chunks of its key row in stage 0
#pragma unroll
      for (int c = 0; c < 4; ++c) dst[c] = ptx::smem_addr(sK) + sm90::sw128_offset(key, 4 * half + c);
      const uint32_t scale_dst = ptx::smem_addr(sScale + key), ok_dst = ptx::smem_addr(sOk + key);
      // Block i into its stage: ok, the key's bytes (this thread's half) and scale; else zeros, flagged.
      auto copy_block = [&](int i, bool ok, const uint8_t* src, const float* ssrc) {
        const uint32_t slot = unsigned(i) % kS;
        if (i >= kS) sm90::mbar_wait_sleep(empty(int(slot)), int(((unsigned(i) / kS) - 1) & 1));
        const uint8_t* s = ok ? src : p.q;
#pragma unroll
        for (int c = 0; c < 4; ++c) ptx::cp_async_16(dst[c] + slot * (kB * kDim), s + 16 * c, ok ? 16 : 0);
        if (half == 0) {
          ptx::cp_async_4(scale_dst + slot * (kB * 4), ok ? ssrc : p.w, ok ? 4 : 0);
          sts_u8(ok_dst + slot * kB, ok ? 1u : 0u);
        }
        sm90::cp_async_mbar_arrive(full(int(slot)));  // fires when this thread's copies (and q's) landed
        sm90::mbar_arrive(full(int(slot)));           // releases the flag store
      };
      const uint32_t col0 = uint32_t(cfirst + key);  // the thread's key column in block 0 (columns < 2^31)
      auto in_window = [&](int i) {
        const int64_t col = int64_t(col0) + int64_t(i) * kB;
        return i < n && col >= umin && col < umax;
      };
      if constexpr (!kPaged) {
        // Ragged: block i's key at p.k + (col0 + 64 i) * k_row_stride: the sources advance by a block a step.
        const uint8_t* src = p.k + int64_t(col0) * p.k_row_stride + 64 * half;
        const float* ssrc = p.k_scale + int64_t(col0) * p.k_scale_stride;
        const int64_t step = int64_t(kB) * p.k_row_stride, sstep = int64_t(kB) * p.k_scale_stride;
#pragma unroll 1
        for (int i = 0; i < n; ++i, src += step, ssrc += sstep) copy_block(i, in_window(i), src, ssrc);
      } else {
        // Paged: the key's page index and in-page offset advance by q64 pages + r64 keys a block (no division
        // by page_size a block); page ids kWsQuadPageAhead blocks ahead (pg[a]: block i0 + a; -1 outside the
        // union window; out-of-pool ids caught at use).
        const uint32_t ps = uint32_t(p.page_size), q64 = uint32_t(kB) / ps, r64 = uint32_t(kB) % ps;
        const int64_t page_bytes = p.page_size * (kDim + 4);
        const int32_t* table = p.page_table + group * p.pt_row_stride;
        constexpr int kAhead = kWsQuadPageAhead;
        int32_t pg[kAhead];
#pragma unroll
        for (int a = 0; a < kAhead; ++a)
          pg[a] = in_window(a) ? table[int64_t((col0 + uint32_t(a * kB)) / ps) * p.pt_col_stride] : -1;
        uint32_t f_idx = (col0 + uint32_t(kAhead * kB)) / ps;  // page index of block i + kAhead's key
        uint32_t f_in = col0 + uint32_t(kAhead * kB) - f_idx * ps, c_in = col0 % ps;  // in-page: i + kAhead, i
#pragma unroll 1
        for (int i0 = 0; i0 < n; i0 += kAhead) {
#pragma unroll
          for (int a = 0; a < kAhead; ++a) {
            const int i = i0 + a;
            if (i >= n) break;  // uniform over the producer
            const int64_t page = pg[a];
            const bool ok = page >= 0 && page < p.num_pages;
            const uint8_t* base = p.pool + page * page_bytes;
            const uint8_t* src = base + c_in * kDim + 64 * half;
            const float* ssrc = reinterpret_cast<const float*>(base + ps * kDim + c_in * 4);
            pg[a] = in_window(i + kAhead) ? table[int64_t(f_idx) * p.pt_col_stride] : -1;  // in flight below
            f_idx += q64, f_in += r64, c_in += r64;
            if (f_in >= ps) f_in -= ps, ++f_idx;
            if (c_in >= ps) c_in -= ps;
            copy_block(i, ok, src, ssrc);
          }
        }
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");  // nothing in flight at exit
      return;
    }
    // Page ids run kWsPageAhead blocks ahead of the copies (registers pg[a] for blocks i0 + a): the loads
    // are issued early and their values first used kWsPageAhead blocks later, so a CTA's start pays about
    // kS / kWsPageAhead page-table round trips instead of one a block. pg = -1: not read (outside the
    // union window); out-of-pool ids are caught at use.
    auto fetch = [&](int i) -> int32_t {
      const int64_t col = cfirst + int64_t(i) * kB + key;
      int32_t v = -1;
      if (i < n && col >= umin && col < umax) {
        if constexpr (kPaged) {
          const uint32_t page_idx = uint32_t(col) / uint32_t(p.page_size);
          v = p.page_table[group * p.pt_row_stride + int64_t(page_idx) * p.pt_col_stride];
        } else {
          v = 0;
        }
      }
      return v;
    };
    constexpr int kAhead = kWsPageAhead;
    int32_t pg[kAhead];
#pragma unroll
    for (int a = 0; a < kAhead; ++a) pg[a] = fetch(a);
#pragma unroll 1
    for (int i0 = 0; i0 < n; i0 += kAhead) {
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        const int i = i0 + a;
        if (i >= n) break;  // uniform over the producer
        const int slot = i % kS;
        const int64_t col = cfirst + int64_t(i) * kB + key;
        const int64_t page = pg[a];
        const bool ok = page >= 0 && (!kPaged || page < p.num_pages);
        const uint8_t* src = p.q;
        const float* ssrc = p.w;
        if (ok) {
          if constexpr (kPaged) {
            const int64_t in_page = col - int64_t(uint32_t(col) / uint32_t(p.page_size)) * p.page_size;
            const uint8_t* base = p.pool + page * p.page_size * (kDim + 4);
            src = base + in_page * kDim;
            ssrc = reinterpret_cast<const float*>(base + p.page_size * kDim + in_page * 4);
          } else {
            src = p.k + col * p.k_row_stride;
            ssrc = p.k_scale + col * p.k_scale_stride;
          }
        }
        pg[a] = fetch(i + kAhead);  // in flight during the wait and the copies below
        if (i >= kS) sm90::mbar_wait(empty(slot), ((i / kS) - 1) & 1);
        const uint32_t dst = ptx::smem_addr(sK) + uint32_t(slot * kB * kDim);
        if constexpr (kVec16) {
#pragma unroll
          for (int c = 4 * half; c < 4 * half + 4; ++c)
            ptx::cp_async_16(dst + sm90::sw128_offset(key, c), ok ? src + c * 16 : p.q, ok ? 16 : 0);
        } else {
#pragma unroll 4
          for (int wd = 16 * half; wd < 16 * half + 16; ++wd)
            ptx::cp_async_4(dst + sm90::sw128_offset(key, wd >> 2) + (wd & 3) * 4, ok ? src + wd * 4 : p.q, ok ? 4 : 0);
        }
        if (half == 0) {
          ptx::cp_async_4(ptx::smem_addr(sScale + slot * kB + key), ok ? ssrc : p.w, ok ? 4 : 0);
          sOk[slot * kB + key] = ok;
        }
        sm90::cp_async_mbar_arrive(full(slot));  // fires when this thread's copies (and q's) landed
        sm90::mbar_arrive(full(slot));           // releases the flag store
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // nothing in flight at exit
    return;
  }

  sm90::setmaxnreg_inc<kQuad ? kWsQuadMathRegs : kWsMathRegs>();
  const int lane = tid & 31, warp = (tid >> 5) & 3;
  const int w = (wg - 1) / kRowSplit;             // this warpgroup's lane of blocks: i % kLanes == w
  const int t0 = (wg - 1) % kRowSplit * kWgRows;  // its first row of the group
  const int g = lane >> 2, q4 = lane & 3;
  // wr[t][2 j + e]: the weight (q_scale folded in) of row t0 + t, head 8 j + 2 q4 + e: this thread's heads.
  float wr[kWgRows][16];
#pragma unroll
  for (int t = 0; t < kWgRows; ++t) {
    const int64_t row = row0 + t0 + t;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int h = 8 * (k >> 1) + 2 * q4 + (k & 1);
      float v = 0.f;
      if (row < p.rows) {
        v = p.w[row * p.w_row_stride + int64_t(h) * p.w_head_stride];
        if constexpr (kQScale) v *= p.q_scale[row * p.qs_row_stride + int64_t(h) * p.qs_head_stride];
      }
      wr[t][k] = v;
    }
  }
  const uint32_t b_base = ptx::smem_addr(sQ);
  const int key_l = warp * 16 + g;  // this thread's keys in a block: key_l, key_l + 8
  const int my_key = key_l + 8 * (q4 & 1);
  float acc[kBanks][kBankN / 2];  // acc[b][32 t' + 4 j + e]: row t0 + b * kBankRows + t'
  constexpr int kBarOf0 = 1;      // named barrier "warpgroup w may issue": kBarOf0 + w
  if constexpr (kPingPong)
    if (w == 1) sm90::named_arrive(kBarOf0, 256);  // warpgroup 0 issues block 0 first

  // Reduces row t of the block from its bank's accumulators: relu * w over the thread's 16 heads, the quad
  // sum, the key scale and the mask; lanes q4 0 and 1 store.
  auto reduce_row = [&](int t, const float* accb, int col, bool writer, bool my_ok, float my_scale) {
    // accb[32 (t % kBankRows) + 4 j + e]: key key_l + 8 (e / 2), row t, head 8 j + 2 q4 + e % 2.
    float s0a = 0.f, s0b = 0.f, s1a = 0.f, s1b = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float* a = accb + 32 * (t % kBankRows) + 4 * j;
      s0a = fmaf(relu_keep_nan(a[0]), wr[t - t0][2 * j], s0a);
      s0b = fmaf(relu_keep_nan(a[1]), wr[t - t0][2 * j + 1], s0b);
      s1a = fmaf(relu_keep_nan(a[2]), wr[t - t0][2 * j], s1a);
      s1b = fmaf(relu_keep_nan(a[3]), wr[t - t0][2 * j + 1], s1b);
    }
    const float v0 = s0a + s0b, v1 = s1a + s1b;  // keys key_l, key_l + 8: this thread's 16 heads
    // Even lanes of the quad keep key key_l, odd ones key_l + 8: swap the other half with the neighbour,
    // then add the other pair's.
    float v = (q4 & 1) ? v1 : v0;
    v += __shfl_xor_sync(ptx::kFullMask, (q4 & 1) ? v0 : v1, 1);
    v += __shfl_xor_sync(ptx::kFullMask, v, 2);
    const int64_t row = row0 + t;
    if (writer && row < p.rows) {
      const bool visible = my_ok && col >= sWin[2 * t] && col < sWin[2 * t + 1];
      p.logits[row * p.logit_row_stride + int64_t(col) * p.logit_col_stride] = visible ? v * my_scale : kNegInf;
    }
  };

  // The batched form (kBatched) of reduce_row over the rows of bank b (accb: its accumulators).
  int win_lo[kWgRows], win_hi[kWgRows];  // the windows [lo, hi) of rows t0 + t
#pragma unroll
  for (int t = 0; t < kWgRows; ++t) win_lo[t] = sWin[2 * (t0 + t)], win_hi[t] = sWin[2 * (t0 + t) + 1];
  const int rows_here = int(min(int64_t(kRows), p.rows - row0));  // rows of the group inside the batch
  float* const out_base = p.logits + row0 * p.logit_row_stride;
  // kQuad: this lane's logit in block 0 (row row0 + t0); block i's is i * kB columns further.
  float* const out_lane = out_base + int64_t(t0) * p.logit_row_stride + (cfirst + my_key) * p.logit_col_stride;
  const int64_t out_step = int64_t(kB) * p.logit_col_stride;
  auto reduce_bank = [&](int b, const float* accb, int col, bool writer, bool my_ok, float my_scale, int i) {
    float v[kBankRows], other[kBankRows];
#pragma unroll
    for (int tt = 0; tt < kBankRows; ++tt) {
      const int t = b * kBankRows + tt;  // the warpgroup's row t: the group's t0 + t
      float s0a = 0.f, s0b = 0.f, s1a = 0.f, s1b = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float* a = accb + 32 * tt + 4 * j;
        s0a = fmaf(relu_keep_nan(a[0]), wr[t][2 * j], s0a);
        s0b = fmaf(relu_keep_nan(a[1]), wr[t][2 * j + 1], s0b);
        s1a = fmaf(relu_keep_nan(a[2]), wr[t][2 * j], s1a);
        s1b = fmaf(relu_keep_nan(a[3]), wr[t][2 * j + 1], s1b);
      }
      const float v0 = s0a + s0b, v1 = s1a + s1b;
      v[tt] = (q4 & 1) ? v1 : v0;
      other[tt] = (q4 & 1) ? v0 : v1;
    }
#pragma unroll
    for (int tt = 0; tt < kBankRows; ++tt) v[tt] += __shfl_xor_sync(ptx::kFullMask, other[tt], 1);
#pragma unroll
    for (int tt = 0; tt < kBankRows; ++tt) v[tt] += __shfl_xor_sync(ptx::kFullMask, v[tt], 2);
    // out[t * row stride]: row t0 + t of the group at this lane's column (t0 = 0 but with kQuad).
    float* const out = kQuad ? out_lane + int64_t(i) * out_step : out_base + int64_t(col) * p.logit_col_stride;
#pragma unroll
    for (int tt = 0; tt < kBankRows; ++tt) {
      const int t = b * kBankRows + tt;
      const bool visible = my_ok && col >= win_lo[t] && col < win_hi[t];
      if (writer && t0 + t < rows_here) out[int64_t(t) * p.logit_row_stride] = visible ? v[tt] * my_scale : kNegInf;
    }
  };

  // kQuad: the wgmma descriptors and this lane's scale / flag addresses by addition (fewer instructions a block,
  // the same values): a descriptor's address field is bits [0, 14) of address / 16 and shared memory lies below
  // 256 KB, so adding a k step (32 bytes: 2) or a stage (8 KB: 512) never carries out of it.
  const uint64_t a_desc0 = sm90::desc_kmajor(ptx::smem_addr(sK));
  const uint64_t b_desc0 = sm90::desc_kmajor(b_base + uint32_t(t0 * kHeads * kDim));
  const uint32_t scale_addr0 = ptx::smem_addr(sScale + my_key), ok_addr0 = ptx::smem_addr(sOk + my_key);

#pragma unroll 1
  for (int i = w; i < n; i += kLanes) {
    const int slot = kQuad ? int(unsigned(i) % kS) : i % kS;
    if constexpr (kQuad) sm90::mbar_wait_sleep(full(slot), int((unsigned(i) / kS) & 1));
    else sm90::mbar_wait(full(slot), (i / kS) & 1);
    sm90::fence_proxy_async();  // the producer's cp.async bytes, seen through the async proxy
    const uint32_t a_base = ptx::smem_addr(sK) + uint32_t(slot * kB * kDim);
    if constexpr (kPingPong) sm90::named_sync(kBarOf0 + w, 256);  // the other warpgroup issued block i - 1
    sm90::wg_fence();
    if constexpr (kQuad) {
      const uint64_t a_desc = a_desc0 + uint32_t(slot) * (kB * kDim / 16);
#pragma unroll
      for (int k = 0; k < kDim / 32; ++k) sm90::WgmmaFp8<kBankN>::ss(acc[0], a_desc + 2 * k, b_desc0 + 2 * k, k);
      sm90::wg_commit();
    } else {
#pragma unroll
      for (int b = 0; b < kBanks; ++b) {
        const uint32_t bank_base = b_base + uint32_t((t0 * kHeads + b * kBankN) * kDim);  // q rows of bank b
#pragma unroll
        for (int k = 0; k < kDim / 32; ++k)
          sm90::WgmmaFp8<kBankN>::ss(acc[b], sm90::desc_kmajor(a_base + 32 * k), sm90::desc_kmajor(bank_base + 32 * k),
                                     k);
        sm90::wg_commit();
      }
    }
    if constexpr (kPingPong)
      if (i + 1 < n) sm90::named_arrive(kBarOf0 + (1 - w), 256);  // the other warpgroup may issue block i + 1
    // The key this lane writes (lanes q4 0 and 1 of a quad: keys key_l and key_l + 8), read while the wgmmas run.
    float my_scale;
    bool my_ok;
    if constexpr (kQuad) {
      my_scale = lds_f32(scale_addr0 + uint32_t(slot * kB * 4));
      my_ok = lds_u8(ok_addr0 + uint32_t(slot * kB)) != 0;
    } else if constexpr (kBatched) {
      my_scale = lds_f32(ptx::smem_addr(sScale + slot * kB + my_key));
      my_ok = lds_u8(ptx::smem_addr(sOk + slot * kB + my_key)) != 0;
    } else {
      my_scale = sScale[slot * kB + my_key];
      my_ok = sOk[slot * kB + my_key] != 0;
    }
    const int col = int(cfirst) + i * kB + my_key;
    const bool writer = q4 < 2 && col < c1;
    auto reduce = [&](int b) {
      if constexpr (kBatched) {
        reduce_bank(b, acc[b], col, writer, my_ok, my_scale, i);
      } else {
#pragma unroll
        for (int t = t0 + b * kBankRows; t < t0 + (b + 1) * kBankRows; ++t)
          reduce_row(t, acc[b], col, writer, my_ok, my_scale);
      }
    };
    if constexpr (kSplit) {
      sm90::wg_wait<1>();  // bank 0 done, bank 1 still running
      sm90::fence_regs(acc[0]);
      reduce(0);
    }
    sm90::wg_wait<0>();
    sm90::fence_regs(acc[kBanks - 1]);
    sm90::mbar_arrive(empty(slot));  // the stage's keys are read: the producer may refill it
    reduce(kBanks - 1);
  }
#endif
}

}  // namespace attnserve::cuda::indexer90
