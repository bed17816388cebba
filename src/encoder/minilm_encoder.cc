// BertEncoder: opening a sentence-transformers directory (configs validated, weights loaded to f32).
#include "encoder/minilm_encoder.h"

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "encoder/bert_weights.h"
#include "encoder/safetensors.h"

namespace chorus {
namespace {

Result<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("'{}' is not a JSON object", path);
  return j;
}

Result<size_t> PositiveInt(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || !j[key].is_number_unsigned() || j[key].get<uint64_t>() == 0 ||
      j[key].get<uint64_t>() > (1u << 20))
    return Status::Error("'{}': '{}' must be a positive integer", file, key);
  return j[key].get<size_t>();
}

Status ParseConfig(const std::string& dir, BertConfig& c) {
  const std::string path = dir + "/config.json";
  CHORUS_ASSIGN_OR_RETURN(nlohmann::json j, ReadJson(path));
  const std::string type = j.value("model_type", std::string("(none)"));
  if (type != "bert") return Status::Error("'{}': model_type '{}' is not supported (need bert)", path, type);
  if (j.value("hidden_act", std::string("gelu")) != "gelu")
    return Status::Error("'{}': hidden_act '{}' is not supported (need gelu)", path, j.value("hidden_act", ""));
  if (j.value("position_embedding_type", std::string("absolute")) != "absolute")
    return Status::Error("'{}': position_embedding_type must be absolute", path);
  CHORUS_ASSIGN_OR_RETURN(c.vocab, PositiveInt(j, "vocab_size", path));
  CHORUS_ASSIGN_OR_RETURN(c.hidden, PositiveInt(j, "hidden_size", path));
  CHORUS_ASSIGN_OR_RETURN(c.heads, PositiveInt(j, "num_attention_heads", path));
  CHORUS_ASSIGN_OR_RETURN(c.layers, PositiveInt(j, "num_hidden_layers", path));
  CHORUS_ASSIGN_OR_RETURN(c.intermediate, PositiveInt(j, "intermediate_size", path));
  CHORUS_ASSIGN_OR_RETURN(c.max_positions, PositiveInt(j, "max_position_embeddings", path));
  CHORUS_ASSIGN_OR_RETURN(c.type_vocab, PositiveInt(j, "type_vocab_size", path));
  if (c.hidden % c.heads != 0) return Status::Error("'{}': hidden_size {} is not a multiple of {} heads", path, c.hidden, c.heads);
  if (j.contains("layer_norm_eps") && j["layer_norm_eps"].is_number()) c.ln_eps = j["layer_norm_eps"].get<float>();

  const std::string st_path = dir + "/sentence_bert_config.json";
  CHORUS_ASSIGN_OR_RETURN(nlohmann::json st, ReadJson(st_path));
  CHORUS_ASSIGN_OR_RETURN(c.max_seq_len, PositiveInt(st, "max_seq_length", st_path));
  if (c.max_seq_len > c.max_positions || c.max_seq_len < 2)
    return Status::Error("'{}': max_seq_length {} outside [2, {}]", st_path, c.max_seq_len, c.max_positions);

  const std::string pool_path = dir + "/1_Pooling/config.json";
  CHORUS_ASSIGN_OR_RETURN(nlohmann::json pj, ReadJson(pool_path));
  const bool mean = pj.value("pooling_mode_mean_tokens", false);
  const bool other = pj.value("pooling_mode_cls_token", false) || pj.value("pooling_mode_max_tokens", false) ||
                     pj.value("pooling_mode_mean_sqrt_len_tokens", false);
  if (!mean || other) return Status::Error("'{}': only mean pooling is supported", pool_path);
  if (pj.contains("word_embedding_dimension") && pj["word_embedding_dimension"] != c.hidden)
    return Status::Error("'{}': word_embedding_dimension != hidden_size {}", pool_path, c.hidden);
  return Status::Ok();
}

Status LoadLinear(const SafetensorsFile& f, const std::string& pre, size_t out, size_t in, BertLinear& l) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<float> w, f.ReadF32(pre + ".weight", {int64_t(out), int64_t(in)}));
  CHORUS_ASSIGN_OR_RETURN(std::vector<float> b, f.ReadF32(pre + ".bias", {int64_t(out)}));
  l = PackMatrix(w.data(), out, in, b);
  return Status::Ok();
}

Status LoadNorm(const SafetensorsFile& f, const std::string& pre, size_t n, BertNorm& ln) {
  CHORUS_ASSIGN_OR_RETURN(ln.g, f.ReadF32(pre + ".weight", {int64_t(n)}));
  CHORUS_ASSIGN_OR_RETURN(ln.b, f.ReadF32(pre + ".bias", {int64_t(n)}));
  return Status::Ok();
}

Status LoadWeights(const SafetensorsFile& f, const BertConfig& c, BertEncoder::Weights& w) {
  // Some exports prefix every name with "bert."; accept both.
  const std::string p = f.Find("embeddings.word_embeddings.weight") ? "" : "bert.";
  const int64_t H = c.hidden;
  CHORUS_ASSIGN_OR_RETURN(w.word, f.ReadF32(p + "embeddings.word_embeddings.weight", {int64_t(c.vocab), H}));
  CHORUS_ASSIGN_OR_RETURN(w.pos, f.ReadF32(p + "embeddings.position_embeddings.weight", {int64_t(c.max_positions), H}));
  CHORUS_ASSIGN_OR_RETURN(w.type, f.ReadF32(p + "embeddings.token_type_embeddings.weight", {int64_t(c.type_vocab), H}));
  CHORUS_RETURN_IF_ERROR(LoadNorm(f, p + "embeddings.LayerNorm", c.hidden, w.emb_ln));
  w.layers.resize(c.layers);
  for (size_t i = 0; i < c.layers; ++i) {
    const std::string l = p + "encoder.layer." + std::to_string(i) + ".";
    BertLayer& L = w.layers[i];
    CHORUS_RETURN_IF_ERROR(LoadLinear(f, l + "attention.self.query", c.hidden, c.hidden, L.q));
    CHORUS_RETURN_IF_ERROR(LoadLinear(f, l + "attention.self.key", c.hidden, c.hidden, L.k));
    CHORUS_RETURN_IF_ERROR(LoadLinear(f, l + "attention.self.value", c.hidden, c.hidden, L.v));
    CHORUS_RETURN_IF_ERROR(LoadLinear(f, l + "attention.output.dense", c.hidden, c.hidden, L.o));
    CHORUS_RETURN_IF_ERROR(LoadNorm(f, l + "attention.output.LayerNorm", c.hidden, L.attn_ln));
    CHORUS_RETURN_IF_ERROR(LoadLinear(f, l + "intermediate.dense", c.intermediate, c.hidden, L.ff_in));
    CHORUS_RETURN_IF_ERROR(LoadLinear(f, l + "output.dense", c.hidden, c.intermediate, L.ff_out));
    CHORUS_RETURN_IF_ERROR(LoadNorm(f, l + "output.LayerNorm", c.hidden, L.out_ln));
  }
  if (f.Find(p + "encoder.layer." + std::to_string(c.layers) + ".output.dense.weight") != nullptr)
    return Status::Error("safetensors '{}' has more layers than config num_hidden_layers {}", f.path(), c.layers);
  return Status::Ok();
}

}  // namespace

BertEncoder::~BertEncoder() = default;

Result<std::unique_ptr<BertEncoder>> BertEncoder::Open(const std::string& dir, int n_threads) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0)
    return Status::Error("encoder directory '{}' does not exist (run scripts/fetch_encoder.sh)", dir);
  if (!S_ISDIR(st.st_mode))
    return Status::Error("encoder '{}' is a file, not a model directory (model.safetensors + tokenizer.json + "
                         "config.json, as scripts/fetch_encoder.sh installs them)", dir);
  if (n_threads < 1) return Status::Error("encoder: n_threads must be >= 1, got {}", n_threads);
  std::unique_ptr<BertEncoder> e(new BertEncoder());
  Status s = ParseConfig(dir, e->cfg_);
  if (!s.ok()) return s.Context("opening encoder");
  Result<BertTokenizer> tok = BertTokenizer::FromTokenizerJson(dir + "/tokenizer.json");
  if (!tok.ok()) return tok.status().Context("opening encoder");
  e->tok_ = std::move(*tok);
  if (e->tok_.vocab_size() != e->cfg_.vocab)
    return Status::Error("opening encoder: tokenizer has {} tokens but config vocab_size is {}", e->tok_.vocab_size(),
                         e->cfg_.vocab);
  Result<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir + "/model.safetensors");
  if (!f.ok()) return f.status().Context("opening encoder");
  e->w_ = std::make_unique<Weights>();
  s = LoadWeights(**f, e->cfg_, *e->w_);
  if (!s.ok()) return s.Context("opening encoder");
  e->w_->pool = std::make_unique<ThreadPool>(n_threads);
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  e->name_ = base.substr(base.find_last_of('/') == std::string::npos ? 0 : base.find_last_of('/') + 1) + " (" + dir + ")";
  return e;
}

Result<std::unique_ptr<TextEncoder>> OpenMiniLmEncoder(const std::string& dir, int n_threads) {
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<BertEncoder> e, BertEncoder::Open(dir, n_threads));
  return std::unique_ptr<TextEncoder>(std::move(e));
}

}  // namespace chorus
