// Tenants of `chorus serve`: the --api-keys file (errors name the line), key lookup, and a server on
// a tiny random-weight model driven over HTTP on loopback. Catches: a tenant that can see, read,
// use or delete another tenant's context by any endpoint (table-driven), an id that answers
// differently from an unknown one, prompts shared across groups (cached_tokens), a cache_salt that
// does not split a scope, and client-chosen path text in /metrics.
#include "server/tenants.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>  // getpid

#include <cstdio>
#include <string>
#include <thread>

#include "../model/synthetic_model.h"
#include "server/dashboard.h"    // StateFor
#include "server/http_server.h"  // HttpServer

namespace chorus::server {
namespace {

using json = nlohmann::json;

TEST(Tenants, ParseErrorsNameTheLine) {
  const auto err = [](const std::string& text) {
    auto t = Tenants::Parse(text, "keys.txt");
    EXPECT_FALSE(t.ok()) << text;
    return t.ok() ? std::string() : t.status().message();
  };
  EXPECT_NE(err("# tenants\n\nk-0123456789abcdef\n").find("keys.txt line 3: a key needs a tenant"), std::string::npos);
  EXPECT_NE(err("short alice\n").find("line 1: the key must be at least 16"), std::string::npos);
  EXPECT_NE(err("k-0123456789abcdef al/ice\n").find("tenant name 'al/ice'"), std::string::npos);
  EXPECT_NE(err("k-0123456789abcdef alice g 12X\n").find("kv_quota '12X'"), std::string::npos);
  EXPECT_NE(err("k-0123456789abcdef alice g 1G extra\n").find("5 columns"), std::string::npos);
  EXPECT_NE(err("k-0123456789abcdef a\nk-0123456789abcdef b\n").find("line 2: the same key is on line 1"),
            std::string::npos);
  EXPECT_NE(err("k-0123456789abcdef a g1\nk-0123456789abcdeF a g2\n").find("tenant 'a' has another group"),
            std::string::npos);
  EXPECT_NE(err("# nothing\n").find("no key"), std::string::npos);
}

TEST(Tenants, KeysFindTheirTenantAndScope) {
  auto t = Tenants::Parse(
      "k-aaaaaaaaaaaaaaaa alice team 64M  # a comment\n"
      "k-bbbbbbbbbbbbbbbb bob team\n"
      "k-cccccccccccccccc carol - 2G\n"
      "k-dddddddddddddddd admin\n"
      "k-eeeeeeeeeeeeeeee carol - 2G\n");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->size(), 4u);
  const Tenant* a = t->Authenticate("Bearer k-aaaaaaaaaaaaaaaa");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "alice");
  EXPECT_EQ(a->scope, "group:team");
  EXPECT_EQ(a->kv_quota, size_t{64} << 20);
  EXPECT_FALSE(a->admin);
  EXPECT_EQ(t->Authenticate("Bearer k-bbbbbbbbbbbbbbbb")->scope, "group:team");
  EXPECT_EQ(t->Authenticate("Bearer k-cccccccccccccccc")->scope, "tenant:carol");
  EXPECT_EQ(t->Authenticate("Bearer k-eeeeeeeeeeeeeeee")->name, "carol");  // a second key (rotation)
  EXPECT_TRUE(t->Authenticate("Bearer k-dddddddddddddddd")->admin);
  EXPECT_EQ(t->Authenticate("Bearer k-aaaaaaaaaaaaaaa"), nullptr);    // a prefix
  EXPECT_EQ(t->Authenticate("Bearer k-aaaaaaaaaaaaaaaaa"), nullptr);  // longer
  EXPECT_EQ(t->Authenticate(""), nullptr);
  // No key, or --api-key: one admin tenant in the public scope (every block shared, as before).
  EXPECT_TRUE(Tenants().Authenticate("")->admin);
  EXPECT_EQ(Tenants::OneKey("secret").Authenticate("Bearer secret")->scope, "");
  EXPECT_EQ(Tenants::OneKey("secret").Authenticate("Bearer other"), nullptr);
}

TEST(Tenants, StateForKeepsOwnRequestsAndVisibleContexts) {
  const json state = {{"requests",
                       {{{"id", "cmpl-1"}, {"tenant", "alice"}, {"preview", "alice's secret"}},
                        {{"id", "cmpl-2"}, {"tenant", "carol"}, {"preview", "carol's"}},
                        {{"id", "engine-3"}, {"tenant", ""}, {"preview", ""}}}},
                      {"runs",
                       {{{"kind", "context"}, {"context", "ctx-1"}, {"preview", "alice's doc"}},
                        {{"kind", "context"}, {"context", "ctx-2"}, {"preview", "public doc"}},
                        {{"kind", "prefix"}, {"context", nullptr}, {"preview", "someone's prompt"}}}},
                      {"counts", {{"contexts", 2}}},
                      {"runs_total", 3}};
  const json c = StateFor(state, "carol", {"ctx-2"});
  ASSERT_EQ(c["requests"].size(), 1u);
  EXPECT_EQ(c["requests"][0]["id"], "cmpl-2");
  ASSERT_EQ(c["runs"].size(), 1u);
  EXPECT_EQ(c["runs"][0]["context"], "ctx-2");
  EXPECT_EQ(c["counts"]["contexts"], 1);
  EXPECT_EQ(c.dump().find("secret"), std::string::npos);
  EXPECT_EQ(c.dump().find("someone"), std::string::npos);
}

// A server on a tiny random-weight model with four tenants: A and B in group g, C alone, admin.
class TenantServer : public ::testing::Test {
 protected:
  static constexpr const char* kA = "Bearer key-aaaaaaaaaaaaaaaa";
  static constexpr const char* kB = "Bearer key-bbbbbbbbbbbbbbbb";
  static constexpr const char* kC = "Bearer key-cccccccccccccccc";
  static constexpr const char* kAdmin = "Bearer key-admin-0000000000";
  static constexpr const char* kQ = "Bearer key-qqqqqqqqqqqqqqqq";  // a 1-byte KV quota

  void SetUp() override {
    const testing::SyntheticSpec s =
        testing::TinySpec("tenants", "{% for message in messages %}<|im_start|>");  // ChatML
    const std::string path = std::string(::testing::TempDir()) + "/tenants_test." + std::to_string(getpid()) + ".gguf";
    ASSERT_TRUE(testing::SyntheticModel(s).WriteFile(path).ok());
    auto e = Engine::Open({.model_path = path, .threads = 2, .n_ctx = 512, .kv_budget_bytes = 64 << 20});
    std::remove(path.c_str());
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(e).value();
    auto t = Tenants::Parse(
        "key-aaaaaaaaaaaaaaaa A g\nkey-bbbbbbbbbbbbbbbb B g\nkey-cccccccccccccccc C\nkey-admin-0000000000 admin\n"
        "key-qqqqqqqqqqqqqqqq Q - 1\n");
    ASSERT_TRUE(t.ok()) << t.status().message();
    server_ = std::make_unique<HttpServer>(*engine_, HttpOptions{.port = 0, .tenants = *t, .model_id = "tiny"});
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { server_->Serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    if (thread_.joinable()) thread_.join();
  }

  struct Reply {
    int status = 0;
    json body;
  };
  Reply Call(const std::string& method, const std::string& path, const char* key, const json& body = nullptr) {
    httplib::Headers h{{"Authorization", key}};
    httplib::Result r = method == "GET"      ? client_->Get(path, h)
                        : method == "DELETE" ? client_->Delete(path, h)
                                             : client_->Post(path, h, body.dump(), "application/json");
    EXPECT_TRUE(r) << method << " " << path;
    if (!r) return {};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  std::string NewContext(const char* key, const std::string& text, const char* scope = "private") {
    Reply r = Call("POST", "/v1/contexts", key, {{"text", text}, {"scope", scope}});
    EXPECT_EQ(r.status, 200) << r.body.dump();
    return r.body.value("id", "");
  }
  std::vector<std::string> Listed(const char* key) {
    std::vector<std::string> ids;
    const Reply r = Call("GET", "/v1/contexts", key);
    for (const json& c : r.body["data"]) ids.push_back(c["id"]);
    return ids;
  }
  std::string StateText(const char* key) { return Call("GET", "/v1/state", key).body.dump(); }
  size_t Cached(const char* key, const json& extra = json::object()) {
    json body = {{"prompt", json::array()}, {"max_tokens", 2}, {"temperature", 0}};
    for (int i = 0; i < 100; ++i) body["prompt"].push_back(3 + (i * 37) % 290);
    body.update(extra);
    Reply r = Call("POST", "/v1/completions", key, body);
    EXPECT_EQ(r.status, 200) << r.body.dump();
    return r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<size_t>();
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

const std::string kDoc = [] {
  std::string d;
  for (int i = 0; i < 8; ++i) d += "alpha beta gamma delta " + std::to_string(i) + ". ";
  return d;
}();

TEST_F(TenantServer, NoEndpointShowsAnotherTenantsContext) {
  const std::string a = NewContext(kA, kDoc);
  ASSERT_FALSE(a.empty());
  const std::string unknown = "ctx-987654";
  const auto chat_with = [](const std::string& id) {
    return json{{"messages", {{{"role", "user"}, {"content", {{{"type", "chorus_context"}, {"id", id}}}}}}},
                {"max_tokens", 1}};
  };
  // Every endpoint that names or lists a context: C gets what an unknown id gets.
  struct Case {
    std::string name, method, path;
    json body;
    int status;  // for C, and for an unknown id
  };
  const std::vector<Case> cases = {
      {"get", "GET", "/v1/contexts/" + a, nullptr, 404},
      {"delete", "DELETE", "/v1/contexts/" + a, nullptr, 404},
      {"chat content part", "POST", "/v1/chat/completions", chat_with(a), 400},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Reply mine = Call(c.method, c.path, kC, c.body);
    EXPECT_EQ(mine.status, c.status) << mine.body.dump();
    std::string other_path = c.path, other_body = c.body.dump();
    if (auto at = other_path.find(a); at != std::string::npos) other_path.replace(at, a.size(), unknown);
    if (auto at = other_body.find(a); at != std::string::npos) other_body.replace(at, a.size(), unknown);
    const Reply none = Call(c.method, other_path, kC, json::parse(other_body));
    EXPECT_EQ(none.status, mine.status);
    std::string msg = mine.body["error"]["message"];
    if (auto at = msg.find(a); at != std::string::npos) msg.replace(at, a.size(), unknown);
    EXPECT_EQ(msg, none.body["error"]["message"]) << "the answer must not tell a foreign id from an unknown one";
    EXPECT_EQ(mine.body["error"]["code"], none.body["error"]["code"]);
  }
  // Lists and the dashboard's state.
  EXPECT_TRUE(Listed(kC).empty());
  EXPECT_EQ(StateText(kC).find(a + "\""), std::string::npos);
  EXPECT_EQ(StateText(kC).find("alpha beta"), std::string::npos);
  // B is in A's group but did not make it: not B's either (groups share KV, not contexts' ids).
  EXPECT_TRUE(Listed(kB).empty());
  EXPECT_EQ(Call("GET", "/v1/contexts/" + a, kB).status, 404);
  // A and admin see it; the context still works for A after everyone else's attempts.
  EXPECT_EQ(Listed(kA), std::vector<std::string>{a});
  EXPECT_EQ(Listed(kAdmin), std::vector<std::string>{a});
  EXPECT_NE(StateText(kAdmin).find(a + "\""), std::string::npos);
  EXPECT_EQ(Call("GET", "/v1/contexts/" + a, kA).status, 200);
  EXPECT_EQ(Call("DELETE", "/v1/contexts/" + a, kA).status, 200);
  EXPECT_EQ(Call("GET", "/v1/contexts/" + a, kA).status, 404);
}

TEST_F(TenantServer, NoEndpointShowsAnotherTenantsStoredResponse) {
  const Reply made = Call("POST", "/v1/responses", kA, {{"input", kDoc}, {"max_output_tokens", 2}});
  ASSERT_EQ(made.status, 200) << made.body.dump();
  const std::string a = made.body["id"], unknown = "resp_0000000000000000";
  struct Case {
    std::string name, method, path;
    json body;
  };
  const std::vector<Case> cases = {
      {"get", "GET", "/v1/responses/" + a, nullptr},
      {"delete", "DELETE", "/v1/responses/" + a, nullptr},
      {"continue", "POST", "/v1/responses", {{"input", "and?"}, {"previous_response_id", a}, {"max_output_tokens", 1}}},
  };
  for (const char* who : {kB, kC}) {  // even B, in A's group: groups share KV, not conversations
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      const Reply mine = Call(c.method, c.path, who, c.body);
      EXPECT_EQ(mine.status, 404) << mine.body.dump();
      std::string other_path = c.path, other_body = c.body.dump();
      if (auto at = other_path.find(a); at != std::string::npos) other_path.replace(at, a.size(), unknown);
      if (auto at = other_body.find(a); at != std::string::npos) other_body.replace(at, a.size(), unknown);
      const Reply none = Call(c.method, other_path, who, json::parse(other_body));
      std::string msg = mine.body["error"]["message"];
      if (auto at = msg.find(a); at != std::string::npos) msg.replace(at, a.size(), unknown);
      EXPECT_EQ(msg, none.body["error"]["message"]) << "a foreign id must read as an unknown one";
    }
  }
  EXPECT_EQ(Call("GET", "/v1/responses/" + a, kAdmin).status, 200);
  EXPECT_EQ(
      Call("POST", "/v1/responses", kA, {{"input", "and?"}, {"previous_response_id", a}, {"max_output_tokens", 1}})
          .status,
      200);
  EXPECT_EQ(Call("DELETE", "/v1/responses/" + a, kA).status, 200);
  EXPECT_EQ(Call("GET", "/v1/responses/" + a, kA).status, 404);
}

TEST_F(TenantServer, PublicContextsAreReadByAllDeletedByTheirOwners) {
  const std::string p = NewContext(kA, kDoc, "public");
  EXPECT_EQ(Listed(kC), std::vector<std::string>{p});
  EXPECT_EQ(Call("GET", "/v1/contexts/" + p, kC).body["scope"], "public");
  const Reply del = Call("DELETE", "/v1/contexts/" + p, kC);
  EXPECT_EQ(del.status, 403) << del.body.dump();
  EXPECT_EQ(Call("DELETE", "/v1/contexts/" + p, kAdmin).status, 200);
  EXPECT_TRUE(Listed(kA).empty());
}

TEST_F(TenantServer, PromptsAreSharedInsideAGroupOnly) {
  EXPECT_EQ(Cached(kA), 0u);
  EXPECT_GE(Cached(kA), 96u);
  EXPECT_GE(Cached(kB), 96u);  // the same group
  EXPECT_EQ(Cached(kC), 0u);   // alone
  EXPECT_EQ(Cached(kAdmin), 0u);
  EXPECT_EQ(Cached(kA, {{"cache_salt", "s1"}}), 0u);  // a salt splits the group's scope
  EXPECT_GE(Cached(kB, {{"cache_salt", "s1"}}), 96u);
  EXPECT_EQ(Cached(kB, {{"cache_salt", "s2"}}), 0u);
}

TEST_F(TenantServer, OverQuotaIsA429WithTheBytes) {
  const Reply r = Call("POST", "/v1/completions", kQ, {{"prompt", "a b c d"}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 429) << r.body.dump();
  EXPECT_EQ(r.body["error"]["code"], "kv_quota_exceeded");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("1-byte quota"), std::string::npos) << r.body.dump();
  EXPECT_EQ(Cached(kA), 0u);  // everyone else is served
}

TEST_F(TenantServer, BadKeysAreRefusedAndPathsAreNoMetricLabels) {
  EXPECT_EQ(Call("GET", "/v1/contexts", "Bearer key-aaaaaaaaaaaaaaaX").status, 401);
  EXPECT_EQ(Call("DELETE", "/v1/contexts/my-secret-prompt-text", "Bearer nope").status, 401);
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body.find("my-secret-prompt-text"), std::string::npos);
  EXPECT_NE(m->body.find("/v1/contexts/{id}"), std::string::npos);
}

}  // namespace
}  // namespace chorus::server
