// CPU target cap (cpu_target.h): CPU feature detection, Highway's DisableTargets, the environment.
#include "ops/cpu_target.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "hwy/targets.h"  // DisableTargets, SupportedTargets, TargetName

#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

namespace chorus {
namespace {

std::atomic<CpuTarget> g_target{CpuTarget::kAuto};

bool CpuHas(const char* feature) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // may run from a static initializer, before libgcc's
  std::string_view f(feature);
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  if (f == "avxvnni") return __builtin_cpu_supports("avxvnni");
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
  if (f == "avx512vbmi") return __builtin_cpu_supports("avx512vbmi");
  return false;
#elif defined(__aarch64__) && defined(__linux__)
  if (std::string_view(feature) == "dotprod") return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  return false;
#else
  (void)feature;
  return false;
#endif
}

// Highway's targets this CPU supports, ignoring any earlier cap.
int64_t UncappedTargets() {
  hwy::DisableTargets(0);
  return hwy::SupportedTargets();
}

int64_t AllowedMask(CpuTarget t) {
  const int64_t portable = HWY_EMU128 | HWY_SCALAR;
  switch (t) {
    case CpuTarget::kScalar: return portable;
#if HWY_ARCH_X86
    case CpuTarget::kAvx2:
    case CpuTarget::kAvxVnni: return portable | HWY_AVX2 | HWY_SSE4 | HWY_SSSE3;
#endif
#if HWY_ARCH_ARM
    case CpuTarget::kNeon: return portable | HWY_NEON;
#endif
    default: return ~int64_t{0};
  }
}

// Empty when this CPU runs t; else what it lacks.
std::string Missing(CpuTarget t, int64_t targets) {
  switch (t) {
    case CpuTarget::kAuto:
    case CpuTarget::kScalar: return "";
#if HWY_ARCH_X86
    case CpuTarget::kAvx2: return targets & HWY_AVX2 ? "" : "AVX2 + FMA + F16C";
    case CpuTarget::kAvxVnni:
      return (targets & HWY_AVX2) && CpuHas("avxvnni") ? "" : "AVX-VNNI (avxvnni, Alder Lake or later)";
    case CpuTarget::kAvx512:
      return targets & HWY_AVX3_DL ? "" : "AVX-512 VNNI + VBMI (Highway AVX3_DL, Ice Lake or later)";
    case CpuTarget::kNeon: return "an Arm CPU";
#elif HWY_ARCH_ARM
    case CpuTarget::kNeon:
      return (targets & HWY_NEON) && CpuHas("dotprod") ? "" : "NEON with the dot-product extension";
    default: return "an x86 CPU";
#else
    default: return "a CPU chorus has SIMD kernels for";
#endif
  }
  return "";
}

}  // namespace

Result<CpuTarget> ParseCpuTarget(std::string_view name) {
  for (CpuTarget t : {CpuTarget::kAuto, CpuTarget::kScalar, CpuTarget::kAvx2, CpuTarget::kAvxVnni,
                      CpuTarget::kAvx512, CpuTarget::kNeon}) {
    if (name == CpuTargetName(t)) return t;
  }
  return Status::Error("unknown CPU target '{}' (valid: {})", name, kCpuTargetNames);
}

const char* CpuTargetName(CpuTarget t) {
  switch (t) {
    case CpuTarget::kAuto: return "auto";
    case CpuTarget::kScalar: return "scalar";
    case CpuTarget::kAvx2: return "avx2";
    case CpuTarget::kAvxVnni: return "avx-vnni";
    case CpuTarget::kAvx512: return "avx512";
    case CpuTarget::kNeon: return "neon";
  }
  return "?";
}

Status SetCpuTarget(CpuTarget t) {
  const int64_t targets = UncappedTargets();
  const std::string missing = Missing(t, targets);
  if (!missing.empty()) {
    hwy::DisableTargets(~AllowedMask(g_target.load()));  // keep the cap in force
    return Status::Error("CPU target '{}' needs {}; this CPU has: {}", CpuTargetName(t), missing, CpuFeatures());
  }
  hwy::DisableTargets(~AllowedMask(t));
  g_target.store(t);
  return Status::Ok();
}

Status SetCpuTargetByName(std::string_view name) {
  Result<CpuTarget> t = ParseCpuTarget(name);
  if (!t.ok()) return t.status();
  return SetCpuTarget(*t);
}

CpuTarget CurrentCpuTarget() { return g_target.load(); }

std::string CpuFeatures() {
  std::string s;
#if HWY_ARCH_X86
  s = "x86:";
  for (const char* f : {"avx2", "fma", "avxvnni", "avx512f", "avx512vnni", "avx512vbmi"})
    if (CpuHas(f)) s += std::string(" ") + f;
  if (AmxInt8Enabled()) s += " amx-int8";
#elif HWY_ARCH_ARM
  s = "arm:";
  if (CpuHas("dotprod")) s += " dotprod";
#else
  s = "cpu:";
#endif
  s += "; Highway targets";
  const int64_t all = UncappedTargets();
  hwy::DisableTargets(~AllowedMask(g_target.load()));
  for (int64_t bits = all; bits != 0; bits &= bits - 1) s += std::string(" ") + hwy::TargetName(bits & ~(bits - 1));
  return s;
}

namespace {

std::string ReadCpuModel() {
  std::string name;
  if (std::FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (name.empty() && std::fgets(line, sizeof line, f)) {
      std::string_view l(line);
      if (!l.starts_with("model name") && !l.starts_with("CPU part")) continue;
      const size_t colon = l.find(':');
      if (colon == std::string_view::npos) continue;
      l.remove_prefix(colon + 1);
      while (!l.empty() && (l.front() == ' ' || l.front() == '\t')) l.remove_prefix(1);
      while (!l.empty() && (l.back() == '\n' || l.back() == ' ')) l.remove_suffix(1);
      name = l;
    }
    std::fclose(f);
  }
  if (name.empty()) name = "unknown";
  return name + " (" + std::to_string(std::thread::hardware_concurrency()) + " CPUs)";
}

}  // namespace

std::string CpuModel() {
  static const std::string model = ReadCpuModel();  // read once: every JSON a tool prints carries it
  return model;
}

bool AvxVnniEnabled() {
  static const bool has = CpuHas("avxvnni");
  const CpuTarget t = g_target.load(std::memory_order_relaxed);
  return has && (t == CpuTarget::kAuto || t == CpuTarget::kAvxVnni || t == CpuTarget::kAvx512);
}

bool Avx512VnniVbmi() {
  static const bool has = CpuHas("avx512vnni") && CpuHas("avx512vbmi");
  return has;
}

bool NeonDotprodEnabled() {
  static const bool has = CpuHas("dotprod");
  return has && g_target.load(std::memory_order_relaxed) != CpuTarget::kScalar;
}

namespace {
// The CPU has AMX-TILE and AMX-INT8 (CPUID.(7,0):EDX bits 24, 25) and Linux lets this process use the
// tile data (XTILEDATA, state component 18: asked for once; the kernel grants it process-wide).
bool AmxInt8Usable() {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// CHORUS_AMX, read before main like CHORUS_CPU_TARGET: a bad value is a clear error, not a silent default.
const bool g_amx_allowed = EnvSwitch("CHORUS_AMX", "on where the CPU has it");
}  // namespace

bool EnvSwitch(const char* name, const char* on) {
  const char* v = std::getenv(name);
  if (v == nullptr || std::string_view(v) == "1") return true;
  if (std::string_view(v) == "0") return false;
  std::fprintf(stderr, "chorus: %s must be 0 (off) or 1 (%s, the default), not '%s'\n", name, on, v);
  std::exit(2);
}

bool AmxInt8Enabled() {
  static const bool usable = g_amx_allowed && AmxInt8Usable();
  const CpuTarget t = g_target.load(std::memory_order_relaxed);
  return usable && (t == CpuTarget::kAuto || t == CpuTarget::kAvx512);
}

#if defined(__x86_64__) && defined(__linux__)
__attribute__((target("amx-tile"))) void AmxEnsureTileConfig() {
  struct alignas(64) Config {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {64, 64, 32, 32, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 8, 8, 16, 16};
  };
  thread_local bool configured = false;
  if (configured) return;
  static const Config config;
  __asm__ volatile("ldtilecfg %0" ::"m"(config));
  configured = true;
}
__attribute__((target("amx-tile,amx-int8"))) void AmxWake() {
  AmxEnsureTileConfig();
  __asm__ volatile("tdpbusd %%tmm4, %%tmm2, %%tmm0" ::);
}
#else
void AmxEnsureTileConfig() {}
void AmxWake() {}
#endif

namespace {
// CHORUS_CPU_TARGET, applied before main; a bad value is a clear error, not a silent default.
const bool g_env_applied = [] {
  const char* v = std::getenv(kCpuTargetEnv);
  if (v == nullptr || *v == '\0') return false;
  const Status st = SetCpuTargetByName(v);
  if (!st.ok()) {
    std::fprintf(stderr, "chorus: %s=%s: %s\n", kCpuTargetEnv, v, st.message().c_str());
    std::exit(2);
  }
  return true;
}();
}  // namespace

}  // namespace chorus
