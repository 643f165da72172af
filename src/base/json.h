// JSON through nlohmann::json, plus checked accessors that turn a missing or mistyped field into
// a Status naming the field, for the files we read from disk.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "base/status.h"

namespace rw {

using Json = nlohmann::json;

Result<Json> ParseJson(const std::string& text, const std::string& what);

// Field access with errors like "<what>: field 'hidden_size' missing" / "must be an integer".
Result<int64_t> JsonInt(const Json& j, const char* key, const std::string& what);
Result<double> JsonNumber(const Json& j, const char* key, const std::string& what);
Result<std::string> JsonString(const Json& j, const char* key, const std::string& what);
Result<bool> JsonBool(const Json& j, const char* key, const std::string& what);

}  // namespace rw
