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

std::unique_ptr<Engine> OpenTiny(size_t n_ctx = 512) {
  const testing::SyntheticSpec s = testing::TinySpec("loop");
  const std::string path = std::string(::testing::TempDir()) + "/engine_loop_test." + std::to_string(getpid()) + ".gguf";
  EXPECT_TRUE(testing::SyntheticModel(s).WriteFile(path).ok());
  EngineOptions o;
  o.model_path = path;
  o.threads = 2;
  o.n_ctx = n_ctx;
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

// What a client has read of its channel: the deltas appended, and the last update.
struct Read {
  std::string text;
  ChannelUpdate last;
};

void TakeOne(Channel& ch, Read* r) {
  ch.Take(&r->last);
  r->text += r->last.delta;
}

void WaitDone(Channel& ch, Read* r) {
  while (!r->last.done) TakeOne(ch, r);
}

// What OpenAI calls "length": the answer ran out of room.
bool IsLength(StopReason r) { return r == StopReason::kMaxTokens || r == StopReason::kContextFull; }

TEST(EngineLoop, ConcurrentClientsCancelsAndContextsKeepEveryAnswerIntact) {
  auto engine = OpenTiny();
  ASSERT_NE(engine, nullptr);
  ServerMetrics metrics;
  EngineLoop loop(*engine, metrics, 1000);
  loop.Start();

  constexpr int kClients = 6, kEach = 5, kVariants = 4;
  std::vector<std::vector<std::shared_ptr<Channel>>> got(kClients);
  std::vector<std::vector<Read>> read(kClients, std::vector<Read>(kEach));
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      for (int r = 0; r < kEach; ++r) {
        auto ch = Request(static_cast<int>(rng() % kVariants), 12);
        const bool cancel = rng() % 4 == 0;
        ASSERT_TRUE(loop.Enqueue(ch));
        if (cancel) {  // after its first token, as a client that disconnects mid-stream
          Read& rd = read[c][r];
          do TakeOne(*ch, &rd);
          while (!rd.last.done && rd.last.completion_tokens == 0);
          ch->cancel = true;
        }
        got[c].push_back(ch);
      }
      for (int r = 0; r < kEach; ++r) WaitDone(*got[c][r], &read[c][r]);
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
  for (int c = 0; c < kClients; ++c)
    for (int r = 0; r < kEach; ++r) {
      const Channel& ch = *got[c][r];
      const Read& rd = read[c][r];
      ASSERT_TRUE(rd.last.done);
      if (ch.cancel) {
        EXPECT_TRUE(rd.last.stop == StopReason::kCancelled || IsLength(rd.last.stop))
            << ToString(rd.last.stop) << " " << rd.last.error;
        continue;
      }
      ASSERT_TRUE(IsLength(rd.last.stop)) << ToString(rd.last.stop) << " " << rd.last.error;
      EXPECT_EQ(rd.last.completion_tokens, 12u);
      EXPECT_EQ(ch.bytes_published(), rd.text.size());
      auto [it, fresh] = answer.emplace(ch.prompt, rd.text);
      if (!fresh) {
        EXPECT_EQ(rd.text, it->second) << "a request's answer changed with what ran beside it";
      }
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
  std::vector<Read> read(chans.size());
  // Wait until generation is under way.
  do TakeOne(*chans[0], &read[0]);
  while (!read[0].last.done && read[0].last.completion_tokens < 2);
  std::thread waiter([&] {  // a client blocked on its channel when Stop comes
    WaitDone(*chans[7], &read[7]);
  });
  loop.Stop("shutting down for the test");
  waiter.join();
  for (size_t i = 0; i < chans.size(); ++i) {
    WaitDone(*chans[i], &read[i]);  // returns at once: every channel is finished
    ASSERT_TRUE(read[i].last.done);
    EXPECT_EQ(read[i].last.stop, StopReason::kError);
    EXPECT_EQ(read[i].last.error, "shutting down for the test");
  }
  EXPECT_FALSE(loop.Enqueue(Request(0, 4)));
  EXPECT_EQ(engine->running() + engine->waiting(), 0u);
  EXPECT_EQ(engine->Stats().in_use_bytes, 0u);
}

// Only deltas cross from the loop to the reader: a 1000-token answer moves its own length in
// bytes, not the sum of its prefixes (what publishing the whole text after every step moved),
// whether the reader takes every step or falls behind and takes several at once.
TEST(EngineLoop, PublishesOnlyTheNewTextOfEachStep) {
  auto engine = OpenTiny(2048);
  ASSERT_NE(engine, nullptr);
  ServerMetrics metrics;
  EngineLoop loop(*engine, metrics, 10);
  loop.Start();
  auto eager = Request(1, 1000), lagging = Request(2, 1000);
  ASSERT_TRUE(loop.Enqueue(eager));
  ASSERT_TRUE(loop.Enqueue(lagging));
  Read e, l;
  size_t takes = 0, whole_text_bytes = 0;  // what copying the whole text per take would move
  while (!e.last.done) {
    TakeOne(*eager, &e);
    ++takes;
    whole_text_bytes += e.text.size();
  }
  WaitDone(*lagging, &l);
  loop.Stop();
  ASSERT_EQ(e.last.stop, StopReason::kMaxTokens) << e.last.error;
  ASSERT_EQ(e.last.completion_tokens, 1000u);
  ASSERT_GT(e.text.size(), 1000u);  // every synthetic token's piece is at least one byte
  EXPECT_EQ(eager->bytes_published(), e.text.size());
  EXPECT_EQ(lagging->bytes_published(), l.text.size());
  EXPECT_EQ(l.last.completion_tokens, 1000u);
  EXPECT_GT(takes, 100u);  // the reader woke per step, not once at the end
  EXPECT_GT(whole_text_bytes, 10 * e.text.size());
}

}  // namespace
}  // namespace chorus::server
