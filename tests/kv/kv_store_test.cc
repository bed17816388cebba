// KvStore / KvSequence: attention over mixed-format blocks equals the scalar reference; f16 blocks
// equal the dense fp16 cache; exact byte accounting (held = what the allocators hand out); no
// dequantized copy of the cache (every allocator counted); budget errors and rollback leave the
// sequence as it was.
#include "kv/kv_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "kv/dense_kv_cache.h"
#include "kv/kv_kernels.h"  // ScopedKvInt8Scores
#include "util/aligned_alloc.h"  // GetAlignedAllocStats: the KV layer's aligned buffers
#include "util/fp16.h"

// Counting operator new: live bytes (requested sizes, kept in a 16-byte header) and their peak.
// With GetAlignedAllocStats this sees every byte the KV layer allocates.
static std::atomic<size_t> g_new_live{0}, g_new_peak{0};
void* operator new(size_t n) {
  auto* p = static_cast<char*>(std::malloc(n + 16));
  if (!p) throw std::bad_alloc();
  *reinterpret_cast<size_t*>(p) = n;
  const size_t live = g_new_live.fetch_add(n) + n;
  for (size_t peak = g_new_peak.load(); live > peak && !g_new_peak.compare_exchange_weak(peak, live);) {
  }
  return p + 16;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  char* h = static_cast<char*>(p) - 16;
  g_new_live.fetch_sub(*reinterpret_cast<size_t*>(h));
  std::free(h);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }
// Arrays too (sanitizers replace new[] on their own otherwise, and the pool's slot chunks are arrays).
void* operator new[](size_t n) { return operator new(n); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }

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
  // The float kernels held to the float bound (tq4 keys' int8 scores: kv_int8_kernels_test.cc).
  const ScopedKvInt8Scores float_scores(false);
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

// Measured bytes are what the allocators hand out: the pool's payloads equal the blocks' costs,
// and the store's running count (held) equals a walk of the live objects (Usage) at every step.
TEST(KvStore, AccountingIsExact) {
  CyclePolicy policy({{KvFormat::kQ8, KvFormat::kTq3}, {KvFormat::kKivi2, KvFormat::kF16}});
  KvStore store({.n_layer = 3, .shape = kShape, .window = WindowFormat::kQ8}, &policy);
  ThreadPool pool(1);
  std::mt19937 rng(3);
  auto a = store.NewSequence(200);
  auto b = store.NewSequence(200);
  for (auto* s : {a.get(), b.get()}) {
    Batch x = RandomBatch(150, rng);
    std::vector<float> out(150 * kShape.q_dim());
    for (size_t l = 0; l < 3; ++l)
      ASSERT_TRUE(s->AppendAndAttend(l, 150, x.k.data(), x.v.data(), x.q.data(), out.data(), pool).ok());
    EXPECT_EQ(store.held(), store.Usage().total()) << "mid-batch";
    s->Commit(150);
    EXPECT_EQ(store.held(), store.Usage().total());
  }
  size_t expect = 0, blocks = 0;
  for (auto* s : {a.get(), b.get()})
    for (size_t l = 0; l < 3; ++l)
      for (BlockId id : s->blocks(l)) {
        const BlockMeta& m = store.pool().meta(id);
        EXPECT_EQ(m.k_bytes, KvBlockBytes(m.k_format, KvSide::kKey, store.geometry()));
        EXPECT_EQ(m.v_bytes, KvBlockBytes(m.v_format, KvSide::kValue, store.geometry()));
        expect += AlignedBytes(m.k_bytes + m.v_bytes);  // the payload as allocated
        ++blocks;
      }
  EXPECT_EQ(blocks, 2u * 3 * (150 / 32));
  EXPECT_EQ(store.seal_stats().blocks, blocks);  // every sealed block counted once, with its time
  EXPECT_GT(store.seal_stats().seconds, 0.0);
  EXPECT_EQ(store.pool().payload_bytes(), expect);
  const KvUsage u = store.Usage();
  EXPECT_EQ(u.block_bytes, expect + store.pool().table_bytes());
  // The projection's per-block cost covers payload and slot; the table's free slots are its slack.
  EXPECT_LE(u.block_bytes, blocks * BlockPool::BlockCost(0, 0) + expect + store.pool().SlackAllowance());
  EXPECT_EQ(u.window_bytes, a->window_bytes() + b->window_bytes());
  EXPECT_EQ(u.tokens, 300u);
  EXPECT_GE(store.high_water(), store.held());
  a.reset();
  EXPECT_LT(store.pool().payload_bytes(), expect);
  EXPECT_EQ(store.held(), store.Usage().total());
  b.reset();
  EXPECT_EQ(store.pool().payload_bytes(), 0u);
  EXPECT_EQ(store.pool().live_blocks(), 0u);
  EXPECT_EQ(store.held(), store.Usage().scratch_bytes + store.pool().table_bytes());  // nothing of a sequence left
}

// "No dequantized copy of the cache", with every allocator of the KV layer counted (operator new
// above, AlignedAlloc for every buffer and block) from before the store exists: (1) after a
// 4096-token prefill the KV layer holds what Usage reports — no hidden buffer sized during the
// prefill (a dequantized copy kept as scratch would be one); (2) each decode step's transient
// bytes (peak during the step − live before it) stay under 1 % of the cache dequantized to f16.
TEST(KvStore, EveryAllocatorCountedNoDequantizedCopy) {
  CyclePolicy policy({{KvFormat::kTq3, KvFormat::kTq3}, {KvFormat::kKivi2, KvFormat::kKivi4}});
  constexpr size_t kLayers = 2, kTokens = 4096;
  ThreadPool pool(1);
  std::mt19937 rng(4);
  Batch pre = RandomBatch(512, rng);
  std::vector<float> out(512 * kShape.q_dim());
  std::vector<Batch> steps;
  for (int i = 0; i < 40; ++i) steps.push_back(RandomBatch(1, rng));  // crosses a block boundary
  const size_t new_base = g_new_live.load(), aligned_base = GetAlignedAllocStats().live;
  {
    KvStore store({.n_layer = kLayers, .shape = kShape, .window = WindowFormat::kQ8}, &policy);
    auto seq = store.NewSequence(kTokens + 64);
    for (size_t done = 0; done < kTokens; done += 512) {  // the engine's prefill chunks
      for (size_t l = 0; l < kLayers; ++l)
        ASSERT_TRUE(seq->AppendAndAttend(l, 512, pre.k.data(), pre.v.data(), pre.q.data(), out.data(), pool).ok());
      seq->Commit(512);
    }
    const auto kv_live = [&] { return (g_new_live.load() - new_base) + (GetAlignedAllocStats().live - aligned_base); };
    const size_t reported = store.Usage().total();
    EXPECT_EQ(store.held(), reported);
    // std::set nodes of the store's live list are the only unreported allocations (~48 B each).
    EXPECT_LE(kv_live(), reported + 256) << "the KV layer holds bytes it does not report";
    EXPECT_GE(kv_live() + 256, reported) << "the KV layer reports bytes it does not hold";
    const size_t dequantized_f16 = kTokens * kShape.kv_dim() * 2 * sizeof(uint16_t) * kLayers;  // K and V
    size_t worst = 0;
    for (const Batch& one : steps) {
      const size_t new_before = g_new_live.load(), aligned_before = GetAlignedAllocStats().live;
      g_new_peak = new_before;
      ResetAlignedAllocPeak();
      for (size_t l = 0; l < kLayers; ++l)
        ASSERT_TRUE(seq->AppendAndAttend(l, 1, one.k.data(), one.v.data(), one.q.data(), out.data(), pool).ok());
      seq->Commit(1);
      const size_t transient = (g_new_peak.load() - new_before) + (GetAlignedAllocStats().peak - aligned_before);
      worst = std::max(worst, transient);
    }
    std::printf("decode step: at most %zu transient bytes (%.2f %% of the %zu-byte f16 cache)\n", worst,
                100.0 * worst / dequantized_f16, dequantized_f16);
    EXPECT_LT(worst, dequantized_f16 / 100);
  }
  EXPECT_EQ(g_new_live.load(), new_base);  // and everything goes back
  EXPECT_EQ(GetAlignedAllocStats().live, aligned_base);
}

// A budget failure at the third block of a batch: that layer is as it was (the blocks sealed
// before it in the same call are given back), nothing is held by the sequence's batch, and the
// message names the budget. The budget is the measured peak of the same batch without a budget,
// minus one block: everything else fits.
TEST(KvStore, BudgetErrorLeavesSequenceUnchanged) {
  CyclePolicy policy({{KvFormat::kF16, KvFormat::kF16}});
  const size_t one_block = BlockPool::BlockCost(KvBlockBytes(KvFormat::kF16, KvSide::kKey, {2, 64}),
                                                KvBlockBytes(KvFormat::kF16, KvSide::kValue, {2, 64}));
  std::mt19937 rng(5);
  Batch b = RandomBatch(100, rng);  // 3 blocks
  std::vector<float> out(100 * kShape.q_dim());
  ThreadPool pool(1);
  size_t peak = 0;
  {
    KvStore free_store({.n_layer = 1, .shape = kShape}, &policy);
    auto seq = free_store.NewSequence(1000);
    ASSERT_TRUE(seq->AppendAndAttend(0, 100, b.k.data(), b.v.data(), b.q.data(), out.data(), pool).ok());
    peak = free_store.high_water();
  }
  KvStore store({.n_layer = 1, .shape = kShape, .budget_bytes = peak - one_block}, &policy);
  auto seq = store.NewSequence(1000);
  const size_t before = store.held() - store.pool().table_bytes();  // slots made stay with the pool
  Status s = seq->AppendAndAttend(0, 100, b.k.data(), b.v.data(), b.q.data(), out.data(), pool);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("KV budget exhausted: a sealed block"), std::string::npos) << s.message();
  seq->Rollback();
  EXPECT_EQ(store.pool().payload_bytes(), 0u);
  EXPECT_TRUE(seq->blocks(0).empty());
  EXPECT_EQ(seq->size(), 0u);
  EXPECT_EQ(store.held() - store.pool().table_bytes(), before);
  EXPECT_LE(store.high_water(), store.budget());
}

// Formats by layer (the last layer f16, much larger than the others), recording the store's
// held bytes each time a block's formats are asked for (the moment before it is allocated).
class ByLayerPolicy : public PrecisionPolicy {
 public:
  explicit ByLayerPolicy(size_t layers) : layers_(layers) {}
  BlockFormats FormatFor(const BlockInfo& info) override {
    if (store) asked.push_back({info.layer, store->held()});
    if (info.layer + 1 == layers_) return BlockFormats{};
    return info.layer % 2 ? BlockFormats{.k = KvFormat::kQ8, .v = KvFormat::kKivi4}
                          : BlockFormats{.k = KvFormat::kTq4, .v = KvFormat::kTq3};
  }
  const KvStore* store = nullptr;
  std::vector<std::pair<size_t, size_t>> asked;  // (layer, held) per block

 private:
  size_t layers_;
};

// All or nothing across layers: a batch whose last layer's block does not fit the budget fails
// after the first layers took the batch; Rollback gives the sequence back exactly what it read and
// held before (tables, window rows), and the same batch appended again — here in a store where it
// fits — gives bit for bit what a twin that never failed gets. The budget is measured: the held
// bytes at the moment the last layer's first block of the second batch is asked for, plus that
// block, minus one byte.
TEST(KvStore, RollbackRestoresEveryLayer) {
  constexpr size_t kLayers = 3;
  for (WindowFormat wf : {WindowFormat::kF16, WindowFormat::kQ8}) {
    ThreadPool pool(1);
    std::mt19937 rng(9);
    Batch first = RandomBatch(45, rng), second = RandomBatch(40, rng);
    std::vector<float> out(45 * kShape.q_dim()), want(45 * kShape.q_dim());
    const auto feed = [&](KvSequence& s, const Batch& x, float* o) -> Status {
      const size_t n = x.k.size() / kShape.kv_dim();
      for (size_t l = 0; l < kLayers; ++l)
        CHORUS_RETURN_IF_ERROR(s.AppendAndAttend(l, n, x.k.data(), x.v.data(), x.q.data(), o, pool));
      return Status::Ok();
    };
    // Probe: where the second batch's last layer asks for its block.
    ByLayerPolicy probe_policy(kLayers);
    KvStore probe({.n_layer = kLayers, .shape = kShape, .window = wf}, &probe_policy);
    probe_policy.store = &probe;
    auto p = probe.NewSequence(200);
    ASSERT_TRUE(feed(*p, first, out.data()).ok());
    p->Commit(45);
    probe_policy.asked.clear();
    ASSERT_TRUE(feed(*p, second, out.data()).ok());
    size_t held_at = 0;
    for (auto [layer, held] : probe_policy.asked)
      if (layer + 1 == kLayers) {
        held_at = held;
        break;
      }
    ASSERT_GT(held_at, 0u);
    const size_t f16_block = BlockPool::BlockCost(KvBlockBytes(KvFormat::kF16, KvSide::kKey, probe.geometry()),
                                                  KvBlockBytes(KvFormat::kF16, KvSide::kValue, probe.geometry()));
    const size_t budget = held_at + f16_block - 1;

    ByLayerPolicy policy(kLayers), twin_policy(kLayers);
    KvStore store({.n_layer = kLayers, .shape = kShape, .budget_bytes = budget, .window = wf}, &policy);
    KvStore twin_store({.n_layer = kLayers, .shape = kShape, .window = wf}, &twin_policy);
    auto seq = store.NewSequence(200), twin = twin_store.NewSequence(200);
    ASSERT_TRUE(feed(*seq, first, out.data()).ok());
    seq->Commit(45);
    ASSERT_TRUE(feed(*twin, first, want.data()).ok());
    twin->Commit(45);
    const size_t held_before = store.held(), window_before = seq->window_bytes();
    std::vector<std::vector<BlockId>> tables_before;
    for (size_t l = 0; l < kLayers; ++l) tables_before.push_back(seq->blocks(l));
    Status s = feed(*seq, second, out.data());
    ASSERT_FALSE(s.ok()) << "the last layer's block should not fit";
    EXPECT_NE(s.message().find("KV budget exhausted"), std::string::npos) << s.message();
    EXPECT_GT(seq->blocks(0).size(), tables_before[0].size()) << "layer 0 took the batch before the failure";
    seq->Rollback();
    EXPECT_EQ(seq->size(), 45u);
    for (size_t l = 0; l < kLayers; ++l) EXPECT_EQ(seq->blocks(l), tables_before[l]) << "layer " << l;
    EXPECT_EQ(seq->window_bytes(), window_before);
    EXPECT_EQ(store.held(), held_before);
    EXPECT_EQ(store.held(), store.Usage().total());
    EXPECT_LE(store.high_water(), budget);
    // The rolled-back sequence, read by the next batch, is the twin: moved into a store without
    // a budget is not possible, so compare what both attend now — one more token each.
    Batch probe_tok = RandomBatch(1, rng);
    std::vector<float> o1(kShape.q_dim()), o2(kShape.q_dim());
    for (size_t l = 0; l < kLayers; ++l) {
      ASSERT_TRUE(seq->AppendAndAttend(l, 1, probe_tok.k.data(), probe_tok.v.data(), probe_tok.q.data(), o1.data(), pool).ok());
      ASSERT_TRUE(twin->AppendAndAttend(l, 1, probe_tok.k.data(), probe_tok.v.data(), probe_tok.q.data(), o2.data(), pool).ok());
      for (size_t i = 0; i < kShape.q_dim(); ++i) ASSERT_EQ(o1[i], o2[i]) << WindowFormatName(wf) << " layer " << l;
    }
    seq->Commit(1);
    twin->Commit(1);
  }
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
