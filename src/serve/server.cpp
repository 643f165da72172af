#include "serve/server.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "base/timer.h"

namespace rw::serve {

namespace {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      const int h = hex(s[i + 1]), l = hex(s[i + 2]);
      if (h >= 0 && l >= 0) {
        out += static_cast<char>(h * 16 + l);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Splits "scheme://host[:port]" (no path); false if it is not of that shape.
bool SplitOrigin(std::string_view origin, std::string_view* scheme, std::string_view* host,
                 std::string_view* port) {
  const size_t sep = origin.find("://");
  if (sep == std::string_view::npos) return false;
  *scheme = origin.substr(0, sep);
  std::string_view rest = origin.substr(sep + 3);
  if (rest.empty() || rest.find('/') != std::string_view::npos) return false;
  size_t colon;
  if (rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    *host = rest.substr(0, close + 1);
    colon = close + 1;
    if (colon < rest.size() && rest[colon] != ':') return false;
  } else {
    colon = rest.find(':');
    *host = rest.substr(0, colon);
  }
  *port = colon < rest.size() ? rest.substr(colon + 1) : std::string_view();
  if (colon < rest.size() && !AllDigits(*port)) return false;
  return !host->empty();
}

// An IP address literal (dotted IPv4 or bracketed IPv6): a name that DNS cannot rebind.
bool IsIpLiteral(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return true;
  if (host.empty()) return false;
  for (char c : host)
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  return true;
}

ApiError MakeError(int status, std::string message, std::string type, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

}  // namespace

Server::Server(std::shared_ptr<const Engine> engine, ServerOptions options)
    : engine_(std::move(engine)), options_(std::move(options)), loop_(engine_, options_.loop) {
  created_ = static_cast<int64_t>(std::time(nullptr));
}

Server::~Server() {
  Stop();
}

Status Server::Start() {
  loop_.Start();
  return http_.Start(
      options_.http,
      [this](const HttpRequest& req, HttpConnection& conn) {
        try {
          return Handle(req, conn);
        } catch (const std::exception& e) {  // a bug, not the client's fault: answer 500
          return SendError(
              conn, &req,
              MakeError(500, std::string("internal error: ") + e.what(), "server_error", ""));
        }
      },
      [this](HttpConnection& conn, int status, const std::string& message) {
        const char* code = status == 408   ? "request_timeout"
                           : status == 413 ? "request_too_large"
                           : status == 429 ? "too_many_connections"
                           : status == 431 ? "headers_too_large"
                           : status == 503 ? "server_busy"
                                           : "invalid_request";
        ApiError e = MakeError(status, message,
                               status >= 500 ? "server_error" : "invalid_request_error", code);
        HeaderList extra;
        if (status == 503 || status == 429) extra.emplace_back("Retry-After", "1");
        SendError(conn, nullptr, e, extra);
      });
}

void Server::Stop() {
  http_.Stop();
  loop_.Stop();
}

bool Server::OriginAllowed(const HttpRequest& req) const {
  const std::string origin = Lower(req.Header("origin"));
  if (origin.empty()) return true;  // not a browser's cross-origin call
  for (const std::string& o : options_.cors_origins) {
    std::string_view allowed = o;
    while (allowed.size() > 1 && allowed.back() == '/') allowed.remove_suffix(1);
    if (allowed == "*" || Lower(allowed) == origin) return true;
  }
  std::string_view scheme, host, port;
  if (!SplitOrigin(origin, &scheme, &host, &port)) return false;
  if (scheme != "http" && scheme != "https") return false;
  if (host == "localhost" || host == "127.0.0.1" || host == "[::1]") return true;
  // The server's own page, opened by an address that DNS cannot rebind to another site (an IP
  // literal) or by the name it was told to listen on.
  const std::string own = Lower(req.Header("host"));
  if (own.empty() || scheme != "http" || std::string_view(origin).substr(7) != own) return false;
  return IsIpLiteral(host) || host == Lower(options_.http.host);
}

HeaderList Server::CommonHeaders(const HttpRequest* req) const {
  HeaderList h;
  if (req != nullptr && !req->Header("origin").empty() && OriginAllowed(*req)) {
    const bool any = std::find(options_.cors_origins.begin(), options_.cors_origins.end(), "*") !=
                     options_.cors_origins.end();
    h.emplace_back("Access-Control-Allow-Origin", any ? "*" : req->Header("origin"));
  }
  h.emplace_back("Vary", "Origin");
  h.emplace_back("Server", "redwing");
  return h;
}

bool Server::SendJson(HttpConnection& conn, const HttpRequest& req, int status, const Json& body,
                      const HeaderList& extra) {
  HeaderList h = CommonHeaders(&req);
  h.emplace_back("Content-Type", "application/json");
  h.insert(h.end(), extra.begin(), extra.end());
  conn.Send(status, h, body.dump(-1, ' ', false, Json::error_handler_t::replace), req.keep_alive,
            req.method == "HEAD");
  return req.keep_alive && !conn.broken();
}

bool Server::SendError(HttpConnection& conn, const HttpRequest* req, const ApiError& e,
                       const HeaderList& extra) {
  HeaderList h = CommonHeaders(req);
  h.emplace_back("Content-Type", "application/json");
  h.insert(h.end(), extra.begin(), extra.end());
  // Errors of the connection layer (no request) close; request errors keep the connection.
  const bool keep = req != nullptr && req->keep_alive;
  conn.Send(e.status, h, ApiErrorBody(e), keep, req != nullptr && req->method == "HEAD");
  return keep && !conn.broken();
}

Json Server::ModelJson() const {
  return Json{{"id", options_.model_id},
              {"object", "model"},
              {"created", created_},
              {"owned_by", "redwing"},
              {"max_context", engine_->max_context()},
              {"defaults", ApiDefaultsJson(options_.defaults)}};
}

Json Server::HealthJson() const {
  const RssBreakdown rss = CurrentRss();
  return Json{{"status", "ok"},
              {"model", options_.model_id},
              {"busy", loop_.busy()},
              {"queued", loop_.queued()},
              {"max_queue", options_.loop.max_queue},
              {"requests_done", loop_.jobs_done()},
              {"context_tokens", loop_.context_tokens()},
              {"max_context", engine_->max_context()},
              {"rss_bytes", rss.anon + rss.file},
              {"rss_anon_bytes", rss.anon},
              {"rss_file_bytes", rss.file},
              {"peak_rss_bytes", PeakRssBytes()},
              {"connections", http_.active_connections()}};
}

bool Server::Handle(const HttpRequest& req, HttpConnection& conn) {
  std::string path = req.path;
  // Every /v1 route is also under /api/v1.
  if (path.rfind("/api/v1/", 0) == 0 || path == "/api/v1") path = path.substr(4);
  const bool api = path.rfind("/v1/", 0) == 0 || path == "/v1";

  // A browser page from an origin not allowed gets nothing done: a "simple" cross-origin POST
  // needs no preflight, so refusing only to show the answer would still run the request.
  if (!OriginAllowed(req))
    return SendError(conn, &req,
                     MakeError(403,
                               fmt::format("the origin {} may not use this server (allow it "
                                           "with --cors-origin)",
                                           req.Header("origin")),
                               "invalid_request_error", "origin_not_allowed"));

  if (req.method == "OPTIONS") {  // CORS preflight
    HeaderList h = CommonHeaders(&req);
    h.emplace_back("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    const std::string& asked = req.Header("access-control-request-headers");
    h.emplace_back("Access-Control-Allow-Headers",
                   asked.empty() ? "Authorization, Content-Type" : asked);
    h.emplace_back("Access-Control-Max-Age", "86400");
    conn.Send(204, h, "", req.keep_alive);
    return req.keep_alive && !conn.broken();
  }

  // Which route, and which methods it takes.
  enum class Route { kNone, kPage, kIcon, kHealth, kModels, kModel, kChat, kCompletions };
  Route route = Route::kNone;
  const char* allow = "GET";
  if (path == "/" || path == "/index.html") {
    route = Route::kPage;
  } else if (path == "/favicon.ico") {
    route = Route::kIcon;
  } else if (path == "/health") {
    route = Route::kHealth;
  } else if (path == "/v1/models") {
    route = Route::kModels;
  } else if (path.rfind("/v1/models/", 0) == 0) {
    route = Route::kModel;
  } else if (path == "/v1/chat/completions") {
    route = Route::kChat;
    allow = "POST";
  } else if (path == "/v1/completions") {
    route = Route::kCompletions;
    allow = "POST";
  }
  if (route == Route::kNone)
    return SendError(conn, &req,
                     MakeError(404, fmt::format("no route for {} {}", req.method, req.path),
                               "invalid_request_error", "not_found"));
  // HEAD goes wherever GET does: the same headers, no body.
  const bool get = std::string_view(allow) == "GET";
  if (req.method != allow && !(get && req.method == "HEAD"))
    return SendError(conn, &req,
                     MakeError(405, fmt::format("{} takes {}, not {}", req.path, allow, req.method),
                               "invalid_request_error", "method_not_allowed"),
                     {{"Allow", std::string(allow) + (get ? ", HEAD, OPTIONS" : ", OPTIONS")}});
  const bool head = req.method == "HEAD";

  // Who asks, for the prompt cache: the API key, else this connection.
  std::string client = fmt::format("connection {}", conn.id());
  if (api && !options_.api_keys.empty()) {
    const std::string& auth = req.Header("authorization");
    // "Bearer" is a case-insensitive scheme name (RFC 9110), then one or more spaces.
    std::string_view given = auth;
    const bool bearer = given.size() > 6 && Lower(given.substr(0, 6)) == "bearer" &&
                        (given[6] == ' ' || given[6] == '\t');
    given.remove_prefix(bearer ? 6 : given.size());
    while (!given.empty() && (given.front() == ' ' || given.front() == '\t'))
      given.remove_prefix(1);
    bool ok = false;
    for (size_t i = 0; i < options_.api_keys.size(); ++i) {
      if (bearer && ConstantTimeEquals(given, options_.api_keys[i])) {
        ok = true;
        client = fmt::format("key {}", i);
      }
    }
    if (!ok)
      return SendError(conn, &req,
                       MakeError(401,
                                 auth.empty() ? "missing API key: send Authorization: Bearer <key>"
                                              : "incorrect API key",
                                 "invalid_request_error", "invalid_api_key"),
                       {{"WWW-Authenticate", "Bearer"}});
  }

  switch (route) {
    case Route::kPage: {
      HeaderList h = CommonHeaders(&req);
      h.emplace_back("Content-Type", "text/html; charset=utf-8");
      h.emplace_back("Cache-Control", "no-store");
      h.emplace_back("Content-Security-Policy",
                     "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
      conn.Send(200, h, ChatPageHtml(), req.keep_alive, head);
      return req.keep_alive && !conn.broken();
    }
    case Route::kIcon: {
      HeaderList h = CommonHeaders(&req);
      h.emplace_back("Content-Type", "image/svg+xml");
      h.emplace_back("Cache-Control", "max-age=86400");
      conn.Send(200, h, FaviconSvg(), req.keep_alive, head);
      return req.keep_alive && !conn.broken();
    }
    case Route::kHealth:
      return SendJson(conn, req, 200, HealthJson());
    case Route::kModels:
      return SendJson(conn, req, 200,
                      Json{{"object", "list"}, {"data", Json::array({ModelJson()})}});
    case Route::kModel: {
      const std::string id = UrlDecode(path.substr(std::string("/v1/models/").size()));
      if (id != options_.model_id)
        return SendError(conn, &req,
                         MakeError(404, fmt::format("the model '{}' does not exist", id),
                                   "invalid_request_error", "model_not_found"));
      return SendJson(conn, req, 200, ModelJson());
    }
    case Route::kChat:
      return HandleCompletion(req, conn, /*chat=*/true, client);
    case Route::kCompletions:
      return HandleCompletion(req, conn, /*chat=*/false, client);
    case Route::kNone:
      break;
  }
  return false;
}

}  // namespace rw::serve
