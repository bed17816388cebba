// `chorus generate`: flags, then eval::RunUniformGenerate (uniform formats: the forward pass on a
// KV store) or eval::RunPolicyGenerate (other policies: one agent of the Engine); streams a
// continuation of a prompt (optionally chat-formatted) and reports speed and KV bytes.
#include "tools/common.h"
#include "tools/generate_args.h"  // GenerateArgs

namespace chorus::cli {
namespace {

// The answer is streamed; then the report: its JSON (--json, nothing streamed) or a summary on stderr.
template <typename Report>
int Finish(const GenerateArgs& a, Result<Report> r) {
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
  auto in = ReadGenerateInputs(a);
  if (!in.ok()) return Fail(in.status());
  const auto on_text = [&](std::string_view piece) {
    if (a.json) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  if (a.pol.policy.is_uniform()) {  // the forward pass on a KV store of its formats
    eval::UniformGenerateConfig c = UniformConfigOf(a, *in);
    c.on_text = on_text;
    return Finish(a, eval::RunUniformGenerate(c));
  }
  eval::PolicyGenerateConfig c = PolicyConfigOf(a, *in);  // one agent of the Engine
  c.on_text = on_text;
  c.on_chunk_map = [&](const Engine& engine, const ChunkMapReport& map, size_t shared_bytes, size_t doc_tokens) {
    if (!a.json) PrintChunkMap(map, shared_bytes, doc_tokens, engine, stderr);
  };
  return Finish(a, eval::RunPolicyGenerate(c));
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
      "3-bit ones). E.g. chorus generate -m M.gguf --policy cocktail --comix-family kivi --kv-avg-bits 4 "
      "--comix-tiers\n"
      "3,4,8 --comix-min-k-bits 4 --doc article.txt -p 'When was it founded?' -n 32 --temp 0");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "prompt text");
  cmd->add_option("-f,--file", a->prompt_file, "read the prompt from a file")->excludes(p);
  cmd->add_option("-n,--n-predict", a->n_predict, "tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template (a user turn)");
  cmd->add_option("--system", a->system, "system message for --chat");
  cmd->add_option("--temp", a->sampling.temperature, "temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "keep the k most likely tokens; 0 = all")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass in (0,1]")->capture_default_str();
  cmd->add_option("--seed", a->seed, "random seed (default: random; printed at the end)");
  AddThreadsFlag(cmd, a->threads);
  cmd->add_option("-c,--ctx", a->ctx, "context size in tokens (default: min(training context, 4096))")
      ->check(CLI::Range(1, 1 << 24));
  AddKvFlags(cmd, a->kv);
  cmd->add_flag("--json", a->json, "print one JSON object (text and numbers) instead of streaming");
  cmd->add_option("--doc", a->doc,
                  "with --policy: a context document; the prompt (-p/-f) is the question about it, "
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
