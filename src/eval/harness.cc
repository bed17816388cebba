// Shared pieces of the evaluation harnesses (see harness.h).
#include "eval/harness.h"

#include <algorithm>
#include <cstdlib>  // getloadavg
#include <fstream>
#include <sstream>

#include "model/chat_template.h"  // ApplyChatTemplate

namespace chorus::eval {

Result<std::unique_ptr<Model>> LoadModel(const std::string& path, const ModelLoadOptions& options) {
  if (path.empty()) return Status::Error("no model given (use -m MODEL.gguf; scripts/fetch_model.sh fetches one)");
  return Model::Load(path, options);
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read file '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double LoadAverage() {
  double l[1];
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

Result<std::pair<std::string, std::string>> ChatFrame(const Model& model) {
  const std::string mark = "\x01CHORUS_CONTENT\x01";
  auto tmpl = model.chat_template();
  if (!tmpl) return std::pair<std::string, std::string>{"", "\nAnswer:"};
  std::vector<ChatMessage> msgs{{"user", mark}};
  auto text = ApplyChatTemplate(*tmpl, msgs, true);
  if (!text.ok()) return text.status();
  const size_t at = text->find(mark);
  return std::pair<std::string, std::string>{text->substr(0, at), text->substr(at + mark.size())};
}

Result<std::pair<std::string, std::string>> ChatFrame(const Engine& engine) {
  const std::string mark = "\x01CHORUS_CONTENT\x01";
  if (!engine.has_chat_template()) return std::pair<std::string, std::string>{"", "\nAnswer:"};
  auto text = engine.RenderChat({{"user", mark}});
  if (!text.ok()) return text.status();
  const size_t at = text->find(mark);
  return std::pair<std::string, std::string>{text->substr(0, at), text->substr(at + mark.size())};
}

}  // namespace chorus::eval
