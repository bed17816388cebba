// BertTokenizer: HF tokenizers' BERT pipeline for uncased WordPiece models (all-MiniLM-L6-v2):
//   special tokens matched verbatim in the raw text (leftmost-longest) → BertNormalizer (clean_text:
//   drop NUL/U+FFFD/controls, whitespace → ' '; pad CJK ideographs with spaces; NFD + drop Mn; lowercase)
//   → BertPreTokenizer (split on whitespace, isolate each punctuation char) → WordPiece (greedy
//   longest match, "##" continuation, a word longer than max_input_chars_per_word or with an
//   unmatchable rest → [UNK]) → truncate to max_len - 2 → [CLS] ids [SEP].
// Loaded from tokenizer.json; configurations other than this pipeline are refused with an error.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/status.h"  // Status, Result

namespace chorus {

class BertTokenizer {
 public:
  static Result<BertTokenizer> FromTokenizerJson(const std::string& path);

  // Token ids with [CLS] first and [SEP] last, at most max_len (>= 2) in all.
  std::vector<int32_t> Encode(std::string_view text, size_t max_len) const;
  // Word pieces of one text, no specials, no truncation (for tests and debugging).
  std::vector<int32_t> EncodeNoSpecials(std::string_view text) const;

  size_t vocab_size() const { return id_to_token_.size(); }
  const std::string& token(int32_t id) const { return id_to_token_.at(id); }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  void EncodeSegment(std::string_view raw, std::vector<int32_t>& out) const;
  void WordPiece(const std::u32string& word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // matched verbatim before normalization
  int32_t cls_id_ = -1, sep_id_ = -1, unk_id_ = -1;
  size_t max_chars_per_word_ = 100;
  bool clean_text_ = true, handle_cjk_ = true;
};

}  // namespace chorus
