// libFuzzer target: the JSON files of a model directory, which may come from anywhere a user
// copies a model from: manifest.json (with the normalized config), experts/index.json, and a
// Hugging Face config.json as `convert` and `install` read it. The same bytes go through every
// parser; the seed corpus holds one real example of each, so the fuzzer mutates all three shapes.
// Accepted values are checked against what the loaders index with them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/json.h"
#include "format/expert_file.h"
#include "format/model_config.h"
#include "format/model_dir.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fuzz_model_format: broken promise: %s\n", what);
    abort();
  }
}

// What the runtime relies on once a config is accepted: one layer type per layer, and the
// geometry it divides and indexes by is positive.
void CheckConfig(const rw::ModelConfig& c) {
  Require(c.Validate().ok(), "an accepted config fails Validate");
  Require(static_cast<int>(c.layer_types.size()) == c.num_layers, "layer_types size != layers");
  Require(c.num_layers > 0 && c.hidden_size > 0 && c.num_heads > 0, "non-positive geometry");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto json = rw::ParseJson(text, "fuzz.json");
  if (!json.ok()) return 0;
  const rw::Json& j = *json;

  if (auto m = rw::Manifest::FromJson(j, "manifest.json"); m.ok()) {
    CheckConfig(m->config);
    Require(m->files.count(rw::kCoreName) == 1, "manifest without core.bin accepted");
    // The writer's form must read back.
    Require(rw::Manifest::FromJson(m->ToJson(), "round trip").ok(), "manifest round trip fails");
  }

  if (auto idx = rw::ExpertIndex::FromJson(j, "experts/index.json"); idx.ok()) {
    Require(static_cast<int>(idx->layers.size()) == idx->num_layers, "layers size != num_layers");
    for (const rw::ExpertLayerInfo& l : idx->layers) {
      Require(static_cast<int>(l.xxh3.size()) == idx->num_experts, "xxh3 size != num_experts");
      Require(l.layout.Validate("index").ok(), "an accepted layout fails Validate");
      Require(l.layout.gate.shape.size() == 2, "expert gate is not 2-D");
    }
  }

  if (auto c = rw::ModelConfig::FromJson(j, "config"); c.ok()) CheckConfig(*c);
  if (auto c = rw::ModelConfigFromHf(j, "bfloat16", "config.json"); c.ok()) CheckConfig(*c);
  return 0;
}
