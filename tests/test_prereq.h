// Skips for a missing prerequisite, in one place.
//
// REQUIRE_OR_SKIP(have, what): when `have` is false the test skips, naming `what` is missing;
// under CI (environment CI=true, as CI runners set it) it fails instead, because CI installs
// everything scripts/install-deps.sh installs (node and the npm oracles, chromium, python3, the
// clang fuzz tools) and a skip there would hide a broken set-up behind a green run.
//
// Prerequisites that CI lacks by design (a GPU, a large model, a kernel feature the container may
// not offer) are not for this macro: those tests GTEST_SKIP with the reason, CI or not.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace rw::test {

// CI=true (GitHub Actions, GitLab, .ci/run) or CI=1.
inline bool UnderCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::strcmp(ci, "true") == 0 || std::strcmp(ci, "1") == 0);
}

}  // namespace rw::test

#define REQUIRE_OR_SKIP(have, what)                                                 \
  do {                                                                              \
    if (!(have)) {                                                                  \
      const std::string rw_missing_ = (what);                                       \
      if (::rw::test::UnderCi())                                                    \
        FAIL() << "missing prerequisite (CI=true, so this fails): " << rw_missing_; \
      GTEST_SKIP() << "missing prerequisite: " << rw_missing_;                      \
    }                                                                               \
  } while (0)
