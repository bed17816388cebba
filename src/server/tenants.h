// Tenants: who a request of `chorus serve` runs as. `--api-keys FILE` names one key per line
// (key, tenant, optional group, optional KV quota); `--api-key KEY` is one key; with neither, every
// request runs as one tenant. A tenant's requests and contexts are salted with its sharing scope
// (its group's when it has one, else its own: AgentOptions::scope), so prompts share cached KV
// inside a trust group and never across one (docs/SECURITY.md). The tenant named `admin` (and the
// one tenant of --api-key or of no key) sees every tenant's requests and contexts.
// Threading rules: immutable after it is built; Authenticate is safe from any thread.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/status.h"

namespace chorus::server {

inline constexpr std::string_view kAdminTenant = "admin";

struct Tenant {
  std::string name;
  std::string group;    // "" = none: the tenant shares cached KV with itself only
  size_t kv_quota = 0;  // bytes its scope may hold (the file's 4th column: AgentOptions::kv_quota_bytes); 0 = none
  bool admin = false;   // sees (and may delete) every tenant's requests and contexts
  // The scope of its requests and private contexts: "group:G", "tenant:T", or "" (public) for
  // the single tenant of a server with one key or none (everyone shares, as before tenants).
  std::string scope;
};

class Tenants {
 public:
  // No key: every request runs as one admin tenant in the public scope.
  Tenants();
  // --api-key KEY: the same tenant, behind a key.
  static Tenants OneKey(std::string key);
  // The lines of an --api-keys file: `key tenant [group] [kv_quota]`, blank lines and `#` comments
  // skipped; `-` for no group. A key is 16+ printable ASCII characters; a tenant's name and group
  // are [A-Za-z0-9_.-]; a quota is bytes with an optional K, M or G (×1024ⁿ). A tenant may have
  // several keys (rotation) if they agree on its group and quota. Errors name the line.
  static Result<Tenants> Parse(std::string_view text, std::string_view source = "--api-keys");
  static Result<Tenants> Load(const std::string& path);

  bool open() const { return keys_.empty(); }  // no key is asked for
  size_t size() const { return tenants_.size(); }
  // The tenant of an Authorization header value ("Bearer KEY"), nullptr when no key matches.
  // Every key is compared in full whatever matched before (no early exit on a byte or a key).
  const Tenant* Authenticate(std::string_view authorization) const;
  const Tenant& anonymous() const { return tenants_.front(); }  // open(): who every request is

 private:
  struct Key {
    std::string bearer;  // "Bearer KEY"
    size_t tenant = 0;
  };
  std::vector<Key> keys_;
  std::vector<Tenant> tenants_;
};

}  // namespace chorus::server
