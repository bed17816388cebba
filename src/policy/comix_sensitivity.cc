// ComixSensitivity lookups and the one-layer probe policy.
#include "policy/comix_sensitivity.h"

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace chorus {

double ComixSensitivity::At(size_t layer, KvSide side, int b) const {
  for (size_t w = 0; w < bits.size(); ++w)
    if (bits[w] == b && layer < n_layer) return kld[Index(layer, side, w)];
  return -1;
}

Status ComixSensitivity::Check() const {
  if (n_layer == 0 || bits.empty()) return Status::Error("sensitivity table: no layers or no widths");
  for (size_t w = 0; w < bits.size(); ++w) {
    const int b = bits[w];
    if (b != 2 && b != 3 && b != 4 && b != 8)
      return Status::Error("sensitivity table: {} is not a width (valid: 2, 3, 4, 8)", b);
    if (w > 0 && b <= bits[w - 1]) return Status::Error("sensitivity table: widths must be ascending");
  }
  if (kld.size() != n_layer * 2 * bits.size())
    return Status::Error("sensitivity table: {} values for {} layers x 2 sides x {} widths", kld.size(), n_layer,
                         bits.size());
  for (double x : kld)
    if (!std::isfinite(x) || x < 0) return Status::Error("sensitivity table: a value is negative or not finite");
  return Status::Ok();
}

BlockFormats LayerProbePolicy::FormatFor(const BlockInfo& info) {
  BlockFormats f;  // f16 / f16
  if (info.layer != layer_ || info.first_pos < sink_blocks_ * kBlockTokens) return f;
  (side_ == KvSide::kKey ? f.k : f.v) = format_;
  return f;
}

Status SaveComixSensitivity(const ComixSensitivity& t, const std::string& path,
                            const std::vector<std::pair<std::string, double>>& extra) {
  CHORUS_RETURN_IF_ERROR(t.Check());
  nlohmann::json j = {{"family", t.family_name()}, {"bits", t.bits}, {"n_layer", t.n_layer}, {"source", t.source}};
  for (const auto& [key, value] : extra) j[key] = value;
  for (size_t l = 0; l < t.n_layer; ++l) {
    nlohmann::json k = nlohmann::json::array(), v = nlohmann::json::array();
    for (size_t w = 0; w < t.bits.size(); ++w) {
      k.push_back(t.kld[t.Index(l, KvSide::kKey, w)]);
      v.push_back(t.kld[t.Index(l, KvSide::kValue, w)]);
    }
    j["layers"].push_back({{"k", k}, {"v", v}});
  }
  // Atomic: a reader (or an interrupted run) never sees half a table.
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::Error("sensitivity table: cannot write '{}'", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::Error("sensitivity table: cannot write '{}' ({})", path, std::strerror(errno));
  }
  return Status::Ok();
}

std::string CalibrationTablePath(const std::string& model_path, uint64_t model_fingerprint, ComixFamily family) {
  return fmt::format("{}.chorus-{}-{:016x}.json", model_path, family == ComixFamily::kKivi ? "kivi" : "tq",
                     model_fingerprint);
}

const ShippedCalibrationTable* FindShippedCalibrationTable(uint64_t model_fingerprint, ComixFamily family) {
  const std::string name = fmt::format("{}-{:016x}", family == ComixFamily::kKivi ? "kivi" : "tq", model_fingerprint);
  for (const ShippedCalibrationTable& t : ShippedCalibrationTables())
    if (name == t.name) return &t;
  return nullptr;
}

Result<std::shared_ptr<const ComixSensitivity>> LoadComixSensitivity(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Error("sensitivity table: cannot read '{}'", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseComixSensitivity(text, path);
}

Result<std::shared_ptr<const ComixSensitivity>> ParseComixSensitivity(std::string_view json_text,
                                                                      const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("sensitivity table '{}': not a JSON object", path);
  auto t = std::make_shared<ComixSensitivity>();
  try {
    const std::string fam = j.at("family").get<std::string>();
    if (fam != "kivi" && fam != "tq") return Status::Error("sensitivity table '{}': unknown family '{}'", path, fam);
    t->family = fam == "kivi" ? ComixFamily::kKivi : ComixFamily::kTq;
    t->bits = j.at("bits").get<std::vector<int>>();
    t->n_layer = j.at("n_layer").get<size_t>();
    t->kld.assign(t->n_layer * 2 * t->bits.size(), -1);
    const nlohmann::json& layers = j.at("layers");
    if (!layers.is_array() || layers.size() != t->n_layer)
      return Status::Error("sensitivity table '{}': 'layers' must hold {} entries", path, t->n_layer);
    for (size_t l = 0; l < t->n_layer; ++l)
      for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
        const auto row = layers[l].at(side == KvSide::kKey ? "k" : "v").get<std::vector<double>>();
        if (row.size() != t->bits.size())
          return Status::Error("sensitivity table '{}': layer {} has {} values for {} widths", path, l, row.size(),
                               t->bits.size());
        for (size_t w = 0; w < row.size(); ++w) t->kld[t->Index(l, side, w)] = row[w];
      }
    t->source = j.value("source", std::string());
  } catch (const nlohmann::json::exception& e) {
    return Status::Error("sensitivity table '{}': {}", path, e.what());
  }
  if (Status st = t->Check(); !st.ok()) return st.Context("'" + path + "'");
  return std::shared_ptr<const ComixSensitivity>(std::move(t));
}

}  // namespace chorus
