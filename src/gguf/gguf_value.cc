// GgufValue builders, typed views and the one-line formatter.
#include "gguf/gguf_value.h"

#include <fmt/format.h>  // fmt::format for ToString

#include <bit>
#include <limits>

namespace chorus {

static_assert(std::endian::native == std::endian::little, "GGUF values are copied as little-endian bytes");

std::string_view GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

size_t GgufValueTypeSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

bool IsGgufInteger(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: return true;
    default: return false;
  }
}

bool IsGgufFloat(GgufValueType t) { return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64; }

// ---- GgufValue special members ----

GgufValue::GgufValue() = default;
GgufValue::~GgufValue() = default;
GgufValue::GgufValue(GgufValue&&) noexcept = default;
GgufValue& GgufValue::operator=(GgufValue&&) noexcept = default;

GgufValue::GgufValue(const GgufValue& o)
    : type_(o.type_), scalar_(o.scalar_), str_(o.str_),
      array_(o.array_ ? std::make_unique<GgufArray>(*o.array_) : nullptr) {}

GgufValue& GgufValue::operator=(const GgufValue& o) {
  if (this != &o) {
    GgufValue copy(o);
    *this = std::move(copy);
  }
  return *this;
}

// ---- builders ----

GgufValue GgufValue::FromScalar(GgufValueType t, uint64_t v) {
  GgufValue out;
  out.type_ = t;
  out.scalar_ = v;
  return out;
}
GgufValue GgufValue::FromScalar(GgufValueType t, int64_t v) {
  GgufValue out;
  out.type_ = t;
  out.scalar_ = v;
  return out;
}
GgufValue GgufValue::FromScalar(GgufValueType t, double v) {
  GgufValue out;
  out.type_ = t;
  out.scalar_ = v;
  return out;
}
GgufValue GgufValue::FromScalar(GgufValueType t, bool v) {
  GgufValue out;
  out.type_ = t;
  out.scalar_ = v;
  return out;
}

GgufValue GgufValue::String(std::string s) {
  GgufValue out;
  out.type_ = GgufValueType::kString;
  out.str_ = std::move(s);
  return out;
}

GgufValue GgufValue::FromRaw(GgufValueType elem, uint64_t count, std::vector<uint8_t> raw) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.array_ = std::make_unique<GgufArray>();
  out.array_->elem_type = elem;
  out.array_->count = count;
  out.array_->raw = std::move(raw);
  return out;
}

GgufValue GgufValue::StringArray(std::vector<std::string> items) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.array_ = std::make_unique<GgufArray>();
  out.array_->elem_type = GgufValueType::kString;
  out.array_->count = items.size();
  out.array_->strings = std::move(items);
  return out;
}

GgufValue GgufValue::ArrayOfArrays(std::vector<GgufValue> items) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.array_ = std::make_unique<GgufArray>();
  out.array_->elem_type = GgufValueType::kArray;
  out.array_->count = items.size();
  out.array_->arrays = std::move(items);
  return out;
}

// ---- typed views ----

std::optional<uint64_t> GgufValue::AsUint() const {
  if (!IsGgufInteger(type_)) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&scalar_)) return *u;
  if (const auto* i = std::get_if<int64_t>(&scalar_)) {
    if (*i >= 0) return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (!IsGgufInteger(type_)) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(&scalar_)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&scalar_)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::AsFloat() const {
  if (IsGgufFloat(type_)) {
    if (const auto* f = std::get_if<double>(&scalar_)) return *f;
    return std::nullopt;
  }
  if (!IsGgufInteger(type_)) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(&scalar_)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&scalar_)) return static_cast<double>(*u);
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufValueType::kBool) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&scalar_)) return *b;
  return std::nullopt;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufValueType::kString) return std::nullopt;
  return std::string_view(str_);
}

// ---- GgufArray ----

namespace {

template <typename T>
T LoadAt(const std::vector<uint8_t>& raw, uint64_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

GgufValue GgufArray::At(uint64_t i) const {
  const size_t size = GgufValueTypeSize(elem_type);
  if (i >= count) return GgufValue();
  if (elem_type == GgufValueType::kString) return i < strings.size() ? GgufValue::String(strings[i]) : GgufValue();
  if (elem_type == GgufValueType::kArray) return i < arrays.size() ? arrays[i] : GgufValue();
  if (size == 0 || (i + 1) * size > raw.size()) return GgufValue();
  switch (elem_type) {
    case GgufValueType::kUint8: return GgufValue::Of(LoadAt<uint8_t>(raw, i));
    case GgufValueType::kInt8: return GgufValue::Of(LoadAt<int8_t>(raw, i));
    case GgufValueType::kUint16: return GgufValue::Of(LoadAt<uint16_t>(raw, i));
    case GgufValueType::kInt16: return GgufValue::Of(LoadAt<int16_t>(raw, i));
    case GgufValueType::kUint32: return GgufValue::Of(LoadAt<uint32_t>(raw, i));
    case GgufValueType::kInt32: return GgufValue::Of(LoadAt<int32_t>(raw, i));
    case GgufValueType::kUint64: return GgufValue::Of(LoadAt<uint64_t>(raw, i));
    case GgufValueType::kInt64: return GgufValue::Of(LoadAt<int64_t>(raw, i));
    case GgufValueType::kFloat32: return GgufValue::Of(LoadAt<float>(raw, i));
    case GgufValueType::kFloat64: return GgufValue::Of(LoadAt<double>(raw, i));
    case GgufValueType::kBool: return GgufValue::Of(raw[i] != 0);
    default: return GgufValue();
  }
}

std::optional<std::vector<int64_t>> GgufArray::ToInts() const {
  if (!IsGgufInteger(elem_type) || count * GgufValueTypeSize(elem_type) != raw.size()) return std::nullopt;
  std::vector<int64_t> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    std::optional<int64_t> v = At(i).AsInt();
    if (!v) return std::nullopt;
    out[i] = *v;
  }
  return out;
}

std::optional<std::vector<double>> GgufArray::ToDoubles() const {
  const bool numeric = IsGgufInteger(elem_type) || IsGgufFloat(elem_type);
  if (!numeric || count * GgufValueTypeSize(elem_type) != raw.size()) return std::nullopt;
  std::vector<double> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    std::optional<double> v = At(i).AsFloat();
    if (!v) return std::nullopt;
    out[i] = *v;
  }
  return out;
}

// ---- ToString ----

namespace {

void AppendQuoted(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

void Append(std::string& out, const GgufValue& v, size_t max_items) {
  switch (v.type()) {
    case GgufValueType::kString: AppendQuoted(out, v.AsString().value_or("")); return;
    case GgufValueType::kBool: out += v.AsBool().value_or(false) ? "true" : "false"; return;
    case GgufValueType::kFloat32: out += fmt::format("{}", static_cast<float>(v.AsFloat().value_or(0))); return;
    case GgufValueType::kFloat64: out += fmt::format("{}", v.AsFloat().value_or(0)); return;
    case GgufValueType::kArray: {
      const GgufArray* a = v.array();
      if (!a) {
        out += "[]";
        return;
      }
      out += '[';
      const uint64_t shown = std::min<uint64_t>(a->count, max_items);
      for (uint64_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        if (a->elem_type == GgufValueType::kArray && i < a->arrays.size()) Append(out, a->arrays[i], max_items);
        else Append(out, a->At(i), max_items);
      }
      if (shown < a->count) out += fmt::format("{}... (+{} more)", shown ? ", " : "", a->count - shown);
      out += ']';
      return;
    }
    default:
      if (auto i = v.AsInt()) out += fmt::format("{}", *i);
      else if (auto u = v.AsUint()) out += fmt::format("{}", *u);
      return;
  }
}

}  // namespace

std::string ToString(const GgufValue& v, size_t max_array_items) {
  std::string out;
  Append(out, v, max_array_items);
  return out;
}

}  // namespace chorus
