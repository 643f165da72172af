// The model directory: manifest.json (written last), core.bin, experts/, and side files
// (tokenizer.json, tokenizer_config.json, chat_template.jinja, generation_config.json).
// A directory without a valid manifest is not a model; writers stage into "<dir>.partial" and
// rename into place only when complete.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/core_file.h"
#include "format/expert_file.h"
#include "format/model_config.h"

namespace rw {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kCoreName = "core.bin";
inline constexpr const char* kExpertIndexName = "experts/index.json";
// Size limits, far above any real model's (the 26B MoE's manifest and expert index are ~100 kB
// each), so a damaged or hostile file is refused before it is read into memory.
inline constexpr uint64_t kMaxManifestBytes = 4u << 20;
inline constexpr uint64_t kMaxExpertIndexBytes = 16u << 20;
// Side files copied from a source checkpoint when present.
const std::vector<std::string>& SideFileNames();

struct FileEntry {
  uint64_t size = 0;
  std::string sha256;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string created_by;
  ModelConfig config;
  Json source = Json::object();  // {kind: hf|mlx|synthetic, repo_id, revision, path, ...}
  Json skipped = Json::array();  // [{prefix, tensors, reason}]
  Json quantization =
      Json::object();  // {default: {...}, tensors: {name: {type, bits, group_size}}}
  bool has_experts = false;
  std::map<std::string, FileEntry> files;  // every file but manifest.json

  Json ToJson() const;
  static Result<Manifest> FromJson(const Json& j, const std::string& what);
};

// Stages a model directory and publishes it atomically.
class ModelDirWriter {
 public:
  // Fails if out_dir exists, unless overwrite (then it is replaced only at Commit).
  static Result<ModelDirWriter> Create(const std::string& out_dir, bool overwrite);
  ModelDirWriter() = default;
  ModelDirWriter(ModelDirWriter&& o) noexcept { *this = std::move(o); }
  ModelDirWriter& operator=(ModelDirWriter&& o) noexcept {
    out_ = std::move(o.out_);
    staging_ = std::move(o.staging_);
    overwrite_ = o.overwrite_;
    committed_ = o.committed_;
    o.staging_.clear();  // the moved-from writer must not clean up
    return *this;
  }
  ~ModelDirWriter();

  std::string Path(const std::string& rel) const { return JoinPath(staging_, rel); }
  const std::string& staging_dir() const { return staging_; }

  // Hashes every staged file into manifest.files, fills the quantization summary, writes the
  // manifest, and renames the staging directory to the output.
  Status Commit(Manifest manifest, const std::function<void(const std::string&)>& progress = {});

 private:
  std::string out_;
  std::string staging_;
  bool overwrite_ = false;
  bool committed_ = false;
};

// An opened model directory: manifest parsed, core mapped, expert index parsed. Cheap checks
// only (sizes); VerifyModelDir re-hashes everything.
class ModelDir {
 public:
  static Result<ModelDir> Open(const std::string& dir);

  const std::string& path() const { return path_; }
  const Manifest& manifest() const { return manifest_; }
  const ModelConfig& config() const { return manifest_.config; }
  const CoreFile& core() const { return core_; }
  const ExpertIndex* experts() const { return experts_ ? &*experts_ : nullptr; }
  std::string FilePath(const std::string& rel) const { return JoinPath(path_, rel); }
  bool HasSideFile(const std::string& name) const { return manifest_.files.count(name) > 0; }

 private:
  std::string path_;
  Manifest manifest_;
  CoreFile core_;
  std::optional<ExpertIndex> experts_;
};

// The manifest of dir, read (within kMaxManifestBytes) and parsed; nothing else is checked.
Result<Manifest> ReadManifest(const std::string& dir);

struct VerifyReport {
  std::vector<std::string> problems;  // empty when intact
  uint64_t bytes_checked = 0;
};
// First runs open_check (by default ModelDir::Open; `redwing verify` passes everything `run`
// checks when it opens a model): its failure is the first problem. Then re-hashes every file
// against the manifest and, only when the model opened (so the expert index and its strides
// were checked against the files), every expert blob against its XXH3. An unreadable manifest
// is an error, not a problem.
Result<VerifyReport> VerifyModelDir(
    const std::string& dir, const std::function<void(const std::string&)>& progress = {},
    const std::function<Status(const std::string& dir)>& open_check = {});

}  // namespace rw
