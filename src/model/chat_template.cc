// Chat templates: render messages into a prompt for the families chorus knows (ChatML, Llama-2/3, Mistral, Gemma); not a Jinja engine.
#include "model/chat_template.h"

#include <optional>
#include <utility>

namespace chorus {
namespace {

constexpr std::pair<const char*, ChatTemplateKind> kNames[] = {
    {"chatml", ChatTemplateKind::kChatMl},
    {"llama2", ChatTemplateKind::kLlama2},
    {"llama2-sys", ChatTemplateKind::kLlama2Sys},
    {"llama2-sys-bos", ChatTemplateKind::kLlama2SysBos},
    {"llama2-sys-strip", ChatTemplateKind::kLlama2SysStrip},
    {"mistral-v1", ChatTemplateKind::kMistralV1},
    {"mistral-v3", ChatTemplateKind::kMistralV3},
    {"mistral-v3-tekken", ChatTemplateKind::kMistralV3Tekken},
    {"mistral-v7", ChatTemplateKind::kMistralV7},
    {"mistral-v7-tekken", ChatTemplateKind::kMistralV7Tekken},
    {"llama3", ChatTemplateKind::kLlama3},
    {"gemma", ChatTemplateKind::kGemma},
};

// llama.cpp's trim: ASCII isspace at both ends.
std::string Trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

// Undoes the escapes of a Jinja string literal (\n, \t, \\, \', \").
std::string UnescapeJinja(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A ChatML template's default system prompt: a string literal
// '<|im_start|>system\n...<|im_end|>' whose middle is plain text (not built from a variable),
// in a template that tests the first message's role.
std::optional<std::string> FindDefaultSystem(std::string_view t) {
  if (t.find("'system'") == std::string_view::npos &&
      t.find("\"system\"") == std::string_view::npos) {
    return std::nullopt;
  }
  constexpr std::string_view kOpen = "<|im_start|>system";
  constexpr std::string_view kClose = "<|im_end|>";
  for (size_t at = t.find(kOpen); at != std::string_view::npos; at = t.find(kOpen, at + 1)) {
    if (at == 0) continue;
    const char quote = t[at - 1];
    if (quote != '\'' && quote != '"') continue;
    size_t body = at + kOpen.size();
    if (t.substr(body, 1) == "\n") {
      body += 1;
    } else if (t.substr(body, 2) == "\\n") {
      body += 2;
    } else {
      continue;
    }
    const size_t end = t.find(kClose, body);
    if (end == std::string_view::npos) continue;
    const std::string_view raw = t.substr(body, end - body);
    bool plain = raw.find("{{") == std::string_view::npos && raw.find("{%") == std::string_view::npos;
    for (size_t i = 0; plain && i < raw.size(); ++i) {
      if (raw[i] == '\\') ++i;                // escaped character
      else if (raw[i] == quote) plain = false;  // the literal ends: built from pieces
    }
    if (plain) return UnescapeJinja(raw);
  }
  return std::nullopt;
}

bool Contains(std::string_view t, std::string_view s) { return t.find(s) != std::string_view::npos; }

}  // namespace

Result<ChatTemplate> DetectChatTemplate(std::string_view t) {
  for (const auto& [name, kind] : kNames) {
    if (t == name) return ChatTemplate{kind, ""};
  }
  if (t.empty()) return Status::Error("empty chat template (the model has no tokenizer.chat_template)");
  if (Contains(t, "<|im_start|>")) {
    if (Contains(t, "<|im_sep|>") || Contains(t, "<end_of_utterance>")) {
      return Status::Error("unsupported chat template: Phi-4/SmolVLM variant of ChatML");
    }
    return ChatTemplate{ChatTemplateKind::kChatMl, FindDefaultSystem(t).value_or("")};
  }
  if (t.substr(0, 7) == "mistral" || Contains(t, "[INST]")) {
    if (Contains(t, "[SYSTEM_PROMPT]")) return ChatTemplate{ChatTemplateKind::kMistralV7, ""};
    if (Contains(t, "' [INST] ' + system_message") || Contains(t, "[AVAILABLE_TOOLS]")) {
      if (Contains(t, " [INST]")) return ChatTemplate{ChatTemplateKind::kMistralV1, ""};
      if (Contains(t, "\"[INST]\"")) return ChatTemplate{ChatTemplateKind::kMistralV3Tekken, ""};
      return ChatTemplate{ChatTemplateKind::kMistralV3, ""};
    }
    if (Contains(t, "content.strip()")) return ChatTemplate{ChatTemplateKind::kLlama2SysStrip, ""};
    if (Contains(t, "bos_token + '[INST]")) return ChatTemplate{ChatTemplateKind::kLlama2SysBos, ""};
    if (Contains(t, "<<SYS>>")) return ChatTemplate{ChatTemplateKind::kLlama2Sys, ""};
    return ChatTemplate{ChatTemplateKind::kLlama2, ""};
  }
  if (Contains(t, "<|start_header_id|>") && Contains(t, "<|end_header_id|>")) {
    return ChatTemplate{ChatTemplateKind::kLlama3, ""};
  }
  if (Contains(t, "<start_of_turn>")) return ChatTemplate{ChatTemplateKind::kGemma, ""};
  std::string head(t.substr(0, 80));
  return Status::Error(
      "unsupported chat template (chorus renders ChatML, Llama-2, Llama-3, Mistral and Gemma families, "
      "or a name: chatml, llama2, llama3, mistral-v7, gemma ...); template begins: '{}'",
      head);
}

std::string RenderChat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                       bool add_generation_prompt) {
  using K = ChatTemplateKind;
  std::string out;
  switch (tmpl.kind) {
    case K::kChatMl:
      if (!tmpl.default_system.empty() && !messages.empty() && messages[0].role != "system") {
        out += "<|im_start|>system\n" + tmpl.default_system + "<|im_end|>\n";
      }
      for (const ChatMessage& m : messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case K::kGemma: {  // llama.cpp LLM_CHAT_TEMPLATE_GEMMA
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system += Trim(m.content);
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n";
        if (!system.empty() && role != "model") {
          out += system + "\n\n";
          system.clear();
        }
        out += Trim(m.content) + "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }
    case K::kLlama3:
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + Trim(m.content) +
               "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case K::kMistralV7:
    case K::kMistralV7Tekken: {
      const std::string sp = tmpl.kind == K::kMistralV7 ? " " : "";
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          out += "[SYSTEM_PROMPT]" + sp + m.content + "[/SYSTEM_PROMPT]";
        } else if (m.role == "user") {
          out += "[INST]" + sp + m.content + "[/INST]";
        } else {
          out += sp + m.content + "</s>";
        }
      }
      break;
    }
    case K::kMistralV1:
    case K::kMistralV3:
    case K::kMistralV3Tekken: {
      const std::string lead = tmpl.kind == K::kMistralV1 ? " " : "";
      const std::string trail = tmpl.kind == K::kMistralV3Tekken ? "" : " ";
      bool in_turn = false;
      for (const ChatMessage& m : messages) {
        if (!in_turn) {
          out += lead + "[INST]" + trail;
          in_turn = true;
        }
        if (m.role == "system") {
          out += m.content + "\n\n";
        } else if (m.role == "user") {
          out += m.content + lead + "[/INST]";
        } else {
          out += trail + (tmpl.kind == K::kMistralV3 ? Trim(m.content) : m.content) + "</s>";
          in_turn = false;
        }
      }
      break;
    }
    case K::kLlama2:
    case K::kLlama2Sys:
    case K::kLlama2SysBos:
    case K::kLlama2SysStrip: {
      const bool sys_block = tmpl.kind != K::kLlama2;
      const bool bos_inside = tmpl.kind == K::kLlama2SysBos;
      const bool strip = tmpl.kind == K::kLlama2SysStrip;
      bool in_turn = true;  // the first [INST] comes without BOS
      out += "[INST] ";
      for (const ChatMessage& m : messages) {
        const std::string content = strip ? Trim(m.content) : m.content;
        if (!in_turn) {
          in_turn = true;
          out += bos_inside ? "<s>[INST] " : "[INST] ";
        }
        if (m.role == "system") {
          out += sys_block ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
        } else if (m.role == "user") {
          out += content + " [/INST]";
        } else {
          out += content + "</s>";
          in_turn = false;
        }
      }
      break;
    }
  }
  return out;
}

Result<std::string> ApplyChatTemplate(std::string_view template_text,
                                      std::span<const ChatMessage> messages,
                                      bool add_generation_prompt) {
  CHORUS_ASSIGN_OR_RETURN(ChatTemplate tmpl, DetectChatTemplate(template_text));
  return RenderChat(tmpl, messages, add_generation_prompt);
}

}  // namespace chorus
