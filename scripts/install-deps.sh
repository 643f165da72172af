#!/usr/bin/env bash
# Installs what redwing needs to build and test on Debian 12: compilers, libraries, and the npm
# packages the tests use as independent oracles. Idempotent: installs nothing that is present.
set -euo pipefail

packages=(
  build-essential g++ cmake ninja-build pkg-config git
  libfmt-dev nlohmann-json3-dev libssl-dev libxxhash-dev liburing-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 clang-format
  python3-numpy  # tools/compare/gguf_twin.py (the GGUF twin for llama.cpp comparisons)
  clang-14 libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes for the fuzz preset
  chromium  # headless browser for the chat page test (tests/serve, driven by playwright-core)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js (with npm) runs the test oracles; any existing install will do.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

# npm oracles, pinned by tests/node/package-lock.json.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$root/tests/node/node_modules/.package-lock.json" ] ||
   ! cmp -s "$root/tests/node/package-lock.json" "$root/tests/node/.installed-lock" 2>/dev/null; then
  echo "install-deps: npm packages for tests"
  (cd "$root/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$root/tests/node/package-lock.json" "$root/tests/node/.installed-lock"
else
  echo "install-deps: npm packages present"
fi
