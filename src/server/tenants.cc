// Tenants: the --api-keys file and constant-time key lookup (tenants.h).
#include "tenants.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

namespace chorus::server {
namespace {

bool IsName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

// "123", "64K", "512M", "2G" (binary multiples); nullopt-like false when malformed.
bool ParseQuota(std::string_view s, size_t* out) {
  if (s.empty()) return false;
  size_t mul = 1;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (last == 'K' || last == 'M' || last == 'G') {
    mul = last == 'K' ? size_t{1} << 10 : last == 'M' ? size_t{1} << 20 : size_t{1} << 30;
    s.remove_suffix(1);
  }
  if (s.empty() || s.size() > 15 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  *out = std::stoull(std::string(s)) * mul;
  return *out > 0;
}

}  // namespace

Tenants::Tenants() { tenants_.push_back({.name = std::string(kAdminTenant), .admin = true, .scope = ""}); }

Tenants Tenants::OneKey(std::string key) {
  Tenants t;
  t.keys_.push_back({.bearer = "Bearer " + key, .tenant = 0});
  return t;
}

Result<Tenants> Tenants::Parse(std::string_view text, std::string_view source) {
  Tenants t;
  t.tenants_.clear();
  std::map<std::string, size_t> by_name;
  std::map<std::string, size_t> key_line;
  std::istringstream in{std::string(text)};
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream cols(line);
    std::vector<std::string> c;
    for (std::string w; cols >> w;) c.push_back(w);
    if (c.empty()) continue;
    const auto bad = [&](const std::string& why) {
      return Status::Error(fmt::format("{} line {}: {} (a line is `key tenant [group] [kv_quota]`)", source, n, why));
    };
    if (c.size() < 2) return bad("a key needs a tenant name after it");
    if (c.size() > 4) return bad(fmt::format("{} columns, at most 4", c.size()));
    const std::string& key = c[0];
    if (key.size() < 16 || !std::all_of(key.begin(), key.end(), [](char ch) { return ch > ' ' && ch < 127; }))
      return bad(fmt::format("the key must be at least 16 printable ASCII characters, this one has {}", key.size()));
    if (auto [it, fresh] = key_line.emplace(key, n); !fresh)
      return bad(fmt::format("the same key is on line {} already", it->second));
    if (!IsName(c[1]))
      return bad(fmt::format("tenant name '{}' must be 1 to 64 of A-Z a-z 0-9 _ . -", c[1].substr(0, 64)));
    std::string group = c.size() > 2 && c[2] != "-" ? c[2] : "";
    if (!group.empty() && !IsName(group))
      return bad(fmt::format("group '{}' must be 1 to 64 of A-Z a-z 0-9 _ . - (or - for none)", group.substr(0, 64)));
    size_t quota = 0;
    if (c.size() > 3 && !ParseQuota(c[3], &quota))
      return bad(fmt::format("kv_quota '{}' must be a positive number of bytes, optionally with K, M or G",
                             c[3].substr(0, 32)));
    Tenant tn{.name = c[1], .group = group, .kv_quota = quota, .admin = c[1] == kAdminTenant};
    tn.scope = group.empty() ? "tenant:" + tn.name : "group:" + group;
    auto [it, fresh] = by_name.emplace(tn.name, t.tenants_.size());
    if (fresh) {
      t.tenants_.push_back(std::move(tn));
    } else {
      const Tenant& was = t.tenants_[it->second];
      if (was.group != tn.group || was.kv_quota != tn.kv_quota)
        return bad(fmt::format("tenant '{}' has another group or kv_quota on an earlier line", tn.name));
    }
    t.keys_.push_back({.bearer = "Bearer " + key, .tenant = it->second});
  }
  if (t.keys_.empty())
    return Status::Error(fmt::format("{}: no key (each line is `key tenant [group] [kv_quota]`)", source));
  return t;
}

Result<Tenants> Tenants::Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(fmt::format("--api-keys {}: cannot read the file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return Parse(ss.str(), "--api-keys " + path);
}

const Tenant* Tenants::Authenticate(std::string_view h) const {
  if (keys_.empty()) return &tenants_.front();
  size_t found = tenants_.size();  // none
  for (const Key& k : keys_) {
    const std::string& want = k.bearer;
    unsigned diff = h.size() != want.size();
    for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(want[i] ^ (i < h.size() ? h[i] : 0));
    // Branch-free select of the match (keys are distinct: at most one matches).
    const size_t mask = size_t{0} - size_t{diff == 0};
    found = (found & ~mask) | (k.tenant & mask);
  }
  return found < tenants_.size() ? &tenants_[found] : nullptr;
}

}  // namespace chorus::server
