// GGML tensor element types as stored in GGUF files: ids, block sizes and bytes per block.
// Invariant: the numeric ids equal ggml's enum ggml_type (they are on disk).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace chorus {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;
  uint32_t block_elems;  // elements per block (1 for float types)
  uint32_t block_bytes;  // bytes per block, scales included
  bool supported;        // chorus can compute with it
};

// The traits row of a type id read from disk; nullopt for an id chorus does not know.
std::optional<GgmlTypeTraits> GgmlTraits(uint32_t type_id);
const GgmlTypeTraits* GgmlTraitsPtr(GgmlType t);
// Every row of the table, in id order (tests iterate it; unsupported rows are known by name only).
std::span<const GgmlTypeTraits> AllGgmlTypes();
inline const GgmlTypeTraits& GgmlTraitsOf(GgmlType t) { return *GgmlTraitsPtr(t); }

// Bytes of a row of n elements; nullopt if n is not a multiple of the block size.
std::optional<size_t> GgmlRowBytes(GgmlType t, uint64_t n);

}  // namespace chorus
