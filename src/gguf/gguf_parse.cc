// GgufFile::ParseAll: the GGUF v2/v3 parser and validator (layout in docs/GGUF.md).
// Invariant: every read is bounds-checked against the bytes left; every count is checked against
// what those bytes could hold before anything is allocated for it.
#include <fmt/format.h>  // fmt::format for context strings
#include <fmt/ranges.h>  // fmt::join

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "gguf/gguf.h"

namespace chorus {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
// Smallest on-disk sizes, used to reject absurd counts before allocating anything.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name len, name, n_dims, 1 dim, type, offset
constexpr uint64_t kMinArrayBytes = 4 + 8;                   // a nested array: elem type + count
constexpr uint64_t kMaxReserve = 1 << 16;                    // never reserve more elements than this up front

// A bounds-checked little-endian reader over the file's bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  Status Need(uint64_t n, std::string_view what) const {
    if (n <= remaining()) return Status::Ok();
    return Status::Error("truncated: reading {} at offset {} needs {} bytes, but only {} remain (file size {})", what,
                         pos_, n, remaining(), size_);
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    CHORUS_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  const uint8_t* Take(size_t n) {  // caller has checked Need(n)
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  // A GGUF string: uint64 length + bytes (no terminator). max_len is the format's limit for it.
  Status ReadString(std::string* out, std::string_view what, uint64_t max_len) {
    const size_t at = pos_;
    uint64_t len = 0;
    if (remaining() < sizeof(len)) return Need(sizeof(len), fmt::format("{} length", what));
    std::memcpy(&len, data_ + pos_, sizeof(len));
    pos_ += sizeof(len);
    if (len > remaining()) {
      return Status::Error("{} at offset {} claims {} bytes, but only {} bytes remain in the file (file size {})",
                           what, at, len, remaining(), size_);
    }
    if (len > max_len) return Status::Error("{} at offset {} is {} bytes long; the limit is {}", what, at, len, max_len);
    const uint8_t* p = Take(static_cast<size_t>(len));
    out->assign(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    return Status::Ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Bytes from the file made safe for a message: control bytes as \xNN, long names cut.
std::string Printable(std::string_view s, bool escape_high = false) {
  constexpr size_t kMaxShown = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || (escape_high && c >= 0x80)) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  if (s.size() > kMaxShown) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

Status ReadValueType(Cursor& c, GgufValueType* out, std::string_view what) {
  const size_t at = c.pos();
  uint32_t id = 0;
  CHORUS_RETURN_IF_ERROR(c.Read(&id, what));
  if (id >= kGgufValueTypeCount) {
    return Status::Error("unknown {} id {} at offset {} (known ids are 0..{})", what, id, at, kGgufValueTypeCount - 1);
  }
  *out = static_cast<GgufValueType>(id);
  return Status::Ok();
}

Status ParseValue(Cursor& c, GgufValueType type, int depth, GgufValue* out);

// Array body: element type, count, elements.
Status ParseArray(Cursor& c, int depth, GgufValue* out) {
  if (depth >= kGgufMaxArrayDepth) {
    return Status::Error("arrays nested more than {} deep at offset {}", kGgufMaxArrayDepth, c.pos());
  }
  GgufValueType elem;
  CHORUS_RETURN_IF_ERROR(ReadValueType(c, &elem, "array element type"));
  const size_t count_at = c.pos();
  uint64_t count = 0;
  CHORUS_RETURN_IF_ERROR(c.Read(&count, "array count"));
  const uint64_t elem_bytes = GgufValueTypeSize(elem);
  const uint64_t min_bytes = elem_bytes ? elem_bytes : (elem == GgufValueType::kString ? 8 : kMinArrayBytes);
  if (count > c.remaining() / min_bytes) {
    return Status::Error(
        "array at offset {} claims {} {} elements (at least {} bytes each), but only {} bytes remain in the file",
        count_at, count, GgufValueTypeName(elem), min_bytes, c.remaining());
  }
  if (elem_bytes) {  // numeric or bool: one copy of the bytes
    const size_t n = static_cast<size_t>(count * elem_bytes);
    const uint8_t* p = c.Take(n);
    if (elem == GgufValueType::kBool) {
      for (size_t i = 0; i < n; ++i) {
        if (p[i] > 1) return Status::Error("bool array element {} at offset {} is {}; must be 0 or 1", i, c.pos() - n + i, p[i]);
      }
    }
    *out = GgufValue::FromRaw(elem, count, std::vector<uint8_t>(p, p + n));
    return Status::Ok();
  }
  if (elem == GgufValueType::kString) {
    std::vector<std::string> items;
    items.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
    for (uint64_t i = 0; i < count; ++i) {
      std::string s;
      Status st = c.ReadString(&s, "string", std::numeric_limits<uint64_t>::max());
      if (!st.ok()) return st.Context(fmt::format("array element {} of {}", i, count));
      items.push_back(std::move(s));
    }
    *out = GgufValue::StringArray(std::move(items));
    return Status::Ok();
  }
  std::vector<GgufValue> items;  // nested arrays
  items.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
  for (uint64_t i = 0; i < count; ++i) {
    GgufValue v;
    Status st = ParseArray(c, depth + 1, &v);
    if (!st.ok()) return st.Context(fmt::format("array element {} of {}", i, count));
    items.push_back(std::move(v));
  }
  *out = GgufValue::ArrayOfArrays(std::move(items));
  return Status::Ok();
}

template <typename T>
Status ParseScalar(Cursor& c, GgufValueType type, GgufValue* out) {
  T v{};  // Read fills it or returns an error; zeroed so no build sees it read uninitialized
  CHORUS_RETURN_IF_ERROR(c.Read(&v, GgufValueTypeName(type)));
  *out = GgufValue::Of(v);
  return Status::Ok();
}

Status ParseValue(Cursor& c, GgufValueType type, int depth, GgufValue* out) {
  switch (type) {
    case GgufValueType::kUint8: return ParseScalar<uint8_t>(c, type, out);
    case GgufValueType::kInt8: return ParseScalar<int8_t>(c, type, out);
    case GgufValueType::kUint16: return ParseScalar<uint16_t>(c, type, out);
    case GgufValueType::kInt16: return ParseScalar<int16_t>(c, type, out);
    case GgufValueType::kUint32: return ParseScalar<uint32_t>(c, type, out);
    case GgufValueType::kInt32: return ParseScalar<int32_t>(c, type, out);
    case GgufValueType::kUint64: return ParseScalar<uint64_t>(c, type, out);
    case GgufValueType::kInt64: return ParseScalar<int64_t>(c, type, out);
    case GgufValueType::kFloat32: return ParseScalar<float>(c, type, out);
    case GgufValueType::kFloat64: return ParseScalar<double>(c, type, out);
    case GgufValueType::kBool: {
      const size_t at = c.pos();
      uint8_t b = 0;
      CHORUS_RETURN_IF_ERROR(c.Read(&b, "bool"));
      if (b > 1) return Status::Error("bool at offset {} is {}; must be 0 or 1", at, b);
      *out = GgufValue::Of(b != 0);
      return Status::Ok();
    }
    case GgufValueType::kString: {
      std::string s;
      CHORUS_RETURN_IF_ERROR(c.ReadString(&s, "string", std::numeric_limits<uint64_t>::max()));
      *out = GgufValue::String(std::move(s));
      return Status::Ok();
    }
    case GgufValueType::kArray: return ParseArray(c, depth, out);
  }
  return Status::Error("unknown value type id {}", static_cast<uint32_t>(type));
}

std::string DimsString(const std::vector<uint64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// One tensor info; sizes are validated here, placement (offset, overlap) by the caller.
Status ParseTensorInfo(Cursor& c, uint64_t alignment, const GgufOpenOptions& options, GgufTensor* t) {
  CHORUS_RETURN_IF_ERROR(c.ReadString(&t->name, "tensor name", kGgufMaxTensorNameBytes));
  if (t->name.empty()) return Status::Error("tensor name at offset {} is empty", c.pos() - 8);
  const std::string who = fmt::format("tensor '{}'", Printable(t->name));
  uint32_t n_dims = 0;
  CHORUS_RETURN_IF_ERROR(c.Read(&n_dims, "n_dims").Context(who));
  if (n_dims < 1 || n_dims > kGgufMaxDims) {
    return Status::Error("{} has {} dimensions; must be 1..{}", who, n_dims, kGgufMaxDims);
  }
  t->dims.resize(n_dims);
  uint64_t n = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    CHORUS_RETURN_IF_ERROR(c.Read(&t->dims[d], "dimension").Context(who));
    if (t->dims[d] == 0) return Status::Error("{} has dimension {} of size 0 (dims {})", who, d, DimsString(t->dims));
    if (__builtin_mul_overflow(n, t->dims[d], &n)) overflow = true;
  }
  constexpr uint64_t kMaxElements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (overflow || n > kMaxElements) {
    return Status::Error("{} dims {} have more elements than fit in int64 (limit {})", who, DimsString(t->dims),
                         kMaxElements);
  }
  t->n_elements = n;
  const size_t type_at = c.pos();
  uint32_t type_id = 0;
  CHORUS_RETURN_IF_ERROR(c.Read(&type_id, "ggml type").Context(who));
  const std::optional<GgmlTypeTraits> tr = GgmlTraits(type_id);
  if (!tr) return Status::Error("{} has unknown ggml type id {} (at offset {})", who, type_id, type_at);
  if (!tr->supported && !options.allow_unsupported_types) {
    return Status::Error("{} has type {} (id {}), which chorus does not support", who, tr->name, type_id);
  }
  t->type = tr->type;
  if (t->dims[0] % tr->block_elems != 0) {
    return Status::Error("{} of type {} has ne0 = {}, not a multiple of the block size {}", who, tr->name,
                         t->dims[0], tr->block_elems);
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n / tr->block_elems, uint64_t{tr->block_bytes}, &bytes) ||
      bytes > std::numeric_limits<size_t>::max()) {
    return Status::Error("{} of type {} with dims {} has a byte size that overflows 64 bits", who, tr->name,
                         DimsString(t->dims));
  }
  t->n_bytes = static_cast<size_t>(bytes);
  CHORUS_RETURN_IF_ERROR(c.Read(&t->offset, "tensor data offset").Context(who));
  if (t->offset % alignment != 0) {
    return Status::Error("{} data offset {} is not a multiple of the alignment {}", who, t->offset, alignment);
  }
  return Status::Ok();
}

}  // namespace

Status GgufFile::ParseAll(const GgufOpenOptions& options) {
  Cursor c(base_, size_);

  // Header: magic, version, tensor count, kv count.
  CHORUS_RETURN_IF_ERROR(c.Need(4, "the magic 'GGUF'"));
  const uint8_t* magic = c.Take(4);
  if (std::memcmp(magic, kMagic, 4) != 0) {
    return Status::Error("not a GGUF file: magic is '{}' (bytes {:02x} {:02x} {:02x} {:02x}), expected 'GGUF'",
                         Printable(std::string_view(reinterpret_cast<const char*>(magic), 4), true), magic[0], magic[1], magic[2], magic[3]);
  }
  CHORUS_RETURN_IF_ERROR(c.Read(&version_, "the version"));
  if (version_ == 1) return Status::Error("GGUF version 1 is not supported (need 2 or 3)");
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped >= 1 && swapped <= 3) {
      return Status::Error("GGUF file is big-endian (version field reads {:#010x}); only little-endian is supported",
                           version_);
    }
    return Status::Error("GGUF version {} is not supported (need 2 or 3)", version_);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  CHORUS_RETURN_IF_ERROR(c.Read(&n_tensors, "the tensor count"));
  CHORUS_RETURN_IF_ERROR(c.Read(&n_kv, "the metadata kv count"));
  if (n_kv > c.remaining() / kMinKvBytes) {
    return Status::Error("metadata kv count {} is absurd: {} bytes remain after the header, and each kv needs at least {}",
                         n_kv, c.remaining(), kMinKvBytes);
  }
  if (n_tensors > c.remaining() / kMinTensorInfoBytes) {
    return Status::Error(
        "tensor count {} is absurd: {} bytes remain after the header, and each tensor info needs at least {}",
        n_tensors, c.remaining(), kMinTensorInfoBytes);
  }

  // Metadata.
  metadata_.reserve(static_cast<size_t>(std::min(n_kv, kMaxReserve)));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string where = fmt::format("metadata kv {} of {}", i, n_kv);
    GgufKv kv;
    CHORUS_RETURN_IF_ERROR(c.ReadString(&kv.key, "key", kGgufMaxKeyBytes).Context(where));
    if (kv.key.empty()) return Status::Error("{}: key at offset {} is empty", where, c.pos() - 8);
    const std::string who = fmt::format("{} (key '{}')", where, Printable(kv.key));
    GgufValueType type;
    CHORUS_RETURN_IF_ERROR(ReadValueType(c, &type, "value type").Context(who));
    CHORUS_RETURN_IF_ERROR(ParseValue(c, type, 0, &kv.value).Context(who));
    auto [it, inserted] = kv_index_.emplace(kv.key, metadata_.size());
    if (!inserted) return Status::Error("duplicate metadata key '{}' (kv {} and kv {})", Printable(kv.key), it->second, i);
    metadata_.push_back(std::move(kv));
  }

  // general.alignment.
  if (const GgufValue* a = Find("general.alignment")) {
    const std::optional<uint64_t> v = a->AsUint();
    if (!v) {
      return Status::Error("general.alignment must be a non-negative integer, got {} {}", GgufValueTypeName(a->type()),
                           ToString(*a, 4));
    }
    if (*v == 0 || !std::has_single_bit(*v)) {
      return Status::Error("general.alignment is {}; it must be a nonzero power of two", *v);
    }
    alignment_ = *v;
  }

  // Tensor infos.
  tensors_.reserve(static_cast<size_t>(std::min(n_tensors, kMaxReserve)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    CHORUS_RETURN_IF_ERROR(
        ParseTensorInfo(c, alignment_, options, &t).Context(fmt::format("tensor info {} of {}", i, n_tensors)));
    auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
    if (!inserted) return Status::Error("duplicate tensor name '{}' (tensor {} and tensor {})", Printable(t.name), it->second, i);
    tensors_.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment.
  const uint64_t pad = (alignment_ - c.pos() % alignment_) % alignment_;
  if (pad > std::numeric_limits<size_t>::max() - c.pos()) {
    return Status::Error("data section offset overflows with alignment {}", alignment_);
  }
  data_offset_ = c.pos() + static_cast<size_t>(pad);
  if (tensors_.empty()) return Status::Ok();
  if (data_offset_ > size_) {
    return Status::Error("data section would start at offset {}, past the end of the file (size {}), but {} tensors need data",
                         data_offset_, size_, tensors_.size());
  }
  const uint64_t data_size = size_ - data_offset_;
  for (GgufTensor& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return Status::Error(
          "tensor '{}' data ({} bytes at data offset {}) lies past the end of the file: the data section holds {} "
          "bytes (starts at offset {}, file size {})",
          Printable(t.name), t.n_bytes, t.offset, data_size, data_offset_, size_);
    }
    t.data = base_ + data_offset_ + t.offset;
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& prev = tensors_[order[k - 1]];
    const GgufTensor& cur = tensors_[order[k]];
    if (prev.offset + prev.n_bytes > cur.offset) {
      return Status::Error("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section", Printable(prev.name),
                           prev.offset, prev.offset + prev.n_bytes, Printable(cur.name), cur.offset, cur.offset + cur.n_bytes);
    }
  }
  return Status::Ok();
}

}  // namespace chorus
