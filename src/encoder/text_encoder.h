// TextEncoder: a sentence-embedding model (text → unit-length vector) for query/chunk relevance
// (Cocktail, METHODS.md §3). Implementations: the MiniLM/BERT encoder loaded from safetensors
// (src/encoder/), and the fallback that mean-pools the LLM's own hidden states (needs the model,
// so it lives above this layer). Invariant: Embed returns dim() floats with L2 norm 1 (or an
// error naming the problem); cosine similarity is then a dot product.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"  // Status, Result

namespace chorus {

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  // What ran, for reports: e.g. "all-MiniLM-L6-v2 (models/all-MiniLM-L6-v2)" or
  // "fallback: mean-pooled hidden states of SmolLM2-135M-Instruct".
  virtual std::string name() const = 0;
  virtual size_t dim() const = 0;
  virtual Result<std::vector<float>> Embed(std::string_view text) = 0;
  // Default: Embed one by one; implementations may batch.
  virtual Result<std::vector<std::vector<float>>> EmbedMany(const std::vector<std::string>& texts) {
    std::vector<std::vector<float>> out;
    out.reserve(texts.size());
    for (const std::string& t : texts) {
      Result<std::vector<float>> e = Embed(t);
      if (!e.ok()) return e.status();
      out.push_back(std::move(*e));
    }
    return out;
  }
};

}  // namespace chorus
