// Block codec: serialize / verify one sealed block of every layer (see block_codec.h).
#include "kv/block_codec.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>

#include "util/check.h"

namespace chorus {
namespace {

template <typename T>
void Put(std::string& s, size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof v);  // little-endian hosts only (x86-64, arm64)
}
template <typename T>
T Get(std::string_view s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

constexpr size_t kChecksumBytes = 8;

// XXH3-64 of the layer table and the payload (everything after the header but the checksum).
uint64_t BlockChecksum(std::string_view s, size_t table_at, size_t sum_at) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, s.data() + table_at, sum_at - table_at);
  XXH3_64bits_update(st, s.data() + sum_at + kChecksumBytes, s.size() - sum_at - kChecksumBytes);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

BlockParse Reject(BlockReject r, std::string why) {
  BlockParse p;
  p.reject = r;
  p.why = std::move(why);
  return p;
}

}  // namespace

std::string_view BlockRejectName(BlockReject r) {
  switch (r) {
    case BlockReject::kNone: return "none";
    case BlockReject::kTruncated: return "truncated";
    case BlockReject::kMagic: return "magic";
    case BlockReject::kVersion: return "version";
    case BlockReject::kModel: return "model";
    case BlockReject::kSettings: return "settings";
    case BlockReject::kScope: return "scope";
    case BlockReject::kKey: return "key";
    case BlockReject::kFormat: return "format";
    case BlockReject::kChecksum: return "checksum";
  }
  return "?";
}

std::string SerializeBlock(const BlockIdentity& id, const BlockPool& pool, std::span<const BlockId> ids) {
  CHORUS_CHECK(ids.size() == id.n_layer && id.n_layer < 65536);
  size_t payload = 0;
  for (BlockId b : ids) {
    CHORUS_CHECK(b != kNoBlock);
    payload += pool.meta(b).k_bytes + pool.meta(b).v_bytes;
  }
  CHORUS_CHECK(payload <= UINT32_MAX);
  const size_t table_at = kBlockCodecHeaderBytes, sum_at = table_at + id.n_layer * kBlockCodecLayerBytes;
  const size_t payload_at = sum_at + kChecksumBytes;
  std::string s(payload_at + payload, '\0');
  Put<uint32_t>(s, 0, kBlockCodecMagic);
  Put<uint16_t>(s, 4, kBlockCodecVersion);
  Put<uint16_t>(s, 6, static_cast<uint16_t>(id.n_layer));
  Put<uint64_t>(s, 8, id.model);
  Put<uint64_t>(s, 16, id.salt);
  Put<uint64_t>(s, 24, id.scope);
  Put<uint64_t>(s, 32, id.key);
  Put<uint32_t>(s, 40, kBlockTokens);
  Put<uint16_t>(s, 44, static_cast<uint16_t>(id.geometry.n_head_kv));
  Put<uint16_t>(s, 46, static_cast<uint16_t>(id.geometry.head_dim));
  Put<uint32_t>(s, 48, static_cast<uint32_t>(payload));
  Put<uint32_t>(s, 52, id.index);
  size_t at = payload_at;
  for (size_t l = 0; l < ids.size(); ++l) {
    const BlockMeta& m = pool.meta(ids[l]);
    const size_t row = table_at + l * kBlockCodecLayerBytes;
    Put<uint8_t>(s, row, static_cast<uint8_t>(m.k_format));
    Put<uint8_t>(s, row + 1, static_cast<uint8_t>(m.v_format));
    Put<uint32_t>(s, row + 4, m.k_bytes);
    Put<uint32_t>(s, row + 8, m.v_bytes);
    std::memcpy(s.data() + at, pool.k_data(ids[l]), m.k_bytes + m.v_bytes);  // K side then V side
    at += m.k_bytes + m.v_bytes;
  }
  Put<uint64_t>(s, sum_at, BlockChecksum(s, table_at, sum_at));
  return s;
}

BlockParse ParseBlock(std::string_view s, const BlockIdentity& expect, KvFormat expect_k, KvFormat expect_v) {
  if (s.size() < kBlockCodecHeaderBytes)
    return Reject(BlockReject::kTruncated, fmt::format("{} bytes, shorter than the {}-byte header", s.size(),
                                                       kBlockCodecHeaderBytes));
  if (Get<uint32_t>(s, 0) != kBlockCodecMagic)
    return Reject(BlockReject::kMagic, fmt::format("magic {:#010x} is not a chorus KV block's", Get<uint32_t>(s, 0)));
  if (const auto v = Get<uint16_t>(s, 4); v != kBlockCodecVersion)
    return Reject(BlockReject::kVersion, fmt::format("layout version {}, this build reads {}", v, kBlockCodecVersion));
  if (const auto m = Get<uint64_t>(s, 8); m != expect.model)
    return Reject(BlockReject::kModel, fmt::format("sealed by model {:016x}, this is {:016x}", m, expect.model));
  if (const auto salt = Get<uint64_t>(s, 16); salt != expect.salt)
    return Reject(BlockReject::kSettings,
                  fmt::format("sealed under KV settings {:016x}, this engine's are {:016x}", salt, expect.salt));
  if (const auto scope = Get<uint64_t>(s, 24); scope != expect.scope)
    return Reject(BlockReject::kScope,
                  fmt::format("sealed for sharing scope {:016x}, asked for under scope {:016x}", scope, expect.scope));
  if (const auto key = Get<uint64_t>(s, 32); key != expect.key)
    return Reject(BlockReject::kKey, fmt::format("sealed for key {:016x}, stored under {:016x}", key, expect.key));
  if (const auto index = Get<uint32_t>(s, 52); index != expect.index)
    return Reject(BlockReject::kKey, fmt::format("sealed as block {}, asked for as block {}", index, expect.index));
  const size_t n_layer = Get<uint16_t>(s, 6);
  if (n_layer != expect.n_layer || Get<uint32_t>(s, 40) != kBlockTokens ||
      Get<uint16_t>(s, 44) != expect.geometry.n_head_kv || Get<uint16_t>(s, 46) != expect.geometry.head_dim)
    return Reject(BlockReject::kFormat,
                  fmt::format("shape {} layers × {} tokens × {} heads × {} dims, expected {} × {} × {} × {}", n_layer,
                              Get<uint32_t>(s, 40), Get<uint16_t>(s, 44), Get<uint16_t>(s, 46), expect.n_layer,
                              kBlockTokens, expect.geometry.n_head_kv, expect.geometry.head_dim));
  const size_t table_at = kBlockCodecHeaderBytes, sum_at = table_at + n_layer * kBlockCodecLayerBytes;
  const size_t payload_at = sum_at + kChecksumBytes, payload = Get<uint32_t>(s, 48);
  if (s.size() != payload_at + payload)
    return Reject(BlockReject::kTruncated, fmt::format("{} bytes, the header says {}", s.size(), payload_at + payload));
  // The checksum before the table is read: a changed size field must not steer the parse.
  const uint64_t want = Get<uint64_t>(s, sum_at), got = BlockChecksum(s, table_at, sum_at);
  if (want != got)
    return Reject(BlockReject::kChecksum, fmt::format("checksum {:016x}, the bytes hash to {:016x}", want, got));
  const size_t k_bytes = KvBlockBytes(expect_k, KvSide::kKey, expect.geometry);
  const size_t v_bytes = KvBlockBytes(expect_v, KvSide::kValue, expect.geometry);
  BlockParse p;
  size_t at = payload_at;
  for (size_t l = 0; l < n_layer; ++l) {
    const size_t row = table_at + l * kBlockCodecLayerBytes;
    const auto kf = Get<uint8_t>(s, row), vf = Get<uint8_t>(s, row + 1);
    const size_t kb = Get<uint32_t>(s, row + 4), vb = Get<uint32_t>(s, row + 8);
    if (kf != static_cast<uint8_t>(expect_k) || vf != static_cast<uint8_t>(expect_v) || kb != k_bytes || vb != v_bytes)
      return Reject(BlockReject::kFormat,
                    fmt::format("layer {}: formats {}/{} of {}/{} bytes, this engine seals {}/{} of {}/{}", l, kf, vf, kb,
                                vb, KvFormatName(expect_k), KvFormatName(expect_v), k_bytes, v_bytes));
    if (at + kb + vb > s.size()) return Reject(BlockReject::kTruncated, "the layer table runs past the payload");
    const auto* base = reinterpret_cast<const uint8_t*>(s.data());
    p.block.k.emplace_back(base + at, kb);
    p.block.v.emplace_back(base + at + kb, vb);
    p.block.k_format.push_back(expect_k);
    p.block.v_format.push_back(expect_v);
    at += kb + vb;
  }
  if (at != s.size()) return Reject(BlockReject::kTruncated, fmt::format("{} payload bytes after the last layer", s.size() - at));
  return p;
}

}  // namespace chorus
