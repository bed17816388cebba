// HiddenStateEncoder: mean-pooled final hidden states of the LLM (see hidden_state_encoder.h).
#include "engine/hidden_state_encoder.h"

#include <cmath>

namespace chorus {

std::string HiddenStateEncoder::name() const {
  const std::string& n = model_.config().name;
  return "fallback: mean-pooled hidden states of " + (n.empty() ? std::string("the loaded model") : n);
}

size_t HiddenStateEncoder::dim() const { return model_.config().n_embd; }

Result<std::vector<float>> HiddenStateEncoder::Embed(std::string_view text) {
  const std::vector<int32_t> tokens = model_.tokenizer().Encode(text, /*add_special=*/false, /*parse_special=*/false);
  if (tokens.empty()) return Status::Error("cannot embed an empty text");
  DenseKvCache kv = fwd_.MakeCache(tokens.size());
  std::vector<float> e(dim());
  CHORUS_RETURN_IF_ERROR(fwd_.MeanHidden(tokens, kv, pool_, e.data()).Context("fallback encoder"));
  double n2 = 0;
  for (float x : e) n2 += double(x) * x;
  if (!(n2 > 0) || !std::isfinite(n2)) return Status::Error("fallback encoder: zero or non-finite embedding");
  const float inv = static_cast<float>(1.0 / std::sqrt(n2));
  for (float& x : e) x *= inv;
  return e;
}

}  // namespace chorus
