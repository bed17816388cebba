// Sliding-window layers of the KV store (KvStoreOptions::layer_window): a local layer's token at
// position p attends exactly positions (p - W, p] — masked per token inside a partly covered
// block —, decode-faithful prefill stays bit-identical to token-by-token decode, a batched step
// over a shared prefix equals each agent alone, and blocks no reader's window reaches are freed
// at once (and never read again).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kv/kv_kernels.h"  // ScopedKvInt8Scores
#include "kv/dense_kv_cache.h"
#include "kv/kv_batch.h"
#include "kv/kv_store.h"
#include "util/fp16.h"

namespace chorus {
namespace {

constexpr AttentionShape kShape{.n_head = 4, .n_head_kv = 2, .head_dim = 64};
constexpr uint32_t kWindow = 80;  // not a multiple of 32: the edge cuts through blocks
const std::vector<uint32_t> kWindows = {kWindow, 0};  // layer 0 local, layer 1 global

class CyclePolicy : public PrecisionPolicy {
 public:
  explicit CyclePolicy(std::vector<std::pair<KvFormat, KvFormat>> f) : f_(std::move(f)) {}
  BlockFormats FormatFor(const BlockInfo& info) override {
    auto [k, v] = f_[(info.block_index + info.layer) % f_.size()];
    return BlockFormats{.k = k, .v = v};
  }

 private:
  std::vector<std::pair<KvFormat, KvFormat>> f_;
};

struct Rows {
  std::vector<float> k, v, q;
};

Rows RandomRows(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Rows r{std::vector<float>(n * kShape.kv_dim()), std::vector<float>(n * kShape.kv_dim()),
         std::vector<float>(n * kShape.q_dim())};
  for (auto& x : r.k) x = nd(rng) * 2.0f;
  for (auto& x : r.v) x = nd(rng);
  for (auto& x : r.q) x = nd(rng) * 0.125f;
  return r;
}

// Runs rows through both layers of seq (out: layer-major (2, n, q_dim)) and commits them.
std::vector<float> Step(SequenceKv& seq, const Rows& r, size_t n, ThreadPool& pool) {
  std::vector<float> out(2 * n * kShape.q_dim());
  for (size_t l = 0; l < 2; ++l)
    EXPECT_TRUE(seq.AppendAndAttend(l, n, r.k.data(), r.v.data(), r.q.data(), out.data() + l * n * kShape.q_dim(), pool)
                    .ok());
  seq.Commit(n);
  return out;
}

// Catches: a window edge off by one, a partly covered block not masked (or masked for the wrong
// rows), a local layer attending everything; f16 blocks must equal the fp16 dense reference,
// which masks by position (DenseKvCache with the same windows).
TEST(SlidingWindow, F16BlocksEqualDenseWindowedReference) {
  CyclePolicy f16({{KvFormat::kF16, KvFormat::kF16}});
  KvStore store({.n_layer = 2, .shape = kShape, .layer_window = kWindows}, &f16);
  DenseKvCache dense(2, 400, kShape, kWindows);
  auto seq = store.NewSequence(400);
  ThreadPool pool(2);
  std::mt19937 rng(3);
  for (size_t n : {45u, 130u, 1u, 1u, 7u, 64u, 33u}) {
    Rows r = RandomRows(n, rng);
    const auto got = Step(*seq, r, n, pool), want = Step(dense, r, n, pool);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5f) << "batch of " << n << " i " << i;
  }
  // A global-layer reference differs once the window bites: the comparison above can fail.
  DenseKvCache global(2, 400, kShape);
  std::mt19937 rng2(3);
  auto seq2 = store.NewSequence(400);
  double max_diff = 0;
  for (size_t n : {45u, 130u}) {
    Rows r = RandomRows(n, rng2);
    const auto got = Step(*seq2, r, n, pool), want = Step(global, r, n, pool);
    for (size_t i = 0; i < n * kShape.q_dim(); ++i) max_diff = std::max<double>(max_diff, std::abs(got[i] - want[i]));
  }
  EXPECT_GT(max_diff, 1e-2) << "the local layer attended beyond its window";
}

// Catches: stacking that folds a window's edge block in a different order or with another
// token's mask than token-by-token decode does (bits differ), on compressed formats.
TEST(SlidingWindow, PrefillEqualsTokenByTokenBitwise) {
  CyclePolicy policy({{KvFormat::kTq4, KvFormat::kTq3}, {KvFormat::kKivi4, KvFormat::kKivi2}, {KvFormat::kQ8, KvFormat::kF16}});
  for (WindowFormat wf : {WindowFormat::kF16, WindowFormat::kQ8}) {
    KvStore store({.n_layer = 2, .shape = kShape, .window = wf, .layer_window = kWindows}, &policy);
    auto batched = store.NewSequence(400), single = store.NewSequence(400);
    ThreadPool pool(2);
    std::mt19937 rng(7);
    for (size_t n : {45u, 130u, 7u, 96u}) {
      Rows r = RandomRows(n, rng);
      const auto out = Step(*batched, r, n, pool);
      for (size_t t = 0; t < n; ++t) {
        Rows one{{r.k.begin() + t * kShape.kv_dim(), r.k.begin() + (t + 1) * kShape.kv_dim()},
                 {r.v.begin() + t * kShape.kv_dim(), r.v.begin() + (t + 1) * kShape.kv_dim()},
                 {r.q.begin() + t * kShape.q_dim(), r.q.begin() + (t + 1) * kShape.q_dim()}};
        const auto o = Step(*single, one, 1, pool);
        for (size_t l = 0; l < 2; ++l)
          for (size_t i = 0; i < kShape.q_dim(); ++i)
            ASSERT_EQ(out[(l * n + t) * kShape.q_dim() + i], o[l * kShape.q_dim() + i])
                << WindowFormatName(wf) << " batch of " << n << ", token " << t << ", layer " << l;
      }
    }
  }
}

// Catches: blocks kept after no window can reach them (bytes), or freed too early (then the
// dense comparison above, and the CHORUS_CHECK in the fold, fail).
TEST(SlidingWindow, FreesBlocksNoWindowReaches) {
  CyclePolicy f16({{KvFormat::kF16, KvFormat::kF16}});
  KvStore store({.n_layer = 2, .shape = kShape, .layer_window = kWindows}, &f16);
  auto seq = store.NewSequence(1000);
  ThreadPool pool(2);
  std::mt19937 rng(5);
  size_t pos = 0;
  for (size_t n : {100u, 300u, 1u, 31u, 200u}) {
    Step(*seq, RandomRows(n, rng), n, pool);
    pos += n;
    // The next token (position pos) sees (pos - W, pos]: a block [32 i, 32 i + 32) is needed iff
    // 32 i + 32 > pos + 1 - W.
    const size_t lo = pos + 1 > kWindow ? pos + 1 - kWindow : 0;
    const size_t first_needed = lo / kBlockTokens, sealed = pos / kBlockTokens;
    EXPECT_EQ(seq->first_block(0), first_needed) << "at " << pos;
    EXPECT_EQ(seq->blocks(0).size(), sealed - first_needed) << "at " << pos;
    EXPECT_EQ(seq->first_block(1), 0u);
    EXPECT_EQ(seq->blocks(1).size(), sealed);
    EXPECT_EQ(store.pool().live_blocks(), seq->blocks(0).size() + sealed) << "freed blocks went back to the pool";
  }
}

// A shared document: its local layer keeps only the tail its readers can reach; agents at
// different positions in one batched step (the window edge cuts the prefix differently for
// each) equal each agent alone, bit for bit; freed blocks reused by another sequence with other
// contents are never read (the outputs would change, or the fold's check would abort).
TEST(SlidingWindow, SharedPrefixKeepsTailAndBatchEqualsAlone) {
  CyclePolicy policy({{KvFormat::kQ8, KvFormat::kTq3}, {KvFormat::kTq4, KvFormat::kKivi4}});
  KvStore store({.n_layer = 2, .shape = kShape, .window = WindowFormat::kQ8, .layer_window = kWindows}, &policy);
  ThreadPool pool(2);
  std::mt19937 rng(11);
  auto doc = store.NewSequence(600);
  // Readers borrow the 15 sealed blocks and start at 480 (they recompute the 20-token tail):
  // the local layer keeps what a token at 480 sees, (480 - 80, ...] → blocks from 401/32 = 12 on.
  doc->set_keep_from(480);
  Step(*doc, RandomRows(500, rng), 500, pool);  // 15 sealed blocks + a 20-token tail
  EXPECT_EQ(doc->first_block(0), (480 + 1 - kWindow) / kBlockTokens);
  EXPECT_EQ(doc->blocks(0).size(), 15u - (480 + 1 - kWindow) / kBlockTokens);
  EXPECT_EQ(doc->blocks(1).size(), 15u);
  std::vector<std::vector<BlockId>> tables = {doc->blocks(0), doc->blocks(1)};
  const std::vector<size_t> first = {doc->first_block(0), doc->first_block(1)};
  const BorrowedBlocks shared{.tables = tables, .first = first};
  // Another sequence takes over the freed ids with different contents.
  auto other = store.NewSequence(400);
  Step(*other, RandomRows(300, rng), 300, pool);

  const size_t N = 4;
  std::vector<std::unique_ptr<KvSequence>> a, b;
  for (size_t i = 0; i < N; ++i) {
    a.push_back(store.NewSequence(700, shared));
    b.push_back(store.NewSequence(700, shared));
    std::mt19937 r1(100 + i), r2(100 + i);
    const size_t prompt = 5 + 23 * i;  // 5 .. 74: edges from 406 to 475
    Step(*a.back(), RandomRows(prompt, r1), prompt, pool);
    Step(*b.back(), RandomRows(prompt, r2), prompt, pool);
    if (i == 0) doc.reset();  // the readers hold the blocks now
  }
  for (int step = 0; step < 40; ++step) {
    Rows r = RandomRows(N, rng);
    KvBatch batch(store);
    for (auto& s : a) batch.Add(s.get(), 1);
    for (size_t l = 0; l < 2; ++l) {
      std::vector<float> got(N * kShape.q_dim()), want(N * kShape.q_dim());
      ASSERT_TRUE(batch.AppendAndAttend(l, N, r.k.data(), r.v.data(), r.q.data(), got.data(), pool).ok());
      for (size_t i = 0; i < N; ++i)
        ASSERT_TRUE(b[i]->AppendAndAttend(l, 1, r.k.data() + i * kShape.kv_dim(), r.v.data() + i * kShape.kv_dim(),
                                          r.q.data() + i * kShape.q_dim(), want.data() + i * kShape.q_dim(), pool)
                        .ok());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << step << " layer " << l << " i " << i;
    }
    batch.Commit(N);
    for (auto& s : b) s->Commit(1);
  }
}

// Gemma 3's KV geometry (1 KV head x 256, 4 query heads): every format encodes, attends and
// matches the scalar reference (decode every block, plain softmax in double), in a windowed
// layer whose edge cuts a block. Catches: a format or kernel that assumes head_dim <= 128 or
// several KV heads (the Hadamard of tq over 256, kivi's groups of 32 channels, the q8 rows).
TEST(SlidingWindow, EveryFormatAtHeadDim256OneKvHead) {
  // The float kernels held to the float bound (tq4 keys' int8 scores: kv_int8_kernels_test.cc).
  const ScopedKvInt8Scores float_scores(false);
  constexpr AttentionShape kGemma{.n_head = 4, .n_head_kv = 1, .head_dim = 256};
  const KvGeometry g{1, 256};
  for (KvFormat f : kAllKvFormats) {
    ASSERT_TRUE(CheckKvFormat(f, KvSide::kKey, g).ok()) << KvFormatName(f);
    ASSERT_TRUE(CheckKvFormat(f, KvSide::kValue, g).ok()) << KvFormatName(f);
    class Params : public PrecisionPolicy {
     public:
      explicit Params(KvFormat f) : f_(f) {}
      BlockFormats FormatFor(const BlockInfo&) override {
        BlockFormats b{.k = f_, .v = f_};
        if (f_ == KvFormat::kPolyKvPaper) b.k_params.layer_absmax = b.v_params.layer_absmax = 8.0f;
        return b;
      }
      KvFormat f_;
    } params(f);
    KvStore store({.n_layer = 1, .shape = kGemma, .layer_window = {100}}, &params);
    auto seq = store.NewSequence(300);
    ThreadPool pool(2);
    std::mt19937 rng(21);
    std::normal_distribution<float> nd;
    const size_t n = 200;  // 6 sealed blocks, the window (100, 200] cuts block 3
    std::vector<float> k(n * 256), v(n * 256), q(n * 4 * 256), out(n * 4 * 256);
    for (auto& x : k) x = nd(rng) * 2.0f;
    for (auto& x : v) x = nd(rng);
    for (auto& x : q) x = nd(rng) * 0.0625f;
    ASSERT_TRUE(seq->AppendAndAttend(0, n, k.data(), v.data(), q.data(), out.data(), pool).ok()) << KvFormatName(f);
    // The last token (199) sees positions 100..199: blocks 3 (rows 4..31), 4, 5 and native 192..199.
    const size_t t = n - 1, first = 3;
    std::vector<BlockView> views;
    for (size_t i = first; i < 6; ++i) {
      const BlockId id = seq->blocks(0)[i - seq->first_block(0)];
      const BlockMeta& m = store.pool().meta(id);
      views.push_back({store.pool().k_data(id), store.pool().v_data(id), m.k_format, m.v_format});
    }
    // Reference: decode the blocks, drop rows 96..99 of block 3, append the native rows.
    std::vector<float> kb(32 * 256), vb(32 * 256), keys, vals;
    for (size_t i = 0; i < views.size(); ++i) {
      DecodeKvBlockRef(views[i].k_format, KvSide::kKey, g, views[i].k, kb.data());
      DecodeKvBlockRef(views[i].v_format, KvSide::kValue, g, views[i].v, vb.data());
      const size_t r0 = i == 0 ? 4 : 0;
      keys.insert(keys.end(), kb.begin() + r0 * 256, kb.end());
      vals.insert(vals.end(), vb.begin() + r0 * 256, vb.end());
    }
    for (size_t p = 192; p <= t; ++p)
      for (size_t c = 0; c < 256; ++c) {
        keys.push_back(F16ToF32(F32ToF16(k[p * 256 + c])));
        vals.push_back(F16ToF32(F32ToF16(v[p * 256 + c])));
      }
    const size_t ctx = keys.size() / 256;
    ASSERT_EQ(ctx, 100u);
    for (size_t h = 0; h < 4; ++h) {
      const float* qh = q.data() + t * 1024 + h * 256;
      std::vector<double> s(ctx);
      double m = -INFINITY, sum = 0;
      for (size_t j = 0; j < ctx; ++j) {
        double acc = 0;
        for (size_t c = 0; c < 256; ++c) acc += double(qh[c]) * keys[j * 256 + c];
        m = std::max(m, s[j] = acc);
      }
      for (auto& x : s) sum += (x = std::exp(x - m));
      for (size_t c = 0; c < 256; ++c) {
        double acc = 0;
        for (size_t j = 0; j < ctx; ++j) acc += s[j] * vals[j * 256 + c];
        ASSERT_NEAR(out[t * 1024 + h * 256 + c], acc / sum, 3e-4) << KvFormatName(f) << " head " << h << " c " << c;
      }
    }
  }
}

}  // namespace
}  // namespace chorus
