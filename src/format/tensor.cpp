#include "format/tensor.h"

#include <limits>

namespace rw {

const char* TensorTypeName(TensorType t) {
  switch (t) {
    case TensorType::kF32:
      return "f32";
    case TensorType::kBf16:
      return "bf16";
    case TensorType::kAffine:
      return "affine";
  }
  return "?";
}

Result<TensorType> ParseTensorType(const std::string& s) {
  if (s == "f32") return TensorType::kF32;
  if (s == "bf16") return TensorType::kBf16;
  if (s == "affine") return TensorType::kAffine;
  return Error(ErrorCode::kUnsupported, "unknown tensor type '{}'", s);
}

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t TensorDesc::ExpectedDataBytes() const {
  switch (type) {
    case TensorType::kF32:
      return static_cast<uint64_t>(numel()) * 4;
    case TensorType::kBf16:
      return static_cast<uint64_t>(numel()) * 2;
    case TensorType::kAffine:
      return static_cast<uint64_t>(numel()) * bits / 8;
  }
  return 0;
}

uint64_t TensorDesc::ExpectedScaleBytes() const {
  if (type != TensorType::kAffine || group_size <= 0) return 0;
  return static_cast<uint64_t>(numel() / group_size) * 2;
}

namespace {
Json RangeJson(const ByteRange& r) {
  return Json{{"offset", r.offset}, {"size", r.size}};
}

Result<ByteRange> RangeFromJson(const Json& j, const char* key, const std::string& what) {
  if (!j.contains(key) || !j[key].is_object())
    return Error(ErrorCode::kCorrupt, "{}: field '{}' missing", what, key);
  const Json& r = j[key];
  auto off = r.find("offset");
  auto size = r.find("size");
  if (off == r.end() || size == r.end() || !off->is_number_unsigned() ||
      !size->is_number_unsigned())
    return Error(ErrorCode::kCorrupt, "{}: '{}' needs unsigned offset and size", what, key);
  return ByteRange{off->get<uint64_t>(), size->get<uint64_t>()};
}
}  // namespace

Json TensorDesc::ToJson() const {
  Json j{
      {"name", name}, {"type", TensorTypeName(type)}, {"shape", shape}, {"data", RangeJson(data)}};
  if (type == TensorType::kAffine) {
    j["bits"] = bits;
    j["group_size"] = group_size;
    j["scales"] = RangeJson(scales);
    j["biases"] = RangeJson(biases);
  }
  return j;
}

Result<TensorDesc> TensorDesc::FromJson(const Json& j, const std::string& what) {
  TensorDesc t;
  RW_ASSIGN_OR_RETURN(t.name, JsonString(j, "name", what));
  std::string w = what + " tensor '" + t.name + "'";
  RW_ASSIGN_OR_RETURN(std::string type, JsonString(j, "type", w));
  RW_ASSIGN_OR_RETURN(t.type, ParseTensorType(type));
  if (!j.contains("shape") || !j["shape"].is_array() || j["shape"].empty() || j["shape"].size() > 4)
    return Error(ErrorCode::kCorrupt, "{}: shape must be an array of 1 to 4 dims", w);
  for (const Json& d : j["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > (1ll << 40))
      return Error(ErrorCode::kCorrupt, "{}: bad dimension {}", w, d.dump());
    t.shape.push_back(d.get<int64_t>());
  }
  // Guard the product against overflow before anything multiplies it.
  long double prod = 1;
  for (int64_t d : t.shape) prod *= static_cast<long double>(d);
  if (prod > static_cast<long double>(1ll << 50))
    return Error(ErrorCode::kCorrupt, "{}: shape too large", w);
  RW_ASSIGN_OR_RETURN(t.data, RangeFromJson(j, "data", w));
  if (t.type == TensorType::kAffine) {
    RW_ASSIGN_OR_RETURN(int64_t bits, JsonInt(j, "bits", w));
    RW_ASSIGN_OR_RETURN(int64_t gs, JsonInt(j, "group_size", w));
    // Checked before narrowing to int (2^32 + 4 must not become 4); Validate names what is
    // supported.
    if (bits < 1 || bits > 32)
      return Error(ErrorCode::kCorrupt, "{}: field 'bits' is {}, outside [1, 32]", w, bits);
    if (gs < 1 || gs > (1 << 20))
      return Error(ErrorCode::kCorrupt, "{}: field 'group_size' is {}, outside [1, 2^20]", w, gs);
    t.bits = static_cast<int>(bits);
    t.group_size = static_cast<int>(gs);
    RW_ASSIGN_OR_RETURN(t.scales, RangeFromJson(j, "scales", w));
    RW_ASSIGN_OR_RETURN(t.biases, RangeFromJson(j, "biases", w));
  }
  return t;
}

Status TensorDesc::Validate(uint64_t limit, const std::string& what) const {
  std::string w = what + " tensor '" + name + "'";
  if (type == TensorType::kAffine) {
    if (bits != 4 && bits != 8)
      return Error(ErrorCode::kUnsupported, "{}: {}-bit affine is not supported", w, bits);
    if (group_size != 32 && group_size != 64 && group_size != 128)
      return Error(ErrorCode::kUnsupported, "{}: group size {} is not supported", w, group_size);
    if (cols() % group_size != 0)
      return Error(ErrorCode::kCorrupt, "{}: {} columns are not a multiple of group size {}", w,
                   cols(), group_size);
  }
  if (data.size != ExpectedDataBytes())
    return Error(ErrorCode::kCorrupt, "{}: data holds {} bytes, shape and type need {}", w,
                 data.size, ExpectedDataBytes());
  std::vector<ByteRange> parts = {data};
  if (type == TensorType::kAffine) {
    if (scales.size != ExpectedScaleBytes() || biases.size != ExpectedScaleBytes())
      return Error(ErrorCode::kCorrupt, "{}: scales/biases hold {}/{} bytes, need {}", w,
                   scales.size, biases.size, ExpectedScaleBytes());
    parts.push_back(scales);
    parts.push_back(biases);
  }
  for (const ByteRange& r : parts) {
    if (r.offset > limit || r.size > limit - r.offset)
      return Error(ErrorCode::kCorrupt, "{}: bytes [{}, +{}) lie outside the {} bytes available", w,
                   r.offset, r.size, limit);
    if (r.offset % 4 != 0)
      return Error(ErrorCode::kCorrupt, "{}: offset {} is not 4-byte aligned", w, r.offset);
  }
  return Status::Ok();
}

}  // namespace rw
