#include "serve/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace rw::serve {

HttpServer::~HttpServer() {
  Stop();
}

Status HttpServer::Start(const HttpServerOptions& options, HttpHandler handler,
                         HttpErrorWriter on_error) {
  options_ = options;
  handler_ = std::move(handler);
  on_error_ = std::move(on_error);
  if (options.port < 0 || options.port > 65535)
    return Error(ErrorCode::kInvalidArgument, "--port must be 0..65535, not {}", options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(options.port);
  if (int rc = getaddrinfo(options.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Error(ErrorCode::kInvalidArgument, "--host '{}': {}", options.host, gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0)
    return Error(ErrorCode::kIo, "cannot listen on {}:{}: {}", options.host, options.port,
                 last_error);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0)
    return Error(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

namespace {

// The client's address as text, an IPv4-mapped IPv6 address as plain IPv4.
std::string PeerAddress(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      inet_ntop(AF_INET, &a.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &a, buf, sizeof buf);
  }
  return buf;
}

}  // namespace

void HttpServer::Refuse(int fd, int status, const std::string& message) {
  HttpLimits quick = options_.limits;
  quick.write_timeout_ms = 200;
  HttpConnection conn(fd, quick);
  if (on_error_) on_error_(conn, status, message);
}

void HttpServer::AcceptLoop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (stopping_ || (p[1].revents & POLLIN)) break;
    if (!(p[0].revents & POLLIN)) continue;
    sockaddr_storage ss{};
    socklen_t ss_len = sizeof ss;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &ss_len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(10000);  // out of descriptors: back off
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string peer = PeerAddress(ss);
    // Over a cap: a short answer without reading, then close.
    if (active_.load() >= options_.max_connections) {
      Refuse(fd, 503, "too many connections; try again later");
      continue;
    }
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      int& mine = per_ip_[peer];
      if (options_.max_connections_per_ip > 0 && mine >= options_.max_connections_per_ip) {
        id = 0;
      } else {
        ++mine;
        id = next_id_++;
      }
    }
    if (id == 0) {
      Refuse(fd, 429,
             fmt::format("too many connections from {} (the limit is {}); try again later", peer,
                         options_.max_connections_per_ip));
      continue;
    }
    active_.fetch_add(1);
    try {
      std::thread([this, fd, peer, id] { Serve(fd, peer, id); }).detach();
    } catch (const std::system_error&) {  // out of threads: refuse this one
      active_.fetch_sub(1);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (--per_ip_[peer] <= 0) per_ip_.erase(peer);
      }
      Refuse(fd, 503, "the server cannot take more connections now");
    }
  }
}

void HttpServer::Serve(int fd, std::string peer, uint64_t id) {
  {
    HttpConnection conn(fd, options_.limits, peer, id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns_.insert(&conn);
    }
    while (!stopping_) {
      HttpRequest req;
      ReadOutcome r = conn.ReadRequest(&req);
      if (r.kind == ReadOutcome::Kind::kClosed) break;
      if (r.kind == ReadOutcome::Kind::kError) {
        if (on_error_ && !stopping_) on_error_(conn, r.status, r.message);
        break;
      }
      if (!handler_(req, conn) || conn.broken()) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    conns_.erase(&conn);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (--per_ip_[peer] <= 0) per_ip_.erase(peer);
  active_.fetch_sub(1);
  idle_cv_.notify_all();
}

void HttpServer::Stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  if (wake_pipe_[1] >= 0) {
    const char c = 'x';
    (void)!::write(wake_pipe_[1], &c, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (HttpConnection* c : conns_) c->Shutdown();
    idle_cv_.wait_for(lock, std::chrono::seconds(5), [this] { return active_.load() == 0; });
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  for (int& fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

}  // namespace rw::serve
