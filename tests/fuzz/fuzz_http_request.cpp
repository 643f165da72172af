// libFuzzer target: the HTTP/1.1 request reader, fed through a real socket pair exactly as the
// server's connection threads feed it. The input is everything a client sends before closing its
// write side; requests are read until the connection closes or a request is refused, so
// pipelining, bodies and the limits are all in play. Accepted requests are checked against what
// the router relies on.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "serve/http.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_http_request: broken promise: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Inputs larger than a socket buffer would block the writer; the reader's limits are scaled
  // down instead so that every limit can still be crossed.
  if (size > 64 * 1024) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) abort();
  int buf = 256 * 1024;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fds[1], data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) abort();
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fds[1], SHUT_WR);

  rw::serve::HttpLimits limits;
  limits.max_header_bytes = 2048;
  limits.max_headers = 16;
  limits.max_body_bytes = 4096;
  // Everything has arrived already; short deadlines keep a would-be wait from stalling the run.
  limits.idle_timeout_ms = limits.header_timeout_ms = limits.body_timeout_ms = 200;
  limits.write_timeout_ms = 200;
  {
    rw::serve::HttpConnection conn(fds[0], limits);
    for (int i = 0; i < 1000; ++i) {
      rw::serve::HttpRequest req;
      const rw::serve::ReadOutcome r = conn.ReadRequest(&req);
      if (r.kind != rw::serve::ReadOutcome::Kind::kRequest) {
        if (r.kind == rw::serve::ReadOutcome::Kind::kError)
          Require(r.status >= 400 && r.status < 600 && !r.message.empty(), "bad refusal");
        break;
      }
      Require(!req.method.empty() && !req.target.empty(), "empty method or target");
      Require(req.path.size() <= req.target.size(), "path longer than target");
      Require(req.body.size() <= limits.max_body_bytes, "body over the limit");
      Require(req.headers.size() <= limits.max_headers, "too many headers");
      for (const auto& [name, value] : req.headers)
        for (char c : name) Require(c < 'A' || c > 'Z', "header name not lower-cased");
      // The server answers every request; a reply must not fail on a live socket.
      conn.Send(200, {}, "ok", req.keep_alive);
    }
  }  // closes fds[0]
  // Drain what the server side wrote (100-continue, replies) so the next run starts clean.
  char sink[4096];
  while (::recv(fds[1], sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  ::close(fds[1]);
  return 0;
}
