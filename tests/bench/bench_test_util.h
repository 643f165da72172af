// Shared by the bench tests: a per-process scratch directory under the build directory (ctest
// runs cases in parallel, each in its own process) and a shell runner.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/file.h"

namespace rw::test {

// build/test_tmp/bench/<name>.<pid>, created; removed at exit.
inline std::string ScratchDir(const std::string& name) {
  const std::string root = JoinPath(REDWING_BUILD_DIR, "test_tmp/bench");
  const std::string d = JoinPath(root, name + "." + std::to_string(::getpid()));
  (void)MakeDirectories(d);
  static std::string* to_remove = nullptr;
  if (to_remove == nullptr) {
    to_remove = new std::string(d);
    std::atexit([] { (void)RemoveAll(*to_remove); });
  }
  return d;
}

struct CmdResult {
  int code = -1;  // exit status; 128 + n when killed by signal n
  std::string out, err;
};

// Runs cmd with /bin/sh; stdout and stderr captured separately.
inline CmdResult Run(const std::string& cmd, const std::string& scratch) {
  CmdResult r;
  const std::string err_file = JoinPath(scratch, "stderr.txt");
  std::FILE* p = ::popen((cmd + " 2>" + err_file).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  if (WIFEXITED(st))
    r.code = WEXITSTATUS(st);
  else if (WIFSIGNALED(st))
    r.code = 128 + WTERMSIG(st);
  auto e = ReadFileToString(err_file);
  if (e.ok()) r.err = *e;
  return r;
}

}  // namespace rw::test
