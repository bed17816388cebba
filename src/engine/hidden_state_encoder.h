// HiddenStateEncoder: Cocktail's fallback TextEncoder (METHODS.md §3) — the LLM itself, run over
// the text alone (no BOS, a fresh dense fp16 KV), its final-norm hidden states mean-pooled and
// L2-normalized. It lives in engine because it needs the model (encoder sits below model).
// Invariant: Embed returns n_embd floats of unit norm, or an error (empty text, forward failure).
#pragma once
#include <string>

#include "encoder/text_encoder.h"  // TextEncoder
#include "model/forward.h"         // ForwardPass
#include "model/model.h"           // Model
#include "util/thread_pool.h"

namespace chorus {

class HiddenStateEncoder : public TextEncoder {
 public:
  // All three must outlive the encoder; `fwd` is only used between other calls (scratch reuse).
  HiddenStateEncoder(const Model& model, ForwardPass& fwd, ThreadPool& pool) : model_(model), fwd_(fwd), pool_(pool) {}
  std::string name() const override;
  size_t dim() const override;
  Result<std::vector<float>> Embed(std::string_view text) override;

 private:
  const Model& model_;
  ForwardPass& fwd_;
  ThreadPool& pool_;
};

}  // namespace chorus
