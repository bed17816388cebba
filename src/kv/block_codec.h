// Block codec: one sealed 32-token block of every layer (what a prefix-cache entry holds) as a
// self-describing byte string, and the parser that checks it before anything is trusted. The
// bytes are what a remote store (Redis) keeps; a reader verifies each field against what its own
// engine would have sealed and rejects anything else with a reason.
//
// Layout v2 (little-endian, docs/SCALE_OUT.md):
//   header (56 bytes): magic "CHKV" (u32 0x564b4843) | layout version u16 | n_layer u16 |
//                      model fingerprint u64 | settings salt u64 | sharing scope u64 | block key u64 |
//                      tokens u32 | n_head_kv u16 | head_dim u16 | payload bytes u32 | block index u32
//   layer table (n_layer × 12 bytes): k format u8 | v format u8 | pad u16 | k bytes u32 | v bytes u32
//   checksum u64: XXH3-64 (seed 0) of the layer table and the payload
//   payload: per layer, its K side then its V side, exactly as the pool holds them.
// Invariant: a string Serialize wrote parses back to the same bytes; any change of one byte of it
// (header, table or payload) is rejected.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/block_pool.h"  // BlockPool, BlockId
#include "kv/kv_format.h"   // KvFormat, KvGeometry

namespace chorus {

inline constexpr uint32_t kBlockCodecMagic = 0x564b4843;  // "CHKV"
inline constexpr uint16_t kBlockCodecVersion = 2;
inline constexpr size_t kBlockCodecHeaderBytes = 56;
inline constexpr size_t kBlockCodecLayerBytes = 12;

// What identifies a block beyond its bytes: who sealed it, under which settings, for which key.
struct BlockIdentity {
  uint64_t model = 0;  // fingerprint of the model file
  uint64_t salt = 0;   // model + every KV setting that changes stored bytes (the prefix keys' seed)
  uint64_t scope = 0;  // the sharing scope it was sealed for (ScopeId; 0 = public): never read under another
  uint64_t key = 0;    // the block's chained content key
  uint32_t index = 0;  // its position in the prompt (tokens [32·index, 32·index + 32))
  KvGeometry geometry{};
  size_t n_layer = 0;
};

// The bytes of one block: ids (n_layer) in `pool`, every one live (no kNoBlock).
std::string SerializeBlock(const BlockIdentity& id, const BlockPool& pool, std::span<const BlockId> ids);

enum class BlockReject : uint8_t {
  kNone,
  kTruncated,  // shorter (or longer) than its header says
  kMagic,      // not a chorus block
  kVersion,    // another layout version
  kModel,      // sealed by another model
  kSettings,   // another KV configuration (formats, sink, window, policy)
  kScope,      // sealed for another sharing scope (tenant, group, public)
  kKey,        // stored under a key (or at a position) it was not sealed for
  kFormat,     // a layer's formats or sizes differ from what this engine seals
  kChecksum,   // payload or layer table changed
};
std::string_view BlockRejectName(BlockReject r);

struct ParsedBlock {
  // (n_layer) views into the parsed string (valid while it lives).
  std::vector<std::span<const uint8_t>> k, v;
  std::vector<KvFormat> k_format, v_format;
};

struct BlockParse {
  BlockReject reject = BlockReject::kNone;
  std::string why;  // empty when accepted
  ParsedBlock block;
  bool ok() const { return reject == BlockReject::kNone; }
};

// Verifies `bytes` against `expect` (every field of the header, each layer's formats — expect_k /
// expect_v for all layers — and sizes, and the checksum) and returns views of its sides.
BlockParse ParseBlock(std::string_view bytes, const BlockIdentity& expect, KvFormat expect_k, KvFormat expect_v);

}  // namespace chorus
