#include "base/json.h"

namespace rw {

Result<Json> ParseJson(const std::string& text, const std::string& what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error(ErrorCode::kCorrupt, "{}: malformed JSON", what);
  return j;
}

namespace {
Result<const Json*> Field(const Json& j, const char* key, const std::string& what) {
  if (!j.is_object()) return Error(ErrorCode::kCorrupt, "{}: expected a JSON object", what);
  auto it = j.find(key);
  if (it == j.end()) return Error(ErrorCode::kCorrupt, "{}: field '{}' missing", what, key);
  return &*it;
}
}  // namespace

Result<int64_t> JsonInt(const Json& j, const char* key, const std::string& what) {
  RW_ASSIGN_OR_RETURN(const Json* v, Field(j, key, what));
  if (!v->is_number_integer())
    return Error(ErrorCode::kCorrupt, "{}: field '{}' must be an integer", what, key);
  // Above INT64_MAX, get<int64_t> would wrap to a negative number.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return Error(ErrorCode::kCorrupt, "{}: field '{}' is {}, out of range", what, key,
                 v->get<uint64_t>());
  return v->get<int64_t>();
}

Result<double> JsonNumber(const Json& j, const char* key, const std::string& what) {
  RW_ASSIGN_OR_RETURN(const Json* v, Field(j, key, what));
  if (!v->is_number())
    return Error(ErrorCode::kCorrupt, "{}: field '{}' must be a number", what, key);
  return v->get<double>();
}

Result<std::string> JsonString(const Json& j, const char* key, const std::string& what) {
  RW_ASSIGN_OR_RETURN(const Json* v, Field(j, key, what));
  if (!v->is_string())
    return Error(ErrorCode::kCorrupt, "{}: field '{}' must be a string", what, key);
  return v->get<std::string>();
}

Result<bool> JsonBool(const Json& j, const char* key, const std::string& what) {
  RW_ASSIGN_OR_RETURN(const Json* v, Field(j, key, what));
  if (!v->is_boolean())
    return Error(ErrorCode::kCorrupt, "{}: field '{}' must be true or false", what, key);
  return v->get<bool>();
}

}  // namespace rw
