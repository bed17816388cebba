#include "responses.h"

namespace chorus::server {
namespace {

using json = nlohmann::json;

// The text of a message's content: a string, or input_text / output_text / text parts.
std::variant<std::string, ApiError> ContentOf(const json& c, const std::string& at) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return Bad(at, "'" + at + "' must be a string or an array of text parts", "invalid_type");
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const json* type = c[i].is_object() ? Field(c[i], "type") : nullptr;
    const json* t = c[i].is_object() ? Field(c[i], "text") : nullptr;
    if (!type || !type->is_string() || (*type != "input_text" && *type != "output_text" && *type != "text") || !t ||
        !t->is_string())
      return Bad(at + "[" + std::to_string(i) + "]",
                 "'" + at + "[" + std::to_string(i) + "]' must be an input_text or output_text part",
                 "unsupported_value");
    text += t->get<std::string>();
  }
  return text;
}

// Input items → chat messages (the chat parser then checks them as it checks any chat body).
std::variant<json, ApiError> Messages(const json& body) {
  json msgs = json::array();
  if (const json* ins = Field(body, "instructions")) {
    if (!ins->is_string()) return Bad("instructions", "'instructions' must be a string", "invalid_type");
    msgs.push_back({{"role", "system"}, {"content", *ins}});
  }
  const json* input = Field(body, "input");
  if (!input) return Bad("input", "'input' is required", "missing_field");
  if (input->is_string()) {
    msgs.push_back({{"role", "user"}, {"content", *input}});
    return msgs;
  }
  if (!input->is_array() || input->empty())
    return Bad("input", "'input' must be a string or a non-empty array of items", "invalid_type");
  for (size_t i = 0; i < input->size(); ++i) {
    const json& it = (*input)[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!it.is_object()) return Bad(at, "'" + at + "' must be an object", "invalid_type");
    const json* type = Field(it, "type");
    const std::string kind = type && type->is_string() ? type->get<std::string>() : "message";
    if (kind == "message") {
      const json* role = Field(it, "role");
      const json* content = Field(it, "content");
      if (!role || !role->is_string() || !content)
        return Bad(at, "'" + at + "' must have a string 'role' and a 'content'", "missing_field");
      auto text = ContentOf(*content, at + ".content");
      if (auto* e = std::get_if<ApiError>(&text)) return *e;
      msgs.push_back({{"role", *role}, {"content", std::get<std::string>(text)}});
    } else if (kind == "function_call") {
      const json* id = Field(it, "call_id");
      const json* name = Field(it, "name");
      const json* args = Field(it, "arguments");
      if (!id || !id->is_string() || !name || !name->is_string() || !args || !args->is_string())
        return Bad(at, "'" + at + "' must have string call_id, name and arguments", "missing_field");
      const json call = {{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *args}}}};
      if (msgs.empty() || msgs.back()["role"] != "assistant" ||
          (msgs.back().contains("content") && msgs.back()["content"] != ""))
        msgs.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array()}});
      if (!msgs.back().contains("tool_calls")) msgs.back()["tool_calls"] = json::array();
      msgs.back()["tool_calls"].push_back(call);
    } else if (kind == "function_call_output") {
      const json* id = Field(it, "call_id");
      const json* out = Field(it, "output");
      if (!id || !id->is_string() || !out || !out->is_string())
        return Bad(at, "'" + at + "' must have string call_id and output", "missing_field");
      msgs.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", *out}});
    } else {
      return Bad(at + ".type",
                 "'" + at + ".type' must be message, function_call or function_call_output, got '" + kind + "'",
                 "unsupported_value");
    }
  }
  return msgs;
}

// obj["type"] when it is a string, else "" (json::value would throw on another type).
std::string TypeOf(const json& obj) {
  const json* t = obj.is_object() ? Field(obj, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : "";
}

// Names in the chat parser's errors → the Responses API's.
ApiError Renamed(ApiError e) {
  auto swap = [](std::string& s, const std::string& from, const std::string& to) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
      s.replace(p, from.size(), to);
  };
  for (std::string* s : {&e.param, &e.message}) {
    swap(*s, "response_format", "text.format");
    swap(*s, "max_tokens", "max_output_tokens");
  }
  return e;
}

}  // namespace

std::variant<ResponsesRequest, ApiError> ParseResponsesRequest(std::string_view body, const ProtocolLimits& limits) {
  json obj = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) return Bad("", "the request body must be a JSON object", "invalid_json");
  ResponsesRequest r;
  if (const json* s = Field(obj, "stream")) {
    if (!s->is_boolean()) return Bad("stream", "'stream' must be a boolean", "invalid_type");
    r.stream = s->get<bool>();
  }
  if (const json* s = Field(obj, "store")) {
    if (!s->is_boolean()) return Bad("store", "'store' must be a boolean", "invalid_type");
    r.store = s->get<bool>();
  }
  if (const json* p = Field(obj, "previous_response_id")) {
    if (!p->is_string()) return Bad("previous_response_id", "'previous_response_id' must be a string", "invalid_type");
    r.previous_response_id = p->get<std::string>();
  }
  if (const json* i = Field(obj, "instructions"); i && i->is_string()) r.instructions = i->get<std::string>();
  auto msgs = Messages(obj);
  if (auto* e = std::get_if<ApiError>(&msgs)) return *e;
  json chat = {{"messages", std::get<json>(msgs)}};
  for (const char* k : {"model", "temperature", "top_p", "parallel_tool_calls", "seed", "top_k"})
    if (const json* f = Field(obj, k)) chat[k] = *f;
  if (const json* m = Field(obj, "max_output_tokens")) chat["max_tokens"] = *m;
  if (const json* tools = Field(obj, "tools")) {
    if (!tools->is_array()) return Bad("tools", "'tools' must be an array", "invalid_type");
    json ct = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      if (!t.is_object() || TypeOf(t) != "function")
        return Bad("tools[" + std::to_string(i) + "].type", "only function tools are supported", "unsupported_value");
      json fn = t;
      fn.erase("type");
      ct.push_back({{"type", "function"}, {"function", fn}});
    }
    chat["tools"] = ct;
  }
  if (const json* c = Field(obj, "tool_choice")) {
    if (TypeOf(*c) == "function" && c->contains("name"))
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
    else
      chat["tool_choice"] = *c;
  }
  if (const json* text = Field(obj, "text"); text && text->is_object() && Field(*text, "format")) {
    const json& f = (*text)["format"];
    if (TypeOf(f) == "json_schema") {
      json js = {{"schema", f.contains("schema") ? f["schema"] : json()}};
      if (f.contains("name")) js["name"] = f["name"];
      chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
    } else {
      chat["response_format"] = f;
    }
  }
  ParsedRequest parsed = ParseChatCompletion(chat.dump(), limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Renamed(*e);
  r.chat = std::move(std::get<GenerationRequest>(parsed));
  for (const char* k : {"tools", "tool_choice", "text", "temperature", "top_p", "max_output_tokens", "metadata"})
    r.echo[k] = obj.contains(k) ? obj[k] : json();
  if (r.echo["tools"].is_null()) r.echo["tools"] = json::array();
  if (r.echo["tool_choice"].is_null()) r.echo["tool_choice"] = "auto";
  if (r.echo["text"].is_null()) r.echo["text"] = {{"format", {{"type", "text"}}}};
  if (r.echo["metadata"].is_null()) r.echo["metadata"] = json::object();
  return r;
}

json ResponseObject(const std::string& id, int64_t created, const std::string& model, const ResponsesRequest& r,
                    const std::string& content, const std::vector<ToolCall>& calls, const std::string& finish_reason,
                    const Usage& usage) {
  json output = json::array();
  if (!content.empty() || calls.empty())
    output.push_back(
        {{"type", "message"},
         {"id", RandomId("msg_")},
         {"status", "completed"},
         {"role", "assistant"},
         {"content", json::array({{{"type", "output_text"}, {"text", content}, {"annotations", json::array()}}})}});
  for (const ToolCall& c : calls)
    output.push_back({{"type", "function_call"},
                      {"id", RandomId("fc_")},
                      {"call_id", c.id},
                      {"name", c.name},
                      {"arguments", c.arguments},
                      {"status", "completed"}});
  const bool incomplete = finish_reason == "length";
  json j = {{"id", id},
            {"object", "response"},
            {"created_at", created},
            {"status", incomplete ? "incomplete" : "completed"},
            {"error", nullptr},
            {"incomplete_details", incomplete ? json{{"reason", "max_output_tokens"}} : json()},
            {"instructions", r.instructions.empty() ? json() : json(r.instructions)},
            {"model", model},
            {"output", output},
            {"parallel_tool_calls", r.chat.parallel_tool_calls},
            {"previous_response_id", r.previous_response_id.empty() ? json() : json(r.previous_response_id)},
            {"store", r.store},
            {"usage",
             {{"input_tokens", usage.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
              {"output_tokens", usage.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}}}};
  for (const auto& [k, v] : r.echo.items()) j[k] = v;
  return j;
}

std::vector<json> ResponseEvents::Start() {
  json r = created_;
  r["status"] = "in_progress";
  r["output"] = json::array();
  return {Numbered({{"type", "response.created"}, {"response", r}}),
          Numbered({{"type", "response.in_progress"}, {"response", r}})};
}

void ResponseEvents::CloseItem(std::vector<json>& out) {
  if (!open_) return;
  open_ = false;
  json& item = items_.back();
  const size_t at = items_.size() - 1;
  item["status"] = "completed";
  if (item["type"] == "message") {
    const std::string text = item["content"][0]["text"];
    out.push_back(Numbered({{"type", "response.output_text.done"},
                            {"item_id", item["id"]},
                            {"output_index", at},
                            {"content_index", 0},
                            {"text", text}}));
    out.push_back(Numbered({{"type", "response.content_part.done"},
                            {"item_id", item["id"]},
                            {"output_index", at},
                            {"content_index", 0},
                            {"part", item["content"][0]}}));
  } else {
    out.push_back(Numbered({{"type", "response.function_call_arguments.done"},
                            {"item_id", item["id"]},
                            {"output_index", at},
                            {"arguments", item["arguments"]}}));
  }
  out.push_back(Numbered({{"type", "response.output_item.done"}, {"output_index", at}, {"item", item}}));
}

std::vector<json> ResponseEvents::Feed(std::string_view text, bool done) {
  std::vector<json> out;
  std::vector<ToolCallParser::Event> evs;
  if (tools_) {
    evs = calls_.Feed(text, done);
  } else if (text.size() > plain_sent_) {
    evs.push_back({.kind = ToolCallParser::Event::Kind::kText, .text = std::string(text.substr(plain_sent_))});
    plain_sent_ = text.size();
  }
  for (const ToolCallParser::Event& e : evs) {
    using K = ToolCallParser::Event::Kind;
    const bool text_item = open_ && items_.back()["type"] == "message";
    if (e.kind == K::kText && !text_item) {
      CloseItem(out);
      items_.push_back(
          {{"type", "message"},
           {"id", RandomId("msg_")},
           {"status", "in_progress"},
           {"role", "assistant"},
           {"content", json::array({{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}})}});
      open_ = true;
      const json& item = items_.back();
      json added = item;
      added["content"] = json::array();
      out.push_back(
          Numbered({{"type", "response.output_item.added"}, {"output_index", items_.size() - 1}, {"item", added}}));
      out.push_back(Numbered({{"type", "response.content_part.added"},
                              {"item_id", item["id"]},
                              {"output_index", items_.size() - 1},
                              {"content_index", 0},
                              {"part", item["content"][0]}}));
    }
    if (e.kind == K::kCallStart) {
      CloseItem(out);
      items_.push_back({{"type", "function_call"},
                        {"id", RandomId("fc_")},
                        {"call_id", e.id},
                        {"name", e.name},
                        {"arguments", ""},
                        {"status", "in_progress"}});
      open_ = true;
      out.push_back(Numbered(
          {{"type", "response.output_item.added"}, {"output_index", items_.size() - 1}, {"item", items_.back()}}));
    }
    if (e.kind == K::kText) {
      json& part = items_.back()["content"][0];
      part["text"] = part["text"].get<std::string>() + e.text;
      out.push_back(Numbered({{"type", "response.output_text.delta"},
                              {"item_id", items_.back()["id"]},
                              {"output_index", items_.size() - 1},
                              {"content_index", 0},
                              {"delta", e.text}}));
    }
    if (e.kind == K::kArguments) {
      json& item = items_.back();
      item["arguments"] = item["arguments"].get<std::string>() + e.text;
      out.push_back(Numbered({{"type", "response.function_call_arguments.delta"},
                              {"item_id", item["id"]},
                              {"output_index", items_.size() - 1},
                              {"delta", e.text}}));
    }
  }
  return out;
}

std::vector<json> ResponseEvents::Finish(json object) {
  std::vector<json> out;
  CloseItem(out);
  object["output"] = items_;
  const bool incomplete = object["status"] == "incomplete";
  out.push_back(Numbered({{"type", incomplete ? "response.incomplete" : "response.completed"}, {"response", object}}));
  return out;
}

void ResponseStore::Put(const std::string& id, StoredResponse r) {
  std::lock_guard lock(mu_);
  if (!by_id_.count(id)) order_.push_back(id);
  by_id_[id] = std::move(r);
  while (by_id_.size() > capacity_ && !order_.empty()) {
    by_id_.erase(order_.front());
    if (evicted_.size() < 4 * capacity_ + 16) evicted_[order_.front()] = true;
    order_.pop_front();
  }
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

bool ResponseStore::Delete(const std::string& id) {
  std::lock_guard lock(mu_);
  if (!by_id_.erase(id)) return false;
  order_.remove(id);
  return true;
}

bool ResponseStore::WasEvicted(const std::string& id) const {
  std::lock_guard lock(mu_);
  return evicted_.count(id) > 0;
}

}  // namespace chorus::server
