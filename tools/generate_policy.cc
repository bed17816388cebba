// `chorus generate --policy comix|cocktail|cocktail-paper`: one agent of the Engine, streamed (see generate_args.h).
#include <fmt/format.h>

#include <random>

#include "chorus/engine.h"
#include "model/chat_template.h"  // ApplyChatTemplate
#include "tools/generate_args.h"
#include "util/timer.h"

namespace chorus::cli {

int RunGenerateWithPolicy(const GenerateArgs& a) {
  const bool paper = a.pol.policy.kind() == KvPolicyKind::kCocktailPaper;
  const bool relevance = a.pol.policy.kind() == KvPolicyKind::kRelevance;  // the allocator, weighted by relevance
  SamplingOptions so = a.sampling;
  so.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
  if (Status s = ValidateSampling(so); !s.ok()) return Fail(s);
  std::string question = a.prompt;
  if (!a.prompt_file.empty()) {
    auto text = ReadFile(a.prompt_file);
    if (!text.ok()) return Fail(text.status());
    question = text.value();
  }
  if (question.find_first_not_of(" \t\r\n") == std::string::npos)
    return Fail(paper ? Status::Error("--policy cocktail-paper needs a question (-p TEXT or -f FILE): it is the query "
                                      "that picks each chunk's precision")
                : relevance ? Status::Error("--policy cocktail needs a question (-p TEXT or -f FILE): its relevance to "
                                            "each chunk of --doc weights that chunk's blocks in the allocator")
                            : Status::Error("the prompt is empty (give -p TEXT or -f FILE)"));
  if (paper && a.doc.empty())
    return Fail(Status::Error("--policy cocktail-paper needs --doc FILE: the context document whose chunks get precisions"));
  if (relevance && a.doc.empty())
    return Fail(Status::Error("--policy cocktail needs --doc FILE: the context document whose blocks' bits follow their "
                              "relevance to the question (without a document, use --policy comix)"));
  if (!a.doc.empty() && (a.chat || !a.system.empty()))
    return Fail(Status::Error("--chat/--system do not combine with --doc (document and question are already one chat "
                              "user turn)"));
  std::string doc;
  if (!a.doc.empty()) {
    auto text = ReadDocument(a.doc);
    if (!text.ok()) return Fail(text.status());
    doc = text.value();
  }
  // The question and the answer: f16 rows and blocks (the document's blocks follow the policy).
  EngineOptions eo{.model_path = a.model,
                   .threads = a.threads,
                   .n_ctx = static_cast<size_t>(std::max(0, a.ctx)),
                   .policy = a.pol.policy,
                   .private_k = "f16",
                   .private_v = "f16",
                   .sink_blocks = a.kv.sink_blocks,
                   .kv_budget_bytes = a.pol.budget_bytes,
                   .encoder_path = a.pol.encoder};
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return Fail(engine_r.status());
  Engine& engine = *engine_r.value();
  auto model_r = LoadModel(a.model);  // chat template only (mmap'ed: no copy)
  if (!model_r.ok()) return Fail(model_r.status());

  ContextId ctx = 0;
  std::string prompt = question;
  Timer t_prefill;
  if (!doc.empty()) {
    auto frame = ChatFrame(*model_r.value());
    if (!frame.ok()) return Fail(frame.status());
    prompt = "\n\nQuestion: " + question + frame->second;
    // The allocator plans the one reader (the question and its answer) before the document is
    // sealed, so the document does not take the bytes the answer needs (as `chorus agents`).
    const ShareOptions share{.readers = 1,
                             .reader_tokens = engine.Tokenize(prompt, false, true).size() + size_t(a.n_predict)};
    auto c = paper ? engine.ShareFor(frame->first + doc, {question})
             : relevance ? engine.ShareFor(frame->first + doc, {question}, share)
                         : engine.Share(frame->first + doc, share);
    if (!c.ok()) return Fail(c.status().Context("--doc"));
    ctx = *c;
  } else if (a.chat) {
    auto tmpl = model_r.value()->chat_template();
    if (!tmpl) return Fail(Status::Error("--chat: the model has no tokenizer.chat_template"));
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", question});
    auto formatted = ApplyChatTemplate(*tmpl, msgs, /*add_generation_prompt=*/true);
    if (!formatted.ok()) return Fail(formatted.status());
    prompt = formatted.value();
  }
  const size_t doc_tokens = ctx ? engine.ContextTokens(ctx) : 0;
  const ChunkMapReport* map = ctx ? engine.chunk_map(ctx) : nullptr;
  if (map && !a.json) PrintChunkMap(*map, engine.KvReport().shared_bytes, doc_tokens, engine, stderr);

  AgentOptions ao{.temperature = so.temperature, .top_k = so.top_k, .top_p = so.top_p, .seed = so.seed,
                  .max_tokens = a.n_predict};
  auto id = engine.Spawn(ctx, prompt, ao);
  if (!id.ok()) return Fail(id.status());
  const double prefill_s = t_prefill.Seconds();
  const AgentState& st = *engine.agent(*id);
  // comix: the allocation in force while the agent still had a block to seal (empty otherwise).
  std::string allocation = engine.AllocationReport();
  size_t peak = engine.KvReport().total_bytes, printed = 0;
  const auto stream = [&] {
    if (a.json) return;
    std::fwrite(st.text.data() + printed, 1, st.text.size() - printed, stdout);
    std::fflush(stdout);
    printed = st.text.size();
  };
  stream();
  Timer t_decode;
  while (engine.running() > 0) {
    if (!allocation.empty() && st.tokens.size() + 32 < size_t(a.n_predict)) allocation = engine.AllocationReport();
    if (Status s = engine.Step(); !s.ok()) return Fail(s);
    peak = std::max(peak, engine.KvReport().total_bytes);
    stream();
  }
  const double decode_s = t_decode.Seconds();
  const size_t gen = st.tokens.size();
  const double decode_tps = gen > 1 && decode_s > 0 ? (gen - 1) / decode_s : 0.0;
  const size_t tokens = doc_tokens + st.prompt_tokens + gen;
  const double bits = 16.0 * peak / double(engine.Fp16Bytes(tokens));
  const std::string policy =
      FormatSpec(a.pol.policy) + (a.pol.policy.allocator() == nullptr ? ""
                                  : a.pol.budget_bytes
                                      ? fmt::format(" (--kv-budget {} bytes)", a.pol.budget_bytes)
                                      : fmt::format(" ({} bits on average)", a.pol.policy.allocator()->avg_bits));
  if (a.json) {
    PrintJson({{"text", st.text},
               {"policy", ToString(a.pol.policy.kind())},
               {"policy_spec", FormatSpec(a.pol.policy)},
               {"policy_desc", policy},
               {"doc_tokens", doc_tokens},
               {"prompt_tokens", st.prompt_tokens},
               {"generated_tokens", gen},
               {"stop", ToString(st.stop)},
               {"prefill_seconds", prefill_s},
               {"decode_tokens_per_s", decode_tps},
               {"threads", a.threads},
               {"seed", so.seed},
               {"kv_peak_bytes", peak},
               {"kv_shared_bytes", engine.KvReport().shared_bytes},
               {"kv_private_peak_bytes", st.peak_private_bytes},
               {"kv_bits_per_element", bits},
               {"fp16_bytes", engine.Fp16Bytes(tokens)},
               {"budget_bytes", a.pol.budget_bytes},
               {"allocation", allocation},
               {"chunk_map", map ? ChunkMapJson(*map) : nlohmann::json()}});
    return 0;
  }
  std::printf("\n");
  if (!allocation.empty()) std::fprintf(stderr, "\ncomix allocation in force while the agent's last block was still to be sealed ('-': none left):\n%s", allocation.c_str());
  std::fprintf(stderr,
               "\n[%zu document + %zu prompt tokens: prefill %.2f s | %zu generated: %.1f tok/s decode | %d threads | "
               "stop: %s | seed %llu]\n[KV %s: %.2f MiB held at peak (document %.2f MiB, agent %.2f MiB) for %zu "
               "tokens = %.2f bits/element (fp16 KV: %.2f MiB)%s]\n",
               doc_tokens, st.prompt_tokens, prefill_s, gen, decode_tps, a.threads, ToString(st.stop),
               static_cast<unsigned long long>(so.seed), policy.c_str(), peak / 1048576.0,
               engine.KvReport().shared_bytes / 1048576.0, st.peak_private_bytes / 1048576.0, tokens, bits,
               engine.Fp16Bytes(tokens) / 1048576.0,
               a.pol.budget_bytes ? fmt::format("; budget {} bytes", a.pol.budget_bytes).c_str() : "");
  return 0;
}

}  // namespace chorus::cli
