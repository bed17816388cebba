// Block codec: a sealed block of every layer round-trips through its bytes, and every way those
// bytes can be wrong (one flipped byte anywhere, cut short, another model, other KV settings,
// another key, other formats, another layout version) is rejected with its reason.
#include "kv/block_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace chorus {
namespace {

constexpr KvGeometry kGeo{.n_head_kv = 2, .head_dim = 64};
constexpr size_t kLayers = 3;

// n_layer real blocks: random rows encoded with tq4 keys and tq3 values, as KvSequence seals them.
struct Fixture {
  BlockPool pool;
  std::vector<BlockId> ids;
  BlockIdentity id{.model = 0x1111,
                   .salt = 0x2222,
                   .scope = 0x4444,
                   .key = 0x3333,
                   .index = 5,
                   .geometry = kGeo,
                   .n_layer = kLayers};
  Fixture(KvFormat kf = KvFormat::kTq4, KvFormat vf = KvFormat::kTq3) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    std::vector<float> rows(kBlockTokens * kGeo.n_head_kv * kGeo.head_dim);
    for (size_t l = 0; l < kLayers; ++l) {
      const size_t kb = KvBlockBytes(kf, KvSide::kKey, kGeo), vb = KvBlockBytes(vf, KvSide::kValue, kGeo);
      BlockId b = pool.Allocate(kf, kb, vf, vb).value();
      for (float& x : rows) x = d(rng);
      EXPECT_TRUE(EncodeKvBlock(kf, KvSide::kKey, kGeo, rows.data(), pool.mutable_k(b)).ok());
      for (float& x : rows) x = d(rng);
      EXPECT_TRUE(EncodeKvBlock(vf, KvSide::kValue, kGeo, rows.data(), pool.mutable_v(b)).ok());
      ids.push_back(b);
    }
  }
  ~Fixture() {
    for (BlockId b : ids) pool.Unref(b);
  }
  BlockParse Parse(const std::string& s) const { return ParseBlock(s, id, KvFormat::kTq4, KvFormat::kTq3); }
};

TEST(BlockCodec, RoundTripGivesThePoolsBytes) {
  Fixture f;
  const std::string s = SerializeBlock(f.id, f.pool, f.ids);
  BlockParse p = f.Parse(s);
  ASSERT_TRUE(p.ok()) << p.why;
  ASSERT_EQ(p.block.k.size(), kLayers);
  for (size_t l = 0; l < kLayers; ++l) {
    const BlockMeta& m = f.pool.meta(f.ids[l]);
    ASSERT_EQ(p.block.k[l].size(), m.k_bytes);
    ASSERT_EQ(p.block.v[l].size(), m.v_bytes);
    EXPECT_EQ(std::memcmp(p.block.k[l].data(), f.pool.k_data(f.ids[l]), m.k_bytes), 0);
    EXPECT_EQ(std::memcmp(p.block.v[l].data(), f.pool.v_data(f.ids[l]), m.v_bytes), 0);
    EXPECT_EQ(p.block.k_format[l], KvFormat::kTq4);
    EXPECT_EQ(p.block.v_format[l], KvFormat::kTq3);
  }
}

// Catches a checksum that misses a region (the layer table, the payload's tail) or a header field
// the parser does not compare: every single-byte change must be refused.
TEST(BlockCodec, EveryFlippedByteIsRejected) {
  Fixture f;
  const std::string s = SerializeBlock(f.id, f.pool, f.ids);
  for (size_t i = 0; i < s.size(); ++i) {
    std::string bad = s;
    bad[i] ^= 0x01;
    BlockParse p = f.Parse(bad);
    ASSERT_FALSE(p.ok()) << "byte " << i << " of " << s.size();
    EXPECT_FALSE(p.why.empty());
    if (i >= kBlockCodecHeaderBytes) { EXPECT_EQ(p.reject, BlockReject::kChecksum) << "byte " << i; }
  }
}

TEST(BlockCodec, TruncatedOrExtendedIsRejected) {
  Fixture f;
  const std::string s = SerializeBlock(f.id, f.pool, f.ids);
  for (size_t n : {size_t{0}, size_t{10}, kBlockCodecHeaderBytes, s.size() / 2, s.size() - 1}) {
    BlockParse p = f.Parse(s.substr(0, n));
    EXPECT_EQ(p.reject, BlockReject::kTruncated) << n << ": " << p.why;
  }
  EXPECT_EQ(f.Parse(s + "x").reject, BlockReject::kTruncated);
}

TEST(BlockCodec, AnotherModelSettingsOrKeyIsRejected) {
  Fixture f;
  const std::string s = SerializeBlock(f.id, f.pool, f.ids);
  BlockIdentity other = f.id;
  other.model ^= 1;
  BlockParse p = ParseBlock(s, other, KvFormat::kTq4, KvFormat::kTq3);
  EXPECT_EQ(p.reject, BlockReject::kModel);
  EXPECT_NE(p.why.find("model"), std::string::npos) << p.why;
  other = f.id;
  other.salt ^= 1;
  EXPECT_EQ(ParseBlock(s, other, KvFormat::kTq4, KvFormat::kTq3).reject, BlockReject::kSettings);
  other = f.id;
  other.scope ^= 1;  // another tenant's block, however well formed
  p = ParseBlock(s, other, KvFormat::kTq4, KvFormat::kTq3);
  EXPECT_EQ(p.reject, BlockReject::kScope);
  EXPECT_NE(p.why.find("scope"), std::string::npos) << p.why;
  other = f.id;
  other.key ^= 1;  // a valid block copied under another block's key
  EXPECT_EQ(ParseBlock(s, other, KvFormat::kTq4, KvFormat::kTq3).reject, BlockReject::kKey);
  other = f.id;
  other.index = 6;  // the right key at the wrong position
  EXPECT_EQ(ParseBlock(s, other, KvFormat::kTq4, KvFormat::kTq3).reject, BlockReject::kKey);
  other = f.id;
  other.geometry.head_dim = 128;
  EXPECT_EQ(ParseBlock(s, other, KvFormat::kTq4, KvFormat::kTq3).reject, BlockReject::kFormat);
}

// A block of other formats (same model, same key and salt forged): refused by its layer table,
// never read as this engine's formats.
TEST(BlockCodec, AnotherFormatIsRejected) {
  Fixture f(KvFormat::kQ8, KvFormat::kTq3);
  const std::string s = SerializeBlock(f.id, f.pool, f.ids);
  BlockParse p = f.Parse(s);  // expects tq4 keys
  EXPECT_EQ(p.reject, BlockReject::kFormat);
  EXPECT_NE(p.why.find("tq4"), std::string::npos) << p.why;
  EXPECT_TRUE(ParseBlock(s, f.id, KvFormat::kQ8, KvFormat::kTq3).ok());
}

TEST(BlockCodec, MagicAndVersionAreChecked) {
  Fixture f;
  std::string s = SerializeBlock(f.id, f.pool, f.ids);
  std::string bad = s;
  bad[0] = 'X';
  EXPECT_EQ(f.Parse(bad).reject, BlockReject::kMagic);
  bad = s;
  bad[4] = 1;  // layout version 1 (before the scope field)
  BlockParse p = f.Parse(bad);
  EXPECT_EQ(p.reject, BlockReject::kVersion);
  EXPECT_NE(p.why.find("version 1"), std::string::npos) << p.why;
  EXPECT_EQ(f.Parse(std::string(200, '\0')).reject, BlockReject::kMagic);
}

}  // namespace
}  // namespace chorus
