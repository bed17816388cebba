// Needle-in-a-haystack cases for Cocktail's benchmark: WikiText-2 excerpts of a target token length
// with K short facts ("The access code for the north gate is 4817.") planted at random depths, and
// a question about one of them whose exact answer is the 4-digit code. Deterministic for a seed.
// Invariants: codes are distinct within a case; keys are distinct; the asked fact is in the text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer.h"  // Tokenizer
#include "util/status.h"

namespace chorus::eval {

struct NeedleCase {
  std::string document;  // the excerpt with the facts planted
  std::string question;  // "What is the access code for the north gate?"
  std::string answer;    // "4817"
  std::string lead;      // the assistant's answer start: "The access code for the north gate is"
  double depth = 0;      // where the asked fact sits, as a fraction of the document (0 = start)
  size_t target_tokens = 0;
  std::string kind;  // --cases-file: what generated it (e.g. "needle:wiki", "read:article"); "" here
};

struct NeedleOptions {
  size_t cases = 20;
  size_t min_tokens = 2000, max_tokens = 6000;  // document length, drawn uniformly per case
  size_t facts = 3;                             // facts planted per document (one is asked)
  uint64_t seed = 1;
};

// corpus: WikiText-2 text (lines; sentences end with " ."). Errors: corpus too short, bad options.
Result<std::vector<NeedleCase>> MakeNeedleCases(const std::string& corpus, const Tokenizer& tok,
                                                const NeedleOptions& options);

}  // namespace chorus::eval
