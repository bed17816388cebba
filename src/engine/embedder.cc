// Embedder (include/chorus/embedder.h) over the MiniLM/BERT encoder of src/encoder.
#include "chorus/embedder.h"

#include "encoder/minilm_encoder.h"

namespace chorus {

struct Embedder::Impl {
  std::unique_ptr<BertEncoder> bert;
};

Embedder::Embedder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Embedder::~Embedder() = default;

Result<std::unique_ptr<Embedder>> Embedder::Open(const std::string& dir, int threads) {
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<BertEncoder> bert, BertEncoder::Open(dir, threads));
  return std::unique_ptr<Embedder>(new Embedder(std::make_unique<Impl>(Impl{std::move(bert)})));
}

std::string Embedder::name() const { return impl_->bert->name(); }
size_t Embedder::dim() const { return impl_->bert->dim(); }
size_t Embedder::max_tokens() const { return impl_->bert->config().max_seq_len; }

Result<Embedder::Batch> Embedder::Embed(const std::vector<std::string>& texts) {
  std::vector<std::vector<int32_t>> ids;
  Batch b;
  for (const std::string& t : texts) {
    ids.push_back(impl_->bert->Tokenize(t));
    b.tokens += ids.back().size();
  }
  CHORUS_ASSIGN_OR_RETURN(b.vectors, impl_->bert->EmbedIds(ids));
  return b;
}

}  // namespace chorus
