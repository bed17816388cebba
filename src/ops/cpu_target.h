// The instruction-set cap for the whole process: which Highway target (and which int8 kernel path)
// every dispatched kernel uses — matmuls, KV attention kernels, the window codec, the encoder.
// Invariant: one process-wide setting, like Highway's own chosen target. It starts from the
// environment variable CHORUS_CPU_TARGET (read once at program start; an invalid value stops the
// program with a message naming the valid ones) and the tools' --cpu-target flag replaces it.
#pragma once
#include <string>
#include <string_view>

#include "util/status.h"  // Status, Result

namespace chorus {

enum class CpuTarget {
  kAuto,     // the best this CPU runs
  kScalar,   // Highway's portable fallback (no SIMD instructions), scalar int8 kernels
  kAvx2,     // AVX2 + FMA: vpmaddubsw int8 kernels
  kAvxVnni,  // AVX2 with the 256-bit AVX-VNNI vpdpbusd (Alder Lake and later)
  kAvx512,   // AVX-512 VNNI + VBMI (Highway's AVX3_DL, Ice Lake and later)
  kNeon,     // Arm NEON with the dot-product extension (sdot)
};

inline constexpr const char* kCpuTargetEnv = "CHORUS_CPU_TARGET";
inline constexpr const char* kCpuTargetNames = "auto, scalar, avx2, avx-vnni, avx512, neon";

// "avx2" → kAvx2 ...; an unknown name → an error listing the valid ones.
Result<CpuTarget> ParseCpuTarget(std::string_view name);
const char* CpuTargetName(CpuTarget t);

// Caps every later dispatch at t. A target this CPU cannot run → an error naming what it has.
Status SetCpuTarget(CpuTarget t);
Status SetCpuTargetByName(std::string_view name);  // ParseCpuTarget + SetCpuTarget
CpuTarget CurrentCpuTarget();

// What this CPU offers, e.g. "x86: avx2 fma f16c; Highway targets AVX2 SSE4 SSSE3 EMU128".
std::string CpuFeatures();
// The processor's name as the OS gives it (Linux: /proc/cpuinfo "model name", or "CPU part" on Arm),
// with the number of logical CPUs, e.g. "AMD EPYC 9R14 (2 CPUs)"; "unknown (N CPUs)" elsewhere. A
// benchmark's JSON records it: a VM can move to another host between two runs.
std::string CpuModel();

// True when the AVX2 target may use AVX-VNNI: the CPU has it and the cap allows it.
bool AvxVnniEnabled();
// True when this CPU has AVX-512 VNNI and VBMI (what the AVX3_DL int8 kernels use). Detected once,
// after __builtin_cpu_init, so a call from any static initializer or sanitizer build gets the truth.
bool Avx512VnniVbmi();
// An on/off switch from the environment, for reading before main: unset or "1" → true, "0" → false;
// another value prints "chorus: NAME must be 0 (off) or 1 (ON, the default), not 'V'" and exits 2.
bool EnvSwitch(const char* name, const char* on);

// True when the packed int8 matmuls may use AMX (int8_amx-inl.h): the CPU has AMX-TILE and AMX-INT8,
// Linux granted this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once), and
// CHORUS_AMX is not 0. CHORUS_AMX is read before main: 0 (off) or 1 (on where the CPU has it, the
// default); another value stops the program with a clear error (exit 2).
bool AmxInt8Enabled();
// Loads chorus's one AMX tile configuration into this thread once (the configuration is thread state
// and survives context switches); every AMX kernel calls it first. Only where AmxInt8Enabled().
//   tiles 0, 1: 16 rows × 64 bytes (C sums; the scores' query tile)
//   tiles 2, 3: 16 rows × 32 bytes (A: 16 tokens or queries × 32 bytes, K = 32)
//   tiles 4, 5:  8 rows × 64 bytes (B for K = 32)
//   tiles 6, 7: 16 rows × 64 bytes (B for K = 64)
void AmxEnsureTileConfig();
// AmxEnsureTileConfig, then a tile product into tile 0 whose result nobody reads (tiles 0, 2, 4 hold
// whatever they hold): it wakes this core's tile unit while the vector work before the kernel's real
// products runs. The unit sleeps after a short time without a product and the next one then waits for
// it to wake: without this, the AMX kernels' gain was lost (docs/results/design-measurements.md,
// AmxWake). Only where AmxInt8Enabled().
void AmxWake();
// True when the Arm targets may use sdot: the CPU has the dot-product extension and the cap is
// not scalar (NEON is Arm's Highway baseline, so the scalar cap must also switch these kernels off).
bool NeonDotprodEnabled();

}  // namespace chorus
