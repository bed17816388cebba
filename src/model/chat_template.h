// Chat templates: render messages into a prompt for the families chorus knows (ChatML, Llama-2/3, Mistral, Gemma); not a Jinja engine.
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "util/status.h"  // Result

namespace chorus {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// The families, as llama.cpp's llm_chat_template names them.
enum class ChatTemplateKind {
  kChatMl,           // <|im_start|>role\ncontent<|im_end|>\n (SmolLM2, Qwen2 ...)
  kLlama2,           // [INST] ... [/INST], system folded into the first turn
  kLlama2Sys,        // + <<SYS>> block
  kLlama2SysBos,     // + <s> before each later [INST]
  kLlama2SysStrip,   // + contents trimmed
  kMistralV1,        // " [INST] ... [/INST]"
  kMistralV3,        // "[INST] ... [/INST]", assistant trimmed
  kMistralV3Tekken,  // "[INST]...[/INST]"
  kMistralV7,        // [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ... [/INST]
  kMistralV7Tekken,
  kLlama3,           // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  kGemma,            // <start_of_turn>user\ncontent<end_of_turn>\n, assistant = "model", system folded into the next turn
};

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatMl;
  // ChatML only: the system prompt the template inserts when the first message is not a
  // system message (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by
  // Hugging Face"); empty when it inserts none.
  std::string default_system;
};

// Recognizes tokenizer.chat_template text (by the markers llama.cpp's llm_chat_detect_template
// uses) or a family name ("chatml", "llama2", "llama2-sys", "llama2-sys-bos",
// "llama2-sys-strip", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
// "mistral-v7-tekken", "llama3", "gemma"). Anything else is an error naming what is supported.
Result<ChatTemplate> DetectChatTemplate(std::string_view template_text);

// The prompt text, without BOS (Encode(add_special = true) adds it when the model wants it).
// ChatML output equals the Jinja rendering of the template (incl. its default system prompt);
// the other families equal llama.cpp's llm_chat_apply_template.
std::string RenderChat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                       bool add_generation_prompt);

// DetectChatTemplate + RenderChat.
Result<std::string> ApplyChatTemplate(std::string_view template_text,
                                      std::span<const ChatMessage> messages,
                                      bool add_generation_prompt);

}  // namespace chorus
