#include "install/safetensors_writer.h"

#include <unistd.h>

#include <cstring>
#include <limits>
#include <set>

#include "base/file.h"
#include "base/json.h"

namespace rw {
namespace {

constexpr size_t kBufferBytes = 4 << 20;  // coalesces small pieces into few write calls

Result<uint64_t> SpecBytes(const StTensorSpec& s) {
  uint64_t n = 1;
  for (int64_t d : s.shape) {
    if (d < 0)
      return Error(ErrorCode::kInvalidArgument, "tensor '{}': negative dimension {}", s.name, d);
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) ||
        n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Error(ErrorCode::kInvalidArgument, "tensor '{}': element count overflows", s.name);
  }
  if (__builtin_mul_overflow(n, StDTypeSize(s.dtype), &n))
    return Error(ErrorCode::kInvalidArgument, "tensor '{}': byte count overflows", s.name);
  return n;
}

// Validates declarations and returns each tensor's byte size.
Result<std::vector<uint64_t>> SpecSizes(const std::vector<StTensorSpec>& tensors) {
  std::set<std::string_view> names;
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  for (const auto& s : tensors) {
    if (s.name.empty()) return Error(ErrorCode::kInvalidArgument, "a tensor has an empty name");
    if (s.name == "__metadata__")
      return Error(ErrorCode::kInvalidArgument, "tensor name '__metadata__' is reserved");
    if (!names.insert(s.name).second)
      return Error(ErrorCode::kInvalidArgument, "tensor '{}' declared twice", s.name);
    RW_ASSIGN_OR_RETURN(uint64_t n, SpecBytes(s));
    sizes.push_back(n);
  }
  return sizes;
}

std::string EncodeLength(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

Result<std::string> BuildSafetensorsHeader(const std::vector<StTensorSpec>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  RW_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, SpecSizes(tensors));
  // ordered_json keeps the file order readable: metadata first, then tensors by offset.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = StDTypeName(tensors[i].dtype);
    e["shape"] = tensors[i].shape;
    if (__builtin_add_overflow(offset, sizes[i], &offset))
      return Error(ErrorCode::kInvalidArgument, "total tensor bytes overflow");
    e["data_offsets"] = {offset - sizes[i], offset};
    j[tensors[i].name] = std::move(e);
  }
  std::string text;
  try {
    text = j.dump();
  } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a name or value
    return Error(ErrorCode::kInvalidArgument, "cannot encode safetensors header: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxSafetensorsHeader)
    return Error(ErrorCode::kInvalidArgument, "header of {} bytes exceeds the {}-byte limit",
                 text.size(), kMaxSafetensorsHeader);
  return text;
}

struct SafetensorsWriter::Impl {
  std::string path;
  std::string tmp_path;
  File file;
  std::vector<StTensorSpec> specs;
  std::vector<uint64_t> sizes;
  size_t cur = 0;            // first tensor not yet complete
  uint64_t cur_written = 0;  // bytes of specs[cur] written
  uint64_t total_size = 0;   // final file size
  std::vector<uint8_t> buf;
  bool failed = false;
  bool done = false;  // finished or aborted

  void SkipEmpty() {
    while (cur < specs.size() && cur_written == sizes[cur]) {
      ++cur;
      cur_written = 0;
    }
  }
  Status Flush() {
    if (buf.empty()) return Status::Ok();
    Status st = file.WriteAll(buf.data(), buf.size());
    buf.clear();
    return st;
  }
  Status Fail(Status st) {
    failed = true;
    return st;
  }
};

SafetensorsWriter::SafetensorsWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&&) noexcept = default;
SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& o) noexcept {
  if (this != &o) {
    Abort();
    impl_ = std::move(o.impl_);
  }
  return *this;
}
SafetensorsWriter::~SafetensorsWriter() {
  Abort();
}

Result<SafetensorsWriter> SafetensorsWriter::Create(const std::string& path,
                                                    std::vector<StTensorSpec> tensors,
                                                    std::map<std::string, std::string> metadata) {
  Result<std::string> header = BuildSafetensorsHeader(tensors, metadata);
  if (!header.ok()) return header.status().Annotate(path);
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->tmp_path = fmt::format("{}.tmp-{}", path, ::getpid());
  impl->sizes = *SpecSizes(tensors);  // validated by BuildSafetensorsHeader
  impl->specs = std::move(tensors);
  impl->total_size = 8 + header->size();
  for (uint64_t s : impl->sizes) impl->total_size += s;
  RW_ASSIGN_OR_RETURN(impl->file, File::Create(impl->tmp_path));
  SafetensorsWriter w(std::move(impl));
  std::string prefix = EncodeLength(header->size()) + *header;
  Status st = w.impl_->file.WriteAll(prefix.data(), prefix.size());
  if (!st.ok()) return st;  // w's destructor removes the temporary file
  w.impl_->buf.reserve(kBufferBytes);
  w.impl_->SkipEmpty();
  return w;
}

Status SafetensorsWriter::Append(std::string_view name, const void* data, size_t n) {
  Impl& s = *impl_;
  if (s.done)
    return Error(ErrorCode::kInvalidArgument, "{}: writer already finished or aborted", s.path);
  if (s.failed) return Error(ErrorCode::kIo, "{}: an earlier write failed", s.path);
  if (s.cur == s.specs.size())
    return Error(ErrorCode::kInvalidArgument, "{}: tensor '{}': every declared tensor is complete",
                 s.path, name);
  const StTensorSpec& spec = s.specs[s.cur];
  if (name != spec.name)
    return Error(ErrorCode::kInvalidArgument,
                 "{}: tensor '{}': out of order; expected data for '{}' next", s.path, name,
                 spec.name);
  if (n > s.sizes[s.cur] - s.cur_written)
    return Error(ErrorCode::kInvalidArgument,
                 "{}: tensor '{}': piece of {} bytes overruns it ({} of {} bytes written)", s.path,
                 name, n, s.cur_written, s.sizes[s.cur]);
  if (s.buf.size() + n > kBufferBytes) {
    Status st = s.Flush();
    if (!st.ok()) return s.Fail(st);
  }
  if (n >= kBufferBytes) {
    Status st = s.file.WriteAll(data, n);
    if (!st.ok()) return s.Fail(st);
  } else if (n > 0) {
    const auto* p = static_cast<const uint8_t*>(data);
    s.buf.insert(s.buf.end(), p, p + n);
  }
  s.cur_written += n;
  s.SkipEmpty();
  return Status::Ok();
}

Status SafetensorsWriter::WriteTensor(std::string_view name, const void* data, size_t n) {
  Impl& s = *impl_;
  if (!s.done && s.cur < s.specs.size() && s.specs[s.cur].name == name &&
      (s.cur_written != 0 || n != s.sizes[s.cur]))
    return Error(
        ErrorCode::kInvalidArgument,
        "{}: tensor '{}': WriteTensor got {} bytes, the tensor has {} ({} already written)", s.path,
        name, n, s.sizes[s.cur], s.cur_written);
  return Append(name, data, n);
}

Status SafetensorsWriter::Finish() {
  Impl& s = *impl_;
  if (s.done)
    return Error(ErrorCode::kInvalidArgument, "{}: writer already finished or aborted", s.path);
  if (s.failed) {
    Abort();
    return Error(ErrorCode::kIo, "{}: an earlier write failed", s.path);
  }
  if (s.cur < s.specs.size()) {
    Status st =
        Error(ErrorCode::kInvalidArgument, "{}: tensor '{}': incomplete, {} of {} bytes written",
              s.path, s.specs[s.cur].name, s.cur_written, s.sizes[s.cur]);
    Abort();
    return st;
  }
  Status st = s.Flush();
  if (st.ok()) st = s.file.Sync();
  if (st.ok()) st = s.file.Close();
  if (st.ok() && ::rename(s.tmp_path.c_str(), s.path.c_str()) != 0)
    st = Error(ErrorCode::kIo, "{}: rename from {}: {}", s.path, s.tmp_path, std::strerror(errno));
  if (!st.ok()) {
    Abort();
    return st;
  }
  s.done = true;
  return SyncDirectory(ParentPath(s.path));
}

void SafetensorsWriter::Abort() {
  if (!impl_ || impl_->done) return;
  impl_->done = true;
  (void)impl_->file.Close();
  ::unlink(impl_->tmp_path.c_str());
}

const std::string& SafetensorsWriter::path() const {
  return impl_->path;
}
uint64_t SafetensorsWriter::file_size() const {
  return impl_->total_size;
}

Status WriteSafetensorsIndex(const std::string& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size) {
  Json j;
  j["metadata"] = {{"total_size", total_size}};
  j["weight_map"] = Json::object();
  for (const auto& [name, shard] : weight_map) j["weight_map"][name] = shard;
  std::string text;
  try {
    text = j.dump(2) + "\n";
  } catch (const Json::exception& e) {
    return Error(ErrorCode::kInvalidArgument, "{}: cannot encode index: {}", path, e.what());
  }
  return WriteFileAtomic(path, text);
}

}  // namespace rw
