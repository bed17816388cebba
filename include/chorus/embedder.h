// Embedder: a sentence-embedding model (a sentence-transformers BERT directory such as
// all-MiniLM-L6-v2: text → unit-length vector), for `POST /v1/embeddings` and library users.
// Invariants: every vector has dim() floats and L2 norm 1; a text longer than max_tokens() is
// truncated (as sentence-transformers does); one caller at a time per Embedder.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "chorus/status.h"  // Result

namespace chorus {

class Embedder {
 public:
  // Errors name the missing or unsupported file of the directory.
  static Result<std::unique_ptr<Embedder>> Open(const std::string& dir, int threads = 1);
  ~Embedder();
  std::string name() const;
  size_t dim() const;
  size_t max_tokens() const;  // per text
  struct Batch {
    std::vector<std::vector<float>> vectors;  // one per text, in order
    size_t tokens = 0;                        // tokens embedded (after truncation), for usage
  };
  Result<Batch> Embed(const std::vector<std::string>& texts);

 private:
  struct Impl;
  explicit Embedder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
