// Cocktail's reorder (SortBlocksByFormat) and group-wise attention: a context's block tables whose
// blocks are permuted so equal formats are contiguous gives the same attention as the original
// order (and as the double-precision reference over the same compressed blocks), moves no bytes,
// and is folded in one kernel group per format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "kv/kv_kernels.h"  // ScopedKvInt8Scores
#include "kv/kv_store.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

namespace chorus {
namespace {

constexpr AttentionShape kShape{.n_head = 6, .n_head_kv = 2, .head_dim = 64};
constexpr size_t kLayers = 2;

// Scatters f16 / kivi4 / kivi2 over the blocks the way a Cocktail map does (no two neighbours alike).
class ScatterPolicy : public PrecisionPolicy {
 public:
  BlockFormats FormatFor(const BlockInfo& info) override {
    static constexpr KvFormat f[] = {KvFormat::kKivi2, KvFormat::kF16, KvFormat::kKivi4, KvFormat::kKivi2,
                                     KvFormat::kKivi4, KvFormat::kF16, KvFormat::kKivi2};
    BlockFormats b;
    b.k = b.v = f[(info.block_index + info.layer) % std::size(f)];
    return b;
  }
};

size_t Runs(const std::vector<BlockView>& v) {
  size_t r = 0;
  for (size_t i = 0; i < v.size(); ++i)
    r += i == 0 || v[i].k_format != v[i - 1].k_format || v[i].v_format != v[i - 1].v_format;
  return r;
}

std::vector<BlockView> Views(const std::vector<BlockId>& table, const BlockPool& bp) {
  std::vector<BlockView> out;
  for (BlockId id : table) out.push_back({bp.k_data(id), bp.v_data(id), bp.meta(id).k_format, bp.meta(id).v_format});
  return out;
}

TEST(KvReorder, GroupedAttentionEqualsOriginalOrder) {
  // The float kernels: the bounds below are float ones (kivi4's integer key scores are held to theirs
  // in kv_int8_kernels_test); opened before the store makes its attention objects.
  const ScopedKvInt8Scores float_kernels(false);
  ScatterPolicy policy;
  KvStore store({.n_layer = kLayers, .shape = kShape}, &policy);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const size_t n_ctx = 13 * kBlockTokens, kv_dim = kShape.kv_dim(), q_dim = kShape.q_dim(), hd = kShape.head_dim;
  std::vector<float> k(n_ctx * kv_dim), v(n_ctx * kv_dim), k1(kv_dim), v1(kv_dim), q1(q_dim);
  for (auto& x : k) x = nd(rng) * 2.0f;
  for (auto& x : v) x = nd(rng);
  for (auto& x : k1) x = nd(rng) * 2.0f;
  for (auto& x : v1) x = nd(rng);
  for (auto& x : q1) x = nd(rng) * 0.125f;
  auto seq = store.NewSequence(n_ctx);
  for (size_t l = 0; l < kLayers; ++l) ASSERT_TRUE(seq->Append(l, n_ctx, k.data(), v.data()).ok());
  seq->Commit(n_ctx);
  std::vector<std::vector<BlockId>> tables(kLayers);  // the context: its block tables
  for (size_t l = 0; l < kLayers; ++l) {
    tables[l] = seq->blocks(l);
    for (BlockId id : tables[l]) store.pool().Ref(id);
  }
  seq.reset();

  ThreadPool pool(1);
  const auto attend = [&](std::vector<float>& out) {  // one agent token over the context, every layer
    auto agent = store.NewSequence(n_ctx + 1, {.tables = tables});
    out.assign(kLayers * q_dim, 0.0f);
    for (size_t l = 0; l < kLayers; ++l)
      ASSERT_TRUE(agent->AppendAndAttend(l, 1, k1.data(), v1.data(), q1.data(), out.data() + l * q_dim, pool).ok());
    agent->Commit(1);
  };
  std::vector<float> before, after;
  std::vector<std::vector<BlockView>> orig(kLayers);
  for (size_t l = 0; l < kLayers; ++l) orig[l] = Views(tables[l], store.pool());
  attend(before);

  const size_t bytes = store.pool().payload_bytes(), blocks = store.pool().live_blocks();
  std::vector<std::vector<BlockId>> ids_before(kLayers);
  for (size_t l = 0; l < kLayers; ++l) ids_before[l] = tables[l];
  SortBlocksByFormat(tables, store.pool());
  // No copy: the same blocks (ids, hence payload addresses) in a new order, the same bytes.
  EXPECT_EQ(store.pool().payload_bytes(), bytes);
  EXPECT_EQ(store.pool().live_blocks(), blocks);
  for (size_t l = 0; l < kLayers; ++l) {
    EXPECT_NE(tables[l], ids_before[l]);  // it did move something
    EXPECT_EQ(std::multiset<BlockId>(tables[l].begin(), tables[l].end()),
              std::multiset<BlockId>(ids_before[l].begin(), ids_before[l].end()));
    const auto re = Views(tables[l], store.pool());
    std::set<std::pair<KvFormat, KvFormat>> formats;
    for (const auto& b : re) formats.insert({b.k_format, b.v_format});
    EXPECT_EQ(Runs(re), formats.size()) << "equal formats must be contiguous";
    EXPECT_GT(Runs(orig[l]), formats.size());
  }
  attend(after);

  // Tolerance, derived. The same kernels score the same compressed blocks in both orders, so only
  // the order of the streaming-softmax folds differs: each fold rescales by exp(m_old − m_new)
  // (expf ≤ 2 ulp) and adds 32 weighted rows, so the relative error of o and l grows by at most
  // ~(5 per block + 32 per block's rows + head-dim-free) units of u = 2^-24; output = o/l doubles it.
  // With n_blocks sealed blocks plus the native tail: tol = 2·(5·n_blocks + 2·32 + 4)·u·max|v|.
  const double u = std::ldexp(1.0, -24);
  float vmax = 0;
  for (float x : v) vmax = std::max(vmax, std::fabs(x));
  for (float x : v1) vmax = std::max(vmax, std::fabs(x));
  const size_t n_blocks = n_ctx / kBlockTokens;
  const double tol = 2.0 * (5.0 * n_blocks + 2 * kBlockTokens + 4) * u * vmax * 1.01;  // 1.01: fp16/kivi range slack
  double worst = 0;
  for (size_t i = 0; i < before.size(); ++i) worst = std::max(worst, double(std::fabs(before[i] - after[i])));
  EXPECT_LE(worst, tol) << "reordered vs original order";
  std::printf("max |reordered − original| = %.3g (tolerance %.3g)\n", worst, tol);

  // Both against the double-precision reference over the same compressed blocks in the original
  // order. Here the kernels' float scores differ from exact ones by ≤ (hd + 2)·u·Σ|q_c||k_c| per
  // score, which moves the output by ≤ 2·δs·max|v| — plus the fold error above.
  const KvGeometry g = store.geometry();
  const size_t group = kShape.n_head / kShape.n_head_kv, tail = n_ctx - n_blocks * kBlockTokens;
  for (size_t l = 0; l < kLayers; ++l)
    for (uint32_t hk = 0; hk < kShape.n_head_kv; ++hk) {
      std::vector<uint16_t> nk, nv;  // native rows of this head: the context tail, then the agent's token
      for (size_t j = 0; j <= tail; ++j) {
        const float* kr = j < tail ? k.data() + (n_blocks * kBlockTokens + j) * kv_dim : k1.data();
        const float* vr = j < tail ? v.data() + (n_blocks * kBlockTokens + j) * kv_dim : v1.data();
        for (size_t c = 0; c < hd; ++c) {
          nk.push_back(F32ToF16(kr[hk * hd + c]));
          nv.push_back(F32ToF16(vr[hk * hd + c]));
        }
      }
      // Queries as the forward pass gives them (already scaled): q1 rows of this group.
      std::vector<float> ref(group * hd);
      BlockAttentionRef(g, orig[l], hk, nk.data(), nv.data(), hd, tail + 1, q1.data() + hk * group * hd, group,
                        ref.data());
      double kmax = 0;
      for (float x : k) kmax = std::max<double>(kmax, std::fabs(x));
      for (size_t r = 0; r < group; ++r) {
        double qsum = 0;
        for (size_t c = 0; c < hd; ++c) qsum += std::fabs(q1[hk * group * hd + r * hd + c]);
        const double ds = (hd + 2) * u * qsum * kmax * 1.01;
        const double tol_ref = 2.0 * ds * vmax * 1.01 + tol;
        for (size_t c = 0; c < hd; ++c) {
          const size_t i = l * q_dim + hk * group * hd + r * hd + c;
          EXPECT_NEAR(after[i], ref[r * hd + c], tol_ref) << "layer " << l << " head " << hk;
          EXPECT_NEAR(before[i], ref[r * hd + c], tol_ref) << "layer " << l << " head " << hk;
        }
      }
    }

  // One kernel group per format after the reorder; many before.
  BlockAttention att(g);
  std::vector<float> out(group * hd);
  for (size_t l = 0; l < kLayers; ++l) {
    const size_t g0 = att.groups();
    att.Begin(q1.data(), group);
    att.AddBlocks(Views(tables[l], store.pool()), 0);
    att.Finish(out.data());
    EXPECT_EQ(att.groups() - g0, 3u);
    const size_t g1 = att.groups();
    att.Begin(q1.data(), group);
    att.AddBlocks(orig[l], 0);
    EXPECT_EQ(att.groups() - g1, Runs(orig[l]));
  }
  for (auto& t : tables)
    for (BlockId id : t) store.pool().Unref(id);
}

}  // namespace
}  // namespace chorus
