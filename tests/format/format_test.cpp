// The model directory format: writer/reader round trips, atomic publication, and the errors a
// damaged or hostile directory must produce.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "base/bf16.h"
#include "base/hash.h"
#include "format/model_dir.h"

namespace rw {
namespace {

std::string FreshDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/rw_format_" + name;
  EXPECT_TRUE(RemoveAll(d).ok());
  EXPECT_TRUE(RemoveAll(d + ".partial").ok());
  return d;
}

ModelConfig TinyConfig() {
  ModelConfig c;
  c.vocab_size = 64;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 2;
  c.layer_types = {LayerKind::kSliding, LayerKind::kFull};
  c.sliding = {16, 1, 10000.0, 1.0, "default", false};
  c.full = {32, 1, 1e6, 0.25, "proportional", true};
  c.sliding_window = 8;
  c.intermediate_size = 64;
  c.enable_moe = true;
  c.num_experts = 3;
  c.top_k = 2;
  c.moe_intermediate_size = 64;
  c.final_logit_softcapping = 30.0;
  c.embed_scale = 8.0f;
  c.max_position_embeddings = 128;
  c.eos_token_ids = {1};
  return c;
}

TensorDesc Affine(const std::string& name, int64_t rows, int64_t cols, int bits) {
  TensorDesc t;
  t.name = name;
  t.type = TensorType::kAffine;
  t.shape = {rows, cols};
  t.bits = bits;
  t.group_size = 64;
  return t;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Writes a small but complete model directory; returns the bytes written for the embedding.
std::vector<uint8_t> WriteTinyModel(const std::string& dir, bool commit = true) {
  auto w = ModelDirWriter::Create(dir, false);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  ModelConfig c = TinyConfig();
  auto core = CoreWriter::Create(w->Path(kCoreName));
  EXPECT_TRUE(core.ok());
  TensorDesc emb = Affine("embed_tokens", c.vocab_size, c.hidden_size, 4);
  auto q = RandomBytes(emb.ExpectedDataBytes(), 1);
  auto s = RandomBytes(emb.ExpectedScaleBytes(), 2);
  auto b = RandomBytes(emb.ExpectedScaleBytes(), 3);
  EXPECT_TRUE(core->Add(emb, q.data(), s.data(), b.data()).ok());
  TensorDesc norm;
  norm.name = "norm";
  norm.type = TensorType::kBf16;
  norm.shape = {c.hidden_size};
  std::vector<uint16_t> ones(c.hidden_size, F32ToBf16(1.0f));
  EXPECT_TRUE(core->Add(norm, ones.data()).ok());
  EXPECT_TRUE(core->Finish().ok());

  ExpertIndex idx;
  idx.num_layers = c.num_layers;
  idx.num_experts = c.num_experts;
  for (int l = 0; l < c.num_layers; ++l) {
    ExpertLayout layout = ExpertLayout::Make(Affine("gate", 64, 64, 4), Affine("up", 64, 64, 4),
                                             Affine("down", 64, 64, 4));
    auto lw = ExpertLayerWriter::Create(w->Path(ExpertLayerFileName(l)), layout, c.num_experts);
    EXPECT_TRUE(lw.ok());
    for (int e = 0; e < c.num_experts; ++e) {
      auto blob = RandomBytes(layout.stride, 100 + l * 10 + e);
      EXPECT_TRUE(lw->Write(e, blob.data()).ok());
    }
    auto sums = lw->Finish();
    EXPECT_TRUE(sums.ok());
    idx.layers.push_back({ExpertLayerFileName(l), layout, *sums});
  }
  EXPECT_TRUE(WriteFileAtomic(w->Path(kExpertIndexName), idx.ToJson().dump()).ok());
  if (commit) {
    Manifest m;
    m.created_by = "test";
    m.config = c;
    m.source = Json{{"kind", "test"}};
    Status st = w->Commit(m);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return q;
}

TEST(Format, RoundTrip) {
  std::string dir = FreshDir("roundtrip");
  auto emb = WriteTinyModel(dir);
  EXPECT_FALSE(PathExists(dir + ".partial"));
  auto m = ModelDir::Open(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config().hidden_size, 64);
  EXPECT_TRUE(m->config().is_full(1));
  const TensorDesc* t = m->core().Find("embed_tokens");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->data.offset % kCoreAlignment, 0u);
  EXPECT_EQ(t->scales.offset % kCoreAlignment, 0u);
  EXPECT_EQ(std::memcmp(m->core().Ptr<uint8_t>(t->data), emb.data(), emb.size()), 0);
  ASSERT_NE(m->experts(), nullptr);
  EXPECT_EQ(m->experts()->layers[1].layout.stride % kExpertAlignment, 0u);
  EXPECT_EQ(m->manifest().quantization["tensors"]["embed_tokens"]["bits"], 4);
  EXPECT_EQ(m->manifest().quantization["tensors"]["layers.1.experts.down"]["type"], "affine");
  auto report = VerifyModelDir(dir);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
}

TEST(Format, UncommittedDirectoryNeverLoads) {
  std::string dir = FreshDir("uncommitted");
  {
    auto w = ModelDirWriter::Create(dir, false);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(PathExists(dir + ".partial"));
  }  // dropped without Commit: staging removed
  EXPECT_FALSE(PathExists(dir + ".partial"));
  EXPECT_FALSE(PathExists(dir));
  EXPECT_FALSE(ModelDir::Open(dir).ok());
  // A staging directory renamed by hand (as if someone copied it) still has no manifest.
  ASSERT_TRUE(MakeDirectories(JoinPath(dir, "experts")).ok());
  auto r = ModelDir::Open(dir);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("incomplete"), std::string::npos);
}

TEST(Format, RefusesToOverwriteWithoutForce) {
  std::string dir = FreshDir("overwrite");
  WriteTinyModel(dir);
  auto w = ModelDirWriter::Create(dir, false);
  EXPECT_EQ(w.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_TRUE(ModelDir::Open(dir).ok());  // untouched
}

TEST(Format, VerifyNamesDamagedFileAndExpert) {
  std::string dir = FreshDir("damaged");
  WriteTinyModel(dir);
  auto m = ModelDir::Open(dir);
  ASSERT_TRUE(m.ok());
  const ExpertLayerInfo& l1 = m->experts()->layers[1];
  {
    auto f = File::OpenReadWrite(JoinPath(dir, l1.file));
    ASSERT_TRUE(f.ok());
    uint8_t byte;
    uint64_t off = l1.layout.stride * 2 + 100;  // inside expert 2
    ASSERT_TRUE(f->PreadExact(&byte, 1, off).ok());
    byte ^= 0x40;
    ASSERT_TRUE(f->PwriteAll(&byte, 1, off).ok());
  }
  auto report = VerifyModelDir(dir);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 2u) << ::testing::PrintToString(report->problems);
  EXPECT_NE(report->problems[0].find("experts/layer_001.bin: SHA-256 mismatch"), std::string::npos);
  EXPECT_NE(report->problems[1].find("experts/layer_001.bin: expert 2"), std::string::npos);
}

TEST(Format, TruncatedFileIsCaughtAtOpen) {
  std::string dir = FreshDir("truncated");
  WriteTinyModel(dir);
  std::filesystem::resize_file(JoinPath(dir, "experts/layer_000.bin"), 4096);
  auto m = ModelDir::Open(dir);
  EXPECT_EQ(m.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(m.status().message().find("layer_000.bin"), std::string::npos);
}

TEST(Format, HostileManifests) {
  std::string dir = FreshDir("hostile");
  WriteTinyModel(dir);
  std::string mpath = JoinPath(dir, kManifestName);
  auto good = ReadFileToString(mpath);
  ASSERT_TRUE(good.ok());
  Json base = Json::parse(*good);
  auto expect_error = [&](const std::string& text, const std::string& needle) {
    ASSERT_TRUE(WriteFileAtomic(mpath, text).ok());
    auto m = ModelDir::Open(dir);
    ASSERT_FALSE(m.ok()) << "accepted: " << needle;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
  };
  expect_error("{not json", "malformed JSON");
  Json j = base;
  j["format_version"] = 99;
  expect_error(j.dump(), "format version 99");
  j = base;
  j["config"].erase("hidden_size");
  expect_error(j.dump(), "hidden_size");
  j = base;
  j["config"]["sliding"]["num_kv_heads"] = 3;
  expect_error(j.dump(), "num_kv_heads");
  j = base;
  j["files"]["../etc/passwd"] = {{"size", 1}, {"sha256", std::string(64, '0')}};
  expect_error(j.dump(), "leaves the model directory");
  j = base;
  j["files"]["core.bin"]["size"] = 1;
  expect_error(j.dump(), "core.bin has");
  ASSERT_TRUE(WriteFileAtomic(mpath, base.dump()).ok());
  EXPECT_TRUE(ModelDir::Open(dir).ok());
}

TEST(Format, HostileCoreDirectory) {
  std::string path = ::testing::TempDir() + "/rw_format_core.bin";
  auto w = CoreWriter::Create(path);
  ASSERT_TRUE(w.ok());
  TensorDesc t = Affine("w", 4, 64, 4);
  auto q = RandomBytes(t.ExpectedDataBytes(), 5);
  auto s = RandomBytes(t.ExpectedScaleBytes(), 6);
  ASSERT_TRUE(w->Add(t, q.data(), s.data(), s.data()).ok());
  EXPECT_EQ(w->Add(t, q.data(), s.data(), s.data()).code(),
            ErrorCode::kInvalidArgument);  // duplicate
  ASSERT_TRUE(w->Finish().ok());
  ASSERT_TRUE(CoreFile::Open(path).ok());
  // An unfinished file (header page still zero) is refused.
  std::string partial = ::testing::TempDir() + "/rw_format_core_partial.bin";
  {
    auto p = CoreWriter::Create(partial);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(p->Add(t, q.data(), s.data(), s.data()).ok());
  }
  auto r = CoreFile::Open(partial);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("bad magic"), std::string::npos);
  // A directory entry pointing past the data is refused with the tensor named.
  auto bytes = ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  std::string text = *bytes;
  size_t pos = text.find("\"size\":128");  // the 4x64 4-bit data part
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 10, "\"size\":129");
  ASSERT_TRUE(WriteFileAtomic(path, text).ok());
  r = CoreFile::Open(path);
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("tensor 'w'"), std::string::npos) << r.status().message();
}

// Found with tests/fuzz/fuzz_model_format's inputs: a field of the wrong type made Json::value()
// throw out of the parser (redwing aborted), and a per_layer_config index within num_layers but
// past a shorter explicit layer_types list read past the vector.
TEST(Format, HfConfigAndManifestWrongShapesAreErrors) {
  const Json base = {
      {"model_type", "gemma4_text"},
      {"vocab_size", 512},
      {"hidden_size", 64},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 2},
      {"num_key_value_heads", 1},
      {"head_dim", 32},
      {"intermediate_size", 64},
      {"layer_types",
       {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"}}};
  ASSERT_TRUE(ModelConfigFromHf(base, "bfloat16", "config.json").ok());
  const std::pair<const char*, Json> wrong_types[] = {{"model_type", 3},
                                                      {"hidden_size_per_layer_input", "x"},
                                                      {"enable_moe_block", "yes"},
                                                      {"attention_k_eq_v", 1},
                                                      {"num_kv_shared_layers", Json::array({1})},
                                                      // Integers too large for 64 bits parse as
                                                      // floats (found by fuzz_model_format).
                                                      {"num_kv_shared_layers", 6.6e37},
                                                      {"hidden_size_per_layer_input", 2.5}};
  for (const auto& [key, value] : wrong_types) {
    Json j = base;
    j[key] = value;
    auto r = ModelConfigFromHf(j, "bfloat16", "config.json");
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
  Json short_types = base;
  short_types["layer_types"] = {"full_attention"};
  short_types["per_layer_config"] = {{"3", {{"head_dim", 64}}}};
  auto r = ModelConfigFromHf(short_types, "bfloat16", "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("per_layer_config key '3'"), std::string::npos)
      << r.status().message();

  std::string dir = FreshDir("created_by");
  WriteTinyModel(dir);
  std::string mpath = JoinPath(dir, kManifestName);
  auto text = ReadFileToString(mpath);
  ASSERT_TRUE(text.ok());
  Json m = Json::parse(*text);
  m["created_by"] = 5;
  ASSERT_TRUE(WriteFileAtomic(mpath, m.dump()).ok());
  auto opened = ModelDir::Open(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("created_by"), std::string::npos)
      << opened.status().message();
}

TEST(Format, StreamedCoreTensorEqualsWholeWrite) {
  std::string path = ::testing::TempDir() + "/rw_format_core_streamed.bin";
  TensorDesc t = Affine("big", 8, 128, 4);
  auto q = RandomBytes(t.ExpectedDataBytes(), 11);
  auto s = RandomBytes(t.ExpectedScaleBytes(), 12);
  auto b = RandomBytes(t.ExpectedScaleBytes(), 13);
  auto w = CoreWriter::Create(path);
  ASSERT_TRUE(w.ok());
  auto placed = w->Reserve(t);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(w->Reserve(t).status().code(), ErrorCode::kInvalidArgument);  // duplicate name
  // Fill out of order and in uneven chunks.
  ASSERT_TRUE(w->WriteAt(placed->biases.offset, b.data(), b.size()).ok());
  for (size_t off = q.size(); off > 0;) {
    size_t n = std::min<size_t>(off, 100);
    off -= n;
    ASSERT_TRUE(w->WriteAt(placed->data.offset + off, q.data() + off, n).ok());
  }
  ASSERT_TRUE(w->WriteAt(placed->scales.offset, s.data(), s.size()).ok());
  EXPECT_FALSE(w->WriteAt(1 << 30, q.data(), 4).ok());
  ASSERT_TRUE(w->Finish().ok());
  auto c = CoreFile::Open(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const TensorDesc* d = c->Find("big");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(std::memcmp(c->Ptr<uint8_t>(d->data), q.data(), q.size()), 0);
  EXPECT_EQ(std::memcmp(c->Ptr<uint8_t>(d->scales), s.data(), s.size()), 0);
  EXPECT_EQ(std::memcmp(c->Ptr<uint8_t>(d->biases), b.data(), b.size()), 0);
}

TEST(Format, HfConfigSpellings) {
  Json base = {{"model_type", "gemma4"},
               {"text_config",
                {{"model_type", "gemma4_text"},
                 {"vocab_size", 512},
                 {"hidden_size", 64},
                 {"num_hidden_layers", 6},
                 {"num_attention_heads", 4},
                 {"num_key_value_heads", 2},
                 {"head_dim", 16},
                 {"intermediate_size", 48},
                 {"sliding_window", 8},
                 {"attention_k_eq_v", true},
                 {"enable_moe_block", true},
                 {"num_experts", 8},
                 {"top_k_experts", 2},
                 {"moe_intermediate_size", 16},
                 {"hidden_size_per_layer_input", 0},
                 {"final_logit_softcapping", 30.0},
                 {"max_position_embeddings", 4096}}}};
  Json a = base;
  a["text_config"]["global_head_dim"] = 32;
  a["text_config"]["num_global_key_value_heads"] = 1;
  Json b = base;
  b["text_config"]["per_layer_config"] = {{"5", {{"head_dim", 32}, {"num_key_value_heads", 1}}}};
  for (const Json& j : {a, b}) {
    auto c = ModelConfigFromHf(j, "bfloat16", "config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->full.head_dim, 32);
    EXPECT_EQ(c->full.num_kv_heads, 1);
    EXPECT_EQ(c->sliding.num_kv_heads, 2);
    EXPECT_TRUE(c->is_full(5));
    EXPECT_FALSE(c->is_full(4));
    EXPECT_EQ(c->full.rope_type, "proportional");
    EXPECT_EQ(c->embed_scale, 8.0f);
  }
  // bf16 rounding of the embedding scale: sqrt(2816) = 53.066 -> 53.0.
  EXPECT_EQ(EmbedScaleFor(2816, "bfloat16"), 53.0f);
  EXPECT_NEAR(EmbedScaleFor(2816, "float32"), 53.0660, 1e-4);
  Json bad = a;
  bad["text_config"]["hidden_size_per_layer_input"] = 256;
  EXPECT_EQ(ModelConfigFromHf(bad, "bfloat16", "c").status().code(), ErrorCode::kUnsupported);
  bad = a;
  bad["text_config"].erase("hidden_size");
  auto r = ModelConfigFromHf(bad, "bfloat16", "config.json");
  EXPECT_NE(r.status().message().find("hidden_size"), std::string::npos);
}

// Records rel's current size and SHA-256 in the manifest, as someone editing a model on purpose
// (or a hostile one) would, so that only the checks beyond the hashes can catch the edit.
void Resign(const std::string& dir, const std::string& rel) {
  const std::string mpath = JoinPath(dir, kManifestName);
  Json m = Json::parse(*ReadFileToString(mpath));
  auto sha = Sha256File(JoinPath(dir, rel));
  ASSERT_TRUE(sha.ok());
  m["files"][rel] = {{"size", std::filesystem::file_size(JoinPath(dir, rel))}, {"sha256", *sha}};
  ASSERT_TRUE(WriteFileAtomic(mpath, m.dump()).ok());
}

// Both the opener and verify must refuse, verify as a problem naming `needle`.
void ExpectRefused(const std::string& dir, const std::string& needle) {
  auto m = ModelDir::Open(dir);
  ASSERT_FALSE(m.ok()) << "opened despite: " << needle;
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
  auto report = VerifyModelDir(dir);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_FALSE(report->problems.empty()) << "verify found nothing wrong: " << needle;
  EXPECT_NE(report->problems[0].find("does not open"), std::string::npos) << report->problems[0];
  EXPECT_NE(report->problems[0].find(needle), std::string::npos) << report->problems[0];
}

// A stride from experts/index.json is checked against the blob's parts and the layer file's size
// before verify sizes a buffer by it (2^62 used to abort with bad_alloc, 2^32 to take 4.3 GB).
TEST(Format, VerifyChecksTheStrideBeforeReadingBlobs) {
  std::string dir = FreshDir("stride");
  WriteTinyModel(dir);
  const std::string ipath = JoinPath(dir, kExpertIndexName);
  const std::string good = *ReadFileToString(ipath);
  for (uint64_t stride : {uint64_t{1} << 62, uint64_t{1} << 32, uint64_t{1} << 52}) {
    SCOPED_TRACE(stride);
    Json idx = Json::parse(good);
    idx["layers"][1]["layout"]["stride"] = stride;
    ASSERT_TRUE(WriteFileAtomic(ipath, idx.dump()).ok());
    Resign(dir, kExpertIndexName);
    ExpectRefused(dir, fmt::format("stride {}", stride));
  }
  // A blob_size padded out to the hostile stride is refused the same way.
  Json idx = Json::parse(good);
  idx["layers"][0]["layout"]["stride"] = uint64_t{1} << 40;
  idx["layers"][0]["layout"]["blob_size"] = uint64_t{1} << 40;
  ASSERT_TRUE(WriteFileAtomic(ipath, idx.dump()).ok());
  Resign(dir, kExpertIndexName);
  ExpectRefused(dir, "do not fit its parts");
  ASSERT_TRUE(WriteFileAtomic(ipath, good).ok());
  Resign(dir, kExpertIndexName);
  auto report = VerifyModelDir(dir);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty()) << ::testing::PrintToString(report->problems);
}

// verify makes every check opening the model makes, so it never calls intact what run refuses.
TEST(Format, VerifyRefusesWhatOpeningRefuses) {
  std::string dir = FreshDir("verify_open");
  WriteTinyModel(dir);
  const std::string ipath = JoinPath(dir, kExpertIndexName);
  const std::string mpath = JoinPath(dir, kManifestName);
  const std::string good_index = *ReadFileToString(ipath);
  const std::string good_manifest = *ReadFileToString(mpath);
  ASSERT_TRUE(WriteFileAtomic(ipath, "this is not JSON").ok());
  Resign(dir, kExpertIndexName);
  ExpectRefused(dir, "malformed JSON");

  // One layer fewer in the config (with as many layer types) than the weights have.
  ASSERT_TRUE(WriteFileAtomic(ipath, good_index).ok());
  ASSERT_TRUE(WriteFileAtomic(mpath, good_manifest).ok());
  Json m = Json::parse(good_manifest);
  m["config"]["num_layers"] = 1;
  m["config"]["layer_types"] = {"full_attention"};
  ASSERT_TRUE(WriteFileAtomic(mpath, m.dump()).ok());
  ExpectRefused(dir, "expert index has 2 layers");

  // A caller's own open check (`redwing verify` passes run's) is the first problem.
  ASSERT_TRUE(WriteFileAtomic(mpath, good_manifest).ok());
  auto report = VerifyModelDir(dir, {}, [](const std::string& d) {
    return Status(ErrorCode::kCorrupt, d + ": tokenizer.json: malformed JSON");
  });
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u) << ::testing::PrintToString(report->problems);
  EXPECT_NE(report->problems[0].find("tokenizer.json: malformed JSON"), std::string::npos);
}

// Model JSON files are read with a size limit: a huge or NUL-padded file is a clear error,
// without reading it into memory.
TEST(Format, OversizedJsonFilesAreRefusedUnread) {
  std::string dir = FreshDir("oversized");
  WriteTinyModel(dir);
  const std::string mpath = JoinPath(dir, kManifestName);
  const std::string good = *ReadFileToString(mpath);
  // Sparse files: no disk space, and the test would need 20 GB of memory if they were read.
  for (uint64_t size : {uint64_t{20} << 30, uint64_t{2} << 30}) {
    SCOPED_TRACE(size);
    ASSERT_TRUE(WriteFileAtomic(mpath, good).ok());
    std::filesystem::resize_file(mpath, size);  // the valid manifest, then NULs
    auto m = ModelDir::Open(dir);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(
                  fmt::format("{} bytes, more than the {} bytes", size, kMaxManifestBytes)),
              std::string::npos)
        << m.status().message();
    EXPECT_FALSE(VerifyModelDir(dir).ok());
  }
  ASSERT_TRUE(WriteFileAtomic(mpath, good).ok());
  const std::string ipath = JoinPath(dir, kExpertIndexName);
  std::filesystem::resize_file(ipath, uint64_t{1} << 30);
  Json m = Json::parse(good);
  m["files"][kExpertIndexName]["size"] = uint64_t{1} << 30;  // sized as listed, not hashed
  ASSERT_TRUE(WriteFileAtomic(mpath, m.dump()).ok());
  auto r = ModelDir::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than the"), std::string::npos) << r.status().message();
  EXPECT_EQ(ReadFileToString(ipath, 4096).status().code(), ErrorCode::kCorrupt);
}

// Every config field is range-checked at parse time, as a 64-bit value before it is narrowed,
// and the error names the field.
TEST(Format, HostileConfigValuesNameTheField) {
  std::string dir = FreshDir("hostile_config");
  WriteTinyModel(dir);
  std::string mpath = JoinPath(dir, kManifestName);
  const Json base = Json::parse(*ReadFileToString(mpath));
  const ModelConfig good = TinyConfig();
  auto expect_error = [&](const std::string& field, const Json& value) {
    SCOPED_TRACE(field + " = " + value.dump());
    Json j = base;
    Json* at = &j["config"];
    std::string leaf = field;
    if (size_t dot = field.find('.'); dot != std::string::npos) {
      at = &j["config"][field.substr(0, dot)];
      leaf = field.substr(dot + 1);
    }
    (*at)[leaf] = value;
    auto c = ModelConfig::FromJson(j["config"], "config");
    ASSERT_FALSE(c.ok()) << "accepted";
    EXPECT_NE(c.status().message().find(leaf + "'"), std::string::npos) << c.status().message();
    ASSERT_TRUE(WriteFileAtomic(mpath, j.dump()).ok());
    auto m = ModelDir::Open(dir);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(leaf), std::string::npos) << m.status().message();
  };
  const int64_t two31 = int64_t{1} << 31, two32 = int64_t{1} << 32;
  expect_error("pad_token_id", two31);  // wrapped to INT_MIN
  expect_error("pad_token_id", good.vocab_size);
  expect_error("pad_token_id", -1);
  expect_error("bos_token_id", two32 + 2);  // would become 2
  expect_error("eos_token_ids", Json::array({1, two32 + 1}));
  expect_error("eos_token_ids", Json::array({good.vocab_size}));
  expect_error("full.head_dim", two32 + 32);  // became 32
  expect_error("sliding.head_dim", 15);
  expect_error("sliding.num_kv_heads", two32 + 1);
  expect_error("vocab_size", two31);
  expect_error("hidden_size", uint64_t{1} << 63);  // beyond int64
  expect_error("num_layers", -2);
  expect_error("num_experts", two32 + 3);
  expect_error("top_k", 4);  // of 3 experts
  expect_error("moe_intermediate_size", 0);
  expect_error("intermediate_size", 0);
  expect_error("sliding_window", 0);
  expect_error("max_position_embeddings", two31 - 1);
  expect_error("rms_norm_eps", -1e-6);
  expect_error("rms_norm_eps", 0);
  expect_error("final_logit_softcapping", 0);
  expect_error("final_logit_softcapping", -30);
  expect_error("embed_scale", 1e300);
  expect_error("full.rope_theta", -1);
  expect_error("full.partial_rotary_factor", 1.5);
  // enable_moe false, on a model whose manifest lists experts and whose config still has them.
  expect_error("enable_moe", false);
  Json j = base;
  j["config"]["enable_moe"] = false;
  j["config"]["num_experts"] = 0;
  j["config"]["top_k"] = 0;
  j["config"]["moe_intermediate_size"] = 0;
  ASSERT_TRUE(WriteFileAtomic(mpath, j.dump()).ok());
  auto m = ModelDir::Open(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("enable_moe false"), std::string::npos)
      << m.status().message();
  // No softcapping is spelled null, and round-trips.
  ModelConfig none = good;
  none.final_logit_softcapping = 0;
  EXPECT_TRUE(none.ToJson()["final_logit_softcapping"].is_null());
  auto back = ModelConfig::FromJson(none.ToJson(), "config");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->final_logit_softcapping, 0.0);
  ASSERT_TRUE(WriteFileAtomic(mpath, base.dump()).ok());
  EXPECT_TRUE(ModelDir::Open(dir).ok());
}

TEST(Format, HostileHfConfigValuesNameTheField) {
  const Json base = {{"model_type", "gemma4_text"},
                     {"vocab_size", 512},
                     {"hidden_size", 64},
                     {"num_hidden_layers", 2},
                     {"num_attention_heads", 4},
                     {"num_key_value_heads", 2},
                     {"head_dim", 16},
                     {"intermediate_size", 48},
                     {"final_logit_softcapping", 30.0}};
  ASSERT_TRUE(ModelConfigFromHf(base, "bfloat16", "config.json").ok());
  for (auto [key, value] :
       std::vector<std::pair<std::string, Json>>{{"head_dim", (int64_t{1} << 32) + 32},
                                                 {"global_head_dim", (int64_t{1} << 32) + 32},
                                                 {"pad_token_id", int64_t{1} << 31},
                                                 {"eos_token_id", (int64_t{1} << 32) + 1},
                                                 {"num_hidden_layers", (int64_t{1} << 32) + 2},
                                                 {"final_logit_softcapping", 0},
                                                 {"rms_norm_eps", -1e-6}}) {
    SCOPED_TRACE(key);
    Json j = base;
    j[key] = value;
    auto c = ModelConfigFromHf(j, "bfloat16", "config.json");
    ASSERT_FALSE(c.ok()) << "accepted";
    EXPECT_NE(c.status().message().find("'" + key + "'"), std::string::npos)
        << c.status().message();
  }
}

}  // namespace
}  // namespace rw
