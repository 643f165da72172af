// Helpers for the server tests: the real `redwing serve` as a child process on an ephemeral port
// and a raw HTTP/1.1 client over a socket. Every wait has a deadline.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "cli/gemma_test_model.h"

namespace rw::test {

inline int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

inline std::string ServeTempPath(const std::string& name) {
  const std::string root = std::string(REDWING_BUILD_DIR) + "/test_tmp/serve";
  (void)MakeDirectories(root);
  return root + "/" + name + "." + std::to_string(getpid());
}

// `redwing serve` on 127.0.0.1 (or the --host in extra) with --port 0; the port is read from
// its "listening on" line. binary: REDWING_TESTHOOKS_BINARY for the test flags (--test-replies).
class ServerProcess {
 public:
  ServerProcess(const std::string& model_dir, const std::vector<std::string>& extra,
                const std::string& tag = "server", const std::string& binary = REDWING_BINARY) {
    log_path_ = ServeTempPath(tag + ".log");
    std::vector<std::string> argv = {binary, "serve", "--model", model_dir, "--port", "0"};
    // 127.0.0.1 unless the test listens elsewhere.
    if (std::find(extra.begin(), extra.end(), "--host") == extra.end())
      argv.insert(argv.end(), {"--host", "127.0.0.1"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      dup2(fd, 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    const int64_t deadline = NowMs() + 60000;
    const std::regex re(R"(listening on http://(?:\[[^\]]*\]|[^:/]+):([0-9]+))");
    while (NowMs() < deadline) {
      std::smatch m;
      const std::string log = Log();
      if (std::regex_search(log, m, re)) {
        port_ = std::stoi(m[1]);
        return;
      }
      if (!Alive()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    error_ = "redwing serve did not start: " + Log();
  }
  ~ServerProcess() { Kill(); }

  const std::string& error() const { return error_; }
  int port() const { return port_; }
  std::string Log() const {
    auto t = ReadFileToString(log_path_);
    return t.ok() ? *t : "";
  }
  bool Alive() {
    if (pid_ <= 0) return false;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      exit_status_ = st;
      pid_ = -1;
      return false;
    }
    return true;
  }
  // SIGTERM, then SIGKILL after 10 s. Returns the wait status.
  int Kill() {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, SIGTERM);
    const int64_t deadline = NowMs() + 10000;
    while (NowMs() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = st;
        std::remove(log_path_.c_str());
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &exit_status_, 0);
    pid_ = -1;
    return exit_status_;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_status_ = -1;
  std::string log_path_, error_;
};

struct HttpResponse {
  int status = 0;                              // 0: no response (closed or timed out)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  Json json() const {
    try {
      return Json::parse(body);
    } catch (...) {
      return Json();
    }
  }
};

// One client connection.
class HttpClient {
 public:
  explicit HttpClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~HttpClient() { Close(); }
  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // An abrupt close: RST instead of FIN.
  void Reset() {
    linger l{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    Close();
  }
  // Ends the sending side only (shutdown(SHUT_WR)): the server reads end of file but can
  // still write.
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  bool SendRaw(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads whatever arrives until the deadline or the peer closes; returns it.
  std::string ReadSome(int timeout_ms) {
    std::string out;
    const int64_t deadline = NowMs() + timeout_ms;
    while (NowMs() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(deadline - NowMs())) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
      in_.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Reads until what arrived contains needle, the deadline passes or the peer closes.
  std::string ReadUntil(const std::string& needle, int timeout_ms) {
    std::string out;
    const int64_t deadline = NowMs() + timeout_ms;
    while (NowMs() < deadline && out.find(needle) == std::string::npos && !closed_)
      out += ReadSome(static_cast<int>(std::min<int64_t>(20, deadline - NowMs())));
    return out;
  }
  bool closed() const { return closed_; }

  static std::string Format(const std::string& method, const std::string& path,
                            const std::string& body, const std::vector<std::string>& headers = {}) {
    std::string r = method + " " + path + " HTTP/1.1\r\n";
    bool host = false;  // a Host header of the caller's replaces the default
    for (const std::string& h : headers) {
      r += h + "\r\n";
      host = host || h.rfind("Host:", 0) == 0;
    }
    if (!host) r += "Host: 127.0.0.1\r\n";
    if (!body.empty() || method == "POST")
      r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
    r += "\r\n" + body;
    return r;
  }

  HttpResponse Request(const std::string& method, const std::string& path,
                       const std::string& body = "", const std::vector<std::string>& headers = {},
                       int timeout_ms = 60000) {
    if (!SendRaw(Format(method, path, body, headers))) return {};
    return ReadResponse(timeout_ms, method == "HEAD");
  }

  // Reads one response (Content-Length or chunked; head_only: the answer to HEAD, no body).
  // on_data sees body bytes as they come.
  HttpResponse ReadResponse(int timeout_ms = 60000, bool head_only = false) {
    HttpResponse r;
    const int64_t deadline = NowMs() + timeout_ms;
    auto fill = [&]() {
      pollfd p{fd_, POLLIN, 0};
      const int64_t left = deadline - NowMs();
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        return false;
      }
      in_.append(buf, static_cast<size_t>(n));
      return true;
    };
    size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return r;
    const std::string head = in_.substr(0, end);
    in_.erase(0, end + 4);
    std::sscanf(head.c_str(), "HTTP/1.%*d %d", &r.status);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos) {
      const size_t next = head.find("\r\n", pos + 2);
      const std::string line =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      const size_t c = line.find(':');
      if (c != std::string::npos) {
        std::string k = line.substr(0, c);
        for (char& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        r.headers[k] = line.substr(line.find_first_not_of(' ', c + 1));
      }
      pos = next;
    }
    if (r.status == 100) return ReadResponse(timeout_ms, head_only);
    if (head_only) return r;
    if (r.headers["transfer-encoding"] == "chunked") {
      for (;;) {
        size_t e;
        while ((e = in_.find("\r\n")) == std::string::npos)
          if (!fill()) return r;
        const size_t n = std::stoul(in_.substr(0, e), nullptr, 16);
        while (in_.size() < e + 2 + n + 2)
          if (!fill()) return r;
        r.body += in_.substr(e + 2, n);
        if (on_data) on_data(in_.substr(e + 2, n));
        in_.erase(0, e + 2 + n + 2);
        if (n == 0) break;
      }
    } else {
      const size_t n =
          r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
      while (in_.size() < n)
        if (!fill()) return r;
      r.body = in_.substr(0, n);
      in_.erase(0, n);
    }
    return r;
  }

  std::function<void(const std::string&)> on_data;

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string in_;
};

// SSE "data:" payloads of a stream body, in order.
inline std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t e = body.find('\n', pos);
    if (e == std::string::npos) e = body.size();
    const std::string line = body.substr(pos, e - pos);
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
    pos = e + 1;
  }
  return out;
}

}  // namespace rw::test
