// Chat template tests: Jinja2 (SmolLM2) and llama.cpp (Llama-2/3, Mistral) goldens, detection, errors.
#include "model/chat_template.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "tokenizer_test_gguf.h"  // ReadTokenizerFromGgufForTest

namespace chorus {
namespace {

const std::string kGoldenPath =
    std::string(CHORUS_SOURCE_DIR) + "/tests/model/testdata/chat_template_golden.json";
const std::string kModelPath =
    std::string(CHORUS_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kSmolSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

nlohmann::json LoadGoldens() {
  std::ifstream f(kGoldenPath);
  if (!f) return nullptr;
  return nlohmann::json::parse(f);
}

TEST(ChatTemplate, MatchesGoldens) {
  const auto g = LoadGoldens();
  ASSERT_FALSE(g.is_null()) << kGoldenPath << " is missing: run scripts/ref_chat_template_goldens.py";
  size_t n = 0, mismatches = 0;
  for (const auto& c : g.at("cases")) {
    const std::string name = c.at("template").get<std::string>();
    const std::string text = g.at("templates").at(name).get<std::string>();
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    const bool gen = c.at("add_generation_prompt").get<bool>();
    auto got = ApplyChatTemplate(text, messages, gen);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().message();
    ++n;
    if (*got != c.at("expected").get<std::string>()) {
      ++mismatches;
      ADD_FAILURE() << name << " (" << c.at("source").get<std::string>() << ") messages "
                    << c.at("messages").dump() << " gen=" << gen << "\n  want "
                    << nlohmann::json(c.at("expected")).dump() << "\n  got  "
                    << nlohmann::json(*got).dump();
    }
  }
  std::printf("chat template goldens: %zu cases, %zu mismatches\n", n, mismatches);
  EXPECT_GT(n, 100u);
}

TEST(ChatTemplate, DetectsSmolLm2DefaultSystemPrompt) {
  ASSERT_TRUE(std::filesystem::exists(kModelPath))
      << kModelPath << " is missing: run scripts/fetch_model.sh";
  auto gguf = testing::ReadTokenizerFromGgufForTest(kModelPath);
  ASSERT_TRUE(gguf.has_value());
  auto t = DetectChatTemplate(gguf->chat_template);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->default_system, kSmolSystem);
  const ChatMessage user[] = {{"user", "Hi"}};
  EXPECT_EQ(RenderChat(*t, user, true),
            std::string("<|im_start|>system\n") + kSmolSystem +
                "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const ChatMessage with_system[] = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(RenderChat(*t, with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(RenderChat(*t, {}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, DefaultSystemOnlyFromPlainLiterals) {
  // Escaped newline in the literal, Qwen-like: a variable-built system block comes first.
  const std::string qwen_like =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
      "Qwen.\\tBe nice.<|im_end|>\\n' }}{%- endif %}";
  auto t = DetectChatTemplate(qwen_like);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->default_system, "You are Qwen.\tBe nice.");
  // Plain ChatML with no default system prompt.
  auto plain = DetectChatTemplate(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(plain->default_system, "");
}

TEST(ChatTemplate, RejectsUnknownTemplates) {
  const ChatMessage user[] = {{"user", "Hi"}};
  auto r = ApplyChatTemplate("{{ messages[0]['content'] }} ### Response:", user, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unsupported chat template"), std::string::npos);
  EXPECT_NE(r.status().message().find("ChatML"), std::string::npos);
  EXPECT_FALSE(ApplyChatTemplate("", user, true).ok());
  EXPECT_FALSE(ApplyChatTemplate("{{ '<|im_start|>' }}<|im_sep|>", user, true).ok());
  EXPECT_FALSE(ApplyChatTemplate("chatml2", user, true).ok());
}

TEST(ChatTemplate, DetectsFamiliesByMarkersAndNames) {
  EXPECT_EQ(DetectChatTemplate("chatml")->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(DetectChatTemplate("llama3")->kind, ChatTemplateKind::kLlama3);
  EXPECT_EQ(DetectChatTemplate("mistral-v7-tekken")->kind, ChatTemplateKind::kMistralV7Tekken);
  EXPECT_EQ(DetectChatTemplate("x<|start_header_id|>y<|end_header_id|>")->kind,
            ChatTemplateKind::kLlama3);
  EXPECT_EQ(DetectChatTemplate("[INST] <<SYS>>")->kind, ChatTemplateKind::kLlama2Sys);
  EXPECT_EQ(DetectChatTemplate("[INST] [SYSTEM_PROMPT]")->kind, ChatTemplateKind::kMistralV7);
}

}  // namespace
}  // namespace chorus
