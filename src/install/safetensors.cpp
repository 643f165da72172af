#include "install/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "base/json.h"
#include "base/log.h"

namespace rw {
namespace {

struct DTypeInfo {
  StDType type;
  const char* name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {StDType::kBool, "BOOL", 1},      {StDType::kU8, "U8", 1},          {StDType::kI8, "I8", 1},
    {StDType::kF8E4M3, "F8_E4M3", 1}, {StDType::kF8E5M2, "F8_E5M2", 1}, {StDType::kI16, "I16", 2},
    {StDType::kU16, "U16", 2},        {StDType::kF16, "F16", 2},        {StDType::kBF16, "BF16", 2},
    {StDType::kI32, "I32", 4},        {StDType::kU32, "U32", 4},        {StDType::kF32, "F32", 4},
    {StDType::kI64, "I64", 8},        {StDType::kU64, "U64", 8},        {StDType::kF64, "F64", 8},
};

const DTypeInfo& Info(StDType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d;
  return kDTypes[0];  // unreachable for valid enum values
}

constexpr int kMaxJsonDepth = 8;  // a safetensors header needs 3; an index needs 2
constexpr size_t kMaxRank = 32;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// Cheap pre-scan before handing untrusted text to the DOM parser: the text must be an object and
// must not nest deeply (bounds the parser's and the DOM destructor's work per byte).
Status CheckJsonShape(std::string_view text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() &&
         (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
    ++i;
  if (i == text.size() || text[i] != '{')
    return Error(ErrorCode::kCorrupt, "{}: header is not a JSON object", what);
  int depth = 0;
  bool in_string = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skip the escaped character; the parser validates escapes
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        return Error(ErrorCode::kCorrupt, "{}: JSON nests deeper than {} levels", what,
                     kMaxJsonDepth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return Status::Ok();
}

// Parses JSON while detecting duplicate keys in any object: nlohmann silently keeps one of them,
// which for a safetensors header would hide a second tensor of the same name. `top_noun` names
// what a top-level key is ("tensor", "field") in errors.
Result<Json> ParseJsonStrict(std::string_view text, const std::string& what, const char* top_noun) {
  RW_RETURN_IF_ERROR(CheckJsonShape(text, what));
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string top, dup_top, dup;
  bool dup_at_top = false;
  auto cb = [&](int /*depth*/, Json::parse_event_t ev, Json& parsed) {
    switch (ev) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (keys.empty()) break;
        const auto& k = parsed.get_ref<const std::string&>();
        if (keys.size() == 1) top = k;
        if (dup.empty() && !keys.back().insert(k).second) {
          dup = k;
          dup_top = top;
          dup_at_top = keys.size() == 1;
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true);
  } catch (const Json::exception& e) {
    return Error(ErrorCode::kCorrupt, "{}: malformed JSON: {}", what, e.what());
  }
  if (!dup.empty()) {
    if (dup_at_top)
      return Error(ErrorCode::kCorrupt, "{}: {} '{}' appears twice", what, top_noun, dup);
    return Error(ErrorCode::kCorrupt, "{}: {} '{}': key '{}' appears twice", what, top_noun,
                 dup_top, dup);
  }
  if (!j.is_object()) return Error(ErrorCode::kCorrupt, "{}: header is not a JSON object", what);
  return j;
}

// A JSON number that is a non-negative integer, as uint64.
bool AsUnsigned(const Json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

Result<StTensor> ParseEntry(const std::string& name, const Json& e, uint64_t data_start,
                            uint64_t file_size, const std::string& what) {
  auto fail = [&](const std::string& msg) {
    return Status(ErrorCode::kCorrupt, fmt::format("{}: tensor '{}': {}", what, name, msg));
  };
  if (!e.is_object()) return fail("entry is not a JSON object");
  StTensor t;
  t.name = name;

  auto dt = e.find("dtype");
  if (dt == e.end()) return fail("field 'dtype' missing");
  if (!dt->is_string()) return fail("field 'dtype' must be a string");
  auto parsed = ParseStDType(dt->get_ref<const std::string&>());
  if (!parsed.ok())
    return Status(ErrorCode::kUnsupported,
                  fmt::format("{}: tensor '{}': {}", what, name, parsed.status().message()));
  t.dtype = *parsed;

  auto sh = e.find("shape");
  if (sh == e.end()) return fail("field 'shape' missing");
  if (!sh->is_array()) return fail("field 'shape' must be an array");
  if (sh->size() > kMaxRank)
    return fail(fmt::format("shape has {} dimensions (limit {})", sh->size(), kMaxRank));
  uint64_t numel = 1;
  for (const Json& d : *sh) {
    uint64_t v;
    if (!AsUnsigned(d, &v))
      return fail(fmt::format("shape {} must hold non-negative integers", sh->dump()));
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, v, &numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return fail(fmt::format("shape {} has too many elements (overflow)", sh->dump()));
    t.shape.push_back(static_cast<int64_t>(v));
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, StDTypeSize(t.dtype), &nbytes))
    return fail(
        fmt::format("shape {} of {} overflows a byte count", sh->dump(), StDTypeName(t.dtype)));

  auto off = e.find("data_offsets");
  if (off == e.end()) return fail("field 'data_offsets' missing");
  uint64_t begin, end;
  if (!off->is_array() || off->size() != 2 || !AsUnsigned((*off)[0], &begin) ||
      !AsUnsigned((*off)[1], &end))
    return fail(
        fmt::format("field 'data_offsets' must be two non-negative integers, got {}", off->dump()));
  if (begin > end) return fail(fmt::format("data_offsets [{}, {}] begin after end", begin, end));
  if (file_size != UINT64_MAX) {
    if (end > file_size - data_start)
      return fail(
          fmt::format("data_offsets [{}, {}] end beyond the file ({} data bytes of {}); truncated?",
                      begin, end, file_size - data_start, file_size));
  } else if (end > UINT64_MAX - data_start) {
    return fail(fmt::format("data_offsets [{}, {}] overflow", begin, end));
  }
  if (end - begin != nbytes)
    return fail(fmt::format("data_offsets [{}, {}] span {} bytes but {} {} needs {}", begin, end,
                            end - begin, StDTypeName(t.dtype), sh->dump(), nbytes));
  t.offset = data_start + begin;
  t.size = nbytes;
  return t;
}

Result<File> OpenSized(const std::string& path, uint64_t* size) {
  RW_ASSIGN_OR_RETURN(File f, File::OpenRead(path));
  RW_ASSIGN_OR_RETURN(*size, f.Size());
  return f;
}

}  // namespace

size_t StDTypeSize(StDType t) {
  return Info(t).size;
}
const char* StDTypeName(StDType t) {
  return Info(t).name;
}

Result<StDType> ParseStDType(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.type;
  return Error(ErrorCode::kUnsupported, "unknown dtype '{}'", name);
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<uint64_t> SafetensorsFile::ParseHeaderLength(const uint8_t prefix[8], uint64_t file_size,
                                                    const std::string& what) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > kMaxSafetensorsHeader)
    return Error(ErrorCode::kCorrupt, "{}: header length {} exceeds the {}-byte limit", what, n,
                 kMaxSafetensorsHeader);
  if (n < 2) return Error(ErrorCode::kCorrupt, "{}: header length {} is too small", what, n);
  if (file_size != UINT64_MAX && n > file_size - 8)
    return Error(ErrorCode::kCorrupt,
                 "{}: header length {} runs past the end of the file ({} bytes)", what, n,
                 file_size);
  return n;
}

Result<std::vector<StTensor>> SafetensorsFile::ParseHeader(
    std::string_view json, uint64_t data_start, uint64_t file_size, const std::string& what,
    std::map<std::string, std::string>* metadata) {
  if (file_size != UINT64_MAX && data_start > file_size)
    return Error(ErrorCode::kCorrupt, "{}: data would start at {}, past the end of the file ({})",
                 what, data_start, file_size);
  RW_ASSIGN_OR_RETURN(Json j, ParseJsonStrict(json, what, "tensor"));
  std::vector<StTensor> tensors;
  tensors.reserve(j.size());
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        return Error(ErrorCode::kCorrupt, "{}: __metadata__ is not a JSON object", what);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          return Error(ErrorCode::kCorrupt, "{}: __metadata__ value of '{}' is not a string", what,
                       mk);
        if (metadata != nullptr) (*metadata)[mk] = mv.get<std::string>();
      }
      continue;
    }
    RW_ASSIGN_OR_RETURN(StTensor t, ParseEntry(key, value, data_start, file_size, what));
    tensors.push_back(std::move(t));
  }
  std::sort(tensors.begin(), tensors.end(), [](const StTensor& a, const StTensor& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
  });
  // Overlap: empty tensors occupy no bytes and cannot overlap anything.
  const StTensor* reach = nullptr;  // the non-empty tensor that ends furthest so far
  uint64_t gaps = 0, next = data_start;
  for (const StTensor& t : tensors) {
    if (t.size == 0) continue;
    if (reach != nullptr && t.offset < reach->offset + reach->size)
      return Error(ErrorCode::kCorrupt, "{}: tensor '{}' overlaps tensor '{}'", what, t.name,
                   reach->name);
    if (t.offset > next) gaps += t.offset - next;
    next = t.offset + t.size;
    reach = &t;
  }
  if (gaps > 0) RW_LOG_DEBUG("{}: {} bytes between tensors are unused", what, gaps);
  return tensors;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  RW_ASSIGN_OR_RETURN(f.file_, OpenSized(path, &f.file_size_));
  if (f.file_size_ < 8)
    return Error(ErrorCode::kCorrupt, "{}: file is {} bytes, shorter than the 8-byte header length",
                 path, f.file_size_);
  uint8_t prefix[8];
  RW_RETURN_IF_ERROR(f.file_.PreadExact(prefix, 8, 0));
  RW_ASSIGN_OR_RETURN(uint64_t n, ParseHeaderLength(prefix, f.file_size_, path));
  std::string header(n, '\0');
  RW_RETURN_IF_ERROR(f.file_.PreadExact(header.data(), n, 8));
  f.data_start_ = 8 + n;
  RW_ASSIGN_OR_RETURN(f.tensors_,
                      ParseHeader(header, f.data_start_, f.file_size_, path, &f.metadata_));
  f.index_.reserve(f.tensors_.size());
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

const StTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::Read(const StTensor& t, void* dst) const {
  return ReadRange(t, 0, t.size, dst);
}

Status SafetensorsFile::ReadRange(const StTensor& t, uint64_t byte_off, uint64_t n,
                                  void* dst) const {
  if (byte_off > t.size || n > t.size - byte_off)
    return Error(ErrorCode::kOutOfRange, "{}: tensor '{}': range [{}, +{}) outside its {} bytes",
                 path(), t.name, byte_off, n, t.size);
  if (t.offset > file_size_ || t.size > file_size_ - t.offset)
    return Error(ErrorCode::kOutOfRange, "{}: tensor '{}' [{}, +{}) is not inside this file",
                 path(), t.name, t.offset, t.size);
  Status st = file_.PreadExact(dst, n, t.offset + byte_off);
  if (!st.ok()) return st.Annotate(fmt::format("tensor '{}'", t.name));
  return Status::Ok();
}

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json,
                                                                 const std::string& what) {
  RW_ASSIGN_OR_RETURN(Json j, ParseJsonStrict(json, what, "field"));
  auto wm = j.find("weight_map");
  if (wm == j.end()) return Error(ErrorCode::kCorrupt, "{}: field 'weight_map' missing", what);
  if (!wm->is_object())
    return Error(ErrorCode::kCorrupt, "{}: field 'weight_map' is not a JSON object", what);
  std::map<std::string, std::string> out;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      return Error(ErrorCode::kCorrupt, "{}: tensor '{}': shard name is not a string", what, name);
    const auto& s = shard.get_ref<const std::string&>();
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos ||
        s.find('\\') != std::string::npos || s.find('\0') != std::string::npos)
      return Error(ErrorCode::kCorrupt, "{}: tensor '{}': shard name '{}' is not a plain file name",
                   what, name, s);
    out.emplace(name, s);
  }
  return out;
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& dir) {
  SafetensorsCheckpoint ck;
  ck.dir_ = dir;
  const std::string index_path = JoinPath(dir, kIndexName);
  const std::string single_path = JoinPath(dir, kSingleName);

  auto add_file = [&](const std::string& path) -> Status {
    RW_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
    ck.files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
    const SafetensorsFile* file = ck.files_.back().get();
    for (const StTensor& t : file->tensors()) {
      auto [it, inserted] = ck.entries_.emplace(t.name, Entry{file, &t});
      if (!inserted)
        return Error(ErrorCode::kCorrupt, "{}: tensor '{}' is in two shards: {} and {}", dir,
                     t.name, BaseName(it->second.file->path()), BaseName(path));
    }
    return Status::Ok();
  };

  if (!PathExists(index_path)) {
    if (!PathExists(single_path))
      return Error(ErrorCode::kNotFound, "{}: neither {} nor {} exists", dir, kIndexName,
                   kSingleName);
    RW_RETURN_IF_ERROR(add_file(single_path));
    return ck;
  }

  uint64_t index_size = 0;
  RW_ASSIGN_OR_RETURN(File index_file, OpenSized(index_path, &index_size));
  if (index_size > kMaxSafetensorsHeader)
    return Error(ErrorCode::kCorrupt, "{}: {} bytes exceeds the {}-byte limit", index_path,
                 index_size, kMaxSafetensorsHeader);
  std::string text(index_size, '\0');
  RW_RETURN_IF_ERROR(index_file.PreadExact(text.data(), index_size, 0));
  RW_ASSIGN_OR_RETURN(auto weight_map, ParseSafetensorsIndex(text, index_path));

  std::map<std::string, std::string> first_user;  // shard -> a tensor that names it, for errors
  for (const auto& [name, shard] : weight_map) first_user.emplace(shard, name);
  for (const auto& [shard, user] : first_user) {
    std::string path = JoinPath(dir, shard);
    if (!PathExists(path))
      return Error(ErrorCode::kNotFound, "{}: tensor '{}': shard {} does not exist", index_path,
                   user, shard);
    RW_RETURN_IF_ERROR(add_file(path));
  }
  for (const auto& [name, shard] : weight_map) {
    auto it = ck.entries_.find(name);
    if (it == ck.entries_.end())
      return Error(ErrorCode::kCorrupt, "{}: tensor '{}': not in its shard {}", index_path, name,
                   shard);
    if (BaseName(it->second.file->path()) != shard)
      return Error(ErrorCode::kCorrupt, "{}: tensor '{}': indexed in {} but stored in {}",
                   index_path, name, shard, BaseName(it->second.file->path()));
  }
  if (ck.entries_.size() != weight_map.size()) {
    for (const auto& [name, e] : ck.entries_)
      if (!weight_map.count(name))
        RW_LOG_WARN("{}: tensor '{}' in {} is not in the index; using it anyway", index_path, name,
                    BaseName(e.file->path()));
  }
  return ck;
}

SafetensorsCheckpoint::Entry SafetensorsCheckpoint::Find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? Entry{} : it->second;
}

std::vector<std::string> SafetensorsCheckpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, e] : entries_) names.push_back(name);
  return names;
}

}  // namespace rw
