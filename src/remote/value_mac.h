// ValueMac: an optional keyed MAC over each value of the remote block store (EngineOptions::
// kv_store_secret), so that a writer who can reach Redis but lacks the replicas' shared secret
// cannot forge a well-formed block. HMAC-SHA256 (OpenSSL) over the Redis key and the value, appended
// to the value; the key is covered so a valid value copied under another key fails too.
// Thread-safe (pure functions).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace chorus {

inline constexpr size_t kValueMacBytes = 32;

// value + HMAC-SHA256(secret, key_len | key | value).
std::string SealValue(std::string_view secret, std::string_view key, std::string_view value);
// The value without its MAC, or nullopt when it is shorter than a MAC or the MAC does not match
// (compared in constant time).
std::optional<std::string_view> OpenValue(std::string_view secret, std::string_view key, std::string_view sealed);

}  // namespace chorus
