// SafetensorsFile: valid files read back exactly (F32/F16/BF16); every malformed header, truncated
// file or missing file is an error naming the problem — never a crash.
#include "encoder/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "util/fp16.h"

namespace chorus {
namespace {

std::vector<uint8_t> Build(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A good file: "a" F32 [2,3], "h" F16 [2], "z" BF16 [1].
std::vector<uint8_t> GoodFile() {
  std::vector<uint8_t> data = FloatBytes({1, 2, 3, 4, 5, 6.5f});
  const uint16_t h[2] = {F32ToF16(0.5f), F32ToF16(-2.0f)};
  const uint16_t z = static_cast<uint16_t>(Fp32ToBits(3.0f) >> 16);
  data.insert(data.end(), reinterpret_cast<const uint8_t*>(h), reinterpret_cast<const uint8_t*>(h) + 4);
  data.insert(data.end(), reinterpret_cast<const uint8_t*>(&z), reinterpret_cast<const uint8_t*>(&z) + 2);
  return Build(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
               R"("h":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},"z":{"dtype":"BF16","shape":[1],"data_offsets":[28,30]}})",
               data);
}

std::string ErrorOf(const std::vector<uint8_t>& bytes) {
  auto f = SafetensorsFile::FromBytes(bytes, "t.safetensors");
  return f.ok() ? std::string("(no error)") : f.status().message();
}

TEST(Safetensors, ReadsF32F16Bf16) {
  auto f = SafetensorsFile::FromBytes(GoodFile());
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ((*f)->tensors().size(), 3u);
  const StTensor* a = (*f)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDtype::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  auto av = (*f)->ReadF32("a", {2, 3});
  ASSERT_TRUE(av.ok());
  EXPECT_EQ(*av, (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  auto hv = (*f)->ReadF32("h");
  ASSERT_TRUE(hv.ok());
  EXPECT_EQ(*hv, (std::vector<float>{0.5f, -2.0f}));
  auto zv = (*f)->ReadF32("z");
  ASSERT_TRUE(zv.ok());
  EXPECT_EQ(*zv, (std::vector<float>{3.0f}));
  EXPECT_EQ((*f)->Find("nope"), nullptr);
}

TEST(Safetensors, ReadF32NamesShapeAndMissingTensor) {
  auto f = SafetensorsFile::FromBytes(GoodFile());
  ASSERT_TRUE(f.ok());
  auto bad_shape = (*f)->ReadF32("a", {3, 2});
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_NE(bad_shape.status().message().find("shape [2, 3], expected [3, 2]"), std::string::npos);
  auto missing = (*f)->ReadF32("b");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'b' not found"), std::string::npos);
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const std::vector<uint8_t> good = GoodFile();
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    EXPECT_FALSE(SafetensorsFile::FromBytes(cut).ok()) << "prefix of " << n << " bytes accepted";
  }
}

TEST(Safetensors, MalformedHeadersNameTheProblem) {
  const std::vector<uint8_t> d = FloatBytes({1, 2, 3, 4});
  auto has = [](const std::string& msg, const char* what) { return msg.find(what) != std::string::npos; };
  EXPECT_TRUE(has(ErrorOf(Build("{not json", d)), "not valid JSON"));
  EXPECT_TRUE(has(ErrorOf(Build("[1,2]", d)), "not a JSON object"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F8","shape":[4],"data_offsets":[0,16]}})", d)), "unsupported dtype 'F8'"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", d)), "no string dtype"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", d)), "negative"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", d)), "needs 20 bytes"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", d)), "outside"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", d)), "outside"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F32","shape":[1]}})", d)), "data_offsets"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]}})", d)),
                  "overflows"));
  EXPECT_TRUE(has(ErrorOf(Build(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", d)),
                  "overlap"));
  std::vector<uint8_t> huge = Build("{}", d);
  huge[5] = 0x7f;  // header length ~ 2^47
  EXPECT_TRUE(has(ErrorOf(huge), "exceeds"));
  std::vector<uint8_t> past = Build("{}", d);
  past[0] = 200;  // longer than the file
  EXPECT_TRUE(has(ErrorOf(past), "past the end"));
  auto i64 = SafetensorsFile::FromBytes(Build(R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", d));
  ASSERT_TRUE(i64.ok()) << i64.status().message();
  EXPECT_FALSE((*i64)->ReadF32("a").ok());
}

// Random byte flips of a good file: never a crash; what is accepted is self-consistent and readable.
TEST(Safetensors, RandomMutationsAreRejectedOrConsistent) {
  const std::vector<uint8_t> good = GoodFile();
  std::mt19937 rng(1234);
  size_t accepted = 0;
  for (int it = 0; it < 5000; ++it) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + rng() % 4;
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    auto r = SafetensorsFile::FromBytes(b);
    if (!r.ok()) {
      EXPECT_FALSE(r.status().message().empty());
      continue;
    }
    ++accepted;
    for (const StTensor& t : (*r)->tensors()) {
      EXPECT_EQ(t.bytes, t.numel() * StDtypeSize(t.dtype));
      EXPECT_LE(t.bytes, b.size());
      (void)(*r)->ReadF32(t.name);  // reads every byte of the tensor: out of bounds shows under ASan
    }
  }
  EXPECT_GT(accepted, 0u);  // flips inside the data section keep the file valid
}

TEST(Safetensors, OpenFromDiskAndMissingFile) {
  char path[] = "/tmp/chorus_st_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::vector<uint8_t> good = GoodFile();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(good.data()), good.size());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->ReadF32("a").value(), (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(good.data()), 40);
  auto cut = SafetensorsFile::Open(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find(path), std::string::npos) << cut.status().message();
  std::remove(path);
  auto missing = SafetensorsFile::Open(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  auto dir = SafetensorsFile::Open("/tmp");
  EXPECT_FALSE(dir.ok());
}

}  // namespace
}  // namespace chorus
