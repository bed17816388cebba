// OpenAI request parsing/validation and response rendering (see protocol.h).
#include "protocol.h"

#include "tools.h"  // ParseToolFields, ParseMessageTools

#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace chorus::server {

ApiError Bad(std::string param, std::string message, std::string code) {
  return ApiError{.status = 400, .message = std::move(message), .param = std::move(param), .code = std::move(code)};
}

const nlohmann::json* Field(const nlohmann::json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;  // JSON nesting a request may have (messages → parts → object)

// A bound in an error message: "2", "0.5".
std::string fmt_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return json(v).dump();
}

struct TooDeep : std::runtime_error {
  TooDeep() : std::runtime_error("too deep") {}
};

// The body as a JSON object, or the error a client should see.
std::variant<json, ApiError> ParseObject(std::string_view body) {
  if (body.empty()) return Bad("", "the request body is empty; expected a JSON object", "invalid_json");
  json j;
  try {
    j = json::parse(body.begin(), body.end(), [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw TooDeep();
      return true;
    });
  } catch (const TooDeep&) {
    return Bad("", "the request body nests JSON deeper than " + std::to_string(kMaxDepth) + " levels", "invalid_json");
  } catch (const json::parse_error& e) {
    // The message quotes what was last read, which may be the offending bytes: keep it UTF-8.
    const std::string what = json(e.what()).dump(-1, ' ', true, json::error_handler_t::replace);
    if (what.find("UTF-8") != std::string::npos)
      return Bad("", "the request body is not valid UTF-8 (" + what + ")", "invalid_utf8");
    return Bad("", "the request body is not valid JSON (" + what + ")", "invalid_json");
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number too large for a double
    const std::string what = json(e.what()).dump(-1, ' ', true, json::error_handler_t::replace);
    return Bad("", "the request body is not valid JSON (" + what + ")", "invalid_json");
  }
  if (!j.is_object()) return Bad("", std::string("the request body must be a JSON object, got ") + j.type_name(), "invalid_json");
  return j;
}

std::optional<ApiError> GetBool(const json& obj, const char* name, bool* out) {
  const json* f = Field(obj, name);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) return Bad(name, std::string("'") + name + "' must be a boolean, got " + f->type_name(), "invalid_type");
  *out = f->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> GetNumber(const json& obj, const char* name, double lo, double hi, bool lo_open, float* out) {
  const json* f = Field(obj, name);
  if (!f) return std::nullopt;
  if (!f->is_number()) return Bad(name, std::string("'") + name + "' must be a number, got " + f->type_name(), "invalid_type");
  const double v = f->get<double>();
  if (!std::isfinite(v) || v > hi || v < lo || (lo_open && v == lo))
    return Bad(name, std::string("'") + name + "' must be in " + (lo_open ? "(" : "[") + fmt_number(lo) + ", " +
                         fmt_number(hi) + "], got " + f->dump());
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> GetInt(const json& obj, const char* name, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const json* f = Field(obj, name);
  if (!f) return std::nullopt;
  if (!f->is_number_integer())
    return Bad(name, std::string("'") + name + "' must be an integer, got " + (f->is_number() ? f->dump() : f->type_name()),
               "invalid_type");
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return Bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + f->dump());
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi)
    return Bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + f->dump());
  *out = v;
  return std::nullopt;
}

// Fields whose non-default values chorus does not implement: refused rather than ignored.
std::optional<ApiError> RejectUnsupported(const json& obj, Endpoint ep) {
  if (const json* b = Field(obj, "best_of"); b && !(b->is_number_integer() && b->get<int64_t>() == 1))
    return Bad("best_of", "only best_of = 1 is supported, got " + b->dump(), "unsupported_value");
  for (const char* name : {"functions", "function_call"})  // OpenAI's deprecated form of tools
    if (const json* t = Field(obj, name); t && !(t->is_array() && t->empty()) && !(t->is_string() && t->get<std::string>() == "none"))
      return Bad(name, std::string("'") + name + "' is not supported: send 'tools' and 'tool_choice'",
                 "unsupported_value");
  if (ep == Endpoint::kCompletion)
    for (const char* name : {"tools", "tool_choice"})
      if (const json* t = Field(obj, name);
          t && !(t->is_array() && t->empty()) && !(t->is_string() && t->get<std::string>() == "none"))
        return Bad(name, std::string("'") + name + "' needs /v1/chat/completions (a completion has no tool calls)",
                   "unsupported_value");
  if (ep == Endpoint::kCompletion) {
    if (const json* s = Field(obj, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
      return Bad("suffix", "suffix (insertion) is not supported", "unsupported_value");
  }
  return std::nullopt;
}

// n, penalties, logit_bias, logprobs and echo.
std::optional<ApiError> ParseSampling(const json& obj, const ProtocolLimits& limits, GenerationRequest* r) {
  std::optional<int64_t> v;
  if (auto e = GetInt(obj, "n", 1, static_cast<int64_t>(limits.max_n), &v)) return e;
  if (v) r->n = static_cast<int>(*v);
  if (auto e = GetNumber(obj, "presence_penalty", -2.0, 2.0, false, &r->presence_penalty)) return e;
  if (auto e = GetNumber(obj, "frequency_penalty", -2.0, 2.0, false, &r->frequency_penalty)) return e;
  if (const json* lb = Field(obj, "logit_bias")) {
    if (!lb->is_object())
      return Bad("logit_bias", "'logit_bias' must be an object of token id -> bias", "invalid_type");
    if (lb->size() > 300)
      return Bad("logit_bias", "'logit_bias' holds at most 300 tokens, got " + std::to_string(lb->size()));
    for (const auto& [key, b] : lb->items()) {
      char* end = nullptr;
      const unsigned long long id = std::strtoull(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>(key[0])) ||
          (limits.n_vocab && id >= limits.n_vocab) || id > static_cast<unsigned long long>(INT32_MAX))
        return Bad("logit_bias", "'logit_bias' key '" + key + "' is not a token id of this model" +
                                     (limits.n_vocab ? " [0, " + std::to_string(limits.n_vocab) + ")" : std::string()));
      if (!b.is_number() || !std::isfinite(b.get<double>()) || std::fabs(b.get<double>()) > 100)
        return Bad("logit_bias", "'logit_bias' values must be numbers in [-100, 100], got " + b.dump() + " for " + key);
      r->logit_bias.emplace_back(static_cast<int32_t>(id), b.get<float>());
    }
  }
  if (r->endpoint == Endpoint::kChat) {
    bool logprobs = false;
    if (auto e = GetBool(obj, "logprobs", &logprobs)) return e;
    v.reset();
    if (auto e = GetInt(obj, "top_logprobs", 0, 20, &v)) return e;
    if (v && !logprobs) return Bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (logprobs) r->top_logprobs = v ? static_cast<int>(*v) : 0;
  } else {
    v.reset();
    if (auto e = GetInt(obj, "logprobs", 0, 5, &v)) return e;
    if (v) r->top_logprobs = static_cast<int>(*v);
    if (auto e = GetBool(obj, "echo", &r->echo)) return e;
  }
  if (r->max_tokens == 0 && !r->echo)  // ParseCommon let 0 through for completions
    return Bad(Field(obj, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
               "'max_tokens' must be at least 1 (0 only with 'echo': the prompt alone, e.g. to score it)");
  return std::nullopt;
}

// The fields both endpoints share: model, sampling, length, stop, stream.
std::optional<ApiError> ParseCommon(const json& obj, const ProtocolLimits& limits, GenerationRequest* r) {
  if (auto e = RejectUnsupported(obj, r->endpoint)) return e;
  if (const json* m = Field(obj, "model")) {
    if (!m->is_string()) return Bad("model", std::string("'model' must be a string, got ") + m->type_name(), "invalid_type");
    r->model = m->get<std::string>();
  }
  if (auto e = GetNumber(obj, "temperature", 0.0, 2.0, false, &r->temperature)) return e;
  if (auto e = GetNumber(obj, "top_p", 0.0, 1.0, true, &r->top_p)) return e;
  std::optional<int64_t> v;
  if (auto e = GetInt(obj, "top_k", 0, 1 << 20, &v)) return e;
  if (v) r->top_k = static_cast<int>(*v);
  v.reset();
  const char* len_field = Field(obj, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // 0 on completions with echo (checked in ParseSampling): the prompt alone, scored.
  const int64_t min_tokens = r->endpoint == Endpoint::kCompletion ? 0 : 1;
  if (auto e = GetInt(obj, len_field, min_tokens, static_cast<int64_t>(limits.max_tokens), &v)) return e;
  if (v) r->max_tokens = static_cast<int>(*v);
  v.reset();
  if (auto e = GetInt(obj, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &v)) return e;
  if (v) r->seed = static_cast<uint64_t>(*v);
  if (auto e = ParseSampling(obj, limits, r)) return e;
  if (const json* s = Field(obj, "stop")) {
    std::vector<std::string> stops;
    if (s->is_string()) {
      stops.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const json& x : *s) {
        if (!x.is_string()) return Bad("stop", std::string("'stop' must be a string or an array of strings, got an array holding ") + x.type_name(), "invalid_type");
        stops.push_back(x.get<std::string>());
      }
    } else {
      return Bad("stop", std::string("'stop' must be a string or an array of strings, got ") + s->type_name(), "invalid_type");
    }
    if (stops.size() > limits.max_stop)
      return Bad("stop", "at most " + std::to_string(limits.max_stop) + " stop strings, got " + std::to_string(stops.size()));
    for (const std::string& x : stops) {
      if (x.empty()) return Bad("stop", "stop strings must not be empty");
      if (x.size() > limits.max_stop_bytes)
        return Bad("stop", "a stop string may have at most " + std::to_string(limits.max_stop_bytes) + " bytes, got " + std::to_string(x.size()));
    }
    r->stop = std::move(stops);
  }
  if (auto e = GetBool(obj, "stream", &r->stream)) return e;
  if (const json* so = Field(obj, "stream_options")) {
    if (!so->is_object()) return Bad("stream_options", std::string("'stream_options' must be an object, got ") + so->type_name(), "invalid_type");
    if (!r->stream) return Bad("stream_options", "'stream_options' is only allowed with stream = true");
    if (auto e = GetBool(*so, "include_usage", &r->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (r->max_tokens == 0 && r->stream)
    return Bad("stream", "'max_tokens' 0 (the echoed prompt alone) is not streamed: send 'stream': false",
               "unsupported_value");
  if (auto e = GetBool(obj, "ignore_eos", &r->ignore_eos)) return e;
  if (const json* s = Field(obj, "cache_salt")) {
    if (!s->is_string() || s->get<std::string>().empty() || s->get<std::string>().size() > 1024)
      return Bad("cache_salt",
                 "'cache_salt' must be a non-empty string of at most 1024 bytes, got " +
                     s->dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 64),
                 "invalid_value");
    r->cache_salt = s->get<std::string>();
  }
  if (const json* c = Field(obj, "chorus")) {
    if (!c->is_object())
      return Bad("chorus", std::string("'chorus' must be an object, got ") + c->type_name(), "invalid_type");
    for (const auto& [k, v] : c->items())
      if (k != "reuse") return Bad("chorus." + k, "unknown field 'chorus." + k + "' (known: reuse)", "unknown_field");
    if (const json* u = Field(*c, "reuse")) {
      if (!u->is_string() || (u->get<std::string>() != "exact" && u->get<std::string>() != "segments"))
        return Bad("chorus.reuse", "'chorus.reuse' must be \"exact\" or \"segments\", got " + u->dump(),
                   "invalid_value");
      r->reuse = u->get<std::string>();
    }
  }
  return std::nullopt;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts and
// {"type": "chorus_context", "id": "ctx-N"} parts (a pinned context's text goes there).
std::optional<ApiError> ContentText(const json& content, const std::string& where, ChatTurn* turn) {
  std::string* out = &turn->content;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array())
    return Bad(where, "'" + where + "' must be a string or an array of text parts, got " + content.type_name(), "invalid_type");
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return Bad(at, "'" + at + "' must be an object", "invalid_type");
    const json* type = Field(part, "type");
    if (!type || !type->is_string()) return Bad(at + ".type", "'" + at + ".type' must be a string", "invalid_type");
    if (type->get<std::string>() == "chorus_context") {
      const json* id = Field(part, "id");
      if (!id || !id->is_string() || id->get<std::string>().rfind("ctx-", 0) != 0)
        return Bad(at + ".id", "'" + at + ".id' must be a context id (\"ctx-N\", from POST /v1/contexts)",
                   "invalid_value");
      turn->contexts.push_back({.at = out->size(), .id = id->get<std::string>()});
      continue;
    }
    if (type->get<std::string>() != "text")
      return Bad(at + ".type", "content parts must be text or chorus_context, got '" + type->get<std::string>() + "'",
                 "unsupported_value");
    const json* text = Field(part, "text");
    if (!text || !text->is_string()) return Bad(at + ".text", "'" + at + ".text' must be a string", "invalid_type");
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

ParsedRequest ParseChatCompletion(std::string_view body, const ProtocolLimits& limits) {
  auto parsed = ParseObject(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& obj = std::get<json>(parsed);
  GenerationRequest r;
  r.endpoint = Endpoint::kChat;
  const json* msgs = Field(obj, "messages");
  if (!msgs) return Bad("messages", "'messages' is required", "missing_field");
  if (!msgs->is_array()) return Bad("messages", std::string("'messages' must be an array, got ") + msgs->type_name(), "invalid_type");
  if (msgs->empty()) return Bad("messages", "'messages' must hold at least one message");
  if (msgs->size() > limits.max_messages)
    return Bad("messages", "at most " + std::to_string(limits.max_messages) + " messages, got " + std::to_string(msgs->size()));
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return Bad(at, "'" + at + "' must be an object, got " + m.type_name(), "invalid_type");
    const json* role = Field(m, "role");
    if (!role) return Bad(at + ".role", "'" + at + ".role' is required", "missing_field");
    if (!role->is_string()) return Bad(at + ".role", "'" + at + ".role' must be a string", "invalid_type");
    ChatTurn turn{.role = role->get<std::string>()};
    if (turn.role == "developer") turn.role = "system";
    if (turn.role != "system" && turn.role != "user" && turn.role != "assistant" && turn.role != "tool")
      return Bad(at + ".role",
                 "'" + at + ".role' must be system, developer, user, assistant or tool, got '" + turn.role + "'" +
                     (turn.role == "function" ? " (send role tool with a tool_call_id)" : ""),
                 "unsupported_value");
    const json* content = Field(m, "content");
    if (!content) {
      if (turn.role != "assistant") return Bad(at + ".content", "'" + at + ".content' is required", "missing_field");
    } else if (auto e = ContentText(*content, at + ".content", &turn)) {
      return *e;
    }
    if (auto e = ParseMessageTools(m, at, &turn)) return *e;
    r.messages.push_back(std::move(turn));
  }
  if (auto e = ParseCommon(obj, limits, &r)) return *e;
  if (auto e = ParseToolFields(obj, &r)) return *e;
  return r;
}

ParsedRequest ParseCompletion(std::string_view body, const ProtocolLimits& limits) {
  auto parsed = ParseObject(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& obj = std::get<json>(parsed);
  GenerationRequest r;
  r.endpoint = Endpoint::kCompletion;
  const json* p = Field(obj, "prompt");
  if (!p) return Bad("prompt", "'prompt' is required", "missing_field");
  const json* one = p;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1) return Bad("prompt", "one prompt per request (n = 1), got " + std::to_string(p->size()), "unsupported_value");
    one = &p->front();
  }
  if (one->is_string()) {
    r.prompt = one->get<std::string>();
  } else if (one->is_array()) {
    if (one->empty()) return Bad("prompt", "'prompt' as token ids must hold at least one id");
    for (const json& t : *one) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        return Bad("prompt", "'prompt' token ids must be non-negative integers, got " + t.dump(), "invalid_type");
      r.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  } else {
    return Bad("prompt", std::string("'prompt' must be a string, an array of one string or of token ids, got ") + p->type_name(),
               "invalid_type");
  }
  if (auto e = ParseCommon(obj, limits, &r)) return *e;
  if (auto e = ParseToolFields(obj, &r)) return *e;  // response_format only: tools were refused above
  return r;
}

std::variant<ContextRequest, ApiError> ParseContextRequest(std::string_view body) {
  auto parsed = ParseObject(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& obj = std::get<json>(parsed);
  const json* text = Field(obj, "text");
  if (!text) return Bad("text", "'text' is required", "missing_field");
  if (!text->is_string()) return Bad("text", std::string("'text' must be a string, got ") + text->type_name(), "invalid_type");
  if (text->get<std::string>().empty()) return Bad("text", "'text' must not be empty");
  ContextRequest r{.text = text->get<std::string>()};
  if (const json* s = Field(obj, "scope")) {
    if (!s->is_string() || (s->get<std::string>() != "public" && s->get<std::string>() != "private"))
      return Bad("scope",
                 "'scope' must be \"private\" (the default: the creator's tenant or group) or \"public\", got " +
                     s->dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 64),
                 "invalid_value");
    r.is_public = s->get<std::string>() == "public";
  }
  return r;
}

json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}, {"reused_tokens", u.reused_tokens}}}};
}

namespace {
json Envelope(const ResponseIds& ids, const char* object) {
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model},
          {"system_fingerprint", ids.fingerprint}};
}
json FinishReason(const std::string& r) { return r.empty() ? json(nullptr) : json(r); }
}  // namespace

json ChatResponse(const ResponseIds& ids, const std::string& text, const std::string& finish_reason, const Usage& usage) {
  json j = Envelope(ids, "chat.completion");
  j["choices"] = json::array({{{"index", 0},
                               {"message", {{"role", "assistant"}, {"content", text}}},
                               {"logprobs", nullptr},
                               {"finish_reason", FinishReason(finish_reason)}}});
  j["usage"] = UsageJson(usage);
  return j;
}

json ChatResponse(const ResponseIds& ids, const std::string& text, const std::vector<ToolCall>& calls,
                  const std::string& finish_reason, const Usage& usage) {
  json j = ChatResponse(ids, text, finish_reason, usage);
  if (calls.empty()) return j;
  json tc = json::array();
  for (const ToolCall& c : calls)
    tc.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  json& msg = j["choices"][0]["message"];
  if (text.empty()) msg["content"] = nullptr;
  msg["tool_calls"] = std::move(tc);
  return j;
}

json ToolCallChunk(const ResponseIds& ids, size_t index, const std::string& id, const std::string& name,
                   const std::string& arguments) {
  json call = {{"index", index}};
  if (!id.empty()) call["id"] = id, call["type"] = "function";
  json fn = {{"arguments", arguments}};
  if (!name.empty()) fn["name"] = name;
  call["function"] = std::move(fn);
  json j = Envelope(ids, "chat.completion.chunk");
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"tool_calls", json::array({call})}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return j;
}

json CompletionResponse(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                        const Usage& usage) {
  json j = Envelope(ids, "text_completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", FinishReason(finish_reason)}}});
  j["usage"] = UsageJson(usage);
  return j;
}

json ChatChunk(const ResponseIds& ids, const std::string& delta, bool first, const std::string& finish_reason) {
  json j = Envelope(ids, "chat.completion.chunk");
  json d = json::object();
  if (first) d["role"] = "assistant";
  if (!delta.empty() || first) d["content"] = delta;
  j["choices"] = json::array({{{"index", 0}, {"delta", d}, {"logprobs", nullptr}, {"finish_reason", FinishReason(finish_reason)}}});
  return j;
}

json CompletionChunk(const ResponseIds& ids, const std::string& text, const std::string& finish_reason) {
  json j = Envelope(ids, "text_completion");
  j["choices"] = json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", FinishReason(finish_reason)}}});
  return j;
}

json UsageChunk(const ResponseIds& ids, Endpoint endpoint, const Usage& usage) {
  json j = Envelope(ids, endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return j;
}

json LogprobsJson(Endpoint ep, const std::vector<TokenLogprob>& lps, const std::function<std::string(int32_t)>& piece,
                  size_t text_offset, size_t unshown) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  if (ep == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
      const std::string p = piece(lp.token);
      json top = json::array();
      for (const auto& [t, x] : lp.top) {
        const std::string tp = piece(t);
        top.push_back({{"token", tp}, {"logprob", x}, {"bytes", bytes(tp)}});
      }
      content.push_back({{"token", p}, {"logprob", lp.logprob}, {"bytes", bytes(p)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    const TokenLogprob& lp = lps[i];
    const std::string p = piece(lp.token);
    tokens.push_back(p);
    const bool none = std::isnan(lp.logprob);  // the prompt's first token: nothing predicts it
    token_lps.push_back(none ? json(nullptr) : json(lp.logprob));
    json top = json::object();
    for (const auto& [t, x] : lp.top) top[piece(t)] = x;
    tops.push_back(none ? json(nullptr) : top);
    offsets.push_back(text_offset);
    if (i >= unshown) text_offset += p.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json EchoLogprobsJson(const std::vector<TokenLogprob>& prompt, size_t unshown, size_t echo_bytes,
                      const std::vector<TokenLogprob>& answer, const std::function<std::string(int32_t)>& piece) {
  json j = LogprobsJson(Endpoint::kCompletion, prompt, piece, 0, unshown);
  const json more = LogprobsJson(Endpoint::kCompletion, answer, piece, echo_bytes);
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    j[k].insert(j[k].end(), more[k].begin(), more[k].end());
  return j;
}

json ErrorJson(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::string SseData(const json& j) {
  // Text from the model may hold bytes that are not UTF-8 on their own; the streamer only emits
  // whole characters, and dump() replaces anything left rather than throwing.
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned c = p[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return false;
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;  // overlong
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace chorus::server
