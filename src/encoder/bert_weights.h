// BertEncoder's private parts: the f32 weights (owned, loaded from safetensors) and scratch.
// Invariant: every Linear has w.size() == out*in, b.size() == out, and view points into w.
#pragma once
#include <memory>
#include <vector>

#include "encoder/minilm_encoder.h"
#include "ops/matmul.h"         // WeightView
#include "util/thread_pool.h"  // ThreadPool

namespace chorus {

struct BertLinear {
  std::vector<float> w, b;  // w: (out, in) row-major, as PyTorch stores nn.Linear
  WeightView view;
};

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
};

}  // namespace chorus
