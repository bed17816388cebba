// Server (include/chorus/server.h): the public door to HttpServer. Create reads the tenants before
// any engine exists; Bind builds the HttpServer over the engine and binds it.
#include "chorus/server.h"

#include <atomic>
#include <optional>

#include "http_server.h"  // HttpServer, HttpOptions
#include "tenants.h"      // Tenants

namespace chorus {

struct Server::Impl {
  ServerOptions options;
  std::optional<server::Tenants> tenants;  // api_keys_file's
  std::unique_ptr<Embedder> embedder;      // until Bind hands it to the HttpServer
  std::unique_ptr<server::HttpServer> http;
  bool bind_called = false;
  std::atomic<server::HttpServer*> bound{nullptr};  // http once Bind succeeded (Shutdown's view)
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (!options.api_keys_file.empty()) {
    if (!options.api_key.empty())
      return Status::Error("an API key and an API keys file (" + options.api_keys_file +
                           ") were both given: use one (the file names each tenant's keys)");
    CHORUS_ASSIGN_OR_RETURN(server::Tenants t, server::Tenants::Load(options.api_keys_file));
    impl->tenants = std::move(t);
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

size_t Server::tenants() const { return impl_->tenants ? impl_->tenants->size() : 0; }

void Server::SetEmbedder(std::unique_ptr<Embedder> embedder) { impl_->embedder = std::move(embedder); }

Status Server::Bind(Engine& engine) {
  if (impl_->bind_called) return Status::Error("Server::Bind was called twice: a Server binds once");
  impl_->bind_called = true;
  const ServerOptions& o = impl_->options;
  impl_->http =
      std::make_unique<server::HttpServer>(engine, server::HttpOptions{.host = o.host,
                                                                       .port = o.port,
                                                                       .api_key = o.api_key,
                                                                       .tenants = impl_->tenants,
                                                                       .max_queue = o.max_queue,
                                                                       .max_body_bytes = o.max_body_bytes,
                                                                       .default_max_tokens = o.default_max_tokens,
                                                                       .model_id = o.model_id,
                                                                       .http_threads = o.http_threads,
                                                                       .retry_after_s = o.retry_after_s,
                                                                       .max_running = o.max_running});
  if (impl_->embedder) impl_->http->SetEmbedder(std::move(impl_->embedder));
  if (Status s = impl_->http->Bind(); !s.ok()) {
    impl_->http.reset();  // nothing of a failed Bind refers to the engine
    return s;
  }
  impl_->bound.store(impl_->http.get());
  return Status::Ok();
}

int Server::port() const { return impl_->http ? impl_->http->port() : 0; }

void Server::Serve() {
  if (server::HttpServer* http = impl_->bound.load()) http->Serve();
}

void Server::Shutdown(const std::string& reason) {
  if (server::HttpServer* http = impl_->bound.load()) http->Shutdown(reason);
}

}  // namespace chorus
