// The grammar engine's cost per generated token on SmolLM2's vocab (49,152 tokens): GrammarMatcher
// FillMask + Accept along tokenized JSON answers, for a JSON Schema (tests/grammar/test_schema.h)
// and for any JSON object. A constrained step pays this once per constrained agent, beside the
// forward pass (docs/results/grammar.md). build/bench/grammar_bench [--benchmark_filter=...]
// env CHORUS_MODEL: the GGUF whose tokenizer to use (default models/SmolLM2-135M-Instruct.Q4_1.gguf).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "../tests/grammar/test_schema.h"
#include "gguf/gguf.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "model/tokenizer.h"
#include "model/tokenizer_gguf.h"

namespace {

using namespace chorus;

// Answers valid for kSchema, as a model would write them (compact JSON).
const char* kSchemaAnswers[] = {
    R"({"name": "Ann", "age": 42, "role": "user", "scores": [[1, -5], [], [3, 3, 4]], "active": true})",
    R"({"name": "Zürich Bob", "age": 150, "role": "admin", "scores": [[0]]})",
    R"({"name": "", "age": 0, "role": "guest", "scores": [], "active": false})",
};
const char* kObjectAnswers[] = {
    R"({"city": "Zürich", "country": "Switzerland", "population": 421878, "coordinates": {"lat": 47.3769, "lon": 8.5417}, "landmarks": ["Grossmünster", "Lake Zurich", "Bahnhofstrasse"], "capital": false, "note": "Largest city in Switzerland, on the northern end of the lake."})",
};

template <typename T>
T Must(Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

struct Fixture {
  std::optional<Tokenizer> tok;
  std::optional<GrammarCompiler> compiler;
  std::optional<Grammar> schema, object;
};

Fixture& Get() {
  static Fixture f = [] {
    Fixture f;
    const char* env = std::getenv("CHORUS_MODEL");
    const std::string path = env ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    auto file = GgufFile::Open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "grammar_bench: %s\n", file.status().message().c_str());
      std::exit(1);
    }
    f.tok.emplace(Must(Tokenizer::Create(Must(TokenizerDataFromGguf(**file)))));
    const TokenVocab vocab = Must(TokenVocab::FromTokenizer(*f.tok));
    f.compiler.emplace(Must(GrammarCompiler::Create(vocab)));
    auto t0 = std::chrono::steady_clock::now();
    f.schema.emplace(Must(f.compiler->Compile({.kind = GrammarKind::kJsonSchema, .text = grammar_test::kSchema})));
    auto t1 = std::chrono::steady_clock::now();
    f.object.emplace(Must(f.compiler->Compile({.kind = GrammarKind::kJsonObject})));
    auto t2 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "vocab %d tokens; compile: schema %.1f ms (%zu bytes), json_object %.1f ms (%zu bytes)\n",
                 vocab.Size(), std::chrono::duration<double, std::milli>(t1 - t0).count(), f.schema->MemoryBytes(),
                 std::chrono::duration<double, std::milli>(t2 - t1).count(), f.object->MemoryBytes());
    return f;
  }();
  return f;
}

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One iteration: every token sequence decoded from a fresh matcher, FillMask + Accept per token.
// max_fill_cpu: the slowest single FillMask in one more pass, in thread CPU time (a loaded machine's
// preemptions make the wall clock's maximum meaningless).
void Run(benchmark::State& state, const Grammar& g, const std::vector<std::vector<int32_t>>& tokens) {
  size_t n = 0;
  for (const auto& ids : tokens) n += ids.size();
  std::vector<uint32_t> mask(MaskWords(g.vocab().Size()));
  for (auto _ : state) {
    for (const auto& ids : tokens) {
      auto m = GrammarMatcher::Create(g);
      for (int32_t t : ids) {
        if (!m->FillMask(mask).ok() || !MaskAllows(mask, t) || !m->Accept(t)) {
          state.SkipWithError("a benchmark sequence was refused by its grammar");
          return;
        }
      }
      benchmark::DoNotOptimize(mask.data());
    }
  }
  double max_fill = 0;
  for (const auto& ids : tokens) {
    auto m = GrammarMatcher::Create(g);
    for (int32_t t : ids) {
      const double t0 = ThreadSeconds();
      (void)m->FillMask(mask);
      max_fill = std::max(max_fill, ThreadSeconds() - t0);
      m->Accept(t);
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
  state.counters["max_fill_cpu"] = max_fill;
  state.counters["tokens"] = static_cast<double>(n);
  state.counters["per_token"] = benchmark::Counter(
      static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

std::vector<std::vector<int32_t>> Encoded(std::span<const char* const> answers) {
  std::vector<std::vector<int32_t>> out;
  for (const char* a : answers) out.push_back(Get().tok->Encode(a, false, false));
  return out;
}

// Random walks over the schema's mask (tests/grammar/test_schema.h), seeds 1-8: odd strings, every
// branch of the grammar, the stop token at the end.
std::vector<std::vector<int32_t>> RandomWalks() {
  std::vector<std::vector<int32_t>> out;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto m = Must(GrammarMatcher::Create(*Get().schema));
    out.push_back(grammar_test::DecodeRandomly(m, seed, 3000, [](int32_t) { return std::string(); }).tokens);
  }
  return out;
}

void BM_MaskSchema(benchmark::State& state) { Run(state, *Get().schema, Encoded(kSchemaAnswers)); }
void BM_MaskSchemaRandomWalk(benchmark::State& state) { Run(state, *Get().schema, RandomWalks()); }
void BM_MaskJsonObject(benchmark::State& state) { Run(state, *Get().object, Encoded(kObjectAnswers)); }
BENCHMARK(BM_MaskSchema)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskSchemaRandomWalk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskJsonObject)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
