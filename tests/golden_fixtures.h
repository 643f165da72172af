// The committed golden fixtures (tests/fixtures/golden, made by tools/golden/make_fixtures.py), as
// their manifest lists them. Tests take the list from the manifest rather than from whatever
// directories happen to exist, so a missing fixture is a failure, not a shorter loop.
#pragma once

#include <string>
#include <vector>

#include "base/file.h"
#include "base/json.h"

namespace rw::test {

inline std::string GoldenRoot() {
  return JoinPath(REDWING_SOURCE_DIR, "tests/fixtures/golden");
}

// The checkpoint formats every golden fixture holds: <fixture>/hf (bf16 Hugging Face) and
// <fixture>/mlx (MLX affine 4-bit), each with transformers' logits and greedy tokens.
inline const std::vector<std::string>& GoldenFormats() {
  static const std::vector<std::string> k = {"hf", "mlx"};
  return k;
}

struct GoldenManifest {
  std::string error;               // non-empty: the manifest could not be read
  std::vector<std::string> names;  // fixture names, in manifest order
  Json json;
};

inline GoldenManifest ReadGoldenManifest() {
  GoldenManifest m;
  const std::string path = JoinPath(GoldenRoot(), "manifest.json");
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    m.error = text.status().ToString();
    return m;
  }
  auto j = ParseJson(*text, path);
  if (!j.ok()) {
    m.error = j.status().ToString();
    return m;
  }
  m.json = *j;
  if (!m.json.contains("fixtures") || !m.json["fixtures"].is_array() ||
      m.json["fixtures"].empty()) {
    m.error = path + ": no \"fixtures\" listed";
    return m;
  }
  for (const Json& f : m.json["fixtures"]) m.names.push_back(f.value("name", ""));
  return m;
}

}  // namespace rw::test
