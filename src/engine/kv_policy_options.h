// From a KvPolicy (include/chorus/kv_policy.h) to the allocator's options: internal to the engine
// and the evaluations, which build ComixPolicy themselves.
#pragma once
#include <cstdint>
#include <string>

#include "chorus/kv_policy.h"
#include "model/model_config.h"   // ModelConfig
#include "policy/comix_policy.h"  // ComixOptions
#include "util/status.h"

namespace chorus {

// The model's geometry and the policy's allocator settings (family, average bits, tiers, key
// floor, rank, join reserve, relevance); the caller sets the budget, sink, window and threads.
// A policy without an allocator gives the geometry only.
ComixOptions AllocatorComixOptions(const KvPolicy& policy, const ModelConfig& model);
// Loads the measured table of a :m policy into co.measured: Allocator::sensitivity, else the table
// `chorus calibrate` cached next to the model (CalibrationTablePath), else the one the repository
// ships for this model (FindShippedCalibrationTable); an error that says how to calibrate when
// there is none, or when a table is given without :m.
Status LoadAllocatorTable(const KvPolicy& policy, ComixOptions& co, const std::string& model_path,
                          uint64_t model_fingerprint);
// Where the :m policy's table comes from ("FILE", "calibrated FILE", "shipped NAME"), or "" when it
// has none (or the policy does not rank by a table).
std::string AllocatorTableSource(const KvPolicy& policy, const std::string& model_path, uint64_t model_fingerprint);
// A :m policy with a fallback (:fK/V) and no table becomes its fallback; the returned line says so
// and how to calibrate ("" when nothing changed).
std::string ApplyTableFallback(KvPolicy& policy, const std::string& model_path, uint64_t model_fingerprint);

}  // namespace chorus
