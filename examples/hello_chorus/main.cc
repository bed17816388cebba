// hello_chorus: open a model, share a document once, spawn an agent with a question, print its
// answer. Usage: hello_chorus MODEL.gguf DOCUMENT.txt "QUESTION"
#include <chorus/engine.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

static int Fail(const chorus::Status& status) {
  std::fprintf(stderr, "hello_chorus: %s\n", status.message().c_str());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf DOCUMENT.txt QUESTION\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[2]);
  std::stringstream document;
  if (!(document << file.rdbuf())) return Fail(chorus::Status::Error(std::string("cannot read ") + argv[2]));

  auto opened = chorus::Engine::Open({.model_path = argv[1]});
  if (!opened.ok()) return Fail(opened.status());
  std::unique_ptr<chorus::Engine> engine = std::move(opened).value();

  // The model's chat template around one user turn: the document opens the turn (the shared part,
  // prefilled and compressed once for every agent that reads it), the question closes it.
  const std::string mark = "\x01";
  auto chat = engine->RenderChat({{.role = "user", .content = mark}});
  if (!chat.ok()) return Fail(chat.status());
  const size_t at = chat->find(mark);
  auto context = engine->Share(chat->substr(0, at) + document.str());
  if (!context.ok()) return Fail(context.status());

  auto agent =
      engine->Spawn(*context, "\n\nQuestion: " + std::string(argv[3]) + chat->substr(at + 1), {.max_tokens = 64});
  if (!agent.ok()) return Fail(agent.status());
  while (engine->running() > 0) {
    if (chorus::Status s = engine->Step(); !s.ok()) return Fail(s);
  }
  const chorus::AgentState* answer = engine->agent(*agent);
  if (!answer->error.empty()) return Fail(chorus::Status::Error(answer->error));
  std::printf("Q: %s\nA: %s\n", argv[3], answer->text.c_str());
  return 0;
}
