// PreTokenizer: llama.cpp's regex pre-split for byte-level BPE, on PCRE2 (UTF + UCP); pieces cover the input exactly.
#include "model/tokenizer_pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>  // pcre2_compile, pcre2_match

#include <utility>

#include "util/check.h"  // CHORUS_CHECK

namespace chorus {
namespace {

// The regexes below are copied verbatim from llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe).
// llama.cpp runs the GPT-2 and Llama-3 ones through hand-written matchers
// (unicode_regex_split_custom_*) that behave as the regex with `\s` = White_Space; the
// others through std::regex. PCRE2 gives the same splits.
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Unicode White_Space, which is llama.cpp's unicode_set_whitespace (PCRE2's UCP \s lacks U+0085).
constexpr const char* kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

struct PreKind {
  const char* names[8];  // null-terminated list of tokenizer.ggml.pre values
  std::vector<const char*> regexes;
  bool ignore_merges;
  bool add_bos;
};

const std::vector<PreKind>& PreKinds() {
  static const std::vector<PreKind> kinds = {
      // llama.cpp LLAMA_VOCAB_PRE_TYPE_DEFAULT (also used when the key is missing).
      {{"default", "", nullptr},
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
      // LLAMA_VOCAB_PRE_TYPE_GPT2 / MPT / OLMO.
      {{"gpt2", "gpt-2", "phi-2", "mpt", "olmo", nullptr}, {kGpt2}, false, false},
      // STARCODER / REFACT / COMMAND_R / SMOLLM / CODESHELL / EXAONE: digits split one by one.
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", nullptr},
       {"\\p{N}", kGpt2}, false, false},
      // LLAMA3: ignore_merges and add_bos by default.
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", nullptr}, {kLlama3}, true, true},
      // DBRX / SMAUG: the Llama-3 regex without the Llama-3 flags.
      {{"dbrx", "smaug-bpe", nullptr}, {kLlama3}, false, false},
      // QWEN2 / STABLELM2.
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", nullptr}, {kQwen2}, false, false},
  };
  return kinds;
}

// Rewrites \s and \S as explicit White_Space classes (inside and outside [...]).
std::string ExpandWhiteSpace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        CHORUS_CHECK(!in_class);  // no \S inside a class in the patterns above
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }

  // Splits text[span] into matches and the gaps between them; appends to out.
  void SplitPiece(std::string_view text, PieceSpan span, pcre2_match_data* md,
                  std::vector<PieceSpan>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + span.begin);
    const size_t n = span.size;
    size_t last_end = 0;  // end of the previous piece, relative to span.begin
    size_t start = 0;     // where the next search starts
    auto emit = [&](size_t b, size_t e) {
      if (e > b) out.push_back({span.begin + b, e - b});
    };
    while (start < n) {
      int rc = pcre2_match(code, subject, n, start, 0, md, nullptr);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        // JIT stack or match limits: retry with the interpreter (heap frames).
        rc = pcre2_match(code, subject, n, start, PCRE2_NO_JIT, md, nullptr);
      }
      if (rc < 0) break;  // no match (or a limit hit twice): the rest is one gap piece
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t mb = ov[0], me = ov[1];
      if (me <= mb) {  // empty match (none of our patterns has one): step over one byte
        start = mb + 1;
        continue;
      }
      emit(last_end, mb);
      emit(mb, me);
      last_end = me;
      start = me;
    }
    emit(last_end, n);
  }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::SupportedNames() {
  std::string s;
  for (const PreKind& k : PreKinds()) {
    for (const char* const* n = k.names; *n != nullptr; ++n) {
      if (**n == '\0') continue;
      if (!s.empty()) s += ", ";
      s += *n;
    }
  }
  return s;
}

Result<PreTokenizer> PreTokenizer::Create(std::string_view pre) {
  const PreKind* kind = nullptr;
  for (const PreKind& k : PreKinds()) {
    for (const char* const* n = k.names; *n != nullptr && kind == nullptr; ++n) {
      if (pre == *n) kind = &k;
    }
  }
  if (kind == nullptr) {
    return Status::Error("unsupported tokenizer.ggml.pre '{}' (supported: {})", pre,
                         SupportedNames());
  }
  PreTokenizer p;
  p.ignore_merges_ = kind->ignore_merges;
  p.default_add_bos_ = kind->add_bos;
  for (const char* pattern : kind->regexes) {
    const std::string expanded = ExpandWhiteSpace(pattern);
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto re = std::make_unique<Regex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.c_str()), expanded.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset,
                             nullptr);
    if (re->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Status::Error("pre-tokenizer regex for '{}' does not compile at {}: {}", pre,
                           err_offset, reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
    p.regexes_.push_back(std::move(re));
  }
  return p;
}

void PreTokenizer::Split(std::string_view text, std::vector<PieceSpan>& out) const {
  if (text.empty()) return;
  std::vector<PieceSpan> cur{{0, text.size()}};
  std::vector<PieceSpan> next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    CHORUS_CHECK(md != nullptr);
    next.clear();
    next.reserve(cur.size() * 2);
    for (const PieceSpan& s : cur) re->SplitPiece(text, s, md, next);
    pcre2_match_data_free(md);
    std::swap(cur, next);
  }
  out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace chorus
