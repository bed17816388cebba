// TokenizerDataFromGguf: reads the tokenizer.ggml.* keys of a GGUF into TokenizerData; every key is type-checked.
#pragma once
#include "gguf/gguf.h"        // GgufFile
#include "model/tokenizer.h"  // TokenizerData
#include "util/status.h"      // Result

namespace chorus {

// Required: tokenizer.ggml.model (string), .tokens (string array), .merges (string array,
// for "gpt2"). Optional: .pre (missing = llama.cpp's "default"), .token_type (integer array,
// one per token), .bos/.eos/.unknown/.padding_token_id (integers), .add_bos_token (bool;
// missing = the pre-tokenizer's llama.cpp default, true for llama3), .scores (number array) and
// .add_space_prefix (bool) for "llama" SentencePiece (whose bos/eos/unk default to llama.cpp's
// 1/2/0 and add_bos to true). Values are only
// type-checked here; Tokenizer::Create checks sizes and ranges.
Result<TokenizerData> TokenizerDataFromGguf(const GgufFile& f);

}  // namespace chorus
