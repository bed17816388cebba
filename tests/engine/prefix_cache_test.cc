// PrefixCache: chained keys depend on every earlier token and the salt; match stops at the first
// miss; eviction frees least-recently-used leaves only, never a block a sequence reads or a pinned
// one, and leaves every cached key reachable; the pool's bytes follow.
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace chorus {
namespace {

constexpr size_t kLayers = 3;

struct Fixture {
  BlockPool pool;
  PrefixCache cache{pool};
  // Blocks (one per layer) as a sequence would seal them; the returned ids carry the sequence's ref.
  std::vector<BlockId> Seal() {
    std::vector<BlockId> ids;
    for (size_t l = 0; l < kLayers; ++l) ids.push_back(pool.Allocate(KvFormat::kF16, 100, KvFormat::kF16, 60).value());
    return ids;
  }
  void Release(const std::vector<BlockId>& ids) {
    for (BlockId id : ids) pool.Unref(id);
  }
  // Inserts a chain for `tokens`, as a finished request leaves it: the cache's refs only.
  std::vector<uint64_t> InsertChain(const std::vector<int32_t>& tokens, uint64_t salt = 7) {
    auto keys = PrefixCache::Keys(tokens, salt);
    for (size_t b = 0; b < keys.size(); ++b) {
      auto ids = Seal();
      cache.Insert(keys[b], b ? keys[b - 1] : 0, ids);
      Release(ids);
    }
    return keys;
  }
};

std::vector<int32_t> Tokens(size_t n, int32_t seed) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), seed);
  return t;
}

TEST(PrefixCache, KeysChainEveryEarlierToken) {
  auto a = Tokens(96, 0), b = a;
  b[5] = 999;  // differs in block 0 only
  auto ka = PrefixCache::Keys(a, 1), kb = PrefixCache::Keys(b, 1);
  ASSERT_EQ(ka.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(ka[i], kb[i]) << i;  // later blocks differ too: chained
  EXPECT_NE(PrefixCache::Keys(a, 2)[0], ka[0]);                   // the salt (formats, model) changes every key
  EXPECT_EQ(PrefixCache::Keys(Tokens(95, 0), 1).size(), 2u);      // only full blocks have keys
  EXPECT_EQ(PrefixCache::Keys(a, 1), ka);
}

TEST(PrefixCache, MatchStopsAtTheFirstMiss) {
  Fixture f;
  auto keys = f.InsertChain(Tokens(128, 0));
  EXPECT_EQ(f.cache.Match(keys), 4u);
  auto other = PrefixCache::Keys(Tokens(128, 0), 8);
  EXPECT_EQ(f.cache.Match(other), 0u);
  auto longer = PrefixCache::Keys(Tokens(200, 0), 7);
  EXPECT_EQ(f.cache.Match(longer), 4u);
  EXPECT_FALSE(f.cache.Insert(keys[0], 0, f.Seal()));  // present: refused, nothing changes
  EXPECT_FALSE(f.cache.Insert(12345, 999, f.Seal()));  // unknown parent: refused
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesAndFreesPoolBytes) {
  Fixture f;
  const size_t before = f.pool.payload_bytes();
  auto a = f.InsertChain(Tokens(96, 0));
  auto b = f.InsertChain(Tokens(96, 1000));
  f.cache.Touch(a);  // b is now the least recently used
  const size_t payload = (f.pool.payload_bytes() - before) / 6;
  const size_t per_block = payload + kLayers * BlockPool::BlockCost(0, 0);  // and its slots (the pool keeps them)
  EXPECT_EQ(f.cache.EvictableBytes(), 6 * per_block);
  EXPECT_EQ(f.cache.Evict(1), per_block);  // one leaf of b
  EXPECT_EQ(f.cache.Match(b), 2u);         // b's first blocks stay reachable
  EXPECT_EQ(f.cache.Match(a), 3u);
  EXPECT_EQ(f.cache.Evict(2 * per_block), 2 * per_block);  // the rest of b, leaf first
  EXPECT_EQ(f.cache.Match(b), 0u);
  EXPECT_EQ(f.cache.Match(a), 3u);
  EXPECT_EQ(f.pool.payload_bytes(), before + 3 * payload);
  EXPECT_EQ(f.cache.Stats().evicted_blocks, 3u);
}

TEST(PrefixCache, NeverEvictsWhatASequenceReadsOrAContextPins) {
  Fixture f;
  auto a = f.InsertChain(Tokens(64, 0));
  auto b = f.InsertChain(Tokens(64, 500));
  // A running request borrowed a's blocks: pool refs 2.
  std::vector<BlockId> borrowed;
  for (uint64_t k : a)
    for (BlockId id : *f.cache.Blocks(k)) f.pool.Ref(id), borrowed.push_back(id);
  f.cache.Pin(b);
  EXPECT_EQ(f.cache.EvictableBytes(), 0u);
  EXPECT_EQ(f.cache.Evict(SIZE_MAX), 0u);
  EXPECT_EQ(f.cache.Match(a), 2u);
  auto s = f.cache.Stats();
  EXPECT_GT(s.pinned_bytes, 0u);
  EXPECT_GT(s.active_bytes, 0u);
  EXPECT_EQ(s.idle_bytes, 0u);
  f.Release(borrowed);  // the request finished
  f.cache.Unpin(b);
  EXPECT_EQ(f.cache.Evict(SIZE_MAX), s.pinned_bytes + s.active_bytes);
  EXPECT_EQ(f.cache.size(), 0u);
}

TEST(PrefixCache, APinnedChildKeepsItsParents) {
  Fixture f;
  auto a = f.InsertChain(Tokens(96, 0));
  f.cache.Pin(std::span<const uint64_t>(a).subspan(2, 1));  // only the last block pinned
  EXPECT_EQ(f.cache.EvictableBytes(), 0u);  // its parents cannot go without orphaning it
  EXPECT_EQ(f.cache.Evict(SIZE_MAX), 0u);
  EXPECT_EQ(f.cache.Match(a), 3u);
}

TEST(PrefixCache, PendingKeysClearOnInsertOrOwner) {
  Fixture f;
  auto keys = PrefixCache::Keys(Tokens(96, 0), 7);
  f.cache.MarkPending(1, keys);
  EXPECT_TRUE(f.cache.IsPending(keys[0]));
  auto ids = f.Seal();
  f.cache.Insert(keys[0], 0, ids);
  f.Release(ids);
  EXPECT_FALSE(f.cache.IsPending(keys[0]));
  EXPECT_TRUE(f.cache.IsPending(keys[1]));
  f.cache.MarkPending(2, keys);  // another owner cannot take keys already pending
  f.cache.ClearPending(2);
  EXPECT_TRUE(f.cache.IsPending(keys[1]));
  f.cache.ClearPending(1);
  EXPECT_FALSE(f.cache.IsPending(keys[2]));
}

// Random churn: inserts, borrows, pins and evictions; after each operation the pool holds exactly
// the live blocks, every cached key is reachable from its first block, and eviction never frees
// a borrowed block (the borrower's ids stay valid: Ref/Unref would CHECK-fail otherwise).
TEST(PrefixCache, RandomChurnKeepsInvariants) {
  Fixture f;
  std::mt19937 rng(42);
  std::vector<std::vector<uint64_t>> chains;
  std::vector<std::vector<BlockId>> borrows;
  for (int op = 0; op < 2000; ++op) {
    const int what = rng() % 5;
    if (what == 0 || chains.empty()) {
      const size_t n = 32 * (1 + rng() % 6);
      auto t = Tokens(n, int32_t(rng() % 4) * 100);  // shared starts across chains
      auto keys = PrefixCache::Keys(t, 7);
      for (size_t b = f.cache.Match(keys); b < keys.size(); ++b) {
        auto ids = f.Seal();
        ASSERT_TRUE(f.cache.Insert(keys[b], b ? keys[b - 1] : 0, ids));
        f.Release(ids);
      }
      chains.push_back(keys);
    } else if (what == 1) {
      auto& keys = chains[rng() % chains.size()];
      std::vector<BlockId> got;
      for (size_t b = 0; b < f.cache.Match(keys); ++b)
        for (BlockId id : *f.cache.Blocks(keys[b])) f.pool.Ref(id), got.push_back(id);
      borrows.push_back(got);
    } else if (what == 2 && !borrows.empty()) {
      const size_t i = rng() % borrows.size();
      f.Release(borrows[i]);
      borrows.erase(borrows.begin() + i);
    } else {
      f.cache.Evict(size_t(rng() % 5000));
    }
    for (const auto& keys : chains) {
      const size_t m = f.cache.Match(keys);
      for (size_t b = m; b < keys.size(); ++b) ASSERT_EQ(f.cache.Blocks(keys[b]), nullptr) << "orphaned key";
    }
  }
  for (auto& b : borrows) f.Release(b);
  f.cache.Evict(SIZE_MAX);
  EXPECT_EQ(f.cache.size(), 0u);
  EXPECT_EQ(f.pool.live_blocks(), 0u);
}

}  // namespace
}  // namespace chorus

namespace chorus {
namespace {

TEST(PrefixCache, ContinuationsAndAliases) {
  // A chain's continuation: an own block under a continuation key, then an alias of another
  // chain's block (shift, hole). Exact Match never finds them; an alias dies with its source; an
  // alias holds no bytes and reports never list continuation blocks.
  Fixture f;
  auto src = f.InsertChain(Tokens(64, 500));
  auto exact = f.InsertChain(Tokens(32, 0));
  const auto t = Tokens(96, 7000);
  const uint64_t k1 = PrefixCache::ContinuationKey(exact[0], std::span(t).first(32), 0, 7);
  const uint64_t k2 = PrefixCache::ContinuationKey(k1, std::span(t).subspan(32, 27), 5, 7);
  EXPECT_NE(k1, PrefixCache::ChainKey(exact[0], std::span(t).first(32), 7));
  EXPECT_NE(k2, PrefixCache::ContinuationKey(k1, std::span(t).subspan(32, 27), 4, 7));  // the hole is in the key
  auto own = f.Seal();
  ASSERT_TRUE(f.cache.InsertContinuation(k1, exact[0], own));
  f.Release(own);
  EXPECT_FALSE(f.cache.InsertAlias(k2, k1, /*source=*/12345, 40, 5));  // no such source
  ASSERT_TRUE(f.cache.InsertAlias(k2, k1, src[1], 40, 5));
  const auto hit = f.cache.FindContinuation(k2);
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit->ids, *f.cache.Blocks(src[1]));
  EXPECT_EQ(hit->shift, 40);
  EXPECT_EQ(hit->skip, 5);
  EXPECT_FALSE(f.cache.FindContinuation(src[1]));  // exact blocks are not continuations
  EXPECT_EQ(f.cache.Match(std::vector<uint64_t>{exact[0], k1}), 1u);
  EXPECT_EQ(f.cache.Entries().size(), 3u);  // src (2) + exact (1)
  EXPECT_EQ(f.cache.Stats().blocks, 4u);    // + the own continuation block, not the alias
  // Evicting everything: the alias first or after its source, never a dangling hit.
  f.cache.Evict(SIZE_MAX);
  EXPECT_FALSE(f.cache.FindContinuation(k2));
  EXPECT_EQ(f.cache.size(), 0u);
  EXPECT_EQ(f.cache.Stats().evicted_blocks, 4u);
}

}  // namespace
}  // namespace chorus
