// Engine::Score's per-token log-probabilities (what `echo` with `logprobs` serves), on a tiny
// random-weight model: they sum to Score's own NLL (exact log-sum-exp), and each position's
// alternatives equal what the scheduler's sampling path reports for the same prefix decoded as a
// request (a batched prefill, then the sampler's log-softmax) — an independent computation of the
// same numbers. Context 0 scores from the start of the sequence; bad arguments are refused.
#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../model/synthetic_model.h"
#include "chorus/engine.h"

namespace chorus {
namespace {

std::unique_ptr<Engine> OpenTiny() {
  const testing::SyntheticSpec s = testing::TinySpec("score");
  const std::string path = std::string(::testing::TempDir()) + "/score_test." + std::to_string(getpid()) + ".gguf";
  EXPECT_TRUE(testing::SyntheticModel(s).WriteFile(path).ok());
  EngineOptions o;
  o.model_path = path;
  o.threads = 2;
  o.n_ctx = 256;
  auto e = Engine::Open(o);
  std::remove(path.c_str());
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

// 45 tokens: a full 32-token block (sealed in the shared formats) and a tail.
std::vector<int32_t> Tokens() {
  std::vector<int32_t> t;
  for (int i = 0; i < 45; ++i) t.push_back(3 + (i * 37 + i * i) % 290);
  return t;
}

TEST(ScoreLogprobs, SumToTheNllAndMatchTheSamplersLogprobsOfEachPrefix) {
  auto e = OpenTiny();
  ASSERT_TRUE(e);
  const std::vector<int32_t> toks = Tokens();
  auto plain = e->Score(0, std::span<const int32_t>(toks));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(plain->logprobs.empty());  // none asked for
  auto r = e->Score(0, std::span<const int32_t>(toks), 5);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->count, toks.size() - 1);
  ASSERT_EQ(r->logprobs.size(), toks.size() - 1);
  EXPECT_EQ(r->nll, plain->nll);  // asking for logprobs changes nothing else
  double sum = 0;
  for (size_t k = 0; k < r->logprobs.size(); ++k) {
    const TokenLogprob& lp = r->logprobs[k];
    EXPECT_EQ(lp.token, toks[k + 1]);
    EXPECT_LE(lp.logprob, 0.0f);
    ASSERT_EQ(lp.top.size(), 5u);
    for (size_t j = 1; j < lp.top.size(); ++j) EXPECT_GE(lp.top[j - 1].second, lp.top[j].second);
    EXPECT_GE(lp.top[0].second, lp.logprob);  // nothing is more likely than the most likely
    sum -= lp.logprob;
  }
  // LogprobsOf uses the fast log-sum-exp, the NLL the exact one: 1e-4 relative.
  EXPECT_NEAR(sum, r->nll, 1e-4 * r->nll);

  // Independently: every prefix as a request of one greedy token, all in one batch. The sampler's
  // top-5 at the prefix's last position are Score's alternatives for the next token.
  std::vector<AgentId> ids;
  for (size_t k = 1; k < toks.size(); ++k) {
    auto id = e->Submit(std::vector<int32_t>(toks.begin(), toks.begin() + k),
                        {.max_tokens = 1, .ignore_eog = true, .top_logprobs = 5});
    ASSERT_TRUE(id.ok()) << id.status().message();
    ids.push_back(*id);
  }
  for (int i = 0; i < 1000 && (e->running() || e->waiting()); ++i) ASSERT_TRUE(e->Step().ok());
  double worst = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const AgentState* s = e->agent(ids[k]);
    ASSERT_TRUE(s && s->done) << k;
    ASSERT_EQ(s->logprobs.size(), 1u) << k;
    const auto& want = s->logprobs[0].top;
    const auto& got = r->logprobs[k].top;
    ASSERT_EQ(want.size(), got.size()) << k;
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ(want[j].first, got[j].first) << "position " << k + 1 << " rank " << j;
      worst = std::max(worst, double(std::fabs(want[j].second - got[j].second)));
    }
  }
  EXPECT_LT(worst, 1e-4) << "largest |Score − sampler| logprob over " << ids.size() << " positions";
  std::printf("ScoreLogprobs: %zu positions, max |Score - sampler| top-5 logprob %.3g, sum %.6f vs nll %.6f\n",
              ids.size(), worst, sum, r->nll);
}

TEST(ScoreLogprobs, TopZeroAndBadArguments) {
  auto e = OpenTiny();
  ASSERT_TRUE(e);
  const std::vector<int32_t> toks = Tokens();
  auto r = e->Score(0, std::span<const int32_t>(toks), 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->logprobs.size(), toks.size() - 1);
  for (const TokenLogprob& lp : r->logprobs) EXPECT_TRUE(lp.top.empty());
  EXPECT_FALSE(e->Score(0, std::span<const int32_t>(toks), 21).ok());
  const std::vector<int32_t> one{5};
  EXPECT_FALSE(e->Score(0, std::span<const int32_t>(one), 1).ok());
  const std::vector<int32_t> outside{5, 300};
  EXPECT_FALSE(e->Score(0, std::span<const int32_t>(outside), 1).ok());
  EXPECT_FALSE(e->Score(777, std::span<const int32_t>(toks), 1).ok());  // no such context
  const std::vector<int32_t> too_long(257, 5);
  EXPECT_FALSE(e->Score(0, std::span<const int32_t>(too_long), 1).ok());
}

}  // namespace
}  // namespace chorus
