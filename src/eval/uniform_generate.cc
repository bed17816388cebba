// eval::RunUniformGenerate (uniform_generate.h): the prefill and the sampled decode loop.
#include "eval/uniform_generate.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/kv_config.h"  // MakeKvRuntime, DescribeKvUsage, KvBitsPerElement
#include "eval/harness.h"      // LoadModel
#include "eval/peer.h"         // ResidentBytes
#include "eval/report.h"       // Versioned
#include "eval/uniform_kv.h"   // UniformKvConfig
#include "model/chat_template.h"
#include "model/forward.h"
#include "util/thread_pool.h"
#include "util/timer.h"

namespace chorus::eval {

Result<UniformGenerateReport> RunUniformGenerate(const UniformGenerateConfig& a) {
  CHORUS_RETURN_IF_ERROR(ValidateSampling(a.sampling));
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return model_r.status();
  const Model& model = *model_r.value();
  const ModelConfig& c = model.config();
  const Tokenizer& tok = model.tokenizer();
  const size_t n_ctx = a.ctx > 0 ? static_cast<size_t>(a.ctx) : std::min<size_t>(c.n_ctx_train, 4096);
  if (n_ctx > c.n_ctx_train)
    return Status::Error("-c {} exceeds the model's training context of {} tokens", n_ctx, c.n_ctx_train);

  std::string prompt = a.prompt;
  if (a.chat) {
    auto tmpl = model.chat_template();
    if (!tmpl) return Status::Error("--chat: the model has no tokenizer.chat_template");
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", prompt});
    auto formatted = ApplyChatTemplate(*tmpl, msgs, /*add_generation_prompt=*/true);
    if (!formatted.ok()) return formatted.status();
    prompt = formatted.value();
  }
  std::vector<int32_t> tokens = tok.Encode(prompt, /*add_special=*/true, /*parse_special=*/a.chat);
  if (tokens.empty()) return Status::Error("the prompt is empty (give -p TEXT or -f FILE)");
  if (tokens.size() >= n_ctx)
    return Status::Error("the prompt has {} tokens but the context holds {} (raise -c, up to {})", tokens.size(), n_ctx,
                         c.n_ctx_train);

  auto kv_config = UniformKvConfig(a.policy, a.sink_blocks, a.window, c, "this command");
  if (!kv_config.ok()) return kv_config.status();
  KvRuntime kv_rt = MakeKvRuntime(c, kv_config.value());
  std::unique_ptr<KvSequence> kv_seq = kv_rt.store->NewSequence(n_ctx);
  KvSequence& kv = *kv_seq;
  ThreadPool pool(a.threads);
  ForwardPass fwd(model);
  std::vector<float> logits(c.n_vocab);
  Sampler sampler(a.sampling);

  Timer t_prefill;
  CHORUS_RETURN_IF_ERROR(fwd.Run(tokens, kv, pool, LogitsFor::kLast, logits.data()));
  const double prefill_s = t_prefill.Seconds();

  UniformGenerateReport r{
      .stop = "length", .prompt_tokens = tokens.size(), .threads = a.threads, .seed = a.sampling.seed};
  Timer t_decode;
  for (int i = 0; i < a.n_predict; ++i) {
    const int32_t next = sampler.Sample(logits.data(), c.n_vocab);
    if (tok.IsEndOfGeneration(next)) {
      r.stop = "end of generation";
      break;
    }
    ++r.generated_tokens;
    const std::string piece = tok.TokenToPiece(next);
    r.text += piece;
    if (a.on_text) a.on_text(piece);
    if (i + 1 == a.n_predict) break;
    if (kv.size() >= n_ctx) {
      r.stop = "context full";
      break;
    }
    const int32_t one[1] = {next};
    CHORUS_RETURN_IF_ERROR(fwd.Run(one, kv, pool, LogitsFor::kLast, logits.data()));
  }
  const double decode_s = t_decode.Seconds();
  // forward passes after the prefill
  const double n_dec = r.generated_tokens > 1 ? r.generated_tokens - 1 : 0;
  r.prefill_tokens_per_s = tokens.size() / prefill_s;
  r.decode_tokens_per_s = n_dec > 0 ? n_dec / decode_s : 0.0;
  const KvUsage usage = kv_rt.store->Usage();
  r.kv_k = KvFormatName(kv_config->k);
  r.kv_v = KvFormatName(kv_config->v);
  r.kv_bytes = usage.total();
  r.kv_tokens = kv.size();
  r.kv_bits_per_element = KvBitsPerElement(usage.total(), kv.size(), c);
  r.kv_usage = DescribeKvUsage(kv_config.value(), usage, kv.size(), c);
  r.rss_bytes = ResidentBytes();
  return r;
}

nlohmann::json ToJson(const UniformGenerateReport& r) {
  return Versioned("generate_uniform", {{"text", r.text},
                                        {"prompt_tokens", r.prompt_tokens},
                                        {"generated_tokens", r.generated_tokens},
                                        {"stop", r.stop},
                                        {"prefill_tokens_per_s", r.prefill_tokens_per_s},
                                        {"decode_tokens_per_s", r.decode_tokens_per_s},
                                        {"threads", r.threads},
                                        {"seed", r.seed},
                                        {"kv_k", r.kv_k},
                                        {"kv_v", r.kv_v},
                                        {"kv_bytes", r.kv_bytes},
                                        {"kv_tokens", r.kv_tokens},
                                        {"kv_bits_per_element", r.kv_bits_per_element},
                                        {"rss_bytes", r.rss_bytes}});
}

void PrintSummary(const UniformGenerateReport& r, std::FILE* out) {
  std::fprintf(out,
               "\n[%zu prompt tokens: %.1f tok/s prefill | %zu generated: %.1f tok/s decode | %d threads | stop: %s | "
               "seed %llu | RSS %.1f MiB]\n[%s]\n",
               r.prompt_tokens, r.prefill_tokens_per_s, r.generated_tokens, r.decode_tokens_per_s, r.threads,
               r.stop.c_str(), static_cast<unsigned long long>(r.seed), r.rss_bytes / 1048576.0, r.kv_usage.c_str());
}

}  // namespace chorus::eval
