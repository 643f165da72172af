// redwing's OpenAI-compatible server: routes, authentication, CORS, the chat and completion
// endpoints (whole or streamed as server-sent events), and the chat page. HTTP threads parse,
// render and tokenize; the EngineLoop thread alone runs the model.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "serve/api_request.h"
#include "serve/chat_history.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"

namespace rw::serve {

struct ServerOptions {
  HttpServerOptions http;
  // Accepted API keys (Authorization: Bearer <key>); none: no authentication. Each key is its
  // own client for the prompt cache.
  std::vector<std::string> api_keys;
  // Origins that browsers may call the API from, besides loopback origins (http(s)://localhost,
  // 127.0.0.1 and [::1], any port) and the server's own page; "*" allows every origin.
  std::vector<std::string> cors_origins;
  std::string model_id = "gemma-4-26b-a4b-it";
  RequestLimits request_limits;
  ApiDefaults defaults;
  EngineLoopOptions loop;
  int keepalive_ms = 2000;  // SSE comment after this long without a write while waiting
};

class Server {
 public:
  Server(std::shared_ptr<const Engine> engine, ServerOptions options);
  ~Server();

  Status Start();
  int port() const { return http_.port(); }
  void Stop();

 private:
  struct Stream;
  bool Handle(const HttpRequest& req, HttpConnection& conn);
  // client: who is asking (an API key, else the connection), so that the prompt cache serves
  // each client only its own prompts.
  bool HandleCompletion(const HttpRequest& req, HttpConnection& conn, bool chat,
                        const std::string& client);
  bool OriginAllowed(const HttpRequest& req) const;
  bool SendJson(HttpConnection& conn, const HttpRequest& req, int status, const Json& body,
                const HeaderList& extra = {});
  bool SendError(HttpConnection& conn, const HttpRequest* req, const ApiError& e,
                 const HeaderList& extra = {});
  HeaderList CommonHeaders(const HttpRequest* req) const;
  Json HealthJson() const;
  Json ModelJson() const;

  std::shared_ptr<const Engine> engine_;
  ServerOptions options_;
  EngineLoop loop_;
  HttpServer http_;
  ChatHistory history_;
  int64_t created_ = 0;
  std::atomic<uint64_t> next_id_{1};
};

// The chat page served at GET / (self-contained: no external resources).
const std::string& ChatPageHtml();
// The icon served at /favicon.ico (SVG).
const std::string& FaviconSvg();

}  // namespace rw::serve
