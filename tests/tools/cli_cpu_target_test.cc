// `--cpu-target` and CHORUS_CPU_TARGET on the real binary: every computing command takes the flag,
// the kernel path is named in inspect and every --json output, and bad values are clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_run.h"  // Chorus, Json, kModel

namespace {

using cli_test::Chorus;
using cli_test::Json;
using cli_test::kModel;

TEST(CliCpuTarget, UnknownTargetListsTheValidOnes) {
  // Catches a flag that silently falls back to auto.
  for (const char* cmd : {"generate", "agents", "bench", "embed", "inspect", "eval ppl"}) {
    const auto r = Chorus(std::string(cmd) + " -m x.gguf --cpu-target avx3 -p hi");
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("unknown CPU target 'avx3'"), std::string::npos) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("auto, scalar, avx2, avx-vnni, avx512, neon"), std::string::npos) << r.err;
  }
}

TEST(CliCpuTarget, TargetTheCpuLacksNamesWhatItHas) {
  // neon on x86 (or avx2 on Arm) can never run: the error names the CPU's features.
#if defined(__x86_64__)
  const char* absent = "neon";
#else
  const char* absent = "avx2";
#endif
  const auto r = Chorus(std::string("inspect ") + kModel + " --cpu-target " + absent);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("this CPU has:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Highway targets"), std::string::npos) << r.err;
}

TEST(CliCpuTarget, EnvironmentVariableIsCheckedToo) {
  const auto r = Chorus("--version");  // sanity: runs without the variable
  EXPECT_EQ(r.code, 0) << r.err;
  const auto bad = Chorus("--version; CHORUS_CPU_TARGET=fast " CHORUS_BIN " --version");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("CHORUS_CPU_TARGET=fast: unknown CPU target 'fast'"), std::string::npos) << bad.err;
}

// The weight prefetch's switch (ops_internal::WeightPrefetch) is checked the same way, before main.
TEST(CliCpuTarget, WeightPrefetchVariableIsChecked) {
  const auto off = Chorus("--version; CHORUS_WEIGHT_PREFETCH=0 " CHORUS_BIN " --version");
  EXPECT_EQ(off.code, 0) << off.err;
  const auto bad = Chorus("--version; CHORUS_WEIGHT_PREFETCH=off " CHORUS_BIN " --version");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("CHORUS_WEIGHT_PREFETCH must be 0 (off) or 1 (on, the default), not 'off'"), std::string::npos)
      << bad.err;
}

TEST(CliCpuTarget, AmxVariableIsChecked) {
  const auto off = Chorus("--version; CHORUS_AMX=0 " CHORUS_BIN " --version");
  EXPECT_EQ(off.code, 0) << off.err;
  const auto bad = Chorus("--version; CHORUS_AMX=yes " CHORUS_BIN " --version");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("CHORUS_AMX must be 0 (off) or 1 (on where the CPU has it, the default), not 'yes'"),
            std::string::npos)
      << bad.err;
}

// The AMX kernels give the bits of the AVX-512 VNNI ones (CPUs without AMX run the same path twice).
TEST(CliCpuTarget, AmxOnAndOffGiveTheSameText) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not found";
  // ~90 prompt tokens in one prefill: AMX matmuls (from 12 tokens) and, over its sealed 32-token blocks, the
  // AMX KV kernels (from 16 queries)
  std::string prompt;
  for (const char* c : {"France is Paris", "Italy is Rome", "Spain is Madrid", "Japan is Tokyo", "Egypt is Cairo",
                        "Peru is Lima", "Kenya is Nairobi", "Chile is Santiago", "Norway is Oslo"})
    prompt += std::string("The capital of ") + c + ". ";
  const std::string gen = std::string("generate -m ") + kModel + " -p '" + prompt + "The capital of Greece is' -n 12" +
                          " -t 2 --policy tq4/tq3 --temp 0 --json";
  const auto on = Json(Chorus(gen));
  const auto off = Json(Chorus("--version >/dev/null; CHORUS_AMX=0 " CHORUS_BIN " " + gen));
  ASSERT_TRUE(on.contains("text") && off.contains("text"));
  EXPECT_EQ(on["text"], off["text"]);
}

TEST(CliCpuTarget, CappedRunsNameTheirPath) {
  // Catches a cap that does not reach the kernels, or a --json output that does not say which ran.
  // (Texts are not compared: the cap also moves the KV kernels and norms to other float orders.)
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not found";
  const std::string gen = std::string("generate -m ") + kModel + " -p 'The capital of France is' -n 4 -t 2 --json";
  const auto scalar = Json(Chorus(gen + " --cpu-target scalar"));
  EXPECT_EQ(scalar.value("kernel_path", ""), "scalar");
  EXPECT_NE(scalar.value("text", ""), "");
  const auto best = Json(Chorus(gen));
  EXPECT_NE(best.value("kernel_path", "scalar"), "scalar") << "no SIMD int8 path on this CPU?";
  const auto insp = Json(Chorus(std::string("inspect ") + kModel + " --json --cpu-target scalar"));
  EXPECT_EQ(insp.value("kernel_path", ""), "scalar");
  EXPECT_NE(insp.value("cpu_features", "").find("Highway targets"), std::string::npos);
  const auto text = Chorus(std::string("inspect ") + kModel);
  EXPECT_NE(text.out.find("kernels       "), std::string::npos) << text.out;
}

}  // namespace
