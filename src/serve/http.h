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
  int idle_timeout_ms = 30000;  // waiting for the first byte of a later request (keep-alive)
  // From the first byte to the end of the headers; for a connection's first request, from the
  // connection's start, so a client that connects and sends nothing holds a slot no longer.
  int header_timeout_ms = 10000;
  int body_timeout_ms = 30000;   // from the end of the headers to the end of the body
  int write_timeout_ms = 30000;  // any one write to a client that does not read
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
  // Takes ownership of the connected socket fd. peer: the client's address (for limits and
  // logs); id: a number unique to this connection within the server's life.
  HttpConnection(int fd, const HttpLimits& limits, std::string peer = "", uint64_t id = 0);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  ReadOutcome ReadRequest(HttpRequest* req);

  // A complete response. Content-Length, Connection and Date-less minimal headers are added.
  // head_only (a HEAD request): the headers, with the body's length, but not the body.
  bool Send(int status, const HeaderList& headers, std::string_view body, bool keep_alive,
            bool head_only = false);
  // A streamed response (Transfer-Encoding: chunked): start, chunks, end.
  bool StartChunked(int status, const HeaderList& headers);
  bool SendChunk(std::string_view data);
  bool EndChunked();

  // Whether the peer has gone: the connection was reset or a write failed (does not consume
  // pipelined data). A peer that has only shut down its sending side (end of file on reads) may
  // still be waiting for the response, so that alone is not "gone"; instead the response's
  // first bytes ("HTTP/1.1 ", the same for every status) are sent at once, which a peer that
  // has closed its socket answers with a reset that a later call sees.
  bool PeerGone();
  // Whether a write has failed (the response was cut off): the connection must close.
  bool broken() const { return broken_; }
  // Unblocks any read or write in progress from another thread (server shutdown).
  void Shutdown();
  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  uint64_t id() const { return id_; }

 private:
  bool WriteAll(std::string_view data);
  // Reads more bytes into in_ until deadline_ns (CLOCK_MONOTONIC); 0 on EOF, -1 on error or
  // timeout (timed_out set), else bytes read.
  long ReadMore(int64_t deadline_ns, bool* timed_out);

  // The head of a response, with what PeerGone already sent of it removed.
  std::string Head(int status, const HeaderList& headers);

  int fd_;
  HttpLimits limits_;
  std::string peer_;
  uint64_t id_ = 0;
  std::string in_;  // bytes read but not consumed (pipelining)
  bool broken_ = false;
  int64_t started_ns_ = 0;   // when the connection was accepted
  int requests_ = 0;         // requests read so far
  size_t prefix_sent_ = 0;   // bytes of "HTTP/1.1 " PeerGone sent ahead of the response
  bool responding_ = false;  // the response's head has been written
};

int64_t MonotonicNanos();

}  // namespace rw::serve
