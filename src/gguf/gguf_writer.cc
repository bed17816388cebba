// GgufWriter: serializes header, kvs, tensor infos and the aligned data section (layout in docs/GGUF.md).
#include "gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus {
namespace {

class Out {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));  // host is little-endian (static_assert in gguf_value.cc)
  }
  void PutBytes(const uint8_t* p, size_t n) { bytes_.insert(bytes_.end(), p, p + n); }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    PutBytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  void PadTo(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

void PutArrayBody(Out& out, const GgufArray& a);

// The integer payload as 64 bits (two's complement for negatives); narrowed by the caller.
uint64_t IntBits(const GgufValue& v) {
  if (auto u = v.AsUint()) return *u;
  return static_cast<uint64_t>(v.AsInt().value_or(0));
}

void PutValue(Out& out, const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8: out.Put(static_cast<uint8_t>(IntBits(v))); break;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: out.Put(static_cast<uint16_t>(IntBits(v))); break;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32: out.Put(static_cast<uint32_t>(IntBits(v))); break;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: out.Put(IntBits(v)); break;
    case GgufValueType::kFloat32: out.Put(static_cast<float>(v.AsFloat().value_or(0))); break;
    case GgufValueType::kFloat64: out.Put(v.AsFloat().value_or(0)); break;
    case GgufValueType::kBool: out.Put(static_cast<uint8_t>(v.AsBool().value_or(false) ? 1 : 0)); break;
    case GgufValueType::kString: {
      const std::string_view s = *v.AsString();
      out.Put<uint64_t>(s.size());
      out.PutBytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
      break;
    }
    case GgufValueType::kArray:
      if (v.array()) PutArrayBody(out, *v.array());
      else {
        out.Put(static_cast<uint32_t>(GgufValueType::kUint8));
        out.Put<uint64_t>(0);
      }
      break;
  }
}

void PutArrayBody(Out& out, const GgufArray& a) {
  out.Put(static_cast<uint32_t>(a.elem_type));
  out.Put<uint64_t>(a.count);
  if (a.elem_type == GgufValueType::kString) {
    for (const std::string& s : a.strings) out.PutString(s);
  } else if (a.elem_type == GgufValueType::kArray) {
    for (const GgufValue& v : a.arrays) PutValue(out, v);
  } else {
    out.PutBytes(a.raw.data(), a.raw.size());
  }
}

}  // namespace

GgufWriter::GgufWriter(Options options) : options_(options) {
  if (options_.alignment != 32) SetScalar<uint32_t>("general.alignment", options_.alignment);
}

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (Kv& kv : kvs_) {
    if (kv.key == key && kv.value) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(Kv{.key = key, .value = std::move(value), .raw_type = 0, .raw_payload = {}});
}

void GgufWriter::SetRaw(const std::string& key, uint32_t type_id, std::vector<uint8_t> payload) {
  kvs_.push_back(Kv{.key = key, .value = std::nullopt, .raw_type = type_id, .raw_payload = std::move(payload)});
}

void GgufWriter::AddTensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims,
                           std::vector<uint8_t> bytes) {
  tensors_.push_back(Tensor{.name = name,
                            .type_id = static_cast<uint32_t>(type),
                            .dims = std::move(dims),
                            .bytes = std::move(bytes),
                            .raw_offset = std::nullopt});
}

void GgufWriter::AddRawTensorInfo(const std::string& name, uint32_t type_id, std::vector<uint64_t> dims,
                                  uint64_t offset) {
  tensors_.push_back(Tensor{.name = name, .type_id = type_id, .dims = std::move(dims), .bytes = {}, .raw_offset = offset});
}

std::vector<uint8_t> GgufWriter::ToBytes() const {
  const uint64_t alignment = options_.alignment ? options_.alignment : 1;
  Out out;
  out.PutBytes(reinterpret_cast<const uint8_t*>("GGUF"), 4);
  out.Put<uint32_t>(options_.version);
  out.Put<uint64_t>(tensors_.size());
  out.Put<uint64_t>(kvs_.size());
  for (const Kv& kv : kvs_) {
    out.PutString(kv.key);
    if (kv.value) {
      out.Put(static_cast<uint32_t>(kv.value->type()));
      PutValue(out, *kv.value);
    } else {
      out.Put<uint32_t>(kv.raw_type);
      out.PutBytes(kv.raw_payload.data(), kv.raw_payload.size());
    }
  }
  // Offsets of data-carrying tensors: packed in order, each at an aligned offset.
  uint64_t next = 0;
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors_) {
    if (t.raw_offset) {
      offsets.push_back(*t.raw_offset);
      continue;
    }
    offsets.push_back(next);
    next += (t.bytes.size() + alignment - 1) / alignment * alignment;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    out.PutString(t.name);
    out.Put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) out.Put<uint64_t>(d);
    out.Put<uint32_t>(t.type_id);
    out.Put<uint64_t>(offsets[i]);
  }
  out.PadTo(alignment);
  for (const Tensor& t : tensors_) {
    if (t.raw_offset) continue;
    out.PutBytes(t.bytes.data(), t.bytes.size());
    out.PadTo(alignment);
  }
  return std::move(out.bytes());
}

Status GgufWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> bytes = ToBytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::Error("cannot create '{}': {}", path, std::strerror(errno));
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !closed) return Status::Error("cannot write {} bytes to '{}'", bytes.size(), path);
  return Status::Ok();
}

}  // namespace chorus
