// KV cache bookkeeping: SlotAllocator (page-aware token slots) and ReqToTokenPool.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attnserve/kv_cache.h"
#include "common/test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

using Ext = SlotAllocator::ExtendRequest;
using Dec = SlotAllocator::DecodeRequest;

// Runs fn, expects an attnserve::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an attnserve::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }
}

std::vector<int32_t> range(int32_t begin, int32_t end) {
  std::vector<int32_t> v;
  for (int32_t s = begin; s < end; ++s) v.push_back(s);
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST(KvSlotAllocator, ConstructionAndReservedPaddingPage) {
  SlotAllocator a(32, 4);
  EXPECT_EQ(a.num_pages(), 8);
  EXPECT_EQ(a.available_pages(), 7);  // page 0 reserved
  EXPECT_EQ(a.available_slots(), 28);
  EXPECT_FALSE(a.page_allocated(0));
  expect_error([] { SlotAllocator(30, 4); }, {"multiple of page_size"});
  expect_error([] { SlotAllocator(32, 0); }, {"page_size"});
  expect_error([] { SlotAllocator(4, 4); }, {"at least 2 pages"});
}

TEST(KvSlotAllocator, PageAwareContinuation) {
  SlotAllocator a(32, 4);
  // Two new requests: 6 tokens -> page 1 + half of page 2; 3 tokens -> 3/4 of page 3.
  std::vector<Ext> first{{0, -1, 6}, {0, -1, 3}};
  auto s1 = a.alloc_extend(first);
  EXPECT_EQ(s1, concat(range(4, 10), range(12, 15)));
  EXPECT_EQ(a.available_pages(), 4);
  // Prefix ending mid-page continues in that page, then fresh pages (lowest first).
  std::vector<Ext> second{{6, 9, 5}, {3, 14, 1}};
  auto s2 = a.alloc_extend(second);
  EXPECT_EQ(s2, concat(range(10, 12), concat(range(16, 19), {15})));
  EXPECT_EQ(a.available_pages(), 3);
  // Decode continues the same way: request 0 now has 11 tokens (last slot 18), request 1 has 4
  // tokens (last slot 15, page full) -> a fresh page.
  std::vector<Dec> dec{{11, 18}, {4, 15}};
  EXPECT_EQ(a.alloc_decode(dec), (std::vector<int32_t>{19, 20}));
  EXPECT_EQ(a.available_pages(), 2);
}

TEST(KvSlotAllocator, page_size_1) {
  SlotAllocator a(10, 1);
  EXPECT_EQ(a.available_slots(), 9);
  std::vector<Ext> ext{{0, -1, 3}, {0, -1, 2}};
  EXPECT_EQ(a.alloc_extend(ext), concat(range(1, 4), range(4, 6)));
  std::vector<Dec> dec{{3, 3}, {2, 5}};
  EXPECT_EQ(a.alloc_decode(dec), (std::vector<int32_t>{6, 7}));
  a.free(std::vector<int32_t>{1, 2, 3, 6});
  EXPECT_EQ(a.available_slots(), 6);
  std::vector<Ext> again{{0, -1, 3}};
  EXPECT_EQ(a.alloc_extend(again), (std::vector<int32_t>{1, 2, 3}));
}

TEST(KvSlotAllocator, page_size_64_last_page_partial) {
  SlotAllocator a(64 * 8, 64);
  std::vector<Ext> ext{{0, -1, 100}};
  auto s = a.alloc_extend(ext);
  ASSERT_EQ(s.size(), 100u);
  EXPECT_EQ(s, concat(range(64, 128), range(128, 164)));  // pages 1 and 2 (36 of 64 used)
  // Extend by 40: 28 fill page 2, 12 start page 3.
  std::vector<Ext> ext2{{100, s.back(), 40}};
  auto s2 = a.alloc_extend(ext2);
  EXPECT_EQ(s2, concat(range(164, 192), range(192, 204)));
  EXPECT_EQ(a.available_pages(), 7 - 3);
  // An extend that fits in the partial page takes no new page.
  std::vector<Ext> ext3{{140, 203, 5}};
  EXPECT_EQ(a.alloc_extend(ext3), range(204, 209));
  EXPECT_EQ(a.available_pages(), 4);
  // Zero-length extends are fine and take nothing.
  std::vector<Ext> ext4{{145, 208, 0}, {0, -1, 0}};
  EXPECT_TRUE(a.alloc_extend(ext4).empty());
  EXPECT_EQ(a.available_pages(), 4);
}

TEST(KvSlotAllocator, ExhaustionErrorLeavesStateUnchanged) {
  SlotAllocator a(4 * 6, 4);         // 5 usable pages
  std::vector<Ext> ext{{0, -1, 6}};  // pages 1, 2
  auto s = a.alloc_extend(ext);
  const SlotAllocator before = a;
  // 3 requests need 1 (rest of page 2 is 2 slots, 3 more -> 1 page) + 2 + 1 = 4 pages; 3 free.
  std::vector<Ext> big{{6, s.back(), 5}, {0, -1, 8}, {0, -1, 1}};
  expect_error([&] { a.alloc_extend(big); }, {"SlotAllocator::alloc_extend", "needs 4 new pages", "only 3 are free"});
  EXPECT_EQ(a.available_pages(), before.available_pages());
  for (int64_t p = 0; p < a.num_pages(); ++p) EXPECT_EQ(a.page_allocated(p), before.page_allocated(p)) << p;
  // Decode exhaustion too.
  std::vector<Ext> fill{{0, -1, 12}};
  a.alloc_extend(fill);  // pages 3, 4, 5: all gone
  EXPECT_EQ(a.available_pages(), 0);
  std::vector<Dec> dec{{6, s.back()}, {12, 23}};  // first continues page 2; second needs a page
  expect_error([&] { a.alloc_decode(dec); }, {"SlotAllocator::alloc_decode", "needs 1 new pages", "only 0 are free"});
  // A smaller allocation still succeeds (continuing a partial page needs no new page).
  std::vector<Dec> small{{6, s.back()}};
  EXPECT_EQ(a.alloc_decode(small), (std::vector<int32_t>{10}));
}

TEST(KvSlotAllocator, SmallerAllocSucceedsAfterExhaustion) {
  SlotAllocator a(4 * 4, 4);  // 3 usable pages
  std::vector<Ext> big{{0, -1, 13}};
  expect_error([&] { a.alloc_extend(big); }, {"SlotAllocator::alloc_extend", "needs 4 new pages", "only 3 are free"});
  EXPECT_EQ(a.available_pages(), 3);
  std::vector<Ext> fits{{0, -1, 12}};
  EXPECT_EQ(a.alloc_extend(fits), range(4, 16));
}

TEST(KvSlotAllocator, DoubleFreeAndBadFreesAreErrorsThatChangeNothing) {
  SlotAllocator a(4 * 6, 4);
  std::vector<Ext> ext{{0, -1, 5}, {0, -1, 4}};  // req0: pages 1, 2; req1: page 3
  auto s = a.alloc_extend(ext);
  std::vector<int32_t> req0(s.begin(), s.begin() + 5), req1(s.begin() + 5, s.end());
  a.free(req0);
  EXPECT_EQ(a.available_pages(), 4);
  expect_error([&] { a.free(req0); }, {"slots[0] = 4", "not allocated"});
  expect_error([&] { a.free(std::vector<int32_t>{20}); }, {"slots[0] = 20", "not allocated"});  // never allocated
  expect_error([&] { a.free(std::vector<int32_t>{1}); }, {"padding page 0"});
  expect_error([&] { a.free(std::vector<int32_t>{24}); }, {"out of range"});
  expect_error([&] { a.free(std::vector<int32_t>{-1}); }, {"out of range"});
  // A batch free with one bad slot frees nothing, not even its good slots.
  std::vector<int32_t> mixed = req1;
  mixed.push_back(4);
  expect_error([&] { a.free(mixed); }, {"slots[4] = 4"});
  EXPECT_TRUE(a.page_allocated(3));
  EXPECT_EQ(a.available_pages(), 4);
  a.free(req1);
  EXPECT_EQ(a.available_pages(), 5);
}

TEST(KvSlotAllocator, FreeThenReallocLowestPageFirst) {
  SlotAllocator a(4 * 8, 4);
  std::vector<Ext> ext{{0, -1, 4}, {0, -1, 4}, {0, -1, 4}};
  auto s = a.alloc_extend(ext);                                // pages 1, 2, 3
  a.free(std::vector<int32_t>(s.begin() + 4, s.begin() + 8));  // page 2
  std::vector<Ext> one{{0, -1, 6}};
  EXPECT_EQ(a.alloc_extend(one), concat(range(8, 12), range(16, 18)));  // page 2 again, then page 4
  a.reset();
  EXPECT_EQ(a.available_pages(), 7);
  EXPECT_EQ(a.alloc_extend(one), concat(range(4, 8), range(8, 10)));
}

TEST(KvSlotAllocator, BadLastLocIsAnError) {
  SlotAllocator a(4 * 8, 4);
  std::vector<Ext> ext{{0, -1, 6}, {0, -1, 2}};
  auto s = a.alloc_extend(ext);  // req0: 4..9, req1: 12, 13
  const int64_t avail = a.available_pages();
  std::vector<Ext> wrong_offset{{6, 8, 1}};
  expect_error([&] { a.alloc_extend(wrong_offset); }, {"request 0", "last_loc 8", "offset"});
  std::vector<Ext> not_allocated{{2, 21, 1}};
  expect_error([&] { a.alloc_extend(not_allocated); }, {"not allocated"});
  std::vector<Ext> prefix0{{0, 5, 1}};
  expect_error([&] { a.alloc_extend(prefix0); }, {"prefix_len 0", "last_loc 5"});
  std::vector<Ext> negative{{0, -1, -1}};
  expect_error([&] { a.alloc_extend(negative); }, {"extend_len -1"});
  std::vector<Ext> same_page{{6, 9, 1}, {6, 9, 1}};
  expect_error([&] { a.alloc_extend(same_page); }, {"same page 2"});
  std::vector<Dec> empty{{0, -1}};
  expect_error([&] { a.alloc_decode(empty); }, {"seq_len 0"});
  EXPECT_EQ(a.available_pages(), avail);
  (void)s;
}

// Random extends/decodes/frees: every live token sits at in-page offset (position % page_size),
// live slots are distinct, never in page 0, pages belong to one request, and counts add up.
TEST(KvSlotAllocator, RandomizedInvariants) {
  auto g = rng_for_test();
  for (int page_size : {1, 3, 16}) {
    SlotAllocator a(int64_t(page_size) * 40, page_size);
    std::map<int, std::vector<int32_t>> live;  // request id -> its slots
    int next_id = 0;
    for (int step = 0; step < 300; ++step) {
      int kind = int(g() % 3);
      if (kind == 0 || live.empty()) {  // extend a batch: some new requests, some existing
        std::vector<Ext> batch;
        std::vector<int> ids;
        for (auto& [id, slots] : live)
          if (g() % 3 == 0) {
            batch.push_back({int64_t(slots.size()), slots.back(), int64_t(g() % 7)});
            ids.push_back(id);
          }
        for (int k = int(g() % 3); k > 0; --k) {
          batch.push_back({0, -1, 1 + int64_t(g() % 9)});
          ids.push_back(-1);
        }
        const int64_t before = a.available_pages();
        int64_t needed = 0;  // fresh pages this batch needs, counted independently
        for (const Ext& e : batch) {
          int64_t room = e.prefix_len % page_size ? page_size - e.prefix_len % page_size : 0;
          int64_t rest = std::max<int64_t>(0, e.extend_len - room);
          needed += (rest + page_size - 1) / page_size;
        }
        std::vector<int32_t> out;
        try {
          out = a.alloc_extend(batch);
        } catch (const Error& e) {
          // Only exhaustion may fail here, and it must leave the state as it was.
          ASSERT_GT(needed, before) << e.what();
          ASSERT_NE(std::string(e.what()).find("out of KV cache pages"), std::string::npos) << e.what();
          ASSERT_EQ(a.available_pages(), before);
          continue;
        }
        ASSERT_LE(needed, before);
        ASSERT_EQ(a.available_pages(), before - needed);
        size_t pos = 0;
        for (size_t r = 0; r < batch.size(); ++r) {
          int id = ids[r] >= 0 ? ids[r] : next_id++;
          auto& slots = live[id];
          for (int64_t t = 0; t < batch[r].extend_len; ++t) slots.push_back(out[pos++]);
          if (slots.empty()) live.erase(id);
        }
        ASSERT_EQ(pos, out.size());
      } else if (kind == 1) {  // decode every live request
        std::vector<Dec> batch;
        for (auto& [id, slots] : live) batch.push_back({int64_t(slots.size()), slots.back()});
        int64_t needed = 0;
        for (const Dec& d : batch) needed += d.seq_len % page_size == 0;
        const int64_t before = a.available_pages();
        try {
          auto out = a.alloc_decode(batch);
          ASSERT_EQ(a.available_pages(), before - needed);
          size_t pos = 0;
          for (auto& [id, slots] : live) slots.push_back(out[pos++]);
        } catch (const Error& e) {
          ASSERT_GT(needed, before) << e.what();
          ASSERT_EQ(a.available_pages(), before);
        }
      } else {  // free a random request
        auto it = live.begin();
        std::advance(it, g() % live.size());
        a.free(it->second);
        live.erase(it);
      }
      // Invariants.
      std::set<int32_t> seen;
      std::map<int64_t, int> page_owner;
      for (auto& [id, slots] : live) {
        for (size_t t = 0; t < slots.size(); ++t) {
          int32_t s = slots[t];
          ASSERT_TRUE(seen.insert(s).second) << "slot " << s << " handed out twice";
          ASSERT_GE(s / page_size, 1);
          ASSERT_EQ(s % page_size, int32_t(t % page_size));
          ASSERT_TRUE(a.page_allocated(s / page_size));
          auto [it, fresh] = page_owner.emplace(s / page_size, id);
          ASSERT_EQ(it->second, id) << "page shared by two requests";
          (void)fresh;
        }
      }
      ASSERT_EQ(a.available_pages() + int64_t(page_owner.size()), a.num_pages() - 1);
    }
  }
}

// ---- ReqToTokenPool

TEST(KvReqToTokenPool, AllocFreeAndErrors) {
  ReqToTokenPool p(3, 16, Device::cpu());
  EXPECT_EQ(p.table().shape_string(), "[3, 16]");
  EXPECT_EQ(p.table().dtype, DType::i32);
  for (int64_t i = 0; i < 3 * 16; ++i) EXPECT_EQ(p.table().ptr<int32_t>()[i], 0);  // starts zeroed
  EXPECT_EQ(p.available(), 3);
  EXPECT_EQ(p.alloc(), 0);
  EXPECT_EQ(p.alloc(), 1);
  EXPECT_EQ(p.alloc(), 2);
  EXPECT_EQ(p.available(), 0);
  expect_error([&] { p.alloc(); }, {"all 3 request slots are in use"});
  p.free(1);
  EXPECT_FALSE(p.is_allocated(1));
  expect_error([&] { p.free(1); }, {"request 1", "double free"});
  expect_error([&] { p.free(3); }, {"out of range"});
  expect_error([&] { p.free(-1); }, {"out of range"});
  EXPECT_EQ(p.alloc(), 1);  // lowest free first
  expect_error([] { ReqToTokenPool(0, 4, Device::cpu()); }, {"size"});
  expect_error([] { ReqToTokenPool(2, 0, Device::cpu()); }, {"max_context_len"});
}

TEST(KvReqToTokenPool, WriteRowsAndBounds) {
  ReqToTokenPool p(4, 8, Device::cpu());
  int64_t r0 = p.alloc(), r1 = p.alloc();
  std::vector<int32_t> a{5, 6, 7}, b{40, 41};
  p.write(r1, 0, a);
  p.write(r1, 3, b);
  p.write(r0, 6, b);  // ends exactly at max_context_len
  const int32_t* t = p.table().ptr<int32_t>();
  std::vector<int32_t> row1(t + 8 * r1, t + 8 * r1 + 8), row0(t + 8 * r0, t + 8 * r0 + 8);
  EXPECT_EQ(row1, (std::vector<int32_t>{5, 6, 7, 40, 41, 0, 0, 0}));
  EXPECT_EQ(row0, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 40, 41}));
  EXPECT_EQ(p.row(r1).ptr<int32_t>()[3], 40);
  expect_error([&] { p.write(r0, 7, b); }, {"do not fit in max_context_len 8"});
  expect_error([&] { p.write(r0, -1, b); }, {"do not fit"});
  expect_error([&] { p.write(2, 0, b); }, {"request 2 is not allocated"});
  expect_error([&] { p.write(9, 0, b); }, {"out of range"});
  expect_error([&] { p.row(4); }, {"out of range"});
  EXPECT_EQ(row0[7], 41);  // failed writes changed nothing
  EXPECT_EQ(t[8 * r0 + 7], 41);
  p.write(r0, 8, std::span<const int32_t>{});  // empty write at the end is fine
}
