// Unicode facts for BERT tokenization (HF tokenizers' BertNormalizer + BertPreTokenizer), from tables
// measured on HF tokenizers itself (scripts/gen_bert_unicode_tables.py → bert_unicode_tables.inc).
// Invariant: DecodeUtf8 never fails — an invalid byte becomes U+FFFD (which clean_text then removes).
#pragma once
#include <string>
#include <string_view>

namespace chorus::bert {

std::u32string DecodeUtf8(std::string_view s);
void AppendUtf8(char32_t c, std::string& out);

bool IsControl(char32_t c);     // dropped by clean_text: NUL, U+FFFD, Cc/Cf/Co except \t \n \r (not Cn)
bool IsWhitespace(char32_t c);  // Unicode White_Space (Rust char::is_whitespace)
bool IsPunct(char32_t c);       // isolated by BertPreTokenizer (ASCII punctuation + HF's P* table)
bool IsCjk(char32_t c);         // the CJK ideograph blocks BERT pads with spaces
bool IsMn(char32_t c);          // dropped by strip_accents (nonspacing marks in HF's table)

// Append lower(NFD(c) without Mn) — strip_accents then lowercase, per code point (no canonical
// reordering: only the order of spacing marks that survive stripping could differ from HF).
void AppendStripLower(char32_t c, std::u32string& out);

}  // namespace chorus::bert
