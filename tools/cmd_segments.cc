// `chorus eval segments`: segment reuse against a full prefill at several repair fractions
// (src/eval/segment_eval.h); flags and printing only.
#include "eval/segment_eval.h"
#include "tools/common.h"

namespace chorus::cli {

std::pair<CLI::App*, RunFn> AddSegmentEval(CLI::App* eval) {
  struct Args {
    std::string model, file, out;
    int threads = 2, docs = 4, words = 700, max_tokens = 24;
    uint64_t seed = 1;
    std::vector<double> repair = {0.0, 0.05, 0.15, 0.30};
    std::string policy = "chorus";
    bool no_f16 = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = eval->add_subcommand(
      "segments",
      "A document reused after another role's prompt (its blocks at another offset, its head "
      "recomputed) against a full prefill: mean/p99 KLD of the answer tokens, greedy answers identical, "
      "a needle's answer, time to first token, per repair fraction (METHODS.md §5b).");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", a->file, "text the documents are cut from (e.g. a corpus of scripts/make_corpora.py)")
      ->required();
  AddThreadsFlag(cmd, a->threads);
  cmd->add_option("--docs", a->docs, "documents cut from the file")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--words", a->words, "words per document (a needle sentence is added)")
      ->check(CLI::Range(50, 100000))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "where the documents and needles are cut")->capture_default_str();
  cmd->add_option("--repair", a->repair, "repair fractions to measure")->delimiter(',')->default_str("0,0.05,0.15,0.3");
  cmd->add_option("--max-tokens", a->max_tokens, "answer tokens")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--policy", a->policy,
                  "uniform KV formats of prompt (shared) blocks: a preset (chorus, polykv) or K/V")
      ->capture_default_str();
  cmd->add_flag("--no-f16", a->no_f16,
                "skip the yardstick: every point against a full prefill with f16 KV too "
                "(the reference's own distance to it is the formats' error)");
  cmd->add_option("-o,--out", a->out, "write the report (JSON) here too");
  return {cmd, [a] {
            auto text = ReadFile(a->file);
            if (!text.ok()) return Fail(text.status());
            eval::SegmentEvalConfig c;
            c.engine.model_path = a->model;
            c.engine.threads = a->threads;
            auto policy = KvPolicy::Parse(a->policy);
            if (!policy.ok()) return Fail(policy.status());
            if (!policy->is_uniform())
              return Fail(Status::Error("--policy {}: segments reuse uniform formats only", a->policy));
            c.engine.policy = *policy;
            c.cases = eval::MakeSegmentCases(*text, size_t(a->docs), size_t(a->words), a->seed);
            if (c.cases.empty()) return Fail(Status::Error("'{}' has fewer than {} words", a->file, a->words));
            c.repair_fractions = a->repair;
            c.max_tokens = a->max_tokens;
            c.f16_yardstick = !a->no_f16;
            c.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
            auto r = eval::RunSegmentEval(c);
            if (!r.ok()) return Fail(r.status());
            const std::string j = eval::ToJson(*r);
            std::printf("%s\n", j.c_str());
            if (!a->out.empty()) {
              std::FILE* f = std::fopen(a->out.c_str(), "w");
              if (!f) return Fail(Status::Error("cannot write '{}'", a->out));
              std::fprintf(f, "%s\n", j.c_str());
              std::fclose(f);
            }
            return 0;
          }};
}

}  // namespace chorus::cli
