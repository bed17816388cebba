// KvStore / KvSequence: attention over mixed-format blocks equals the scalar reference; f16 blocks
// equal the dense fp16 cache; exact byte accounting; no dequantized copy of the cache; budget errors.
#include "kv/kv_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "kv/dense_kv_cache.h"
#include "util/fp16.h"

// Counting allocator: bytes requested through operator new while counting is on.
static std::atomic<bool> g_counting{false};
static std::atomic<size_t> g_alloc_bytes{0};
void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_alloc_bytes += n;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace chorus {
namespace {

constexpr AttentionShape kShape{.n_head = 6, .n_head_kv = 2, .head_dim = 64};

// Cycles through a list of format pairs, block by block.
class CyclePolicy : public PrecisionPolicy {
 public:
  explicit CyclePolicy(std::vector<std::pair<KvFormat, KvFormat>> f) : f_(std::move(f)) {}
  BlockFormats FormatFor(const BlockInfo& info) override {
    auto [k, v] = f_[(info.block_index + info.layer) % f_.size()];
    BlockFormats b{.k = k, .v = v};
    if (k == KvFormat::kPolyKvPaper) b.k_params.layer_absmax = 8.0f;
    if (v == KvFormat::kPolyKvPaper) b.v_params.layer_absmax = 8.0f;
    return b;
  }

 private:
  std::vector<std::pair<KvFormat, KvFormat>> f_;
};

struct Batch {
  std::vector<float> k, v, q;
};

Batch RandomBatch(size_t n, std::mt19937& rng, const AttentionShape& kShape = kShape) {
  std::normal_distribution<float> nd;
  Batch b;
  b.k.resize(n * kShape.kv_dim());
  b.v.resize(n * kShape.kv_dim());
  b.q.resize(n * kShape.q_dim());
  for (auto& x : b.k) x = nd(rng) * 2.0f;
  for (auto& x : b.v) x = nd(rng);
  for (auto& x : b.q) x = nd(rng) * 0.125f;
  return b;
}

TEST(KvStore, MixedFormatsMatchReference) {
  CyclePolicy policy({{KvFormat::kQ8, KvFormat::kTq3},
                      {KvFormat::kKivi4, KvFormat::kKivi2},
                      {KvFormat::kTq4, KvFormat::kF16},
                      {KvFormat::kF16, KvFormat::kQ8},
                      {KvFormat::kPolyKvPaper, KvFormat::kTq2}});
  KvStore store({.n_layer = 2, .shape = kShape}, &policy);
  auto seq = store.NewSequence(400);
  ThreadPool pool(2);
  std::mt19937 rng(1);
  const KvGeometry g = store.geometry();
  const size_t kv_dim = kShape.kv_dim(), q_dim = kShape.q_dim(), hd = kShape.head_dim;
  std::vector<float> hist_k, hist_v;  // (positions so far, kv_dim): every batch's K/V
  for (size_t n : {37u, 1u, 1u, 64u, 90u, 5u}) {
    Batch b = RandomBatch(n, rng);
    for (size_t layer = 0; layer < 2; ++layer) {
      std::vector<float> out(n * q_dim);
      ASSERT_TRUE(seq->AppendAndAttend(layer, n, b.k.data(), b.v.data(), b.q.data(), out.data(), pool).ok());
      // Check the last token of the batch against the reference over blocks + its native rows.
      const size_t t = n - 1, p = seq->size() + t, nb = p / kBlockTokens;
      std::vector<BlockView> views;
      for (size_t i = 0; i < nb; ++i) {
        const BlockId id = seq->blocks(layer)[i];
        const BlockMeta& m = store.pool().meta(id);
        views.push_back({store.pool().k_data(id), store.pool().v_data(id), m.k_format, m.v_format});
      }
      // Native rows of p's block, fp16-rounded, from the history of every batch so far.
      std::vector<uint16_t> nk, nv;
      const size_t first = nb * kBlockTokens;
      for (size_t pos = first; pos <= p; ++pos)
        for (size_t i = 0; i < kv_dim; ++i) {
          nk.push_back(F32ToF16(pos < hist_k.size() / kv_dim ? hist_k[pos * kv_dim + i] : b.k[(pos - seq->size()) * kv_dim + i]));
          nv.push_back(F32ToF16(pos < hist_v.size() / kv_dim ? hist_v[pos * kv_dim + i] : b.v[(pos - seq->size()) * kv_dim + i]));
        }
      for (uint32_t hk = 0; hk < kShape.n_head_kv; ++hk) {
        const size_t group = kShape.n_head / kShape.n_head_kv;
        std::vector<float> ref(group * hd);
        BlockAttentionRef(g, views, hk, nk.data() + hk * hd, nv.data() + hk * hd, kv_dim, p - first + 1,
                          b.q.data() + t * q_dim + hk * group * hd, group, ref.data());
        for (size_t i = 0; i < group * hd; ++i)
          ASSERT_NEAR(out[t * q_dim + hk * group * hd + i], ref[i], 2e-4f) << "n=" << n << " layer " << layer;
      }
    }
    seq->Commit(n);
    hist_k.insert(hist_k.end(), b.k.begin(), b.k.end());
    hist_v.insert(hist_v.end(), b.v.begin(), b.v.end());
  }
}

// Decode-faithful prefill, bit for bit: a batch of tokens (stacked 32 at a time per KV head)
// gives every token exactly the output it gets when the same tokens arrive one by one.
class PrefillEqualsTokenByToken : public ::testing::TestWithParam<WindowFormat> {};

TEST_P(PrefillEqualsTokenByToken, Bitwise) {
  CyclePolicy policy({{KvFormat::kTq4, KvFormat::kTq3}, {KvFormat::kKivi4, KvFormat::kKivi2}, {KvFormat::kQ8, KvFormat::kF16}});
  KvStore store({.n_layer = 1, .shape = kShape, .window = GetParam()}, &policy);
  auto batched = store.NewSequence(300), single = store.NewSequence(300);
  ThreadPool pool(2);
  std::mt19937 rng(7);
  const size_t q_dim = kShape.q_dim(), kv_dim = kShape.kv_dim();
  for (size_t n : {45u, 130u, 7u}) {
    Batch b = RandomBatch(n, rng);
    std::vector<float> out(n * q_dim), one(q_dim);
    ASSERT_TRUE(batched->AppendAndAttend(0, n, b.k.data(), b.v.data(), b.q.data(), out.data(), pool).ok());
    batched->Commit(n);
    for (size_t t = 0; t < n; ++t) {
      ASSERT_TRUE(single->AppendAndAttend(0, 1, b.k.data() + t * kv_dim, b.v.data() + t * kv_dim, b.q.data() + t * q_dim,
                                          one.data(), pool).ok());
      single->Commit(1);
      for (size_t i = 0; i < q_dim; ++i) ASSERT_EQ(out[t * q_dim + i], one[i]) << "batch of " << n << ", token " << t;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Windows, PrefillEqualsTokenByToken, ::testing::Values(WindowFormat::kF16, WindowFormat::kQ8),
                         [](const auto& info) { return std::string(WindowFormatName(info.param)); });

// A q8 window holds 66 instead of 128 bytes per token and KV head (measured), its rows stay within
// q8's rounding of the f16 window's.
TEST(KvStore, Q8WindowHalvesWindowBytes) {
  CyclePolicy policy({{KvFormat::kTq4, KvFormat::kTq3}});
  KvStore f16({.n_layer = 2, .shape = kShape}, &policy), q8({.n_layer = 2, .shape = kShape, .window = WindowFormat::kQ8}, &policy);
  auto a = f16.NewSequence(100), b = q8.NewSequence(100);
  ThreadPool pool(1);
  std::mt19937 rng(3);
  const size_t n = 45;  // one sealed block + a 13-token window per layer
  Batch x = RandomBatch(n, rng);
  std::vector<float> oa(n * kShape.q_dim()), ob(n * kShape.q_dim());
  for (size_t l = 0; l < 2; ++l) {
    ASSERT_TRUE(a->AppendAndAttend(l, n, x.k.data(), x.v.data(), x.q.data(), oa.data(), pool).ok());
    ASSERT_TRUE(b->AppendAndAttend(l, n, x.k.data(), x.v.data(), x.q.data(), ob.data(), pool).ok());
  }
  a->Commit(n);
  b->Commit(n);
  const size_t granule_rows = 16;  // 13 rounded up to kWindowGranule
  EXPECT_EQ(a->window_bytes(), 2 * 2 * granule_rows * kShape.n_head_kv * kShape.head_dim * 2);
  EXPECT_EQ(b->window_bytes(), 2 * 2 * granule_rows * kShape.n_head_kv * (2 + kShape.head_dim));
  // Outputs of the first block's tokens (they read native rows only): q8 rounding of the rows
  // (step max|x|/127) moves them a little, not a lot. Later tokens read a block sealed from the
  // rounded rows, whose codes may differ by a step.
  double max_diff = 0;
  for (size_t i = 0; i < 32 * kShape.q_dim(); ++i) max_diff = std::max(max_diff, double(std::fabs(oa[i] - ob[i])));
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff, 0.05);
}

class F16BlocksEqualDenseCache : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(F16BlocksEqualDenseCache, SameOutputs) {
  struct F16 : PrecisionPolicy {
    BlockFormats FormatFor(const BlockInfo&) override { return {}; }
  } policy;
  const AttentionShape kShape = GetParam();
  KvStore store({.n_layer = 1, .shape = kShape}, &policy);
  auto seq = store.NewSequence(300);
  DenseKvCache dense(1, 300, kShape);
  ThreadPool pool(1);
  std::mt19937 rng(2);
  for (size_t n : {40u, 1u, 100u, 1u, 1u, 33u}) {
    Batch b = RandomBatch(n, rng, kShape);
    std::vector<float> a(n * kShape.q_dim()), d(n * kShape.q_dim());
    ASSERT_TRUE(seq->AppendAndAttend(0, n, b.k.data(), b.v.data(), b.q.data(), a.data(), pool).ok());
    ASSERT_TRUE(dense.AppendAndAttend(0, n, b.k.data(), b.v.data(), b.q.data(), d.data(), pool).ok());
    seq->Commit(n);
    dense.Commit(n);
    // Same fp16 values, only the summation order differs.
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], d[i], 1e-5f * (1 + std::fabs(d[i]))) << i;
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, F16BlocksEqualDenseCache,
                         ::testing::Values(AttentionShape{6, 2, 64}, AttentionShape{9, 3, 64},
                                           AttentionShape{4, 4, 32}));

TEST(KvStore, AccountingIsExact) {
  CyclePolicy policy({{KvFormat::kQ8, KvFormat::kTq3}, {KvFormat::kKivi2, KvFormat::kF16}});
  KvStore store({.n_layer = 3, .shape = kShape}, &policy);
  ThreadPool pool(1);
  std::mt19937 rng(3);
  auto a = store.NewSequence(200);
  auto b = store.NewSequence(200);
  for (auto* s : {a.get(), b.get()}) {
    Batch x = RandomBatch(150, rng);
    std::vector<float> out(150 * kShape.q_dim());
    for (size_t l = 0; l < 3; ++l)
      ASSERT_TRUE(s->AppendAndAttend(l, 150, x.k.data(), x.v.data(), x.q.data(), out.data(), pool).ok());
    s->Commit(150);
  }
  size_t expect = 0, blocks = 0;
  for (auto* s : {a.get(), b.get()})
    for (size_t l = 0; l < 3; ++l)
      for (BlockId id : s->blocks(l)) {
        const BlockMeta& m = store.pool().meta(id);
        EXPECT_EQ(m.k_bytes, KvBlockBytes(m.k_format, KvSide::kKey, store.geometry()));
        EXPECT_EQ(m.v_bytes, KvBlockBytes(m.v_format, KvSide::kValue, store.geometry()));
        expect += BlockPool::BlockCost(m.k_bytes, m.v_bytes);
        ++blocks;
      }
  EXPECT_EQ(blocks, 2u * 3 * (150 / 32));
  EXPECT_EQ(store.pool().bytes_in_use(), expect);
  const KvUsage u = store.Usage();
  EXPECT_EQ(u.block_bytes, expect);
  EXPECT_EQ(u.window_bytes, a->window_bytes() + b->window_bytes());
  EXPECT_EQ(u.tokens, 300u);
  a.reset();
  EXPECT_LT(store.pool().bytes_in_use(), expect);
  b.reset();
  EXPECT_EQ(store.pool().bytes_in_use(), 0u);
  EXPECT_EQ(store.pool().live_blocks(), 0u);
}

// A decode step allocates a few small objects, never a buffer the size of the (dequantized) cache.
TEST(KvStore, NoDequantizedCopy) {
  CyclePolicy policy({{KvFormat::kTq3, KvFormat::kTq3}, {KvFormat::kKivi2, KvFormat::kKivi4}});
  KvStore store({.n_layer = 1, .shape = kShape}, &policy);
  auto seq = store.NewSequence(4096);
  ThreadPool pool(1);
  std::mt19937 rng(4);
  Batch pre = RandomBatch(2048, rng);
  std::vector<float> out(2048 * kShape.q_dim());
  ASSERT_TRUE(seq->AppendAndAttend(0, 2048, pre.k.data(), pre.v.data(), pre.q.data(), out.data(), pool).ok());
  seq->Commit(2048);
  const size_t dequantized_cache = 2048 * kShape.kv_dim() * 2 * sizeof(float);  // K and V as f32
  for (int step = 0; step < 3; ++step) {
    Batch one = RandomBatch(1, rng);
    g_alloc_bytes = 0;
    g_counting = true;
    ASSERT_TRUE(seq->AppendAndAttend(0, 1, one.k.data(), one.v.data(), one.q.data(), out.data(), pool).ok());
    g_counting = false;
    seq->Commit(1);
    // Only the per-step block list (24 bytes per block) is allocated: ~1.5 KB, < 1 % of a copy.
    EXPECT_LT(g_alloc_bytes.load(), dequantized_cache / 100) << "step " << step;
  }
}

TEST(KvStore, BudgetErrorLeavesSequenceUnchanged) {
  CyclePolicy policy({{KvFormat::kF16, KvFormat::kF16}});
  const size_t one_block = BlockPool::BlockCost(KvBlockBytes(KvFormat::kF16, KvSide::kKey, {2, 64}),
                                                KvBlockBytes(KvFormat::kF16, KvSide::kValue, {2, 64}));
  KvStore store({.n_layer = 1, .shape = kShape, .budget_bytes = 2 * one_block}, &policy);
  auto seq = store.NewSequence(1000);
  ThreadPool pool(1);
  std::mt19937 rng(5);
  Batch b = RandomBatch(100, rng);  // 3 blocks: one more than the budget
  std::vector<float> out(100 * kShape.q_dim());
  Status s = seq->AppendAndAttend(0, 100, b.k.data(), b.v.data(), b.q.data(), out.data(), pool);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("KV budget"), std::string::npos) << s.message();
  EXPECT_EQ(store.pool().bytes_in_use(), 0u);
  EXPECT_TRUE(seq->blocks(0).empty());
  EXPECT_EQ(seq->size(), 0u);
}

TEST(KvStore, ContextOverflowIsAnError) {
  CyclePolicy policy({{KvFormat::kQ8, KvFormat::kQ8}});
  KvStore store({.n_layer = 1, .shape = kShape}, &policy);
  auto seq = store.NewSequence(10);
  ThreadPool pool(1);
  std::mt19937 rng(6);
  Batch b = RandomBatch(11, rng);
  std::vector<float> out(11 * kShape.q_dim());
  Status s = seq->AppendAndAttend(0, 11, b.k.data(), b.v.data(), b.q.data(), out.data(), pool);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context overflow"), std::string::npos);
}

}  // namespace
}  // namespace chorus
