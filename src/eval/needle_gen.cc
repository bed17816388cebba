// Needle case generator (see needle_gen.h).
#include "eval/needle_gen.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

namespace chorus::eval {
namespace {

constexpr const char* kKeys[] = {"north gate",   "blue warehouse", "east tower",  "river laboratory",
                                 "old library",  "red bunker",     "west harbor", "glass dome",
                                 "south bridge", "iron vault",     "green depot", "silver hangar"};

size_t Draw(std::mt19937_64& rng, size_t lo, size_t hi) { return lo + rng() % (hi - lo + 1); }  // [lo, hi]

}  // namespace

Result<std::vector<NeedleCase>> MakeNeedleCases(const std::string& corpus, const Tokenizer& tok,
                                                const NeedleOptions& o) {
  if (o.cases == 0 || o.facts == 0 || o.facts > std::size(kKeys))
    return Status::Error("needle: need cases >= 1 and 1..{} facts, got {} cases, {} facts", std::size(kKeys), o.cases,
                         o.facts);
  if (o.min_tokens < 256 || o.min_tokens > o.max_tokens)
    return Status::Error("needle: document length range [{}, {}] is invalid (min >= 256, min <= max)", o.min_tokens,
                         o.max_tokens);
  const size_t max_chars = o.max_tokens * 8;
  if (corpus.size() < 2 * max_chars)
    return Status::Error("needle: the corpus has {} bytes; {} are needed for {}-token documents", corpus.size(),
                         2 * max_chars, o.max_tokens);
  std::mt19937_64 rng(o.seed);
  std::vector<NeedleCase> out;
  for (size_t c = 0; c < o.cases; ++c) {
    NeedleCase nc;
    nc.target_tokens = Draw(rng, o.min_tokens, o.max_tokens);
    // An excerpt starting at a line, cut to the target minus room for the facts.
    size_t start = corpus.find('\n', Draw(rng, 0, corpus.size() - 2 * max_chars));
    start = start == std::string::npos ? 0 : start + 1;
    const std::string raw = corpus.substr(start, nc.target_tokens * 8);
    std::vector<int32_t> ids = tok.Encode(raw, false, false);
    const size_t fact_room = 20 * o.facts;
    ids.resize(std::min(ids.size(), nc.target_tokens - fact_room));
    std::string doc = tok.Decode(ids);
    // Facts: distinct keys and codes, each after a sentence end (" .") at a random depth.
    std::vector<size_t> keys(std::size(kKeys));
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
    std::shuffle(keys.begin(), keys.end(), rng);
    std::vector<std::string> codes;
    while (codes.size() < o.facts) {
      const std::string code = fmt::format("{}", Draw(rng, 1000, 9999));
      if (std::find(codes.begin(), codes.end(), code) == codes.end()) codes.push_back(code);
    }
    const size_t asked = Draw(rng, 0, o.facts - 1);
    size_t asked_at = 0;
    // Insert from the deepest depth backwards so earlier insert positions stay valid.
    std::vector<std::pair<size_t, size_t>> at;  // (char position, fact index)
    for (size_t f = 0; f < o.facts; ++f) {
      const size_t want = doc.size() * Draw(rng, 5, 95) / 100;
      size_t p = doc.find(" .", want);
      p = p == std::string::npos ? doc.size() : p + 2;
      at.push_back({p, f});
    }
    std::sort(at.rbegin(), at.rend());
    for (auto [p, f] : at) {
      doc.insert(p, fmt::format(" The access code for the {} is {}.", kKeys[keys[f]], codes[f]));
      if (f == asked) asked_at = p;
    }
    // The asked fact's position after the insertions before it (those at smaller positions).
    const size_t asked_p = asked_at;
    for (auto [p, f] : at)
      if (p < asked_p || (p == asked_p && f < asked))
        asked_at += fmt::format(" The access code for the {} is {}.", kKeys[keys[f]], codes[f]).size();
    nc.document = std::move(doc);
    nc.question = fmt::format("What is the access code for the {}?", kKeys[keys[asked]]);
    nc.answer = codes[asked];
    nc.lead = fmt::format("The access code for the {} is", kKeys[keys[asked]]);
    nc.depth = double(asked_at) / nc.document.size();
    out.push_back(std::move(nc));
  }
  return out;
}

}  // namespace chorus::eval
