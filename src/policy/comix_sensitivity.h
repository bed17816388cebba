// Measured sensitivity of a model's KV to each (layer, side, width): the mean KL divergence of the
// next-token distribution against f16 KV when only that layer's keys (or values) are stored at that
// width and everything else stays f16 (`chorus eval sensitivity` measures it over a text with
// LayerProbePolicy). The allocator's "measured" ranking (ComixOptions::measured) takes these as the
// items' errors: the end-to-end error of a side, which the one-head estimates (comix_bound.h) rank
// badly (docs/results/allocator.md: keys' errors propagate through every later layer).
// Invariant: kld holds n_layer × 2 × bits.size() values, bits ascending, each of {2, 3, 4, 8}.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/kv_format.h"          // KvSide
#include "kv/precision_policy.h"   // PrecisionPolicy
#include "policy/comix_bound.h"    // ComixFamily
#include "util/status.h"

namespace chorus {

struct ComixSensitivity {
  ComixFamily family = ComixFamily::kKivi;
  size_t n_layer = 0;
  std::vector<int> bits;    // widths measured, ascending
  std::vector<double> kld;  // (layer, side: K then V, width index)
  std::string source;       // what it was measured on (text, chunks, model), for reports

  size_t Index(size_t layer, KvSide side, size_t width) const {
    return (layer * 2 + (side == KvSide::kValue ? 1 : 0)) * bits.size() + width;
  }
  // The measured KLD of (layer, side) at `b` bits; -1 when that width was not measured.
  double At(size_t layer, KvSide side, int b) const;
  bool HasWidth(int b) const { return std::find(bits.begin(), bits.end(), b) != bits.end(); }
  const char* family_name() const { return family == ComixFamily::kKivi ? "kivi" : "tq"; }
  // Geometry, widths and values are consistent (names what is not).
  Status Check() const;
};

// The table's file (JSON: family, bits, n_layer, source, layers[i].k / .v one KLD per width, then any
// `extra` numbers, e.g. how it was measured): written by `chorus eval sensitivity -o FILE`, read by every
// --comix-sensitivity. Errors name the file and what is wrong.
Status SaveComixSensitivity(const ComixSensitivity& table, const std::string& path,
                            const std::vector<std::pair<std::string, double>>& extra = {});
Result<std::shared_ptr<const ComixSensitivity>> LoadComixSensitivity(const std::string& path);
// The same from the table's JSON text; `name` names it in errors.
Result<std::shared_ptr<const ComixSensitivity>> ParseComixSensitivity(std::string_view json_text,
                                                                      const std::string& name);
// Where `chorus calibrate` caches a model's table, next to the model file and keyed by its
// fingerprint (engine/model_fingerprint.h) and family: MODEL.chorus-FAMILY-FINGERPRINT.json.
std::string CalibrationTablePath(const std::string& model_path, uint64_t model_fingerprint, ComixFamily family);

// The tables the repository ships for its supported models (data/calibration/FAMILY-FINGERPRINT.json,
// compiled in by src/policy/CMakeLists.txt), and the one for a model's fingerprint and family.
struct ShippedCalibrationTable {
  const char* name;  // "FAMILY-FINGERPRINT", e.g. "kivi-b7ea23ef05c5ffe0"
  const char* json;
};
std::span<const ShippedCalibrationTable> ShippedCalibrationTables();
const ShippedCalibrationTable* FindShippedCalibrationTable(uint64_t model_fingerprint, ComixFamily family);

// The probe: every block f16 except `side` of `layer`, which gets `format` (the sink blocks stay f16,
// as under every compressed policy).
class LayerProbePolicy : public PrecisionPolicy {
 public:
  LayerProbePolicy(size_t layer, KvSide side, KvFormat format, size_t sink_blocks)
      : layer_(layer), side_(side), format_(format), sink_blocks_(sink_blocks) {}
  BlockFormats FormatFor(const BlockInfo& info) override;

 private:
  size_t layer_;
  KvSide side_;
  KvFormat format_;
  size_t sink_blocks_;
};

}  // namespace chorus
