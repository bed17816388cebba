// ModelFingerprint (model_fingerprint.h).
#include "engine/model_fingerprint.h"

#include <xxhash.h>

#include <algorithm>

#include "gguf/gguf.h"  // GgufFile

namespace chorus {

// The model file's identity: its header (metadata + tensor index) and samples of its tensor data.
uint64_t ModelFingerprint(const Model& m) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const GgufFile& f = m.gguf();
  const size_t size = f.file_size();
  XXH3_64bits_update(st, &size, sizeof size);
  for (const GgufTensor& t : f.tensors()) {
    XXH3_64bits_update(st, t.name.data(), t.name.size());
    XXH3_64bits_update(st, &t.type, sizeof t.type);
    XXH3_64bits_update(st, t.dims.data(), t.dims.size() * sizeof(uint64_t));
    XXH3_64bits_update(st, t.data, std::min<size_t>(t.n_bytes, 256));  // a sample of every tensor
  }
  for (const GgufKv& kv : f.metadata()) XXH3_64bits_update(st, kv.key.data(), kv.key.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace chorus
