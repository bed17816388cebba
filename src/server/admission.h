// HttpServer::Admission: a generation request checked, tokenized and ready to enqueue (routes.cc
// makes it; the chat, completions and Responses handlers use it).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "channel.h"      // Channel
#include "http_server.h"  // HttpServer
#include "metrics.h"      // EngineGauges
#include "protocol.h"     // ResponseIds

namespace chorus::server {

struct HttpServer::Admission {
  std::shared_ptr<Channel> ch;                 // prompt, options, ids set; not yet enqueued
  std::vector<std::shared_ptr<Channel>> more;  // choices 1..n-1: the same prompt, seed + i
  std::string prompt_text;                     // chat: the rendered prompt
  size_t n_prompt = 0;
  size_t need = 0;     // the KV bytes EstimateBytes projects
  EngineGauges gauge;  // when it was admitted (the 503 message quotes it)
  ResponseIds ids;
  // Completions with echo: the prompt's text, and with logprobs its tokens' (Engine::Score; the
  // first has a NaN logprob: nothing predicts it). echo_unshown: leading prompt tokens the text
  // does not show (a BOS the tokenizer added).
  std::string echo;
  std::vector<TokenLogprob> prompt_logprobs;
  size_t echo_unshown = 0;
  bool prompt_only = false;  // max_tokens 0 (with echo): nothing is generated or enqueued
};

}  // namespace chorus::server
