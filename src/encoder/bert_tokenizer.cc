// BertTokenizer: loading tokenizer.json and the BERT normalize → pre-tokenize → WordPiece pipeline.
#include "encoder/bert_tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "encoder/bert_unicode.h"

namespace chorus {
namespace {

std::string TypeOf(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_object() || !j[key].contains("type") ||
      !j[key]["type"].is_string())
    return "(none)";
  return j[key]["type"].get<std::string>();
}

bool BoolOr(const nlohmann::json& obj, const char* key, bool dflt) {
  if (!obj.contains(key) || obj[key].is_null()) return dflt;
  return obj[key].is_boolean() ? obj[key].get<bool>() : dflt;
}

}  // namespace

Result<BertTokenizer> BertTokenizer::FromTokenizerJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot open tokenizer file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("tokenizer '{}': not a JSON object", path);
  if (TypeOf(j, "model") != "WordPiece")
    return Status::Error("tokenizer '{}': model type '{}' is not supported (need WordPiece)", path, TypeOf(j, "model"));
  if (TypeOf(j, "normalizer") != "BertNormalizer")
    return Status::Error("tokenizer '{}': normalizer '{}' is not supported (need BertNormalizer)", path,
                         TypeOf(j, "normalizer"));
  if (TypeOf(j, "pre_tokenizer") != "BertPreTokenizer")
    return Status::Error("tokenizer '{}': pre_tokenizer '{}' is not supported (need BertPreTokenizer)", path,
                         TypeOf(j, "pre_tokenizer"));
  const nlohmann::json& norm = j["normalizer"];
  const bool lowercase = BoolOr(norm, "lowercase", true);
  const bool strip = BoolOr(norm, "strip_accents", lowercase);  // null: follows lowercase (HF)
  if (!lowercase || !strip)
    return Status::Error("tokenizer '{}': only uncased BERT (lowercase + strip_accents) is supported", path);
  BertTokenizer t;
  t.clean_text_ = BoolOr(norm, "clean_text", true);
  t.handle_cjk_ = BoolOr(norm, "handle_chinese_chars", true);
  const nlohmann::json& model = j["model"];
  if (model.contains("continuing_subword_prefix") &&
      (!model["continuing_subword_prefix"].is_string() || model["continuing_subword_prefix"] != "##"))
    return Status::Error("tokenizer '{}': continuing_subword_prefix must be \"##\"", path);
  if (model.contains("max_input_chars_per_word") && model["max_input_chars_per_word"].is_number_unsigned())
    t.max_chars_per_word_ = model["max_input_chars_per_word"].get<size_t>();
  if (!model.contains("vocab") || !model["vocab"].is_object() || model["vocab"].empty())
    return Status::Error("tokenizer '{}': model.vocab missing or empty", path);
  const size_t n = model["vocab"].size();
  t.id_to_token_.assign(n, std::string());
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() >= n)
      return Status::Error("tokenizer '{}': vocab id of '{}' is not in [0, {})", path, it.key(), n);
    const size_t id = it->get<size_t>();
    if (!t.id_to_token_[id].empty()) return Status::Error("tokenizer '{}': vocab id {} appears twice", path, id);
    t.id_to_token_[id] = it.key();
    t.vocab_[it.key()] = static_cast<int32_t>(id);
  }
  auto id_of = [&](const char* tok) -> int32_t {
    auto f = t.vocab_.find(tok);
    return f == t.vocab_.end() ? -1 : f->second;
  };
  t.cls_id_ = id_of("[CLS]");
  t.sep_id_ = id_of("[SEP]");
  std::string unk = model.contains("unk_token") && model["unk_token"].is_string() ? model["unk_token"].get<std::string>()
                                                                                   : "[UNK]";
  t.unk_id_ = id_of(unk.c_str());
  if (t.cls_id_ < 0 || t.sep_id_ < 0 || t.unk_id_ < 0)
    return Status::Error("tokenizer '{}': vocab lacks [CLS], [SEP] or the unk token '{}'", path, unk);
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const nlohmann::json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id") ||
          !a["id"].is_number_unsigned() || a["id"].get<size_t>() >= n)
        return Status::Error("tokenizer '{}': malformed added_tokens entry", path);
      if (BoolOr(a, "normalized", false) || BoolOr(a, "lstrip", false) || BoolOr(a, "rstrip", false) ||
          BoolOr(a, "single_word", false))
        return Status::Error("tokenizer '{}': added token '{}' uses options this tokenizer does not implement", path,
                             a["content"].get<std::string>());
      if (!a["content"].get<std::string>().empty())
        t.specials_.push_back({a["content"].get<std::string>(), a["id"].get<int32_t>()});
    }
  }
  return t;
}

void BertTokenizer::WordPiece(const std::u32string& word, std::vector<int32_t>& out) const {
  if (word.size() > max_chars_per_word_) {
    out.push_back(unk_id_);
    return;
  }
  std::vector<int32_t> pieces;
  std::string cand;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      cand.assign(start > 0 ? "##" : "");
      for (size_t k = start; k < end; ++k) bert::AppendUtf8(word[k], cand);
      auto f = vocab_.find(cand);
      if (f != vocab_.end()) {
        found = f->second;
        break;
      }
      --end;
    }
    if (found < 0) {
      out.push_back(unk_id_);
      return;
    }
    pieces.push_back(found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

void BertTokenizer::EncodeSegment(std::string_view raw, std::vector<int32_t>& out) const {
  // Normalize.
  const std::u32string in = bert::DecodeUtf8(raw);
  std::u32string norm;
  norm.reserve(in.size());
  for (char32_t c : in) {
    if (clean_text_) {
      if (c == 0 || c == 0xFFFD || bert::IsControl(c)) continue;
      if (bert::IsWhitespace(c)) {
        norm.push_back(U' ');
        continue;
      }
    }
    const bool pad = handle_cjk_ && bert::IsCjk(c);
    if (pad) norm.push_back(U' ');
    bert::AppendStripLower(c, norm);
    if (pad) norm.push_back(U' ');
  }
  // Pre-tokenize and WordPiece each word.
  std::u32string word;
  for (char32_t c : norm) {
    if (bert::IsWhitespace(c)) {
      if (!word.empty()) WordPiece(word, out);
      word.clear();
    } else if (bert::IsPunct(c)) {
      if (!word.empty()) WordPiece(word, out);
      word.assign(1, c);
      WordPiece(word, out);
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  if (!word.empty()) WordPiece(word, out);
}

std::vector<int32_t> BertTokenizer::EncodeNoSpecials(std::string_view text) const {
  std::vector<int32_t> out;
  size_t seg = 0, i = 0;
  while (i < text.size()) {
    const std::pair<std::string, int32_t>* best = nullptr;
    for (const auto& s : specials_) {
      if (text.compare(i, s.first.size(), s.first) == 0 && (best == nullptr || s.first.size() > best->first.size()))
        best = &s;
    }
    if (best == nullptr) {
      ++i;
      continue;
    }
    EncodeSegment(text.substr(seg, i - seg), out);
    out.push_back(best->second);
    i += best->first.size();
    seg = i;
  }
  EncodeSegment(text.substr(seg), out);
  return out;
}

std::vector<int32_t> BertTokenizer::Encode(std::string_view text, size_t max_len) const {
  std::vector<int32_t> body = EncodeNoSpecials(text);
  const size_t keep = max_len < 2 ? 0 : max_len - 2;
  if (body.size() > keep) body.resize(keep);
  std::vector<int32_t> out;
  out.reserve(body.size() + 2);
  out.push_back(cls_id_);
  out.insert(out.end(), body.begin(), body.end());
  out.push_back(sep_id_);
  return out;
}

}  // namespace chorus
