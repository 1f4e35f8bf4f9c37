// Hopper FP8 paged attention, the producer's side: cp.async of the Q tile and of the K/V rows gathered
// through the page table, and the transpose of a V tile in shared memory (FP8 wgmma reads B K-major,
// so O += P V needs Vt [d][keys]). d 128: a row is 128 bytes, one SW128 panel (common/wgmma.cuh).
//
// Layouts, all 128 rows x 128 bytes, 16-byte chunk ch of row r at r * 128 + 16 * position:
//   Q, K   SW128: position = ch ^ (r % 8)                      (the wgmma K-major operand)
//   V staging:     position = ch ^ ((r / 16) % 8)              (row r = key; conflict-free transpose reads)
//   Vt     SW128: position = ch ^ (r % 8), row r = d index, chunk g = keys 16g..16g+15 stored in
//                 P's register order (fp8_key_of_position): wgmma's A fragment holds, per 4-byte
//                 register, keys {2t, 2t+1, 2t+8, 2t+9} of the S accumulator's columns, so storing Vt's
//                 keys in that order makes P's conversion a plain in-thread pack.
#pragma once
#include "tile_load.cuh"

namespace attnserve::cuda::attn90 {

// Key (0..15, within a 16-key group) stored at byte position `pos` (0..15) of a Vt chunk: position
// 4t + e holds key 2t + (e % 2) + 8 (e / 2), the S accumulator column that P's A register byte e of
// lane t % 4 carries (sm90::acc_col: columns 8nb + 2(lane % 4) + {0, 1}).
__host__ __device__ constexpr int fp8_key_of_position(int pos) {
  return 2 * (pos / 4) + (pos % 2) + 8 * ((pos % 4) / 2);
}

// 128 producer threads: 8 per tile row (one 16-byte chunk each), 16 rows per pass, 8 K/V rows a tile.
struct Fp8Loader {
  static constexpr int kNT = 128, kTpr = 8, kStep = kNT / kTpr, kRowsPerThread = kTileKeys / kStep;
  static constexpr int kTileBytes = kTileKeys * 128;

  int lch, lrow0;
  const int* pt;
  const char *gK, *gV;
  int pages[kRowsPerThread];  // page id, then (slots_t) token slot per loaded row; -1: zero-fill

  __device__ __forceinline__ Fp8Loader(const Params& p, const Block& b, int t) {
    lch = t % kTpr;
    lrow0 = t / kTpr;
    pt = p.page_table + int64_t(b.r) * p.pt_st;
    gK = p.k + int64_t(b.hk) * p.k_sh + lch * 16;
    gV = p.v + int64_t(b.hk) * p.v_sh + lch * 16;
  }

  // Q: packed rows (q_row * group + head) -> SW128; rows past the request are zero-filled (no commit).
  __device__ __forceinline__ void load_q(const Params& p, const Block& b, char* sQ) const {
#pragma unroll
    for (int i = 0; i < kRows / kStep; ++i) {
      const int row = lrow0 + i * kStep;
      const int pr = b.row0 + row;
      const bool valid = pr < b.rows_total;
      const char* src = p.q;
      if (valid) {
        const int qr = pr / p.group, h = b.hk * p.group + (pr - qr * p.group);
        src = p.q + (int64_t(b.q_start + qr) * p.q_st + int64_t(h) * p.q_sh + lch * 16);  // 1-byte elements
      }
      ptx::cp_async_16(ptx::smem_addr(sQ) + sm90::sw128_offset(row, lch), src, valid ? 16 : 0);
    }
  }

  template <bool POW2>
  __device__ __forceinline__ void read_pages_t(const Params& p, const Block& b, int tile) {
    const int j0 = b.k_begin + tile * kTileKeys + lrow0;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int j = j0 + i * kStep;
      const int pi = POW2 ? (j >> p.page_shift) : j / p.page_size;
      pages[i] = (j < b.k_end && pi < p.max_pages) ? __ldg(pt + pi) : -1;
    }
  }

  // Page ids -> token slots of this thread's rows of `tile` (in place; -1: zero-fill). 32-bit slot
  // math as tile_load.cuh's Loader (the plan requires slots and per-token byte strides below 2^31).
  template <bool POW2>
  __device__ __forceinline__ void slots_t(const Params& p, const Block& b, int tile) {
    const int j0 = b.k_begin + tile * kTileKeys + lrow0;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int j = j0 + i * kStep;
      const int in_page = POW2 ? (j & ((1 << p.page_shift) - 1)) : j % p.page_size;
      const int page = pages[i];
      const bool ok = unsigned(page) < unsigned(p.num_pages);
      pages[i] = ok ? (POW2 ? (page << p.page_shift) + in_page : page * p.page_size + in_page) : -1;
    }
  }

  // cp.async of this thread's K rows (after slots_t) into dK (SW128); invalid rows read as zeros.
  __device__ __forceinline__ void issue_k(const Params& p, char* dK) const {
    const uint32_t sK = ptx::smem_addr(dK), stk = uint32_t(p.k_stok);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = lrow0 + i * kStep;
      const bool ok = pages[i] >= 0;
      ptx::cp_async_16(sK + sm90::sw128_offset(row, lch), gK + uint64_t(ok ? uint32_t(pages[i]) : 0u) * stk,
                       ok ? 16 : 0);
    }
  }
  // ... and its V rows into the staging tile dV (group swizzle).
  __device__ __forceinline__ void issue_v(const Params& p, char* dV) const {
    const uint32_t sV = ptx::smem_addr(dV), stv = uint32_t(p.v_stok);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = lrow0 + i * kStep;
      const bool ok = pages[i] >= 0;
      ptx::cp_async_16(sV + uint32_t(row * 128 + ((lch ^ ((row >> 4) & 7)) << 4)),
                       gV + uint64_t(ok ? uint32_t(pages[i]) : 0u) * stv, ok ? 16 : 0);
    }
  }
};

#if defined(ATTNSERVE_SM90_DEVICE)
// x_i = bytes i of (a, b, c, d), low byte first: a 4 x 4 byte transpose in 8 PRMT.
__device__ __forceinline__ void transpose4x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t (&x)[4]) {
  const uint32_t t0 = __byte_perm(a, b, 0x5140), t1 = __byte_perm(a, b, 0x7362);  // a0 b0 a1 b1 | a2 b2 a3 b3
  const uint32_t t2 = __byte_perm(c, d, 0x5140), t3 = __byte_perm(c, d, 0x7362);
  x[0] = __byte_perm(t0, t2, 0x5410);
  x[1] = __byte_perm(t0, t2, 0x7632);
  x[2] = __byte_perm(t1, t3, 0x5410);
  x[3] = __byte_perm(t1, t3, 0x7632);
}

// Staging V [128 keys][128 d] -> Vt [128 d][128 keys] (keys in fp8_key_of_position order), by the
// 128 producer threads (t = thread index). Thread (warp wp, lane l) owns key group g = l % 8 and the
// words c = 4 q + l / 8 (d bytes 4c..4c+3) for q = 2 wp, 2 wp + 1: 16 LDS.32 of rows 16g..16g+15, four
// 4 x 4 transposes, 4 STS.128 (d rows 4c..4c+3, chunk g). Both sides are bank-conflict free: the reads
// of a warp hit bank 4 (q ^ g) + l / 8, the 8 stores of a phase 8 distinct chunk positions.
__device__ __forceinline__ void transpose_v(uint32_t sStage, uint32_t sVt, int t) {
  const int lane = t & 31, wp = t >> 5, g = lane & 7, w = lane >> 3;
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    const int q = 2 * wp + it, c = 4 * q + w;
    const uint32_t src = sStage + uint32_t(16 * g * 128 + ((q ^ g) << 4) + 4 * w);
    uint32_t r[16];
#pragma unroll
    for (int k = 0; k < 16; ++k)
      asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(r[k]) : "r"(src + uint32_t(k * 128)) : "memory");
    uint32_t o[4][4];  // [d row 4c + i][word t' = positions 4t'..4t'+3]
#pragma unroll
    for (int tw = 0; tw < 4; ++tw) {
      uint32_t x[4];
      // positions 4 tw + e <- keys 2 tw + {0, 1, 8, 9} (fp8_key_of_position)
      transpose4x4(r[2 * tw], r[2 * tw + 1], r[2 * tw + 8], r[2 * tw + 9], x);
#pragma unroll
      for (int i = 0; i < 4; ++i) o[i][tw] = x[i];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = 4 * c + i;
      const uint32_t dst = sVt + sm90::sw128_offset(n, g);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(o[i][0]), "r"(o[i][1]), "r"(o[i][2]),
                   "r"(o[i][3])
                   : "memory");
    }
  }
}
#endif

}  // namespace attnserve::cuda::attn90
