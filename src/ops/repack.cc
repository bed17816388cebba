// RepackPanels: the byte moves of repack.h's layout (scalar; once per tensor at model load).
#include "ops/repack.h"

#include <cstring>

#include "ops/quant_blocks.h"  // BlockQ4_0, BlockQ4_1, BlockQ8_0
#include "util/check.h"        // CHORUS_CHECK

namespace chorus {

bool IsRepackableType(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ8_0;
}

size_t RepackedBytes(const WeightView& w) {
  return (w.rows + kPackedRows - 1) / kPackedRows * (w.cols / 32) * PackedBlockBytes(w.type);
}

void RepackPanels(const WeightView& w, uint8_t* dst, size_t p0, size_t p1) {
  CHORUS_CHECK(IsRepackableType(w.type) && w.cols % 32 == 0);
  const bool q8 = w.type == GgmlType::kQ8_0, has_min = w.type == GgmlType::kQ4_1;
  const size_t block_bytes = GgmlTraitsOf(w.type).block_bytes;
  const size_t qs_off = q8 ? offsetof(BlockQ8_0, qs) : has_min ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  const size_t groups = q8 ? 8 : 4, scales = 64 * groups, out_bytes = PackedBlockBytes(w.type);
  const size_t nb = w.cols / 32, panels = (w.rows + kPackedRows - 1) / kPackedRows;
  p1 = p1 < panels ? p1 : panels;
  if (p0 >= p1) return;
  std::memset(dst + p0 * nb * out_bytes, 0, (p1 - p0) * nb * out_bytes);
  for (size_t p = p0; p < p1; ++p) {
    for (size_t i = 0; i < kPackedRows && p * kPackedRows + i < w.rows; ++i) {
      const uint8_t* row = w.data + (p * kPackedRows + i) * w.row_bytes;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * block_bytes;
        uint8_t* out = dst + (p * nb + b) * out_bytes;
        for (size_t g = 0; g < groups; ++g) {
          std::memcpy(out + 64 * g + 4 * i, blk + qs_off + 4 * g, 4);
          if (q8)
            for (size_t k = 0; k < 4; ++k) out[64 * g + 4 * i + k] ^= 0x80;  // q + 128
        }
        std::memcpy(out + scales + 2 * i, blk, 2);                       // d
        if (has_min) std::memcpy(out + scales + 32 + 2 * i, blk + 2, 2);  // m
      }
    }
  }
}

}  // namespace chorus
