// Blocks reused at another offset (KvSequence::Attach, BlockView::shift/skip): a shifted block met
// by a query rotated back equals the same keys rotated where they now sit (RoPE composes), up to
// the format's rounding; a hole's rows weigh nothing; positions continue past the hole; sliding
// windows mask by position across attached runs; a shift off by one block is far off.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kv/block_attention.h"
#include "kv/kv_kernels.h"  // ScopedKvInt8Scores
#include "kv/kv_store.h"
#include "policy/uniform_policy.h"
#include "util/fp16.h"

namespace chorus {
namespace {

constexpr AttentionShape kShape{.n_head = 4, .n_head_kv = 2, .head_dim = 64};
const KeyRope kRope{.rope_dim = 64, .neox = false, .params = {.base = 10000.0f}};

// Rows of raw (pre-RoPE) vectors.
std::vector<float> Random(size_t rows, size_t dim, float scale, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> x(rows * dim);
  for (float& v : x) v = nd(rng) * scale;
  return x;
}

// Row i of x (heads of head_dim) rotated by the RoPE of position pos0 + i.
std::vector<float> Rotated(const std::vector<float>& x, size_t dim, int64_t pos0, const KeyRope& rope = kRope) {
  std::vector<float> y = x, cs(kShape.head_dim);
  const size_t rows = x.size() / dim;
  for (size_t i = 0; i < rows; ++i)
    RotateHeads(rope, pos0 + int64_t(i), y.data() + i * dim, dim / kShape.head_dim, kShape.head_dim, cs.data());
  return y;
}

// Dense softmax attention of one query head over key/value rows (fp16-rounded, as stored), keys
// already rotated; rows where `visible` is false are left out.
std::vector<float> DenseAttend(const float* q, const std::vector<float>& k, const std::vector<float>& v, size_t kv_head,
                               const std::vector<bool>& visible) {
  const size_t hd = kShape.head_dim, kv_dim = kShape.kv_dim(), n = k.size() / kv_dim;
  std::vector<double> s(n, -INFINITY);
  double m = -INFINITY;
  for (size_t j = 0; j < n; ++j) {
    if (!visible[j]) continue;
    double acc = 0;
    for (size_t c = 0; c < hd; ++c) acc += double(q[c]) * F16ToF32(F32ToF16(k[j * kv_dim + kv_head * hd + c]));
    s[j] = acc;
    m = std::max(m, acc);
  }
  double sum = 0;
  std::vector<double> o(hd, 0.0);
  for (size_t j = 0; j < n; ++j) {
    if (!visible[j]) continue;
    const double w = std::exp(s[j] - m);
    sum += w;
    for (size_t c = 0; c < hd; ++c) o[c] += w * F16ToF32(F32ToF16(v[j * kv_dim + kv_head * hd + c]));
  }
  std::vector<float> out(hd);
  for (size_t c = 0; c < hd; ++c) out[c] = float(o[c] / sum);
  return out;
}

// Appends rows [r0, r1) of k/v (queries q) to every layer of seq as one batch.
// out: each layer's attention output (n, q_dim).
void Append(KvSequence& seq, size_t n_layer, const std::vector<float>& k, const std::vector<float>& v,
            const std::vector<float>& q, size_t r0, size_t r1, ThreadPool& pool,
            std::vector<std::vector<float>>* out = nullptr) {
  const size_t n = r1 - r0, kv_dim = kShape.kv_dim(), q_dim = kShape.q_dim();
  for (size_t l = 0; l < n_layer; ++l) {
    std::vector<float> o(n * q_dim);
    ASSERT_TRUE(
        seq.AppendAndAttend(l, n, k.data() + r0 * kv_dim, v.data() + r0 * kv_dim, q.data() + r0 * q_dim, o.data(), pool)
            .ok());
    if (out) out->push_back(std::move(o));
  }
  seq.Commit(n);
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// One shifted group against the reference twin and against the same keys rotated in place.
class ShiftedBlocks : public ::testing::TestWithParam<std::pair<KvFormat, bool>> {};

TEST_P(ShiftedBlocks, MatchReferenceAndInPlaceRotation) {
  const auto [format, neox] = GetParam();
  const ScopedKvInt8Scores float_scores(false);  // the float kernels, held to the float bound
  const KeyRope rope{.rope_dim = 64, .neox = neox, .params = {.base = 10000.0f}};
  UniformPolicy policy(format, format, 0);
  KvStore store({.n_layer = 1, .shape = kShape}, &policy);
  ThreadPool pool(1);
  std::mt19937 rng(7);
  const size_t rows = 96, kv_dim = kShape.kv_dim(), hd = kShape.head_dim;
  const auto k = Random(rows, kv_dim, 1.5f, rng), v = Random(rows, kv_dim, 1.0f, rng);
  const auto q_any = Random(rows, kShape.q_dim(), 0.1f, rng);
  const int64_t src = 300, dst = 41;  // the keys were computed at src.., they now sit at dst..
  auto views_of = [&](int64_t pos0, std::unique_ptr<KvSequence>& seq) {
    seq = store.NewSequence(rows);
    Append(*seq, 1, Rotated(k, kv_dim, pos0, rope), v, q_any, 0, rows, pool);
    std::vector<BlockView> views;
    for (BlockId id : seq->blocks(0))
      views.push_back({store.pool().k_data(id), store.pool().v_data(id), store.pool().meta(id).k_format,
                       store.pool().meta(id).v_format});
    return views;
  };
  std::unique_ptr<KvSequence> a, b;
  std::vector<BlockView> shifted = views_of(src, a), in_place = views_of(dst, b);
  for (BlockView& bv : shifted) bv.shift = int32_t(dst - src);
  shifted[0].skip = in_place[0].skip = 5;  // a hole in the first block
  const size_t group = kShape.n_head / kShape.n_head_kv;
  std::vector<float> q(group * hd);
  std::copy_n(Random(1, group * hd, 0.15f, rng).data(), group * hd, q.data());
  std::vector<float> cs(hd);
  RotateHeads(rope, dst + int64_t(rows) + 3, q.data(), group, hd, cs.data());  // a query after the run
  BlockAttention att(store.geometry());
  auto attend = [&](const std::vector<BlockView>& views) {
    std::vector<float> out(group * hd);
    att.Begin(q.data(), group);
    att.AddBlocks(views, 1, 0, SIZE_MAX, 0, &rope);
    att.Finish(out.data());
    return out;
  };
  const std::vector<float> got = attend(shifted), want = attend(in_place);
  std::vector<float> ref(group * hd);
  BlockAttentionRef(store.geometry(), shifted, 1, nullptr, nullptr, 0, 0, q.data(), group, ref.data(), &rope);
  EXPECT_LT(MaxDiff(got, ref), 2e-4f) << "the kernels against their reference twin";
  // Dense attention over the keys rotated where they sit (the hole left out): the truth. Rotating
  // the query back instead differs from it by the format's own error (that of `want`), no more.
  std::vector<bool> visible(rows, true);
  for (size_t j = 0; j < 5; ++j) visible[j] = false;
  const auto k_dst = Rotated(k, kv_dim, dst, rope);
  std::vector<float> truth;
  for (size_t g = 0; g < group; ++g) {
    const auto o = DenseAttend(q.data() + g * hd, k_dst, v, 1, visible);
    truth.insert(truth.end(), o.begin(), o.end());
  }
  const float bound = 2 * MaxDiff(want, truth) + 2e-3f;
  EXPECT_LT(MaxDiff(got, truth), bound);
  // Off by one block: the check above must be able to fail (lossy 4-bit keys blur it too much).
  if (format == KvFormat::kTq4) return;
  for (BlockView& bv : shifted) bv.shift += int32_t(kBlockTokens);
  EXPECT_GT(MaxDiff(attend(shifted), truth), 5 * bound);
}

INSTANTIATE_TEST_SUITE_P(Formats, ShiftedBlocks,
                         ::testing::Values(std::pair{KvFormat::kF16, false}, std::pair{KvFormat::kF16, true},
                                           std::pair{KvFormat::kQ8, false}, std::pair{KvFormat::kTq4, true}));

// A document after prefix A, reused after prefix B: B recomputes its prefix and the document's head
// up to a block boundary, attaches A's blocks from there (the first one's rows before that point
// are a hole), and computes the rest. Every output equals dense attention over B's tokens at B's
// positions; layer 1 has a sliding window that ends inside the attached run.
class AttachedRun : public ::testing::TestWithParam<int> {};

TEST_P(AttachedRun, EqualsDenseAttentionAtTruePositions) {
  const ScopedKvInt8Scores float_scores(false);
  const size_t n_a = 45, n_b = 70 + size_t(GetParam()), n_doc = 300, n_tail = 40;
  const uint32_t window = 150;
  UniformPolicy policy(KvFormat::kF16, KvFormat::kF16, 0);
  KvStore store({.n_layer = 2, .shape = kShape, .layer_window = {0, window}, .layer_rope = {kRope, kRope}}, &policy);
  ThreadPool pool(2);
  std::mt19937 rng(11);
  const size_t kv_dim = kShape.kv_dim(), q_dim = kShape.q_dim(), hd = kShape.head_dim;
  const auto pa = Random(n_a, kv_dim, 1.5f, rng), pb = Random(n_b, kv_dim, 1.5f, rng);
  const auto doc_k = Random(n_doc, kv_dim, 1.5f, rng), doc_v = Random(n_doc, kv_dim, 1.0f, rng);
  const auto pa_v = Random(n_a, kv_dim, 1.0f, rng), pb_v = Random(n_b, kv_dim, 1.0f, rng);
  const auto tail_k = Random(n_tail, kv_dim, 1.5f, rng), tail_v = Random(n_tail, kv_dim, 1.0f, rng);
  const auto q_raw = Random(n_b + n_doc + n_tail, q_dim, 0.12f, rng);
  auto cat = [](std::vector<float> x, const std::vector<float>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  // A: prefix A + the document at positions [0, n_a + n_doc).
  auto a = store.NewSequence(1024);
  a->set_keep_from(0);  // A keeps every block (a prompt's blocks wait for the cache like this)
  {
    const auto k = Rotated(cat(pa, doc_k), kv_dim, 0), v = cat(pa_v, doc_v);
    Append(*a, 2, k, v, Rotated(Random(n_a + n_doc, q_dim, 0.1f, rng), q_dim, 0), 0, n_a + n_doc, pool);
  }
  // B's plan: recompute the document up to x (B's rows then end on a block boundary), attach A's
  // blocks [ja, je) from there, recompute the document from A's last attached row on.
  const size_t min_head = 8;
  size_t x = min_head;
  while ((n_b + x) % kBlockTokens != 0) ++x;
  const size_t ja = (n_a + x) / kBlockTokens, skip = (n_a + x) % kBlockTokens;
  const size_t je = (n_a + n_doc) / kBlockTokens;  // A's full blocks end there
  const size_t resume = je * kBlockTokens - n_a;   // first document offset B computes again
  const int32_t shift = int32_t(n_b) - int32_t(n_a);
  // B's tokens at their true positions (what a full prefill would hold), for the reference.
  const auto all_k = Rotated(cat(cat(pb, doc_k), tail_k), kv_dim, 0);
  const auto all_v = cat(cat(pb_v, doc_v), tail_v);
  const auto all_q = Rotated(q_raw, q_dim, 0);
  auto b = store.NewSequence(1024);
  Append(*b, 2, all_k, all_v, all_q, 0, n_b + x, pool);
  ASSERT_EQ(b->size() % kBlockTokens, 0u);
  std::vector<std::vector<BlockId>> tables(2);
  for (size_t l = 0; l < 2; ++l)
    for (size_t j = ja; j < je; ++j) tables[l].push_back(a->block(l, j));
  ASSERT_NE(tables[1][0], kNoBlock) << "A's sliding-window layer freed a block B needs";
  ASSERT_TRUE(b->Attach({.tables = tables, .shift = shift, .skip = skip}).ok());
  EXPECT_EQ(b->Position(0), n_b + resume);
  EXPECT_EQ(b->hole_rows(), skip);
  EXPECT_TRUE(b->attached(b->size() / kBlockTokens - 1));
  // The rest of the document and the tail, in one batch; check every row against dense attention.
  const size_t r0 = n_b + resume, r1 = n_b + n_doc + n_tail;
  std::vector<std::vector<float>> out;
  // Append takes rows of the arrays given: B's remaining rows are rows [r0, r1) of all_*.
  Append(*b, 2, all_k, all_v, all_q, r0, r1, pool, &out);
  const size_t group = kShape.n_head / kShape.n_head_kv;
  for (size_t l = 0; l < 2; ++l)
    for (size_t t = 0; t < r1 - r0; t += 7) {
      const size_t p = r0 + t;  // the token's true position
      std::vector<bool> visible(r1, false);
      for (size_t j = 0; j <= p; ++j) visible[j] = l == 0 || j + window > p;  // layer 1: the window
      for (uint32_t hk = 0; hk < kShape.n_head_kv; ++hk)
        for (size_t g = 0; g < group; ++g) {
          const size_t h = hk * group + g;
          const std::vector<float> want = DenseAttend(all_q.data() + p * q_dim + h * hd, all_k, all_v, hk, visible);
          for (size_t c = 0; c < hd; ++c)
            ASSERT_NEAR(out[l][t * q_dim + h * hd + c], want[c], 4e-3f)
                << "layer " << l << " row " << t << " head " << h;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(PrefixLengths, AttachedRun, ::testing::Values(0, 13, 31));

TEST(Attach, RefusesWhatDoesNotFit) {
  UniformPolicy policy(KvFormat::kF16, KvFormat::kF16, 0);
  KvStore store({.n_layer = 1, .shape = kShape}, &policy);
  ThreadPool pool(1);
  std::mt19937 rng(3);
  auto a = store.NewSequence(128);
  const auto k = Random(64, kShape.kv_dim(), 1, rng), q = Random(64, kShape.q_dim(), 0.1f, rng);
  Append(*a, 1, k, k, q, 0, 64, pool);
  auto b = store.NewSequence(64);
  Append(*b, 1, k, k, q, 0, 32, pool);
  std::vector<std::vector<BlockId>> tables = {{a->block(0, 0), a->block(0, 1)}};
  const Status s = b->Attach({.tables = tables});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("capacity"), std::string::npos) << s.message();
  // A shifted run needs the layers' RoPE, which this store was not given.
  tables = {{a->block(0, 0)}};
  const Status r = b->Attach({.tables = tables, .shift = 5});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("RoPE"), std::string::npos) << r.message();
  EXPECT_EQ(b->size(), 32u);
}

}  // namespace
}  // namespace chorus
