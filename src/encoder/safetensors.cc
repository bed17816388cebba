// SafetensorsFile: mmap + header validation (see safetensors.h for the format and invariants).
#include "encoder/safetensors.h"

#include <fcntl.h>     // open
#include <sys/mman.h>  // mmap, munmap
#include <sys/stat.h>  // fstat
#include <unistd.h>    // close

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/fp16.h"  // F16ToF32

namespace chorus {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

struct DtypeInfo {
  const char* name;
  StDtype type;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"F64", StDtype::kF64, 8}, {"F32", StDtype::kF32, 4}, {"F16", StDtype::kF16, 2},
    {"BF16", StDtype::kBF16, 2}, {"I64", StDtype::kI64, 8}, {"I32", StDtype::kI32, 4},
    {"I16", StDtype::kI16, 2}, {"I8", StDtype::kI8, 1}, {"U8", StDtype::kU8, 1},
    {"BOOL", StDtype::kBool, 1},
};

}  // namespace

const char* StDtypeName(StDtype t) {
  for (const DtypeInfo& d : kDtypes) if (d.type == t) return d.name;
  return "?";
}
size_t StDtypeSize(StDtype t) {
  for (const DtypeInfo& d : kDtypes) if (d.type == t) return d.size;
  return 0;
}

size_t StTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open safetensors file '{}': {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Error("safetensors path '{}' is not a regular file", path);
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return Status::Error("cannot mmap safetensors file '{}' ({} bytes): {}", path, f->size_, std::strerror(e));
    }
    f->map_ = p;
    f->base_ = static_cast<const uint8_t*>(p);
  }
  close(fd);
  CHORUS_RETURN_IF_ERROR(f->Parse());
  return f;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::vector<uint8_t> bytes,
                                                                    const std::string& label) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = label;
  f->owned_ = std::move(bytes);
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  CHORUS_RETURN_IF_ERROR(f->Parse());
  return f;
}

Status SafetensorsFile::Parse() {
  const std::string& p = path_;
  if (size_ < 8) return Status::Error("safetensors '{}': file is {} bytes, too short for the header length", p, size_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
  if (n > kMaxHeaderBytes) return Status::Error("safetensors '{}': header length {} exceeds the 100 MiB limit", p, n);
  if (n > size_ - 8) {
    return Status::Error("safetensors '{}': header length {} runs past the end of the file ({} bytes): truncated?",
                         p, n, size_);
  }
  const char* hdr = reinterpret_cast<const char*>(base_ + 8);
  nlohmann::json j = nlohmann::json::parse(hdr, hdr + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Error("safetensors '{}': header is not valid JSON", p);
  if (!j.is_object()) return Status::Error("safetensors '{}': header is not a JSON object", p);
  const uint8_t* data = base_ + 8 + n;
  const size_t data_size = size_ - 8 - n;
  tensors_.clear();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) return Status::Error("safetensors '{}': __metadata__ is not an object", p);
      continue;
    }
    const nlohmann::json& t = *it;
    if (!t.is_object()) return Status::Error("safetensors '{}': entry '{}' is not an object", p, name);
    if (!t.contains("dtype") || !t["dtype"].is_string())
      return Status::Error("safetensors '{}': tensor '{}' has no string dtype", p, name);
    const std::string dt = t["dtype"].get<std::string>();
    const DtypeInfo* info = nullptr;
    for (const DtypeInfo& d : kDtypes) if (dt == d.name) info = &d;
    if (info == nullptr) return Status::Error("safetensors '{}': tensor '{}' has unsupported dtype '{}'", p, name, dt);
    if (!t.contains("shape") || !t["shape"].is_array())
      return Status::Error("safetensors '{}': tensor '{}' has no shape array", p, name);
    StTensor st;
    st.name = name;
    st.dtype = info->type;
    size_t numel = 1;
    for (const nlohmann::json& d : t["shape"]) {
      if (!d.is_number_unsigned()) return Status::Error("safetensors '{}': tensor '{}' has a non-integer or negative dimension", p, name);
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t{1} << 48)) return Status::Error("safetensors '{}': tensor '{}' dimension {} is absurd", p, name, v);
      if (v != 0 && numel > SIZE_MAX / v) return Status::Error("safetensors '{}': tensor '{}' element count overflows", p, name);
      numel *= v;
      st.shape.push_back(static_cast<int64_t>(v));
    }
    if (numel > SIZE_MAX / info->size) return Status::Error("safetensors '{}': tensor '{}' byte size overflows", p, name);
    const nlohmann::json* offs = t.contains("data_offsets") ? &t["data_offsets"] : nullptr;
    if (offs == nullptr || !offs->is_array() || offs->size() != 2 || !(*offs)[0].is_number_unsigned() ||
        !(*offs)[1].is_number_unsigned())
      return Status::Error("safetensors '{}': tensor '{}' needs data_offsets [begin, end] of non-negative integers", p, name);
    const uint64_t b = (*offs)[0].get<uint64_t>(), e = (*offs)[1].get<uint64_t>();
    if (b > e || e > data_size)
      return Status::Error("safetensors '{}': tensor '{}' data_offsets [{}, {}] outside the {}-byte data section (truncated?)",
                           p, name, b, e, data_size);
    if (e - b != numel * info->size)
      return Status::Error("safetensors '{}': tensor '{}' {} {} needs {} bytes but data_offsets span {}", p, name, dt,
                           ShapeString(st.shape), numel * info->size, e - b);
    st.data = data + b;
    st.bytes = e - b;
    tensors_.push_back(std::move(st));
  }
  // No two tensors may share bytes (zero-size tensors excepted).
  std::vector<std::pair<const uint8_t*, const StTensor*>> order;
  for (const StTensor& t : tensors_) if (t.bytes > 0) order.push_back({t.data, &t});
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    const StTensor* prev = order[i - 1].second;
    if (prev->data + prev->bytes > order[i].first)
      return Status::Error("safetensors '{}': tensors '{}' and '{}' overlap", p, prev->name, order[i].second->name);
  }
  return Status::Ok();
}

const StTensor* SafetensorsFile::Find(std::string_view name) const {
  for (const StTensor& t : tensors_) if (t.name == name) return &t;
  return nullptr;
}

Result<std::vector<float>> SafetensorsFile::ReadF32(std::string_view name, const std::vector<int64_t>& shape) const {
  const StTensor* t = Find(name);
  if (t == nullptr) return Status::Error("safetensors '{}': tensor '{}' not found", path_, name);
  if (!shape.empty() && t->shape != shape)
    return Status::Error("safetensors '{}': tensor '{}' has shape {}, expected {}", path_, name, ShapeString(t->shape),
                         ShapeString(shape));
  const size_t n = t->numel();
  std::vector<float> out(n);
  switch (t->dtype) {
    case StDtype::kF32:
      std::memcpy(out.data(), t->data, n * 4);
      break;
    case StDtype::kF16:
    case StDtype::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        out[i] = t->dtype == StDtype::kF16 ? F16ToF32(h) : Bf16ToF32(h);
      }
      break;
    default:
      return Status::Error("safetensors '{}': tensor '{}' is {}, expected F32, F16 or BF16", path_, name,
                           StDtypeName(t->dtype));
  }
  return out;
}

}  // namespace chorus
