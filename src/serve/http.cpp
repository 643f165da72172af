#include "serve/http.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rw::serve {

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

namespace {

int RemainingMs(int64_t deadline_ns) {
  const int64_t left = deadline_ns - MonotonicNanos();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((left + 999999) / 1000000, 1 << 30));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool IsTokenChar(char c) {
  if (c >= 'a' && c <= 'z') return true;
  if (c >= 'A' && c <= 'Z') return true;
  if (c >= '0' && c <= '9') return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

ReadOutcome Fail(int status, std::string message) {
  ReadOutcome o;
  o.kind = ReadOutcome::Kind::kError;
  o.status = status;
  o.message = std::move(message);
  return o;
}

// Whether a comma-separated header value lists `token` (case-insensitive).
bool HasToken(const std::string& value, std::string_view token) {
  const std::string v = Lower(value);
  size_t start = 0;
  while (start <= v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    if (Trim(std::string_view(v).substr(start, end - start)) == token) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

const std::string& HttpRequest::Header(std::string_view name) const {
  static const std::string kEmpty;
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return kEmpty;
}

const char* HttpReason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
  }
  return "Unknown";
}

namespace {
constexpr std::string_view kStatusPrefix = "HTTP/1.1 ";
}  // namespace

HttpConnection::HttpConnection(int fd, const HttpLimits& limits, std::string peer, uint64_t id)
    : fd_(fd), limits_(limits), peer_(std::move(peer)), id_(id), started_ns_(MonotonicNanos()) {}

HttpConnection::~HttpConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void HttpConnection::Shutdown() {
  ::shutdown(fd_, SHUT_RDWR);
}

long HttpConnection::ReadMore(int64_t deadline_ns, bool* timed_out) {
  *timed_out = false;
  char buf[16384];
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int ms = RemainingMs(deadline_ns);
    if (ms <= 0) {
      *timed_out = true;
      return -1;
    }
    const int r = ::poll(&p, 1, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) {
      *timed_out = true;
      return -1;
    }
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return -1;
    }
    in_.append(buf, static_cast<size_t>(n));
    return n;
  }
}

ReadOutcome HttpConnection::ReadRequest(HttpRequest* req) {
  *req = HttpRequest();
  bool timed_out = false;
  prefix_sent_ = 0;
  responding_ = false;
  // A new connection has the header timeout from its start for its first request, so silent
  // connections cannot hold slots for long; a kept-alive one may idle between requests.
  const bool first = requests_++ == 0;
  const int64_t header_ns = int64_t{limits_.header_timeout_ms} * 1000000;
  if (in_.empty()) {
    const int64_t wait_until = first
                                   ? started_ns_ + header_ns
                                   : MonotonicNanos() + int64_t{limits_.idle_timeout_ms} * 1000000;
    const long n = ReadMore(wait_until, &timed_out);
    if (n <= 0) return ReadOutcome{};  // closed, reset or idle too long: close quietly
  }
  // Headers: all of them before the header deadline.
  const int64_t header_deadline = (first ? started_ns_ : MonotonicNanos()) + header_ns;
  size_t header_end = std::string::npos, body_start = 0;
  for (;;) {
    // Tolerate (and skip) empty lines before the request line, as RFC 9112 allows.
    while (in_.size() >= 2 && in_.compare(0, 2, "\r\n") == 0) in_.erase(0, 2);
    while (!in_.empty() && in_[0] == '\n') in_.erase(0, 1);
    size_t p = in_.find("\r\n\r\n");
    size_t q = in_.find("\n\n");
    if (p != std::string::npos && (q == std::string::npos || p + 1 <= q)) {
      header_end = p;
      body_start = p + 4;
    } else if (q != std::string::npos) {
      header_end = q;
      body_start = q + 2;
    }
    if (header_end != std::string::npos) break;
    if (in_.size() > limits_.max_header_bytes)
      return Fail(431,
                  fmt::format("the request headers exceed {} bytes", limits_.max_header_bytes));
    const long n = ReadMore(header_deadline, &timed_out);
    if (n == 0) return ReadOutcome{};
    if (n < 0) {
      if (timed_out)
        return Fail(408, fmt::format("the request headers did not arrive within {} ms",
                                     limits_.header_timeout_ms));
      return ReadOutcome{};
    }
  }
  if (header_end > limits_.max_header_bytes)
    return Fail(431, fmt::format("the request headers exceed {} bytes", limits_.max_header_bytes));

  std::string_view head(in_.data(), header_end);
  // Request line.
  size_t eol = head.find('\n');
  std::string_view line = Trim(head.substr(0, eol));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.find(' ', sp2 + 1) != std::string_view::npos)
    return Fail(400, "malformed request line");
  req->method = std::string(line.substr(0, sp1));
  req->target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::string_view version = line.substr(sp2 + 1);
  if (req->method.empty() || !std::all_of(req->method.begin(), req->method.end(), IsTokenChar))
    return Fail(400, "malformed request method");
  if (req->target.empty() || req->target.size() > 8192 ||
      (req->target[0] != '/' && req->target != "*"))
    return Fail(400, "malformed request target");
  for (unsigned char c : req->target)
    if (c <= 0x20 || c >= 0x7f) return Fail(400, "malformed request target");
  if (version == "HTTP/1.1") {
    req->minor_version = 1;
  } else if (version == "HTTP/1.0") {
    req->minor_version = 0;
  } else if (version.substr(0, 5) == "HTTP/") {
    return Fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  } else {
    return Fail(400, "malformed request line");
  }
  const size_t qm = req->target.find('?');
  req->path = req->target.substr(0, qm);
  if (qm != std::string::npos) req->query = req->target.substr(qm + 1);

  // Header fields.
  std::string_view rest = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 1);
  while (!rest.empty()) {
    const size_t e = rest.find('\n');
    std::string_view l = rest.substr(0, e);
    rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 1);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    if (l[0] == ' ' || l[0] == '\t') return Fail(400, "folded header lines are not allowed");
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) return Fail(400, "malformed header line");
    std::string_view name = l.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), IsTokenChar))
      return Fail(400, "malformed header name");
    for (unsigned char c : l.substr(colon + 1))
      if ((c < 0x20 && c != '\t') || c == 0x7f) return Fail(400, "control character in a header");
    if (req->headers.size() >= limits_.max_headers)
      return Fail(431, fmt::format("more than {} request headers", limits_.max_headers));
    req->headers.emplace_back(Lower(name), std::string(Trim(l.substr(colon + 1))));
  }

  const std::string& connection = req->Header("connection");
  req->keep_alive =
      req->minor_version == 1 ? !HasToken(connection, "close") : HasToken(connection, "keep-alive");
  if (!req->Header("transfer-encoding").empty())
    return Fail(411, "chunked request bodies are not supported: send Content-Length");
  size_t length = 0;
  bool have_length = false;
  for (const auto& [k, v] : req->headers) {
    if (k != "content-length") continue;
    if (v.empty() || v.size() > 18 ||
        !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Fail(400, "malformed Content-Length");
    const size_t n = std::stoull(v);
    if (have_length && n != length) return Fail(400, "conflicting Content-Length headers");
    length = n;
    have_length = true;
  }
  in_.erase(0, body_start);
  if (length > limits_.max_body_bytes)
    return Fail(413, fmt::format("the request body has {} bytes; the limit is {}", length,
                                 limits_.max_body_bytes));
  if (length > 0 && HasToken(req->Header("expect"), "100-continue") && in_.empty()) {
    if (!WriteAll("HTTP/1.1 100 Continue\r\n\r\n")) return ReadOutcome{};
  }
  const int64_t body_deadline = MonotonicNanos() + int64_t{limits_.body_timeout_ms} * 1000000;
  while (in_.size() < length) {
    const long n = ReadMore(body_deadline, &timed_out);
    if (n == 0) return ReadOutcome{};
    if (n < 0) {
      if (timed_out)
        return Fail(408, fmt::format("the request body did not arrive within {} ms",
                                     limits_.body_timeout_ms));
      return ReadOutcome{};
    }
  }
  req->body = in_.substr(0, length);
  in_.erase(0, length);
  ReadOutcome ok;
  ok.kind = ReadOutcome::Kind::kRequest;
  return ok;
}

bool HttpConnection::WriteAll(std::string_view data) {
  if (broken_) return false;
  const int64_t deadline = MonotonicNanos() + int64_t{limits_.write_timeout_ms} * 1000000;
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const int ms = RemainingMs(deadline);
      if (ms > 0 && ::poll(&p, 1, ms) > 0 && !(p.revents & (POLLERR | POLLHUP))) continue;
    }
    broken_ = true;
    return false;
  }
  return true;
}

std::string HttpConnection::Head(int status, const HeaderList& headers) {
  std::string out = fmt::format("{}{} {}\r\n", kStatusPrefix, status, HttpReason(status));
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  out.erase(0, prefix_sent_);
  prefix_sent_ = 0;
  responding_ = true;
  return out;
}

bool HttpConnection::Send(int status, const HeaderList& headers, std::string_view body,
                          bool keep_alive, bool head_only) {
  std::string out = Head(status, headers);
  out += fmt::format("Content-Length: {}\r\nConnection: {}\r\n\r\n", body.size(),
                     keep_alive ? "keep-alive" : "close");
  if (!head_only) out.append(body);
  return WriteAll(out);
}

bool HttpConnection::StartChunked(int status, const HeaderList& headers) {
  std::string out = Head(status, headers);
  out += "Transfer-Encoding: chunked\r\n\r\n";
  return WriteAll(out);
}

bool HttpConnection::SendChunk(std::string_view data) {
  if (data.empty()) return true;
  std::string out = fmt::format("{:x}\r\n", data.size());
  out.append(data);
  out += "\r\n";
  return WriteAll(out);
}

bool HttpConnection::EndChunked() {
  return WriteAll("0\r\n\r\n");
}

bool HttpConnection::PeerGone() {
  if (broken_) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  bool eof = (p.revents & POLLRDHUP) != 0;
  if (!eof && (p.revents & POLLIN)) {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    eof = n == 0;
  }
  // End of file: a half-close (the request is all sent) or a close. Only a write tells them
  // apart, so send the start of the response now; a closed socket answers it with a reset.
  if (eof && !responding_ && prefix_sent_ == 0) {
    if (!WriteAll(kStatusPrefix)) return true;
    prefix_sent_ = kStatusPrefix.size();
  }
  return false;
}

}  // namespace rw::serve
