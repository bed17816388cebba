// RepackQ4x16: the byte moves of repack.h's layout (scalar; once per tensor at model load).
#include "ops/repack.h"

#include <cstring>

#include "ops/quant_blocks.h"  // BlockQ4_0, BlockQ4_1
#include "util/check.h"        // CHORUS_CHECK

namespace chorus {

bool IsRepackableType(GgmlType t) { return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1; }

size_t RepackedBytes(const WeightView& w) {
  return (w.rows + kPackedRows - 1) / kPackedRows * (w.cols / 32) * kPackedBlockBytes;
}

void RepackQ4x16(const WeightView& w, uint8_t* dst) {
  CHORUS_CHECK(IsRepackableType(w.type) && w.cols % 32 == 0);
  const bool has_min = w.type == GgmlType::kQ4_1;
  const size_t block_bytes = has_min ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0);
  const size_t qs_off = has_min ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  const size_t nb = w.cols / 32, panels = (w.rows + kPackedRows - 1) / kPackedRows;
  std::memset(dst, 0, RepackedBytes(w));
  for (size_t p = 0; p < panels; ++p) {
    for (size_t i = 0; i < kPackedRows && p * kPackedRows + i < w.rows; ++i) {
      const uint8_t* row = w.data + (p * kPackedRows + i) * w.row_bytes;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * block_bytes;
        uint8_t* out = dst + (p * nb + b) * kPackedBlockBytes;
        for (size_t g = 0; g < 4; ++g) std::memcpy(out + 64 * g + 4 * i, blk + qs_off + 4 * g, 4);
        std::memcpy(out + 256 + 2 * i, blk, 2);                    // d
        if (has_min) std::memcpy(out + 288 + 2 * i, blk + 2, 2);  // m
      }
    }
  }
}

}  // namespace chorus
