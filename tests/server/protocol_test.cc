// Request parsing and validation: every accepted field in range, every bad input one ApiError that
// names the field; response and SSE shapes as OpenAI clients read them.
#include "server/protocol.h"
#include "server/responses.h"

#include <gtest/gtest.h>

#include <limits>

namespace chorus::server {
namespace {

using json = nlohmann::json;

ApiError ErrorOf(const ParsedRequest& p) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(p)) << "expected an error";
  return std::holds_alternative<ApiError>(p) ? std::get<ApiError>(p) : ApiError{};
}
GenerationRequest RequestOf(const ParsedRequest& p) {
  if (auto* e = std::get_if<ApiError>(&p)) ADD_FAILURE() << "unexpected error: " << e->message;
  return std::holds_alternative<GenerationRequest>(p) ? std::get<GenerationRequest>(p) : GenerationRequest{};
}

TEST(Protocol, ChatDefaultsAndFields) {
  auto r = RequestOf(ParseChatCompletion(R"({"model":"m","messages":[{"role":"system","content":"S"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})"));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_EQ(r.top_p, 1.0f);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.stream);
  r = RequestOf(ParseChatCompletion(R"({"messages":[{"role":"developer","content":"x"}],"max_tokens":7,
      "temperature":0,"top_p":0.5,"seed":-3,"stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true},
      "n":1,"presence_penalty":0,"tools":[],"logprobs":false,"response_format":{"type":"text"}})"));
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_EQ(*r.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream && r.include_usage);
  r = RequestOf(ParseChatCompletion(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":3,"max_tokens":9,"stop":"s"})"));
  EXPECT_EQ(*r.max_tokens, 3);  // the newer field wins
  EXPECT_EQ(r.stop, std::vector<std::string>{"s"});
  // null means "not given" (what clients send for None)
  r = RequestOf(ParseChatCompletion(R"({"messages":[{"role":"assistant","content":null},{"role":"user","content":"q"}],"max_tokens":null,"stop":null,"seed":null})"));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.messages[0].content, "");
}

struct BadCase {
  const char* body;
  const char* param;
};

TEST(Protocol, ChatErrorsNameTheField) {
  const BadCase cases[] = {
      {"", ""},
      {"{", ""},
      {"[1,2]", ""},
      {"{\"messages\": \"hi\"}", "messages"},
      {"{}", "messages"},
      {"{\"messages\": []}", "messages"},
      {"{\"messages\": [1]}", "messages[0]"},
      {"{\"messages\": [{\"content\":\"x\"}]}", "messages[0].role"},
      {"{\"messages\": [{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].tool_call_id"},
      {"{\"messages\": [{\"role\":\"function\",\"content\":\"x\"}]}", "messages[0].role"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages[0].tool_calls"},
      {"{\"messages\": [{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]}",
       "messages[0].tool_calls[0]"},
      {"{\"messages\": [{\"role\":\"user\"}]}", "messages[0].content"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":5}]}", "messages[0].content"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content[0].type"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"max_tokens\": 0}", "max_tokens"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"max_tokens\": -5}", "max_tokens"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"max_tokens\": 1e30}", "max_tokens"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"max_tokens\": 99999999999}", "max_tokens"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"max_tokens\": \"10\"}", "max_tokens"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"temperature\": 2.5}", "temperature"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"temperature\": -0.1}", "temperature"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"top_p\": 0}", "top_p"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"top_p\": 1.5}", "top_p"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"n\": 17}", "n"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"seed\": 1.5}", "seed"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"stop\": [\"\"]}", "stop"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"stop\": 3}", "stop"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"stream\": \"yes\"}", "stream"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"stream_options\": {\"include_usage\":true}}",
       "stream_options"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"stream\": true, \"stream_options\": "
       "{\"include_usage\":1}}",
       "stream_options.include_usage"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"model\": 3}", "model"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"top_logprobs\": 3}", "top_logprobs"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"tools\": [{\"type\":\"function\"}]}",
       "tools[0].function"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"tools\": {}}", "tools"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"tools\": "
       "[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
       "tools[0].function.name"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"tool_choice\": \"required\"}", "tool_choice"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"tools\": "
       "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}], \"tool_choice\": "
       "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
       "tool_choice"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"functions\": [{\"name\":\"f\"}]}", "functions"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"presence_penalty\": 2.5}", "presence_penalty"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"logit_bias\": {\"a\": 1}}", "logit_bias"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"logit_bias\": {\"5\": 101}}", "logit_bias"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"response_format\": {\"type\":\"xml\"}}",
       "response_format.type"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"response_format\": {\"type\":\"json_schema\"}}",
       "response_format.json_schema"},
      {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}], \"response_format\": "
       "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":3}}}",
       "response_format.json_schema.schema"},
  };
  for (const BadCase& c : cases) {
    ApiError e = ErrorOf(ParseChatCompletion(c.body));
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty()) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

TEST(Protocol, ChorusReuseExtension) {
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(RequestOf(ParseChatCompletion("{" + msgs + "}")).reuse, "");
  EXPECT_EQ(RequestOf(ParseChatCompletion("{" + msgs + R"(,"chorus":{"reuse":"exact"}})")).reuse, "exact");
  EXPECT_EQ(RequestOf(ParseCompletion(R"({"prompt":"p","chorus":{"reuse":"segments"}})")).reuse, "segments");
  EXPECT_EQ(ErrorOf(ParseChatCompletion("{" + msgs + R"(,"chorus":{"reuse":"always"}})")).param, "chorus.reuse");
  EXPECT_EQ(ErrorOf(ParseChatCompletion("{" + msgs + R"(,"chorus":{"reuse":1}})")).param, "chorus.reuse");
  EXPECT_EQ(ErrorOf(ParseChatCompletion("{" + msgs + R"(,"chorus":{"resue":"exact"}})")).param, "chorus.resue");
  EXPECT_EQ(ErrorOf(ParseChatCompletion("{" + msgs + R"(,"chorus":"exact"})")).param, "chorus");
}

TEST(Protocol, CacheSalt) {
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(RequestOf(ParseChatCompletion("{" + msgs + "}")).cache_salt, "");
  EXPECT_EQ(RequestOf(ParseChatCompletion("{" + msgs + R"(,"cache_salt":"s1"})")).cache_salt, "s1");
  EXPECT_EQ(RequestOf(ParseCompletion(R"({"prompt":"p","cache_salt":"s2"})")).cache_salt, "s2");
  EXPECT_EQ(ErrorOf(ParseChatCompletion("{" + msgs + R"(,"cache_salt":""})")).param, "cache_salt");
  EXPECT_EQ(ErrorOf(ParseChatCompletion("{" + msgs + R"(,"cache_salt":7})")).param, "cache_salt");
}

TEST(Protocol, ChorusContextContentParts) {
  auto r = RequestOf(ParseChatCompletion(R"({"messages":[{"role":"user","content":[{"type":"text","text":"Read "},
      {"type":"chorus_context","id":"ctx-3"},{"type":"text","text":" and answer."}]}]})"));
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "Read  and answer.");
  ASSERT_EQ(r.messages[0].contexts.size(), 1u);
  EXPECT_EQ(r.messages[0].contexts[0].at, 5u);
  EXPECT_EQ(r.messages[0].contexts[0].id, "ctx-3");
  EXPECT_EQ(
      ErrorOf(ParseChatCompletion(R"({"messages":[{"role":"user","content":[{"type":"chorus_context"}]}]})")).param,
      "messages[0].content[0].id");
  EXPECT_EQ(
      ErrorOf(ParseChatCompletion(R"({"messages":[{"role":"user","content":[{"type":"chorus_context","id":"doc"}]}]})"))
          .param,
      "messages[0].content[0].id");
  EXPECT_EQ(ErrorOf(ParseChatCompletion(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})")).param,
            "messages[0].content[0].type");
}

TEST(Protocol, LimitsComeFromTheServer) {
  ProtocolLimits lim{.max_tokens = 100};
  EXPECT_EQ(ErrorOf(ParseChatCompletion(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":101})", lim)).param,
            "max_tokens");
  EXPECT_EQ(*RequestOf(ParseChatCompletion(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":100})", lim)).max_tokens,
            100);
}

TEST(Protocol, InvalidUtf8AndDeepNestingAreErrors) {
  std::string bad = "{\"messages\":[{\"role\":\"user\",\"content\":\"\xC3\x28\"}]}";
  ApiError e = ErrorOf(ParseChatCompletion(bad));
  EXPECT_EQ(e.code, "invalid_utf8") << e.message;
  EXPECT_TRUE(IsValidUtf8(e.message));  // it quotes the bytes it read, escaped: the error JSON can be sent
  EXPECT_NO_THROW(ErrorJson(e).dump());
  std::string deep(100000, '[');
  e = ErrorOf(ParseChatCompletion(deep + std::string(100000, ']')));
  EXPECT_EQ(e.code, "invalid_json") << e.message;
  EXPECT_NE(e.message.find("deeper"), std::string::npos) << e.message;
  // A number too large for a double: nlohmann throws out_of_range (406), not parse_error — found by
  // fuzz/request_fuzz.cc; it used to escape ParseObject and end the process.
  e = ErrorOf(ParseChatCompletion("{\"max_tokens\": 22000000000000000000001e308, \"messages\": []}"));
  EXPECT_EQ(e.code, "invalid_json") << e.message;
}

TEST(Protocol, CompletionPrompts) {
  auto r = RequestOf(ParseCompletion(R"({"prompt":"Once upon","max_tokens":5})"));
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_EQ(r.endpoint, Endpoint::kCompletion);
  r = RequestOf(ParseCompletion(R"({"prompt":["one"]})"));
  EXPECT_EQ(r.prompt, "one");
  r = RequestOf(ParseCompletion(R"({"prompt":[1,2,3]})"));
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"prompt":["a","b"]})")).param, "prompt");
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"prompt":[1,-2]})")).param, "prompt");
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"prompt":{}})")).param, "prompt");
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"max_tokens":3})")).param, "prompt");
  // echo with logprobs scores the prompt; max_tokens 0 only with echo (the prompt alone), not streamed.
  r = RequestOf(ParseCompletion(R"({"prompt":"x","echo":true,"logprobs":2,"max_tokens":0})"));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(*r.max_tokens, 0);
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"prompt":"x","max_tokens":0})")).param, "max_tokens");
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"prompt":"x","max_completion_tokens":0})")).param, "max_completion_tokens");
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"prompt":"x","echo":true,"max_tokens":0,"stream":true})")).param, "stream");
  EXPECT_EQ(ErrorOf(ParseCompletion(R"({"prompt":"x","echo":true,"max_tokens":-1})")).param, "max_tokens");
}

TEST(Protocol, EchoLogprobsShape) {
  // The legacy logprobs object over the prompt then the answer: the first prompt token's entries
  // are null, an unshown BOS takes no text, the answer's offsets follow the echoed text.
  const auto piece = [](int32_t t) { return t == 0 ? std::string("<s>") : std::string(size_t(t), 'a'); };
  const float none = std::numeric_limits<float>::quiet_NaN();
  const std::vector<TokenLogprob> prompt{{.token = 0, .logprob = none},
                                         {.token = 2, .logprob = -1.5f, .top = {{1, -0.5f}}},
                                         {.token = 3, .logprob = -2.0f, .top = {{3, -2.0f}}}};
  const std::vector<TokenLogprob> answer{{.token = 1, .logprob = -0.25f, .top = {{1, -0.25f}}}};
  json j = EchoLogprobsJson(prompt, /*unshown=*/1, /*echo_bytes=*/5, answer, piece);
  EXPECT_EQ(j["tokens"], json({"<s>", "aa", "aaa", "a"}));
  EXPECT_EQ(j["token_logprobs"], json({nullptr, -1.5, -2.0, -0.25}));
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_EQ(j["top_logprobs"][1], json({{"a", -0.5}}));
  EXPECT_EQ(j["text_offset"], json({0, 0, 2, 5}));
}

TEST(Protocol, ResponsesFieldsOfTheWrongTypeAreA400) {
  // A "type" that is not a string once threw out of the parser (json::value): a 400 naming the field.
  auto err = [](std::string_view body) {
    auto p = ParseResponsesRequest(body, {});
    EXPECT_TRUE(std::holds_alternative<ApiError>(p)) << body;
    return std::holds_alternative<ApiError>(p) ? std::get<ApiError>(p) : ApiError{};
  };
  EXPECT_EQ(err(R"({"input":"x","tools":[{"type":5}]})").param, "tools[0].type");
  EXPECT_EQ(err(R"({"input":"x","tool_choice":{"type":5,"name":"a"}})").param, "tool_choice");
  EXPECT_EQ(err(R"({"input":"x","text":{"format":{"type":[1]}}})").param, "text.format");
  EXPECT_TRUE(std::holds_alternative<ResponsesRequest>(ParseResponsesRequest(R"({"input":"x"})", {})));
}

TEST(Protocol, ContextRequests) {
  EXPECT_EQ(std::get<ContextRequest>(ParseContextRequest(R"({"text":"doc"})")).text, "doc");
  EXPECT_FALSE(std::get<ContextRequest>(ParseContextRequest(R"({"text":"doc"})")).is_public);
  EXPECT_TRUE(std::get<ContextRequest>(ParseContextRequest(R"({"text":"doc","scope":"public"})")).is_public);
  EXPECT_EQ(std::get<ApiError>(ParseContextRequest(R"({"text":"doc","scope":"world"})")).param, "scope");
  EXPECT_EQ(std::get<ApiError>(ParseContextRequest(R"({"text":""})")).param, "text");
  EXPECT_EQ(std::get<ApiError>(ParseContextRequest(R"({"txt":"a"})")).param, "text");
  EXPECT_EQ(std::get<ApiError>(ParseContextRequest(R"({"text":1})")).param, "text");
}

TEST(Protocol, ResponseShapes) {
  ResponseIds ids{.id = "chatcmpl-1", .created = 5, .model = "m", .fingerprint = "fp"};
  json j = ChatResponse(ids, "hi", "stop", {.prompt_tokens = 10, .completion_tokens = 2, .cached_tokens = 4});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  json c = ChatChunk(ids, "", true, "");
  EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  c = ChatChunk(ids, "", false, "length");
  EXPECT_TRUE(c["choices"][0]["delta"].empty());
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  json u = UsageChunk(ids, Endpoint::kChat, {.prompt_tokens = 1});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(SseData(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  json e = ErrorJson({.status = 400, .message = "bad", .param = "max_tokens", .code = "invalid_value"});
  EXPECT_EQ(e["error"]["param"], "max_tokens");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(ErrorJson({.message = "x"})["error"]["code"].is_null());
  // a lone byte that is not UTF-8 is replaced, never thrown
  EXPECT_NE(SseData(json{{"t", std::string("\xFF")}}).find("data: "), std::string::npos);
}

TEST(Protocol, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));           // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));       // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));   // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));
}

}  // namespace
}  // namespace chorus::server
