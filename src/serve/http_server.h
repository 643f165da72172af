// The listening socket and its connections: one thread per connection up to max_connections,
// and at most max_connections_per_ip from one client address; a connection beyond either is
// answered (503 or 429) at once and closed, so a flood cannot exhaust threads and one client
// cannot take every slot. Each connection serves requests in turn (keep-alive) under HttpLimits.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "base/status.h"
#include "serve/http.h"

namespace rw::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: an ephemeral port (see HttpServer::port())
  HttpLimits limits;
  int max_connections = 64;
  int max_connections_per_ip = 32;  // 0: no limit
};

// Serves one request: writes the whole response on conn. Returns whether the connection may
// serve another request (the response said keep-alive and was written completely).
using HttpHandler = std::function<bool(const HttpRequest& req, HttpConnection& conn)>;
// Answers a request the connection layer refused (bad syntax, too large, too slow, too many
// connections) on a connection that will close.
using HttpErrorWriter =
    std::function<void(HttpConnection& conn, int status, const std::string& message)>;

class HttpServer {
 public:
  HttpServer() = default;
  ~HttpServer();

  Status Start(const HttpServerOptions& options, HttpHandler handler, HttpErrorWriter on_error);
  int port() const { return port_; }
  // Stops accepting, shuts every connection down and waits for their threads.
  void Stop();
  int active_connections() const { return active_.load(); }

 private:
  void AcceptLoop();
  void Serve(int fd, std::string peer, uint64_t id);
  // Answers a connection that is not served at once and closes it.
  void Refuse(int fd, int status, const std::string& message);

  HttpServerOptions options_;
  HttpHandler handler_;
  HttpErrorWriter on_error_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> active_{0};
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::set<HttpConnection*> conns_;
  std::map<std::string, int> per_ip_;  // open connections by client address (under mu_)
  uint64_t next_id_ = 1;
};

}  // namespace rw::serve
