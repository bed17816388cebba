// The arguments of `chorus eval ppl|logits|kld|sensitivity` (see eval_args.h).
#include "tools/eval_args.h"

namespace chorus::cli {

void AddTextFlags(CLI::App* s, EvalArgs& a, bool json, bool chunks) {
  s->add_option("-m,--model", a.model, "GGUF model file")->required();
  s->add_option("-f,--file", a.file,
                "text file: e.g. WikiText-2's test.txt (where to get it: docs/EVAL.md) or examples/du_fu.txt, which "
                "the repository ships")
      ->required();
  AddThreadsFlag(s, a.threads);
  if (json) s->add_flag("--json", a.json, "print one JSON object");
  s->add_flag("--f32-weights", a.f32_weights,
              "a reference: dequantize the weight matrices to f32 at load, so their products take f32 activations "
              "(the engine rounds activations to int8 per 32 columns; any change upstream, a KV format of any "
              "width, re-draws that rounding downstream: ~0.003 KLD on SmolLM2 whatever the change's size). About "
              "4 bytes per weight, several times slower");
  if (!chunks) return;
  s->add_option("-c,--ctx", a.ctx, "tokens per chunk (kld default: 2048; sensitivity: 256)")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  s->add_option("--chunks", a.chunks, "evaluate only the first N chunks (default: all; sensitivity: 4)")
      ->check(CLI::Range(1, 1 << 30));
}

eval::ChunkedText ChunkedTextOf(const EvalArgs& a) {
  return {.model_path = a.model,
          .text_path = a.file,
          .ctx = size_t(a.ctx),
          .chunks = size_t(a.chunks),
          .threads = a.threads,
          .f32_weights = a.f32_weights};
}

eval::KvOptions KvOptionsOf(const EvalArgs& a) {
  return {.policy = a.pol.policy,
          .budget_bytes = a.pol.budget_bytes,
          .encoder = a.pol.encoder,
          .query = a.pol.query,
          .sink_blocks = a.kv.sink_blocks,
          .window = a.kv.window};
}

eval::LogitsConfig LogitsConfigOf(const EvalArgs& a) {
  return {.model_path = a.model,
          .text_path = a.file,
          .out_path = a.out,
          .n_tokens = size_t(a.n_tokens),
          .kv = KvOptionsOf(a),
          .threads = a.threads,
          .f32_weights = a.f32_weights};
}

}  // namespace chorus::cli
