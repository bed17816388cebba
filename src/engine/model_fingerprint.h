// A model file's identity: XXH3 of its header (metadata keys + tensor index) and a 256-byte sample
// of every tensor. Keys prefix-cache blocks, remote blocks and calibration tables to one model file.
#pragma once
#include <cstdint>

#include "model/model.h"  // Model

namespace chorus {

uint64_t ModelFingerprint(const Model& model);

}  // namespace chorus
