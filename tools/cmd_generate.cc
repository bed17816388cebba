// `chorus generate`: stream a continuation of a prompt (optionally chat-formatted) and report speed.
#include <random>

#include "engine/kv_config.h"     // MakeKvConfig, MakeKvRuntime
#include "eval/policy_generate.h"  // RunPolicyGenerate
#include "model/chat_template.h"  // ApplyChatTemplate
#include "model/forward.h"        // ForwardPass
#include "model/sampler.h"        // Sampler
#include "tools/common.h"
#include "tools/generate_args.h"  // GenerateArgs
#include "util/timer.h"

namespace chorus::cli {
namespace {

// --policy comix|cocktail|cocktail-paper: one agent of the Engine, streamed (eval/policy_generate.h).
int RunGenerateWithPolicy(const GenerateArgs& a) {
  SamplingOptions so = a.sampling;
  so.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
  std::string question = a.prompt, doc;
  if (!a.prompt_file.empty()) {
    auto text = ReadFile(a.prompt_file);
    if (!text.ok()) return Fail(text.status());
    question = text.value();
  }
  if (!a.doc.empty()) {
    auto text = ReadDocument(a.doc);
    if (!text.ok()) return Fail(text.status());
    doc = text.value();
  }
  auto r = eval::RunPolicyGenerate(
      {.model = a.model,
       .policy = a.pol.policy,
       .budget_bytes = a.pol.budget_bytes,
       .encoder = a.pol.encoder,
       .sink_blocks = a.kv.sink_blocks,
       .question = question,
       .doc = doc,
       .system = a.system,
       .chat = a.chat,
       .n_predict = a.n_predict,
       .threads = a.threads,
       .ctx = a.ctx,
       .sampling = so,
       .on_text =
           [&](std::string_view piece) {
             if (a.json) return;
             std::fwrite(piece.data(), 1, piece.size(), stdout);
             std::fflush(stdout);
           },
       .on_chunk_map =
           [&](const Engine& engine, const ChunkMapReport& map, size_t shared_bytes, size_t doc_tokens) {
             if (!a.json) PrintChunkMap(map, shared_bytes, doc_tokens, engine, stderr);
           }});
  if (!r.ok()) return Fail(r.status());
  if (a.json) {
    PrintJson(eval::ToJson(*r));
    return 0;
  }
  std::printf("\n");
  eval::PrintSummary(*r, stderr);
  return 0;
}

int RunGenerate(const GenerateArgs& a) {
  if (!a.pol.policy.is_uniform()) return RunGenerateWithPolicy(a);
  SamplingOptions so = a.sampling;
  so.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
  if (Status s = ValidateSampling(so); !s.ok()) return Fail(s);
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) {
    auto text = ReadFile(a.prompt_file);
    if (!text.ok()) return Fail(text.status());
    prompt = text.value();
  }
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return Fail(model_r.status());
  const Model& model = *model_r.value();
  const ModelConfig& c = model.config();
  const Tokenizer& tok = model.tokenizer();
  const size_t n_ctx = a.ctx > 0 ? static_cast<size_t>(a.ctx) : std::min<size_t>(c.n_ctx_train, 4096);
  if (n_ctx > c.n_ctx_train)
    return Fail(Status::Error("-c {} exceeds the model's training context of {} tokens", n_ctx, c.n_ctx_train));

  if (a.chat) {
    auto tmpl = model.chat_template();
    if (!tmpl) return Fail(Status::Error("--chat: the model has no tokenizer.chat_template"));
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", prompt});
    auto formatted = ApplyChatTemplate(*tmpl, msgs, /*add_generation_prompt=*/true);
    if (!formatted.ok()) return Fail(formatted.status());
    prompt = formatted.value();
  }
  std::vector<int32_t> tokens = tok.Encode(prompt, /*add_special=*/true, /*parse_special=*/a.chat);
  if (tokens.empty()) return Fail(Status::Error("the prompt is empty (give -p TEXT or -f FILE)"));
  if (tokens.size() >= n_ctx)
    return Fail(Status::Error("the prompt has {} tokens but the context holds {} (raise -c, up to {})",
                              tokens.size(), n_ctx, c.n_ctx_train));

  auto kv_config = KvConfigFor(a.pol.policy, a.kv, c);
  if (!kv_config.ok()) return Fail(kv_config.status());
  KvRuntime kv_rt = MakeKvRuntime(c, kv_config.value());
  std::unique_ptr<KvSequence> kv_seq = kv_rt.store->NewSequence(n_ctx);
  KvSequence& kv = *kv_seq;
  ThreadPool pool(a.threads);
  ForwardPass fwd(model);
  std::vector<float> logits(c.n_vocab);
  Sampler sampler(so);

  Timer t_prefill;
  if (Status s = fwd.Run(tokens, kv, pool, LogitsFor::kLast, logits.data()); !s.ok()) return Fail(s);
  const double prefill_s = t_prefill.Seconds();

  std::string text;
  std::vector<int32_t> out_ids;
  std::string stop_reason = "length";
  Timer t_decode;
  for (int i = 0; i < a.n_predict; ++i) {
    const int32_t next = sampler.Sample(logits.data(), c.n_vocab);
    if (tok.IsEndOfGeneration(next)) {
      stop_reason = "end of generation";
      break;
    }
    out_ids.push_back(next);
    const std::string piece = tok.TokenToPiece(next);
    text += piece;
    if (!a.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == a.n_predict) break;
    if (kv.size() >= n_ctx) {
      stop_reason = "context full";
      break;
    }
    const int32_t one[1] = {next};
    if (Status s = fwd.Run(one, kv, pool, LogitsFor::kLast, logits.data()); !s.ok()) return Fail(s);
  }
  const double decode_s = t_decode.Seconds();
  const double n_dec = out_ids.size() > 1 ? out_ids.size() - 1 : 0;  // forward passes after the prefill
  const double prefill_tps = tokens.size() / prefill_s;
  const double decode_tps = n_dec > 0 ? n_dec / decode_s : 0.0;
  const KvUsage usage = kv_rt.store->Usage();
  if (a.json) {
    PrintJson({{"text", text}, {"prompt_tokens", tokens.size()}, {"generated_tokens", out_ids.size()},
               {"stop", stop_reason}, {"prefill_tokens_per_s", prefill_tps},
               {"decode_tokens_per_s", decode_tps}, {"threads", a.threads}, {"seed", so.seed},
               {"kv_k", KvFormatName(kv_config->k)}, {"kv_v", KvFormatName(kv_config->v)},
               {"kv_bytes", usage.total()}, {"kv_tokens", kv.size()},
               {"kv_bits_per_element", KvBitsPerElement(usage.total(), kv.size(), c)}, {"rss_bytes", ResidentBytes()}});
  } else {
    std::printf("\n");
    std::fprintf(stderr,
                 "\n[%zu prompt tokens: %.1f tok/s prefill | %zu generated: %.1f tok/s decode | %d threads | "
                 "stop: %s | seed %llu | RSS %.1f MiB]\n[%s]\n",
                 tokens.size(), prefill_tps, out_ids.size(), decode_tps, a.threads, stop_reason.c_str(),
                 static_cast<unsigned long long>(so.seed), ResidentBytes() / 1048576.0,
                 DescribeKvUsage(kv_config.value(), usage, kv.size(), c).c_str());
  }
  return 0;
}

}  // namespace

RunFn AddGenerate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Continue a prompt, streaming tokens; prints tokens/s at the end. Under a KV policy (one agent of the Engine):\n"
      "  --policy comix -p TEXT [--doc FILE]           bits per block run x layer x K/V under one budget\n"
      "  --policy cocktail --doc FILE -p QUESTION      the same allocator and bytes, the document's blocks weighted\n"
      "                                                by their chunk's relevance to the question\n"
      "  --policy cocktail-paper --doc FILE -p QUESTION  the paper's f16/kivi4/kivi2 per chunk\n"
      "Bytes for comix/cocktail: --kv-budget BYTES, or --kv-avg-bits B (default 3: sealed blocks cost at most uniform\n"
      "3-bit ones). E.g. chorus generate -m M.gguf --policy cocktail --comix-family kivi --kv-avg-bits 4 --comix-tiers\n"
      "3,4,8 --comix-min-k-bits 4 --doc article.txt -p 'When was it founded?' -n 32 --temp 0");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "prompt text");
  cmd->add_option("-f,--file", a->prompt_file, "read the prompt from a file")->excludes(p);
  cmd->add_option("-n,--n-predict", a->n_predict, "tokens to generate")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template (a user turn)");
  cmd->add_option("--system", a->system, "system message for --chat");
  cmd->add_option("--temp", a->sampling.temperature, "temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "keep the k most likely tokens; 0 = all")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass in (0,1]")->capture_default_str();
  cmd->add_option("--seed", a->seed, "random seed (default: random; printed at the end)");
  cmd->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("-c,--ctx", a->ctx, "context size in tokens (default: min(training context, 4096))")
      ->check(CLI::Range(1, 1 << 24));
  AddKvFlags(cmd, a->kv);
  cmd->add_flag("--json", a->json, "print one JSON object (text and numbers) instead of streaming");
  cmd->add_option("--doc", a->doc, "with --policy: a context document; the prompt (-p/-f) is the question about it, "
                                   "both framed as one chat user turn (as `chorus agents` does); cocktail(-paper): the "
                                   "question is the query whose relevance to each chunk sets its precision");
  AddPolicyFlags(cmd, a->pol,
                 {.default_spec = "f16",
                  .where = "uniform formats (K/V) store the prompt and answer; any other policy runs one agent of the "
                           "Engine: comix and cocktail choose every block's format (--doc's, the question's, the "
                           "answer's), cocktail with --doc's blocks weighted by relevance; cocktail-paper: --doc's "
                           "blocks follow its chunk map, the question and answer stay f16"});
  return [a, cmd] {
    if (Status s = CheckPolicyFlags(cmd, a->pol, /*need_query=*/false); !s.ok()) return Fail(s);
    if (cmd->count("--doc") && a->pol.policy.is_uniform())
      return Fail(
          Status::Error("--doc needs --policy cocktail, cocktail-paper or comix (not uniform {})", a->pol.spec));
    return RunGenerate(*a);
  };
}

}  // namespace chorus::cli
