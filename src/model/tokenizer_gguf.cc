// TokenizerDataFromGguf: reads the tokenizer.ggml.* keys of a GGUF into TokenizerData; every key is type-checked.
#include "model/tokenizer_gguf.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "model/tokenizer_pretok.h"  // PreTokenizer::default_add_bos

namespace chorus {
namespace {

Result<std::optional<int32_t>> OptionalId(const GgufFile& f, const char* key) {
  if (f.Find(key) == nullptr) return std::optional<int32_t>();
  const auto v = f.GetInt(key);
  if (!v) return Status::Error("GGUF key {} is not an integer", key);
  if (*v < 0 || *v > std::numeric_limits<int32_t>::max()) {
    return Status::Error("GGUF key {} = {} is not a token id", key, *v);
  }
  return std::optional<int32_t>(static_cast<int32_t>(*v));
}

}  // namespace

Result<TokenizerData> TokenizerDataFromGguf(const GgufFile& f) {
  TokenizerData d;
  const auto model = f.GetString("tokenizer.ggml.model");
  if (!model) return Status::Error("GGUF has no tokenizer.ggml.model string");
  d.model = std::string(*model);

  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    const auto pre = f.GetString("tokenizer.ggml.pre");
    if (!pre) return Status::Error("GGUF key tokenizer.ggml.pre is not a string");
    d.pre = std::string(*pre);
  }

  const std::vector<std::string>* tokens = f.GetStringArray("tokenizer.ggml.tokens");
  if (tokens == nullptr) return Status::Error("GGUF has no tokenizer.ggml.tokens array of strings");
  d.tokens = *tokens;

  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    auto types = f.GetI32Array("tokenizer.ggml.token_type");
    if (!types) return Status::Error("GGUF key tokenizer.ggml.token_type is not an int32 array");
    d.token_types = std::move(*types);
  }

  if (f.Find("tokenizer.ggml.merges") != nullptr) {
    const std::vector<std::string>* merges = f.GetStringArray("tokenizer.ggml.merges");
    if (merges == nullptr) return Status::Error("GGUF key tokenizer.ggml.merges is not an array of strings");
    d.merges = *merges;
  } else if (d.model == "gpt2") {
    return Status::Error("GGUF has no tokenizer.ggml.merges (needed by the gpt2 BPE tokenizer)");
  }

  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    auto scores = f.GetF32Array("tokenizer.ggml.scores");
    if (!scores) return Status::Error("GGUF key tokenizer.ggml.scores is not an array of numbers");
    d.scores = std::move(*scores);
  }
  if (f.Find("tokenizer.ggml.add_space_prefix") != nullptr) {
    const auto v = f.GetBool("tokenizer.ggml.add_space_prefix");
    if (!v) return Status::Error("GGUF key tokenizer.ggml.add_space_prefix is not a bool");
    d.add_space_prefix = *v;
  }
  if (d.model == "llama") {  // llama.cpp's SentencePiece defaults
    d.bos = 1;
    d.eos = 2;
    d.unk = 0;
    d.add_bos = true;
  }
  if (f.Find("tokenizer.ggml.bos_token_id") != nullptr) {
    CHORUS_ASSIGN_OR_RETURN(d.bos, OptionalId(f, "tokenizer.ggml.bos_token_id"));
  }
  if (f.Find("tokenizer.ggml.eos_token_id") != nullptr) {
    CHORUS_ASSIGN_OR_RETURN(d.eos, OptionalId(f, "tokenizer.ggml.eos_token_id"));
  }
  if (f.Find("tokenizer.ggml.unknown_token_id") != nullptr) {
    CHORUS_ASSIGN_OR_RETURN(d.unk, OptionalId(f, "tokenizer.ggml.unknown_token_id"));
  }
  CHORUS_ASSIGN_OR_RETURN(d.pad, OptionalId(f, "tokenizer.ggml.padding_token_id"));

  if (f.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    const auto add_bos = f.GetBool("tokenizer.ggml.add_bos_token");
    if (!add_bos) return Status::Error("GGUF key tokenizer.ggml.add_bos_token is not a bool");
    d.add_bos = *add_bos;
  } else if (d.model == "llama") {
    // llama.cpp's SentencePiece default (set above)
  } else if (auto pre = PreTokenizer::Create(d.pre); pre.ok()) {
    d.add_bos = pre->default_add_bos();  // an unknown pre is reported by Tokenizer::Create
  }
  return d;
}

}  // namespace chorus
