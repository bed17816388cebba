// `chorus agents --roles FILE` (agents_roles.cc): one system prompt per agent before the same
// document, each agent a request of its own, the document reused across roles by segments.
#pragma once
#include <string>

#include "chorus/engine.h"
#include "tools/common.h"

namespace chorus::cli {

struct RolesRun {
  EngineOptions engine;  // model and KV settings (segments.reuse is set from `reuse`)
  std::string document, roles_file, questions_file;
  int max_tokens = 96;
  Reuse reuse = Reuse::kSegments;
  bool json = false, quiet = false;
};

int RunRoles(const RolesRun& r);

}  // namespace chorus::cli
