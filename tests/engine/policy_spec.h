// Spec("comix-tq:3"): a KvPolicy from its spec string in a test (a parse error fails the test).
#pragma once
#include <gtest/gtest.h>

#include <string_view>

#include "chorus/kv_policy.h"

inline chorus::KvPolicy Spec(std::string_view spec) {
  auto p = chorus::KvPolicy::Parse(spec);
  EXPECT_TRUE(p.ok()) << spec << ": " << p.status().message();
  return p.ok() ? *p : chorus::KvPolicy{};
}
