// Runs the redwing binary under test with its output captured, for tests of the command line.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace rw::test {

// Runs `redwing <args>`; returns its exit code (128 + signal when it was killed, as a shell
// reports it, so a crash is told from an error exit) and fills *output with stdout+stderr.
inline int RunCli(const std::string& args, std::string* output) {
  const std::string cmd = std::string(REDWING_BINARY) + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[4096];
  output->clear();
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) output->append(buf, n);
  const int st = ::pclose(f);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace rw::test
