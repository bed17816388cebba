// The CPU a command runs on, for the command line and reports: which SIMD kernels are in use, the
// CPU's features, and the --cpu-target cap (ops/cpu_target.h, ops/matmul.h) offered to tools/
// through the eval library, so commands need no ops/ header.
#pragma once
#include <string>
#include <string_view>

#include "ops/cpu_target.h"  // CpuTarget, ParseCpuTarget, SetCpuTargetByName, CpuFeatures
#include "ops/matmul.h"      // MatMulPath

namespace chorus::eval {

using ::chorus::CpuFeatures;         // "avx2 avx512f ...": what this CPU has
using ::chorus::CpuTarget;           // a cap on the SIMD kernels
using ::chorus::kCpuTargetEnv;       // the environment variable that sets the cap for library users
using ::chorus::kCpuTargetNames;     // the valid --cpu-target names, for help and errors
using ::chorus::MatMulPath;          // the SIMD kernels in use ("AVX-512 VNNI", ...)
using ::chorus::ParseCpuTarget;      // a name -> CpuTarget, or an error listing the valid names
using ::chorus::SetCpuTargetByName;  // ParseCpuTarget + apply for the whole process

}  // namespace chorus::eval
