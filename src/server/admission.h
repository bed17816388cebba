// HttpServer::Admission: a generation request checked, tokenized and ready to enqueue (routes.cc
// makes it; the chat, completions and Responses handlers use it).
#pragma once
#include <memory>
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
};

}  // namespace chorus::server
