// `chorus bench --json` prints one JSON object on stdout (the human tables go to stderr), in every
// mode: multi-agent, decode at depth, and the plain pp/tg run. Small sizes, no llama.cpp peer.
#include "cli_run.h"

namespace {

using cli_test::Chorus;
using cli_test::Json;
using cli_test::kModel;

TEST(CliBench, JsonModesPrintOnlyJson) {
  const std::string base = std::string("bench -m ") + kModel + " -t 1 --reps 1 --no-peer --json ";
  const nlohmann::json agents = Json(Chorus(base + "--agents 1,2 --doc-tokens 64 --tg 2 --kv f16/f16"));
  EXPECT_GT(agents["rows"]["2"]["chorus"]["f16/f16"]["decode_tokens_per_s"].get<double>(), 0.0) << agents;
  EXPECT_GT(agents["rows"]["2"]["chorus"]["f16/f16"]["peak_kv_bytes"].get<size_t>(), 0u) << agents;
  const nlohmann::json depth = Json(Chorus(base + "--depths 0,64 --tg 2 --kv f16/f16"));
  ASSERT_EQ(depth["rows"].size(), 2u) << depth;
  EXPECT_GT(depth["rows"][1]["chorus"]["f16/f16"]["tg"].get<double>(), 0.0) << depth;
  const nlohmann::json plain = Json(Chorus(base + "--pp 16 --tg 2"));
  EXPECT_FALSE(plain.empty());
}

}  // namespace
