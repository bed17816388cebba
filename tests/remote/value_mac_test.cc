// The remote store's keyed MAC: a value sealed under a secret opens under that secret and key only;
// any changed byte (value or MAC), another key, another secret or a short value is refused.
#include "remote/value_mac.h"

#include <gtest/gtest.h>

#include <string>

namespace chorus {
namespace {

TEST(ValueMac, OpensUnderItsSecretAndKeyOnly) {
  const std::string v = "a well-formed block, say";
  const std::string s = SealValue("shared-secret", "chorus:kv2:1:2:3", v);
  ASSERT_EQ(s.size(), v.size() + kValueMacBytes);
  auto o = OpenValue("shared-secret", "chorus:kv2:1:2:3", s);
  ASSERT_TRUE(o);
  EXPECT_EQ(*o, v);
  EXPECT_FALSE(OpenValue("other-secret", "chorus:kv2:1:2:3", s));
  EXPECT_FALSE(OpenValue("shared-secret", "chorus:kv2:1:2:4", s));  // copied under another key
  for (size_t i = 0; i < s.size(); ++i) {
    std::string bad = s;
    bad[i] ^= 0x01;
    EXPECT_FALSE(OpenValue("shared-secret", "chorus:kv2:1:2:3", bad)) << "byte " << i;
  }
  EXPECT_FALSE(OpenValue("shared-secret", "chorus:kv2:1:2:3", s.substr(0, kValueMacBytes - 1)));
  EXPECT_FALSE(OpenValue("shared-secret", "chorus:kv2:1:2:3", v));  // no MAC at all
}

}  // namespace
}  // namespace chorus
