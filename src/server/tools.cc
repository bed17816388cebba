#include "tools.h"

#include <random>

namespace chorus::server {
namespace {

using json = nlohmann::json;

// OpenAI's rule for function names.
bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::optional<ApiError> ParseResponseFormat(const json& body, ResponseFormat* out) {
  const json* rf = Field(body, "response_format");
  if (!rf) return std::nullopt;
  const json* type = rf->is_object() ? Field(*rf, "type") : nullptr;
  if (!type || !type->is_string())
    return Bad("response_format", "'response_format' must be an object with a string 'type'", "invalid_type");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out->kind = ResponseFormat::Kind::kJsonObject;
    return std::nullopt;
  }
  if (t != "json_schema")
    return Bad("response_format.type",
               "'response_format.type' must be text, json_object or json_schema, got '" + t + "'", "unsupported_value");
  const json* js = Field(*rf, "json_schema");
  if (!js || !js->is_object())
    return Bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'",
               "missing_field");
  if (const json* name = Field(*js, "name")) {
    if (!name->is_string() || !ValidName(name->get<std::string>()))
      return Bad("response_format.json_schema.name",
                 "'response_format.json_schema.name' must be 1-64 letters, digits, '_' or '-'");
    out->name = name->get<std::string>();
  }
  const json* schema = Field(*js, "schema");
  if (!schema || !(schema->is_object() || schema->is_boolean()))
    return Bad("response_format.json_schema.schema",
               "'response_format.json_schema.schema' must be a JSON Schema object", "missing_field");
  out->kind = ResponseFormat::Kind::kJsonSchema;
  out->schema = *schema;
  return std::nullopt;
}

std::optional<ApiError> ParseTools(const json& body, GenerationRequest* r) {
  const json* tools = Field(body, "tools");
  if (tools && !tools->is_array()) return Bad("tools", "'tools' must be an array of functions", "invalid_type");
  for (size_t i = 0; tools && i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json* type = t.is_object() ? Field(t, "type") : nullptr;
    if (!type || *type != "function")
      return Bad(at + ".type", "'" + at + "' must be {\"type\": \"function\", \"function\": {...}}",
                 "unsupported_value");
    const json* fn = Field(t, "function");
    if (!fn || !fn->is_object())
      return Bad(at + ".function", "'" + at + ".function' must be an object", "missing_field");
    const json* name = Field(*fn, "name");
    if (!name || !name->is_string() || !ValidName(name->get<std::string>()))
      return Bad(at + ".function.name", "'" + at + ".function.name' must be 1-64 letters, digits, '_' or '-'");
    ToolSpec spec{.name = name->get<std::string>(), .parameters = {{"type", "object"}, {"properties", json::object()}}};
    for (const ToolSpec& other : r->tools)
      if (other.name == spec.name) return Bad(at + ".function.name", "two tools are named '" + spec.name + "'");
    if (const json* d = Field(*fn, "description")) {
      if (!d->is_string())
        return Bad(at + ".function.description", "'" + at + ".function.description' must be a string");
      spec.description = d->get<std::string>();
    }
    if (const json* p = Field(*fn, "parameters")) {
      if (!p->is_object())
        return Bad(at + ".function.parameters", "'" + at + ".function.parameters' must be a JSON Schema object");
      spec.parameters = *p;
    }
    r->tools.push_back(std::move(spec));
  }
  r->tool_choice = r->tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const json* c = Field(body, "tool_choice")) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none")
        r->tool_choice = ToolChoice::kNone;
      else if (s == "auto")
        r->tool_choice = r->tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
      else if (s == "required")
        r->tool_choice = ToolChoice::kRequired;
      else
        return Bad("tool_choice", "'tool_choice' must be none, auto, required or a named function, got '" + s + "'");
    } else if (c->is_object() && Field(*c, "function") && Field(*c, "function")->is_object() &&
               Field(*Field(*c, "function"), "name") && Field(*Field(*c, "function"), "name")->is_string()) {
      r->tool_choice = ToolChoice::kNamed;
      r->tool_name = (*c)["function"]["name"].get<std::string>();
      bool known = false;
      for (const ToolSpec& t : r->tools) known |= t.name == r->tool_name;
      if (!known) return Bad("tool_choice", "'tool_choice' names '" + r->tool_name + "', which is not in 'tools'");
    } else {
      return Bad("tool_choice",
                 "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                 "invalid_type");
    }
    if (r->tools.empty() && r->tool_choice != ToolChoice::kNone)
      return Bad("tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
  }
  if (const json* p = Field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) return Bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean", "invalid_type");
    r->parallel_tool_calls = p->get<bool>();
  }
  return std::nullopt;
}

std::string CallText(const std::string& name, const std::string& arguments) {
  return std::string(kCallBegin) + name + std::string(kCallArgs) + arguments + std::string(kCallEnd);
}

std::string ToolsPrompt(const std::vector<ToolSpec>& tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
      "function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ToolSpec& t : tools) {
    json fn = {{"name", t.name}, {"parameters", t.parameters}};
    if (!t.description.empty()) fn["description"] = t.description;
    s += "\n" + json{{"type", "function"}, {"function", fn}}.dump();
  }
  return s +
         "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
         "<args-json-object>}\n</tool_call>";
}

// The longest suffix of `s` that is a proper prefix of `marker` (text that may still become it).
size_t PartialMarker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

std::string RandomId(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

std::optional<ApiError> ParseToolFields(const json& body, GenerationRequest* r) {
  if (auto e = ParseResponseFormat(body, &r->response_format)) return e;
  if (r->endpoint != Endpoint::kChat) return std::nullopt;
  return ParseTools(body, r);
}

std::optional<ApiError> ParseMessageTools(const json& m, const std::string& at, ChatTurn* turn) {
  if (const json* calls = Field(m, "tool_calls")) {
    if (turn->role != "assistant")
      return Bad(at + ".tool_calls", "'" + at + ".tool_calls' is allowed on assistant messages only");
    if (!calls->is_array()) return Bad(at + ".tool_calls", "'" + at + ".tool_calls' must be an array", "invalid_type");
    for (size_t i = 0; i < calls->size(); ++i) {
      const json& c = (*calls)[i];
      const std::string where = at + ".tool_calls[" + std::to_string(i) + "]";
      const json* fn = c.is_object() ? Field(c, "function") : nullptr;
      const json* name = fn && fn->is_object() ? Field(*fn, "name") : nullptr;
      const json* args = fn && fn->is_object() ? Field(*fn, "arguments") : nullptr;
      if (!name || !name->is_string() || !args || !args->is_string())
        return Bad(where,
                   "'" + where +
                       "' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}} "
                       "with string name and arguments",
                   "invalid_type");
      const json* id = Field(c, "id");
      turn->tool_calls.push_back({.id = id && id->is_string() ? id->get<std::string>() : "",
                                  .name = name->get<std::string>(),
                                  .arguments = args->get<std::string>()});
    }
  }
  if (turn->role == "tool") {
    const json* id = Field(m, "tool_call_id");
    if (!id || !id->is_string())
      return Bad(at + ".tool_call_id", "'" + at + ".tool_call_id' is required on tool messages", "missing_field");
    turn->tool_call_id = id->get<std::string>();
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> RenderTurns(const GenerationRequest& g,
                                                             const std::vector<std::string>& contents) {
  std::vector<std::pair<std::string, std::string>> out;
  const bool tools = ToolsActive(g);
  if (tools && (g.messages.empty() || g.messages[0].role != "system")) out.emplace_back("system", ToolsPrompt(g.tools));
  for (size_t i = 0; i < g.messages.size(); ++i) {
    const ChatTurn& t = g.messages[i];
    std::string content = contents[i];
    if (t.role == "system" && i == 0 && tools) content += (content.empty() ? "" : "\n\n") + ToolsPrompt(g.tools);
    if (t.role == "assistant")
      for (const ToolCall& c : t.tool_calls) content += (content.empty() ? "" : "\n") + CallText(c.name, c.arguments);
    if (t.role == "tool") {
      const std::string block = "<tool_response>\n" + content + "\n</tool_response>";
      if (i > 0 && g.messages[i - 1].role == "tool")
        out.back().second += "\n" + block;
      else
        out.emplace_back("user", block);
      continue;
    }
    out.emplace_back(t.role, std::move(content));
  }
  return out;
}

OutputConstraint ConstraintFor(const GenerationRequest& g) {
  using K = OutputConstraint::Kind;
  // JSON inside a structural tag: at most one whitespace character in a row (a small model padding
  // its arguments with endless newlines never ends), as the plain schema grammars are compact.
  json answer;  // the response_format's own format, if any
  if (g.response_format.kind == ResponseFormat::Kind::kJsonObject)
    answer = {{"type", "json_schema"}, {"json_schema", {{"type", "object"}}}, {"max_whitespace_cnt", 1}};
  else if (g.response_format.kind == ResponseFormat::Kind::kJsonSchema)
    answer = {{"type", "json_schema"}, {"json_schema", g.response_format.schema}, {"max_whitespace_cnt", 1}};
  if (!ToolsActive(g)) {
    if (g.response_format.kind == ResponseFormat::Kind::kJsonObject) return {.kind = K::kJsonObject};
    if (g.response_format.kind == ResponseFormat::Kind::kJsonSchema)
      return {.kind = K::kJsonSchema, .text = g.response_format.schema.dump()};
    return {};
  }
  json tags = json::array();
  for (const ToolSpec& t : g.tools)
    if (g.tool_choice != ToolChoice::kNamed || t.name == g.tool_name)
      tags.push_back({{"type", "tag"},
                      {"begin", std::string(kCallBegin) + t.name + std::string(kCallArgs)},
                      {"content", {{"type", "json_schema"}, {"json_schema", t.parameters}, {"max_whitespace_cnt", 1}}},
                      {"end", std::string(kCallEnd)}});
  const bool one = !g.parallel_tool_calls || g.tool_choice == ToolChoice::kNamed;
  const json calls_only = {{"type", "tags_with_separator"},
                           {"separator", "\n"},
                           {"tags", tags},
                           {"at_least_one", true},
                           {"stop_after_first", one}};
  json format;
  if (g.tool_choice != ToolChoice::kAuto)
    format = calls_only;
  else if (!answer.is_null())  // calls, or the structured answer
    format = {{"type", "or"}, {"elements", json::array({calls_only, answer})}};
  else  // free text in which calls may appear
    format = {{"type", "triggered_tags"},
              {"triggers", json::array({std::string(kCallTrigger)})},
              {"tags", tags},
              {"stop_after_first", one}};
  return {.kind = K::kStructuralTag, .text = json{{"type", "structural_tag"}, {"format", format}}.dump()};
}

std::vector<ToolCallParser::Event> ToolCallParser::Feed(std::string_view text, bool done) {
  std::vector<Event> out;
  auto emit_text = [&](std::string_view s) {
    if (s.empty()) return;
    if (!calls_.empty() && s.find_first_not_of(" \t\r\n") == std::string_view::npos) {
      held_ws_ += s;  // separators between calls: content only if text follows
      return;
    }
    std::string piece = held_ws_ + std::string(s);
    held_ws_.clear();
    content_ += piece;
    out.push_back({.kind = Event::Kind::kText, .text = std::move(piece)});
  };
  for (bool progress = true; progress;) {
    progress = false;
    const std::string_view rest = text.substr(pos_);
    switch (state_) {
      case State::kText: {
        const size_t at = rest.find(kCallTrigger);
        if (at == std::string_view::npos) {
          const size_t keep = done ? 0 : PartialMarker(rest, kCallTrigger);
          emit_text(rest.substr(0, rest.size() - keep));
          pos_ += rest.size() - keep;
          break;
        }
        emit_text(rest.substr(0, at));
        pos_ += at;
        state_ = State::kHeader;
        progress = true;
        break;
      }
      case State::kHeader: {
        if (rest.size() < kCallBegin.size()) break;
        const size_t args = rest.find(kCallArgs, kCallBegin.size());
        if (args == std::string_view::npos) break;
        ToolCall call{.id = RandomId("call_"),
                      .name = std::string(rest.substr(kCallBegin.size(), args - kCallBegin.size()))};
        out.push_back({.kind = Event::Kind::kCallStart, .index = calls_.size(), .id = call.id, .name = call.name});
        calls_.push_back(std::move(call));
        pos_ += args + kCallArgs.size();
        state_ = State::kArguments;
        progress = true;
        break;
      }
      case State::kArguments: {
        const size_t end = rest.find(kCallEnd);
        const size_t n = end != std::string_view::npos ? end : rest.size() - (done ? 0 : PartialMarker(rest, kCallEnd));
        if (n > 0) {
          calls_.back().arguments += rest.substr(0, n);
          out.push_back(
              {.kind = Event::Kind::kArguments, .index = calls_.size() - 1, .text = std::string(rest.substr(0, n))});
        }
        pos_ += n;
        if (end != std::string_view::npos) {
          pos_ += kCallEnd.size();
          state_ = State::kText;
          progress = true;
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace chorus::server
