// The GGML type table (sizes from ggml's block structs; see docs/FORMATS.md).
#include "gguf/ggml_types.h"

namespace chorus {
namespace {

constexpr GgmlTypeTraits kTable[] = {
    {GgmlType::kF32, "F32", 1, 4, true},
    {GgmlType::kF16, "F16", 1, 2, true},
    {GgmlType::kQ4_0, "Q4_0", 32, 18, true},
    {GgmlType::kQ4_1, "Q4_1", 32, 20, true},
    {GgmlType::kQ5_0, "Q5_0", 32, 22, true},
    {GgmlType::kQ5_1, "Q5_1", 32, 24, true},
    {GgmlType::kQ8_0, "Q8_0", 32, 34, true},
    {GgmlType::kQ8_1, "Q8_1", 32, 36, false},
    {GgmlType::kQ2_K, "Q2_K", 256, 84, false},
    {GgmlType::kQ3_K, "Q3_K", 256, 110, false},
    {GgmlType::kQ4_K, "Q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "Q5_K", 256, 176, true},
    {GgmlType::kQ6_K, "Q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "Q8_K", 256, 292, false},
    {GgmlType::kBF16, "BF16", 1, 2, true},
};

}  // namespace

std::optional<GgmlTypeTraits> GgmlTraits(uint32_t type_id) {
  for (const auto& row : kTable)
    if (static_cast<uint32_t>(row.type) == type_id) return row;
  return std::nullopt;
}

const GgmlTypeTraits* GgmlTraitsPtr(GgmlType t) {
  for (const auto& row : kTable)
    if (row.type == t) return &row;
  return nullptr;
}

std::optional<size_t> GgmlRowBytes(GgmlType t, uint64_t n) {
  const GgmlTypeTraits* tr = GgmlTraitsPtr(t);
  if (!tr || n % tr->block_elems != 0) return std::nullopt;
  return static_cast<size_t>(n / tr->block_elems) * tr->block_bytes;
}

}  // namespace chorus
