// ValueMac: HMAC-SHA256 over the remote store's values (value_mac.h).
#include "remote/value_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <cstring>

#include "util/check.h"

namespace chorus {
namespace {

void Mac(std::string_view secret, std::string_view key, std::string_view value, unsigned char* out) {
  const uint64_t key_len = key.size();  // length-prefixed: no key/value split spells another
  std::string msg(sizeof key_len, '\0');
  std::memcpy(msg.data(), &key_len, sizeof key_len);
  msg.append(key);
  msg.append(value);
  unsigned int n = 0;
  const unsigned char* r = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                                reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &n);
  CHORUS_CHECK(r != nullptr && n == kValueMacBytes);
}

}  // namespace

std::string SealValue(std::string_view secret, std::string_view key, std::string_view value) {
  std::string s(value);
  s.resize(value.size() + kValueMacBytes);
  Mac(secret, key, value, reinterpret_cast<unsigned char*>(s.data() + value.size()));
  return s;
}

std::optional<std::string_view> OpenValue(std::string_view secret, std::string_view key, std::string_view sealed) {
  if (sealed.size() < kValueMacBytes) return std::nullopt;
  const std::string_view value = sealed.substr(0, sealed.size() - kValueMacBytes);
  unsigned char want[kValueMacBytes];
  Mac(secret, key, value, want);
  if (CRYPTO_memcmp(want, sealed.data() + value.size(), kValueMacBytes) != 0) return std::nullopt;
  return value;
}

}  // namespace chorus
