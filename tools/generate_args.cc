// The configs `chorus generate`'s arguments describe (see generate_args.h).
#include "tools/generate_args.h"

#include <random>

namespace chorus::cli {

Result<GenerateInputs> ReadGenerateInputs(const GenerateArgs& a) {
  GenerateInputs in{.prompt = a.prompt, .sampling = a.sampling};
  in.sampling.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
  if (!a.prompt_file.empty()) {
    CHORUS_ASSIGN_OR_RETURN(in.prompt, ReadFile(a.prompt_file));
  }
  if (!a.doc.empty()) {  // --policy only (checked before)
    CHORUS_ASSIGN_OR_RETURN(in.doc, ReadDocument(a.doc));
  }
  return in;
}

eval::UniformGenerateConfig UniformConfigOf(const GenerateArgs& a, const GenerateInputs& in) {
  return {.model = a.model,
          .policy = a.pol.policy,
          .sink_blocks = a.kv.sink_blocks,
          .window = a.kv.window,
          .prompt = in.prompt,
          .system = a.system,
          .chat = a.chat,
          .n_predict = a.n_predict,
          .threads = a.threads,
          .ctx = a.ctx,
          .sampling = in.sampling};
}

eval::PolicyGenerateConfig PolicyConfigOf(const GenerateArgs& a, const GenerateInputs& in) {
  return {.model = a.model,
          .policy = a.pol.policy,
          .budget_bytes = a.pol.budget_bytes,
          .encoder = a.pol.encoder,
          .sink_blocks = a.kv.sink_blocks,
          .question = in.prompt,
          .doc = in.doc,
          .system = a.system,
          .chat = a.chat,
          .n_predict = a.n_predict,
          .threads = a.threads,
          .ctx = a.ctx,
          .sampling = in.sampling};
}

}  // namespace chorus::cli
