// Measured KV bytes with and without sliding windows, on a model's real KV geometry and layer
// windows (e.g. Gemma 3 270M: 18 layers, 1 KV head x 256, window 512 on 15 layers): a 4K-token
// context, and N agents on a 4K-token shared document (each a private prompt + decode steps in
// one KvBatch per step). The rows are random (bytes do not depend on values); "all global" is the
// same store with no windows, i.e. what the cache would hold if every layer kept everything.
// Every number is KvStore::Usage() of the live objects (blocks + metadata, windows, tables), peak
// over the run.
//
// Usage: sliding_window_bytes MODEL.gguf [--agents 16] [--doc 4096] [--prompt 64] [--gen 128]
//                             [--kv f16/f16,q8/tq3] [--window f16|q8]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/kv_config.h"    // MakeKvConfig
#include "kv/kv_batch.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "policy/uniform_policy.h"

namespace chorus {
namespace {

struct Args {
  std::string model;
  size_t agents = 16, doc = 4096, prompt = 64, gen = 128;
  std::string kv = "f16/f16,q8/tq3";
  std::string window = "f16";
};

struct Feeder {
  AttentionShape shape;
  std::mt19937 rng{1};
  std::vector<float> k, v, q, out;
  void Rows(size_t n) {
    std::normal_distribution<float> nd;
    k.resize(n * shape.kv_dim());
    v.resize(n * shape.kv_dim());
    q.resize(n * shape.q_dim());
    out.resize(n * shape.q_dim());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    for (auto& x : q) x = nd(rng) * 0.06f;
  }
};

struct Peak {
  size_t total = 0, blocks = 0;
  void See(const KvStore& s) {
    const KvUsage u = s.Usage();
    total = std::max(total, u.total());
    blocks = std::max(blocks, u.blocks);
  }
};

// One sequence of `doc` tokens, prefilled 512 at a time.
Peak Context(const ModelConfig& c, const KvStoreOptions& so, PrecisionPolicy& policy, size_t doc, ThreadPool& pool) {
  KvStore store(so, &policy);
  Feeder f{so.shape};
  Peak peak;
  auto seq = store.NewSequence(doc);
  for (size_t done = 0; done < doc; done += 512) {
    const size_t n = std::min<size_t>(512, doc - done);
    f.Rows(n);
    for (size_t l = 0; l < c.n_layer; ++l)
      if (!seq->AppendAndAttend(l, n, f.k.data(), f.v.data(), f.q.data(), f.out.data(), pool).ok()) std::exit(1);
    seq->Commit(n);
    peak.See(store);
  }
  return peak;
}

// A frozen document and `agents` readers: private prompts, then `gen` batched decode steps.
Peak Agents(const ModelConfig& c, const KvStoreOptions& so, PrecisionPolicy& policy, const Args& a, ThreadPool& pool) {
  KvStore store(so, &policy);
  Feeder f{so.shape};
  Peak peak;
  auto doc = store.NewSequence(a.doc);
  doc->set_keep_from(a.doc / kBlockTokens * kBlockTokens);  // its readers start after its last sealed block
  for (size_t done = 0; done < a.doc; done += 512) {
    const size_t n = std::min<size_t>(512, a.doc - done);
    f.Rows(n);
    for (size_t l = 0; l < c.n_layer; ++l)
      if (!doc->AppendAndAttend(l, n, f.k.data(), f.v.data(), f.q.data(), f.out.data(), pool).ok()) std::exit(1);
    doc->Commit(n);
  }
  std::vector<std::vector<BlockId>> tables;
  std::vector<size_t> first;
  for (size_t l = 0; l < c.n_layer; ++l) {
    tables.push_back(doc->blocks(l));
    first.push_back(doc->first_block(l));
  }
  const BorrowedBlocks shared{.tables = tables, .first = first};
  std::vector<std::unique_ptr<KvSequence>> agents;
  for (size_t i = 0; i < a.agents; ++i) {
    agents.push_back(store.NewSequence(a.doc + a.prompt + a.gen, shared));
    f.Rows(a.prompt);
    for (size_t l = 0; l < c.n_layer; ++l)
      if (!agents.back()->AppendAndAttend(l, a.prompt, f.k.data(), f.v.data(), f.q.data(), f.out.data(), pool).ok())
        std::exit(1);
    agents.back()->Commit(a.prompt);
    peak.See(store);
  }
  doc.reset();  // the readers hold the document's blocks now (as the engine's prefix cache would)
  for (size_t step = 0; step < a.gen; ++step) {
    KvBatch batch(store);
    for (auto& s : agents) batch.Add(s.get(), 1);
    f.Rows(a.agents);
    for (size_t l = 0; l < c.n_layer; ++l)
      if (!batch.AppendAndAttend(l, a.agents, f.k.data(), f.v.data(), f.q.data(), f.out.data(), pool).ok())
        std::exit(1);
    batch.Commit(a.agents);
    peak.See(store);
  }
  return peak;
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--agents") a.agents = std::stoul(next());
    else if (s == "--doc") a.doc = std::stoul(next());
    else if (s == "--prompt") a.prompt = std::stoul(next());
    else if (s == "--gen") a.gen = std::stoul(next());
    else if (s == "--kv") a.kv = next();
    else if (s == "--window") a.window = next();
    else if (s[0] != '-' && a.model.empty()) a.model = s;
    else {
      std::fprintf(stderr, "usage: %s MODEL.gguf [--agents N] [--doc N] [--prompt N] [--gen N] [--kv K/V,...] [--window f16|q8]\n",
                   argv[0]);
      return 2;
    }
  }
  auto model = Model::Load(a.model);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  const ModelConfig& c = model.value()->config();
  auto wf = ParseWindowFormat(a.window);
  if (!wf.ok()) {
    std::fprintf(stderr, "--window: %s\n", wf.status().message().c_str());
    return 2;
  }
  size_t local = 0;
  for (size_t l = 0; l < c.n_layer; ++l) local += c.is_local(l);
  std::printf("# %s: %zu layers (%zu sliding-window), %zu KV heads x %zu; doc %zu tokens, %zu agents x (%zu prompt + %zu "
              "generated), window rows %s\n",
              a.model.c_str(), c.n_layer, local, c.n_head_kv, c.head_dim, a.doc, a.agents, a.prompt, a.gen,
              a.window.c_str());
  std::printf("| KV K/V | scenario | all global (bytes) | sliding windows (bytes) | ratio | blocks global / windowed |\n");
  std::printf("|---|---|---|---|---|---|\n");
  ThreadPool pool(2);
  for (size_t b = 0; b < a.kv.size();) {
    size_t e = a.kv.find(',', b);
    if (e == std::string::npos) e = a.kv.size();
    const std::string pair = a.kv.substr(b, e - b);
    b = e + 1;
    const size_t slash = pair.find('/');
    auto cfg = MakeKvConfig(pair.substr(0, slash), pair.substr(slash + 1), c);
    if (!cfg.ok()) {
      std::fprintf(stderr, "--kv %s: %s\n", pair.c_str(), cfg.status().message().c_str());
      return 2;
    }
    UniformPolicy policy(cfg->k, cfg->v, 0);
    KvStoreOptions global{.n_layer = c.n_layer,
                          .shape = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim},
                          .window = *wf};
    KvStoreOptions windowed = global;
    windowed.layer_window = c.layer_window;
    const Peak g1 = Context(c, global, policy, a.doc, pool), w1 = Context(c, windowed, policy, a.doc, pool);
    std::printf("| %s | %zu-token context | %zu | %zu | %.3f | %zu / %zu |\n", pair.c_str(), a.doc, g1.total, w1.total,
                double(w1.total) / g1.total, g1.blocks, w1.blocks);
    const Peak g2 = Agents(c, global, policy, a, pool), w2 = Agents(c, windowed, policy, a, pool);
    std::printf("| %s | %zu agents on a %zu-token document | %zu | %zu | %.3f | %zu / %zu |\n", pair.c_str(), a.agents,
                a.doc, g2.total, w2.total, double(w2.total) / g2.total, g2.blocks, w2.blocks);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) { return chorus::Main(argc, argv); }
