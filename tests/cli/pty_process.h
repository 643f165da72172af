// Drives a command through a pseudo-terminal, as a person at a terminal would: type lines, wait
// for output, press Ctrl-C. Every wait has a deadline, and the child is killed on destruction.
#pragma once

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace rw::test {

class PtyProcess {
 public:
  explicit PtyProcess(const std::vector<std::string>& argv) {
    struct winsize ws {};
    ws.ws_row = 40;
    ws.ws_col = 200;
    pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~PtyProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool started() const { return pid_ > 0; }

  void Send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = write(fd_, s.data() + off, s.size() - off);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // Ctrl-C as typed: the terminal turns it into SIGINT for the foreground process.
  void SendInterrupt() { Send("\x03"); }

  // Reads until `needle` appears in the output after `from` (an offset into output()), or the
  // deadline passes. Returns whether it appeared.
  bool WaitFor(const std::string& needle, size_t from, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      if (out_.find(needle, from) != std::string::npos) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            end - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0 || !ReadSome(static_cast<int>(left))) return false;
    }
  }
  // Reads until the output holds at least n bytes.
  bool WaitForSize(size_t n, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (out_.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            end - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0 || !ReadSome(static_cast<int>(left))) return false;
    }
    return true;
  }
  // Waits for exit (reading output meanwhile); returns the exit code, or -1 on timeout/signal.
  int WaitExit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        while (ReadSome(50)) {
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      ReadSome(50);
    }
    return -1;
  }
  const std::string& output() const { return out_; }

 private:
  bool ReadSome(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  std::string out_;
};

}  // namespace rw::test
