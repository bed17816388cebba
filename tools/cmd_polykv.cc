// `chorus eval polykv`: flags, then eval::RunPolykv (src/eval/polykv_eval.h): the PolyKV paper's
// protocol on the engine (a shared compressed pool, the rest's perplexity, N agents answering).
#include "eval/polykv_eval.h"
#include "tools/common.h"

namespace chorus::cli {
namespace {

using PolykvArgs = eval::PolykvConfig;  // the flags fill the config directly
struct PolykvFlags {
  PolykvArgs cfg{.threads = DefaultThreads()};
  bool json = false;
};

int RunPolykv(const PolykvFlags& f) {
  PolykvArgs cfg = f.cfg;
  cfg.log = stderr;
  auto r = eval::RunPolykv(cfg);
  if (!r.ok()) return Fail(r.status());
  if (f.json)
    PrintJson(eval::ToJson(*r));
  else
    eval::PrintTable(*r, stdout);
  return 0;
}

}  // namespace

std::pair<CLI::App*, RunFn> AddPolykvEval(CLI::App* eval) {
  auto flags = std::make_shared<PolykvFlags>();
  PolykvArgs* a = &flags->cfg;
  CLI::App* cmd = eval->add_subcommand("polykv", "PolyKV's protocol: 70 % of a document in a shared compressed "
                                                 "pool, PPL of the rest, N agents; measured bytes vs fp16 copies.");
  cmd->add_option("-m,--model", a->model_path, "GGUF model file")->required();
  cmd->add_option("-f,--file", a->text_path, "text to cut documents from (WikiText-2 test)")->required();
  cmd->add_option("--doc-tokens", a->doc_tokens, "document sizes in tokens")->delimiter(',')->capture_default_str();
  cmd->add_option("--agents", a->agents, "agent counts")->delimiter(',')->check(CLI::Range(1, 512))
      ->capture_default_str();
  cmd->add_option("--configs", a->configs, "shared K/V formats to compare with f16")->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--private", a->private_kv, "agents' own K/V formats")->capture_default_str();
  cmd->add_option("--kv-window", a->window, "rows of the newest <32 tokens: f16 or q8 (default: the engine's)");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "tokens per answer")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  AddThreadsFlag(cmd, a->threads);
  cmd->add_flag("--json", flags->json, "print one JSON object");
  return {cmd, [flags] { return RunPolykv(*flags); }};
}

}  // namespace chorus::cli
