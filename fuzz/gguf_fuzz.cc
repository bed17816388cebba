// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch every accessor.
// Invariant checked: an accepted file's tensors lie inside it and are disjoint, and a writer
// round trip of an accepted file is accepted again with equal metadata.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "gguf/gguf.h"         // GgufFile
#include "gguf/gguf_writer.h"  // GgufWriter (round trip)

namespace chorus {
namespace {

#define FUZZ_ASSERT(cond)    \
  do {                       \
    if (!(cond)) abort();    \
  } while (0)

void TouchValue(const GgufValue& v) {
  (void)ToString(v, 8);
  (void)v.AsUint();
  (void)v.AsInt();
  (void)v.AsFloat();
  (void)v.AsBool();
  (void)v.AsString();
  if (const GgufArray* a = v.array()) {
    if (a->count > 0) {
      (void)ToString(a->At(0), 2);
      (void)ToString(a->At(a->count - 1), 2);
    }
    (void)a->At(a->count);  // out of range: a default value, never a read
    (void)a->ToInts();
    (void)a->ToDoubles();
    for (const GgufValue& inner : a->arrays) TouchValue(inner);
  }
}

void Exercise(const GgufFile& f) {
  FUZZ_ASSERT(f.version() == 2 || f.version() == 3);
  FUZZ_ASSERT(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0);
  for (const GgufKv& kv : f.metadata()) {
    FUZZ_ASSERT(f.Find(kv.key) == &kv.value);
    (void)f.GetUint(kv.key);
    (void)f.GetInt(kv.key);
    (void)f.GetFloat(kv.key);
    (void)f.GetBool(kv.key);
    (void)f.GetString(kv.key);
    (void)f.GetStringArray(kv.key);
    (void)f.GetI32Array(kv.key);
    (void)f.GetI64Array(kv.key);
    (void)f.GetF32Array(kv.key);
    TouchValue(kv.value);
  }
  uint64_t sum = 0;
  for (const GgufTensor& t : f.tensors()) {
    FUZZ_ASSERT(f.FindTensor(t.name) == &t);
    FUZZ_ASSERT(t.n_bytes > 0 && t.data != nullptr);
    FUZZ_ASSERT(t.offset % f.alignment() == 0);
    FUZZ_ASSERT(f.data_offset() + t.offset + t.n_bytes <= f.file_size());
    sum += t.data[0] + t.data[t.n_bytes - 1];  // ASan checks both ends are inside the buffer
  }
  (void)sum;
}

// Rewrite an accepted file with GgufWriter and parse it again: same keys, values and tensors.
void RoundTrip(const GgufFile& f) {
  if (f.alignment() > 4096) return;  // the writer would pad by up to the alignment
  GgufWriter w({.version = f.version(), .alignment = static_cast<uint32_t>(f.alignment())});
  for (const GgufKv& kv : f.metadata()) w.Set(kv.key, kv.value);
  for (const GgufTensor& t : f.tensors()) {
    w.AddTensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  auto again = GgufFile::FromBytes(w.ToBytes(), {.allow_unsupported_types = true});
  FUZZ_ASSERT(again.ok());
  const GgufFile& g = **again;
  FUZZ_ASSERT(g.metadata().size() == f.metadata().size());
  for (const GgufKv& kv : f.metadata()) {
    const GgufValue* v = g.Find(kv.key);
    FUZZ_ASSERT(v != nullptr && ToString(*v, 1 << 20) == ToString(kv.value, 1 << 20));
  }
  FUZZ_ASSERT(g.tensors().size() == f.tensors().size());
  for (const GgufTensor& t : f.tensors()) {
    const GgufTensor* u = g.FindTensor(t.name);
    FUZZ_ASSERT(u != nullptr && u->type == t.type && u->dims == t.dims && u->n_bytes == t.n_bytes);
  }
}

}  // namespace
}  // namespace chorus

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using chorus::GgufFile;
  std::vector<uint8_t> bytes(data, data + size);
  auto strict = GgufFile::FromBytes(bytes);
  auto lenient = GgufFile::FromBytes(std::move(bytes), {.allow_unsupported_types = true});
  if (strict.ok()) FUZZ_ASSERT(lenient.ok());  // the option only ever accepts more
  if (!lenient.ok()) {
    FUZZ_ASSERT(!lenient.status().message().empty());
    return 0;
  }
  chorus::Exercise(**lenient);
  chorus::RoundTrip(**lenient);
  return 0;
}
