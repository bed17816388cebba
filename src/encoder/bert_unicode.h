// Unicode facts for BERT tokenization (HF tokenizers' BertNormalizer + BertPreTokenizer), from tables
// generated out of Python's unicodedata (scripts/gen_bert_unicode_tables.py → bert_unicode_tables.inc).
// Invariant: DecodeUtf8 never fails — an invalid byte becomes U+FFFD (which clean_text then removes).
#pragma once
#include <string>
#include <string_view>

namespace chorus::bert {

std::u32string DecodeUtf8(std::string_view s);
void AppendUtf8(char32_t c, std::string& out);

bool IsControl(char32_t c);     // category C* except \t \n \r (clean_text drops these, and NUL, U+FFFD)
bool IsWhitespace(char32_t c);  // Unicode White_Space (Rust char::is_whitespace)
bool IsPunct(char32_t c);       // ASCII punctuation or category P*
bool IsCjk(char32_t c);         // the CJK ideograph blocks BERT pads with spaces
bool IsMn(char32_t c);          // nonspacing mark (dropped after NFD by strip_accents)

// Append lower(NFD(c) without Mn) — strip_accents then lowercase, per code point (no canonical
// reordering: only the order of spacing marks that survive stripping could differ from HF).
void AppendStripLower(char32_t c, std::u32string& out);

}  // namespace chorus::bert
