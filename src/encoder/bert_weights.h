// BertEncoder's private parts: the f32 weights (owned, loaded from safetensors) and scratch.
// Invariant: every linear layer is packed with its bias (rows = out, cols = in).
#pragma once
#include <memory>
#include <vector>

#include "encoder/minilm_encoder.h"
#include "encoder/packed_gemm.h"  // PackedMatrix
#include "util/thread_pool.h"  // ThreadPool

namespace chorus {

using BertLinear = PackedMatrix;  // nn.Linear weight (out, in) + bias, packed once at load

struct BertNorm {
  std::vector<float> g, b;
};

struct BertLayer {
  BertLinear q, k, v, o, ff_in, ff_out;
  BertNorm attn_ln, out_ln;
};

struct BertEncoder::Weights {
  std::vector<float> word, pos, type;  // (vocab, H), (max_positions, H), (type_vocab, H)
  BertNorm emb_ln;
  std::vector<BertLayer> layers;
  std::unique_ptr<ThreadPool> pool;
  // Activation scratch reused across calls (grown, never shrunk).
  std::vector<float> x, q, k, v, ctx, tmp, ff;
};

}  // namespace chorus
