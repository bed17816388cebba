// One agent of the Engine under a KV policy, streamed (see policy_generate.h).
#include "eval/policy_generate.h"

#include <fmt/format.h>

#include <algorithm>

#include "eval/chunk_map.h"       // ChunkMapJson
#include "eval/harness.h"         // ChatFrame
#include "eval/report.h"          // Versioned
#include "util/timer.h"

namespace chorus::eval {

Result<PolicyGenerateReport> RunPolicyGenerate(const PolicyGenerateConfig& a) {
  const bool paper = a.policy.kind() == KvPolicyKind::kCocktailPaper;
  const bool relevance = a.policy.kind() == KvPolicyKind::kRelevance;  // the allocator, weighted by relevance
  const SamplingOptions& so = a.sampling;
  CHORUS_RETURN_IF_ERROR(ValidateSampling(so));
  const std::string& question = a.question;
  if (question.find_first_not_of(" \t\r\n") == std::string::npos)
    return paper ? Status::Error(
                       "--policy cocktail-paper needs a question (-p TEXT or -f FILE): it is the query "
                       "that picks each chunk's precision")
           : relevance ? Status::Error(
                             "--policy cocktail needs a question (-p TEXT or -f FILE): its relevance to "
                             "each chunk of --doc weights that chunk's blocks in the allocator")
                       : Status::Error("the prompt is empty (give -p TEXT or -f FILE)");
  if (paper && a.doc.empty())
    return Status::Error("--policy cocktail-paper needs --doc FILE: the context document whose chunks get precisions");
  if (relevance && a.doc.empty())
    return Status::Error(
        "--policy cocktail needs --doc FILE: the context document whose blocks' bits follow their "
        "relevance to the question (without a document, use --policy comix)");
  if (!a.doc.empty() && (a.chat || !a.system.empty()))
    return Status::Error(
        "--chat/--system do not combine with --doc (document and question are already one chat "
        "user turn)");
  const std::string& doc = a.doc;
  // The question and the answer: f16 rows and blocks (the document's blocks follow the policy).
  EngineOptions eo{.model_path = a.model,
                   .threads = a.threads,
                   .n_ctx = static_cast<size_t>(std::max(0, a.ctx)),
                   .policy = a.policy,
                   .private_k = "f16",
                   .private_v = "f16",
                   .sink_blocks = a.sink_blocks,
                   .kv_budget_bytes = a.budget_bytes,
                   .encoder_path = a.encoder};
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine_p, Engine::Open(eo));
  Engine& engine = *engine_p;

  ContextId ctx = 0;
  std::string prompt = question;
  Timer t_prefill;
  if (!doc.empty()) {
    CHORUS_ASSIGN_OR_RETURN(const auto frame, ChatFrame(engine));
    prompt = "\n\nQuestion: " + question + frame.second;
    // The allocator plans the one reader (the question and its answer) before the document is
    // sealed, so the document does not take the bytes the answer needs (as `chorus agents`).
    const ShareOptions share{.readers = 1,
                             .reader_tokens = engine.Tokenize(prompt, false, true).size() + size_t(a.n_predict)};
    auto c = paper       ? engine.ShareFor(frame.first + doc, {question})
             : relevance ? engine.ShareFor(frame.first + doc, {question}, share)
                         : engine.Share(frame.first + doc, share);
    if (!c.ok()) return c.status().Context("--doc");
    ctx = *c;
  } else if (a.chat) {
    if (!engine.has_chat_template()) return Status::Error("--chat: the model has no tokenizer.chat_template");
    std::vector<Engine::ChatTurn> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", question});
    CHORUS_ASSIGN_OR_RETURN(prompt, engine.RenderChat(msgs));
  }
  PolicyGenerateReport r;
  r.doc_tokens = ctx ? engine.ContextTokens(ctx) : 0;
  const ChunkMapReport* map = ctx ? engine.chunk_map(ctx) : nullptr;
  if (map && a.on_chunk_map) a.on_chunk_map(engine, *map, engine.KvReport().shared_bytes, r.doc_tokens);

  AgentOptions ao{
      .temperature = so.temperature, .top_k = so.top_k, .top_p = so.top_p, .seed = so.seed, .max_tokens = a.n_predict};
  CHORUS_ASSIGN_OR_RETURN(const AgentId id, engine.Spawn(ctx, prompt, ao));
  r.prefill_seconds = t_prefill.Seconds();
  const AgentState& st = *engine.agent(id);
  // comix: the allocation in force while the agent still had a block to seal (empty otherwise).
  r.allocation = engine.AllocationReport();
  size_t peak = engine.KvReport().total_bytes, streamed = 0;
  const auto stream = [&] {
    if (a.on_text) a.on_text(std::string_view(st.text).substr(streamed));
    streamed = st.text.size();
  };
  stream();
  Timer t_decode;
  while (engine.running() > 0) {
    if (!r.allocation.empty() && st.tokens.size() + 32 < size_t(a.n_predict)) r.allocation = engine.AllocationReport();
    CHORUS_RETURN_IF_ERROR(engine.Step());
    peak = std::max(peak, engine.KvReport().total_bytes);
    stream();
  }
  const double decode_s = t_decode.Seconds();
  const size_t gen = st.tokens.size();
  const size_t tokens = r.doc_tokens + st.prompt_tokens + gen;
  r.text = st.text;
  r.policy_kind = ToString(a.policy.kind());
  r.policy_spec = FormatSpec(a.policy);
  r.policy_desc =
      r.policy_spec + (a.policy.allocator() == nullptr ? ""
                       : a.budget_bytes                ? fmt::format(" (--kv-budget {} bytes)", a.budget_bytes)
                                        : fmt::format(" ({} bits on average)", a.policy.allocator()->avg_bits));
  r.stop = ToString(st.stop);
  r.prompt_tokens = st.prompt_tokens;
  r.generated_tokens = gen;
  r.decode_tokens_per_s = gen > 1 && decode_s > 0 ? (gen - 1) / decode_s : 0.0;
  r.threads = a.threads;
  r.seed = so.seed;
  r.kv_peak_bytes = peak;
  r.kv_shared_bytes = engine.KvReport().shared_bytes;
  r.kv_private_peak_bytes = st.peak_private_bytes;
  r.fp16_bytes = engine.Fp16Bytes(tokens);
  r.kv_bits_per_element = 16.0 * peak / double(r.fp16_bytes);
  r.budget_bytes = a.budget_bytes;
  if (map) r.chunk_map = ChunkMapJson(*map);
  return r;
}

nlohmann::json ToJson(const PolicyGenerateReport& r) {
  return Versioned("generate", {{"text", r.text},
                                {"policy", r.policy_kind},
                                {"policy_spec", r.policy_spec},
                                {"policy_desc", r.policy_desc},
                                {"doc_tokens", r.doc_tokens},
                                {"prompt_tokens", r.prompt_tokens},
                                {"generated_tokens", r.generated_tokens},
                                {"stop", r.stop},
                                {"prefill_seconds", r.prefill_seconds},
                                {"decode_tokens_per_s", r.decode_tokens_per_s},
                                {"threads", r.threads},
                                {"seed", r.seed},
                                {"kv_peak_bytes", r.kv_peak_bytes},
                                {"kv_shared_bytes", r.kv_shared_bytes},
                                {"kv_private_peak_bytes", r.kv_private_peak_bytes},
                                {"kv_bits_per_element", r.kv_bits_per_element},
                                {"fp16_bytes", r.fp16_bytes},
                                {"budget_bytes", r.budget_bytes},
                                {"allocation", r.allocation},
                                {"chunk_map", r.chunk_map}});
}

void PrintSummary(const PolicyGenerateReport& r, std::FILE* out) {
  const size_t tokens = r.doc_tokens + r.prompt_tokens + r.generated_tokens;
  if (!r.allocation.empty())
    std::fprintf(out,
                 "\ncomix allocation in force while the agent's last block was still to be sealed ('-': none "
                 "left):\n%s",
                 r.allocation.c_str());
  std::fprintf(out,
               "\n[%zu document + %zu prompt tokens: prefill %.2f s | %zu generated: %.1f tok/s decode | %d threads | "
               "stop: %s | seed %llu]\n[KV %s: %.2f MiB held at peak (document %.2f MiB, agent %.2f MiB) for %zu "
               "tokens = %.2f bits/element (fp16 KV: %.2f MiB)%s]\n",
               r.doc_tokens, r.prompt_tokens, r.prefill_seconds, r.generated_tokens, r.decode_tokens_per_s, r.threads,
               r.stop.c_str(), static_cast<unsigned long long>(r.seed), r.policy_desc.c_str(),
               r.kv_peak_bytes / 1048576.0, r.kv_shared_bytes / 1048576.0, r.kv_private_peak_bytes / 1048576.0, tokens,
               r.kv_bits_per_element, r.fp16_bytes / 1048576.0,
               r.budget_bytes ? fmt::format("; budget {} bytes", r.budget_bytes).c_str() : "");
}

}  // namespace chorus::eval
