// A small HTTP/1.1 connection: reads requests under hard limits (header bytes and count, body
// size, an idle deadline between requests, a header deadline and a body deadline once a request
// has begun, so a slow sender cannot hold a worker), writes responses with a write deadline
// (fixed-length or chunked for streams), and tells whether the peer has gone away while the
// server is busy on its behalf. No TLS: put a TLS proxy in front before exposing it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rw::serve {

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;  // request line + headers
  size_t max_headers = 100;
  size_t max_body_bytes = 4u << 20;
  int idle_timeout_ms = 30000;    // waiting for the first byte of a request
  int header_timeout_ms = 10000;  // from the first byte to the end of the headers
  int body_timeout_ms = 30000;    // from the end of the headers to the end of the body
  int write_timeout_ms = 30000;   // any one write to a client that does not read
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;  // as sent
  std::string path;    // target without the query
  std::string query;
  int minor_version = 1;  // HTTP/1.<minor>
  HeaderList headers;     // names lower-cased
  std::string body;
  bool keep_alive = true;

  // The first header of that (lower-case) name, or "".
  const std::string& Header(std::string_view name) const;
};

// What reading a request came to.
struct ReadOutcome {
  enum class Kind {
    kRequest,  // a complete request
    kClosed,   // the peer closed (or stayed idle) between requests: close without a word
    kError,    // a bad or too slow request: answer `status` with `message`, then close
  };
  Kind kind = Kind::kClosed;
  int status = 0;
  std::string message;
};

const char* HttpReason(int status);

class HttpConnection {
 public:
  // Takes ownership of the connected socket fd.
  HttpConnection(int fd, const HttpLimits& limits);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  ReadOutcome ReadRequest(HttpRequest* req);

  // A complete response. Content-Length, Connection and Date-less minimal headers are added.
  bool Send(int status, const HeaderList& headers, std::string_view body, bool keep_alive);
  // A streamed response (Transfer-Encoding: chunked): start, chunks, end.
  bool StartChunked(int status, const HeaderList& headers);
  bool SendChunk(std::string_view data);
  bool EndChunked();

  // Whether the peer has closed or reset the connection (does not consume pipelined data).
  bool PeerGone();
  // Whether a write has failed (the response was cut off): the connection must close.
  bool broken() const { return broken_; }
  // Unblocks any read or write in progress from another thread (server shutdown).
  void Shutdown();
  int fd() const { return fd_; }

 private:
  bool WriteAll(std::string_view data);
  // Reads more bytes into in_ until deadline_ns (CLOCK_MONOTONIC); 0 on EOF, -1 on error or
  // timeout (timed_out set), else bytes read.
  long ReadMore(int64_t deadline_ns, bool* timed_out);

  int fd_;
  HttpLimits limits_;
  std::string in_;  // bytes read but not consumed (pipelining)
  bool broken_ = false;
};

int64_t MonotonicNanos();

}  // namespace rw::serve
