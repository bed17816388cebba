// GgufValue: one GGUF metadata value (scalar, string or array; arrays may nest).
// Invariant: type() says which payload is held; an array holds exactly count elements of elem_type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace chorus {

// Value type ids as stored on disk (gguf_type in the GGUF spec).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kGgufValueTypeCount = 13;  // ids 0..12 are valid

// "uint8", "int8", ..., "float64"; "unknown" for an id outside the enum.
std::string_view GgufValueTypeName(GgufValueType t);
// Bytes one element takes on disk for fixed-size types; 0 for string and array.
size_t GgufValueTypeSize(GgufValueType t);
bool IsGgufInteger(GgufValueType t);
bool IsGgufFloat(GgufValueType t);

// The GGUF type of a C++ scalar: uint8_t → kUint8, ..., float → kFloat32, double → kFloat64, bool → kBool.
template <typename T>
constexpr GgufValueType GgufTypeOf() {
  if constexpr (std::is_same_v<T, bool>) return GgufValueType::kBool;
  else if constexpr (std::is_same_v<T, uint8_t>) return GgufValueType::kUint8;
  else if constexpr (std::is_same_v<T, int8_t>) return GgufValueType::kInt8;
  else if constexpr (std::is_same_v<T, uint16_t>) return GgufValueType::kUint16;
  else if constexpr (std::is_same_v<T, int16_t>) return GgufValueType::kInt16;
  else if constexpr (std::is_same_v<T, uint32_t>) return GgufValueType::kUint32;
  else if constexpr (std::is_same_v<T, int32_t>) return GgufValueType::kInt32;
  else if constexpr (std::is_same_v<T, uint64_t>) return GgufValueType::kUint64;
  else if constexpr (std::is_same_v<T, int64_t>) return GgufValueType::kInt64;
  else if constexpr (std::is_same_v<T, float>) return GgufValueType::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return GgufValueType::kFloat64;
  else static_assert(sizeof(T) == 0, "no GGUF type for this C++ type");
}

struct GgufArray;

class GgufValue {
 public:
  GgufValue();  // uint8 0
  ~GgufValue();
  GgufValue(GgufValue&&) noexcept;
  GgufValue& operator=(GgufValue&&) noexcept;
  GgufValue(const GgufValue& o);  // deep copy
  GgufValue& operator=(const GgufValue& o);

  // Builders (the reader, the writer and tests).
  template <typename T>
  static GgufValue Of(T v) {
    constexpr GgufValueType t = GgufTypeOf<T>();
    if constexpr (t == GgufValueType::kBool) return FromScalar(t, v);
    else if constexpr (std::is_floating_point_v<T>) return FromScalar(t, static_cast<double>(v));
    else if constexpr (std::is_signed_v<T>) return FromScalar(t, static_cast<int64_t>(v));
    else return FromScalar(t, static_cast<uint64_t>(v));
  }
  static GgufValue String(std::string s);
  // An array of numeric or bool elements.
  template <typename T>
  static GgufValue Array(std::span<const T> items) {
    std::vector<uint8_t> raw(items.size() * sizeof(T));
    for (size_t i = 0; i < items.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>) raw[i] = items[i] ? 1 : 0;
      else std::memcpy(raw.data() + i * sizeof(T), &items[i], sizeof(T));  // host is little-endian
    }
    return FromRaw(GgufTypeOf<T>(), items.size(), std::move(raw));
  }
  template <typename T>
  static GgufValue Array(const std::vector<T>& items) { return Array(std::span<const T>(items)); }
  static GgufValue StringArray(std::vector<std::string> items);
  // An array whose elements are arrays (of any element types, each its own).
  static GgufValue ArrayOfArrays(std::vector<GgufValue> items);
  // Numeric/bool array from raw little-endian bytes: (count × GgufValueTypeSize(elem)) bytes.
  static GgufValue FromRaw(GgufValueType elem, uint64_t count, std::vector<uint8_t> raw);
  static GgufValue FromScalar(GgufValueType t, uint64_t v);
  static GgufValue FromScalar(GgufValueType t, int64_t v);
  static GgufValue FromScalar(GgufValueType t, double v);
  static GgufValue FromScalar(GgufValueType t, bool v);

  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::kArray; }

  // Typed views; nullopt when the type does not fit.
  std::optional<uint64_t> AsUint() const;  // any integer type holding a non-negative value
  std::optional<int64_t> AsInt() const;    // any integer type whose value fits int64
  std::optional<double> AsFloat() const;   // float32, float64 and any integer type
  std::optional<bool> AsBool() const;      // bool only
  std::optional<std::string_view> AsString() const;  // string only
  const GgufArray* array() const { return array_.get(); }  // nullptr unless is_array()

 private:
  GgufValueType type_ = GgufValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool> scalar_ = uint64_t{0};  // by type_'s kind
  std::string str_;                   // kString
  std::unique_ptr<GgufArray> array_;  // kArray
};

struct GgufArray {
  GgufValueType elem_type = GgufValueType::kUint8;
  uint64_t count = 0;
  std::vector<uint8_t> raw;          // (count × GgufValueTypeSize(elem_type)): numeric/bool elements, LE
  std::vector<std::string> strings;  // (count) when elem_type == kString
  std::vector<GgufValue> arrays;     // (count) when elem_type == kArray

  // Element i (< count) as a scalar value; for elem_type kArray returns a copy of arrays[i].
  GgufValue At(uint64_t i) const;
  // All elements as int64 / double; nullopt unless every element is an integer that fits
  // (ToInts) or the elements are numeric (ToDoubles).
  std::optional<std::vector<int64_t>> ToInts() const;
  std::optional<std::vector<double>> ToDoubles() const;
};

// One line for an inspect tool: 42, -1.5, true, "text" (escaped), [1, 2, 3, ... (+N more)].
// Arrays show at most max_array_items elements at each nesting level.
std::string ToString(const GgufValue& v, size_t max_array_items);

}  // namespace chorus
