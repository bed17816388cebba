// EngineLoop under concurrency, on a tiny random-weight model (fast enough for ThreadSanitizer:
// label tsan). Many client threads enqueue requests that share a prompt prefix, some cancel
// mid-stream, one makes and drops an explicit context on the loop, and Stop arrives while
// requests are in flight. Catches: a data race between the HTTP side and the loop (TSan), a
// channel finished twice or never, a cancelled request that damages another's answer (identical
// prompts must give identical greedy text), leaked blocks after everything finished, and a
// Stop that leaves a waiter hanging.
#include "server/engine_loop.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../model/synthetic_model.h"

namespace chorus::server {
namespace {

std::unique_ptr<Engine> OpenTiny() {
  testing::SyntheticSpec s{.name = "loop", .n_layer = 2, .n_embd = 64, .n_head = 2, .n_head_kv = 1,
                           .head_dim = 32, .n_ff = 128, .n_vocab = 300};
  const std::string path = std::string(::testing::TempDir()) + "/engine_loop_test." + std::to_string(getpid()) + ".gguf";
  EXPECT_TRUE(testing::SyntheticModel(s).WriteFile(path).ok());
  EngineOptions o;
  o.model_path = path;
  o.threads = 2;
  o.n_ctx = 512;
  auto e = Engine::Open(o);
  std::remove(path.c_str());
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

// A prompt: a 100-token prefix every request shares, then `variant`'s own tokens.
std::vector<int32_t> Prompt(int variant) {
  std::vector<int32_t> p;
  for (int i = 0; i < 100; ++i) p.push_back(3 + (i * 37) % 290);
  for (int i = 0; i < 5 + variant % 7; ++i) p.push_back(3 + (variant * 11 + i * 5) % 290);
  return p;
}

std::shared_ptr<Channel> Request(int variant, int max_tokens) {
  auto ch = std::make_shared<Channel>();
  ch->prompt = Prompt(variant);
  ch->options.max_tokens = max_tokens;
  ch->options.ignore_eog = true;  // random weights: run to max_tokens
  return ch;
}

void WaitDone(Channel& ch) {
  std::unique_lock lock(ch.mu);
  ch.cv.wait(lock, [&] { return ch.done; });
}

TEST(EngineLoop, ConcurrentClientsCancelsAndContextsKeepEveryAnswerIntact) {
  auto engine = OpenTiny();
  ASSERT_NE(engine, nullptr);
  ServerMetrics metrics;
  EngineLoop loop(*engine, metrics, 1000);
  loop.Start();

  constexpr int kClients = 6, kEach = 5, kVariants = 4;
  std::vector<std::vector<std::shared_ptr<Channel>>> got(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      for (int r = 0; r < kEach; ++r) {
        auto ch = Request(static_cast<int>(rng() % kVariants), 12);
        const bool cancel = rng() % 4 == 0;
        ASSERT_TRUE(loop.Enqueue(ch));
        if (cancel) {  // after its first token, as a client that disconnects mid-stream
          std::unique_lock lock(ch->mu);
          ch->cv.wait(lock, [&] { return ch->done || ch->completion_tokens > 0; });
          ch->cancel = true;
        }
        got[c].push_back(ch);
      }
      for (auto& ch : got[c]) WaitDone(*ch);
    });
  }
  // An explicit context made and released on the loop while the clients run.
  std::thread ctx([&] {
    ContextId id = 0;
    loop.RunOnLoop([&](Engine& e) {
      auto r = e.Share("a document pinned while requests run, long enough for a block or two of its own tokens");
      ASSERT_TRUE(r.ok()) << r.status().message();
      id = *r;
    });
    loop.RunOnLoop([&](Engine& e) { e.Release(id); });
  });
  for (auto& t : clients) t.join();
  ctx.join();

  // Every channel finished exactly once; uncancelled ones ran to max_tokens with the same text
  // for the same prompt, whatever ran beside them.
  std::map<std::vector<int32_t>, std::string> answer;
  size_t complete = 0;
  for (auto& list : got)
    for (auto& ch : list) {
      std::lock_guard lock(ch->mu);
      ASSERT_TRUE(ch->done);
      if (ch->cancel) {
        EXPECT_TRUE(ch->finish == "cancelled" || ch->finish == "length") << ch->finish << " " << ch->error;
        continue;
      }
      ASSERT_EQ(ch->finish, "length") << ch->error;
      EXPECT_EQ(ch->completion_tokens, 12u);
      auto [it, fresh] = answer.emplace(ch->prompt, ch->text);
      if (!fresh) { EXPECT_EQ(ch->text, it->second) << "a request's answer changed with what ran beside it"; }
      ++complete;
    }
  EXPECT_GT(complete, 0u);
  // Nothing is in use once everything finished (cached prompt blocks only).
  EngineStats s;
  loop.RunOnLoop([&](Engine& e) { s = e.Stats(); });
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.prefilling + s.decoding + s.waiting, 0u);
  EXPECT_GT(s.prefix_hit_tokens, 0u);  // the shared 96-token run was borrowed
  loop.Stop();
}

TEST(EngineLoop, StopFinishesEveryRequestInFlightAndRefusesNewOnes) {
  auto engine = OpenTiny();
  ASSERT_NE(engine, nullptr);
  ServerMetrics metrics;
  EngineLoop loop(*engine, metrics, 1000);
  loop.Start();
  std::vector<std::shared_ptr<Channel>> chans;
  for (int i = 0; i < 8; ++i) {
    chans.push_back(Request(i, 400));
    ASSERT_TRUE(loop.Enqueue(chans.back()));
  }
  {  // wait until generation is under way
    std::unique_lock lock(chans[0]->mu);
    chans[0]->cv.wait(lock, [&] { return chans[0]->done || chans[0]->completion_tokens >= 2; });
  }
  std::thread waiter([&] {  // a client blocked on its channel when Stop comes
    WaitDone(*chans[7]);
  });
  loop.Stop("shutting down for the test");
  waiter.join();
  for (auto& ch : chans) {
    std::lock_guard lock(ch->mu);
    ASSERT_TRUE(ch->done);
    EXPECT_EQ(ch->finish, "error");
    EXPECT_EQ(ch->error, "shutting down for the test");
  }
  EXPECT_FALSE(loop.Enqueue(Request(0, 4)));
  EXPECT_EQ(engine->running() + engine->waiting(), 0u);
  EXPECT_EQ(engine->Stats().in_use_bytes, 0u);
}

}  // namespace
}  // namespace chorus::server
