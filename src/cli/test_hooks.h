// Seams for the tests. The shipped `redwing` leaves them empty, so it has no test-only flags or
// environment variables; `redwing-testhooks` (built only with the tests, from the same objects
// plus test_hooks.cpp) fills them before main() runs.
#pragma once

#include "base/status.h"

namespace rw {
struct InstallOptions;
namespace serve {
struct ServerOptions;
}
}  // namespace rw

namespace rw::cli {

class Flags;

struct TestHooks {
  // serve: declares the test flags, then reads them into the server's options.
  void (*add_serve_flags)(Flags& flags) = nullptr;
  Status (*apply_serve_flags)(const Flags& flags, serve::ServerOptions* o) = nullptr;
  // install: adjusts the options before the install starts.
  Status (*adjust_install)(InstallOptions* o) = nullptr;
};

// One instance for the whole program (an inline function's static is shared by every object).
inline TestHooks& GetTestHooks() {
  static TestHooks hooks;
  return hooks;
}

}  // namespace rw::cli
