#include "cli/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace rw::cli {

Flags::Flags(std::string command, std::string usage, std::string summary)
    : command_(std::move(command)), usage_(std::move(usage)), summary_(std::move(summary)) {}

void Flags::String(const std::string& name, const std::string& def, const std::string& help) {
  opts_[name] = Opt{Kind::kString, def, help, std::nullopt, {}};
  order_.push_back(name);
}
void Flags::Int(const std::string& name, long long def, const std::string& help) {
  opts_[name] = Opt{Kind::kInt, std::to_string(def), help, std::nullopt, {}};
  order_.push_back(name);
}
void Flags::Double(const std::string& name, double def, const std::string& help) {
  opts_[name] =
      Opt{Kind::kDouble, fmt::format("{:g}", static_cast<float>(def)), help, std::nullopt, {}};
  order_.push_back(name);
}
void Flags::Bool(const std::string& name, const std::string& help) {
  opts_[name] = Opt{Kind::kBool, "off", help, std::nullopt, {}};
  order_.push_back(name);
}
void Flags::StringList(const std::string& name, const std::string& help) {
  opts_[name] = Opt{Kind::kList, "", help, std::nullopt, {}};
  order_.push_back(name);
}
void Flags::Positional(const std::string& name, const std::string& help, bool required) {
  positional_decl_.emplace_back(name, help);
  positional_required_.push_back(required);
}

Status Flags::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      return Status::Ok();
    }
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), value;
      bool has_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      auto it = opts_.find(name);
      if (it == opts_.end())
        return Error(ErrorCode::kInvalidArgument, "{}: unknown option --{} (see redwing {} --help)",
                     command_, name, command_);
      Opt& o = it->second;
      if (o.value.has_value() && o.kind != Kind::kList)
        return Error(ErrorCode::kInvalidArgument, "{}: option --{} given twice", command_, name);
      if (o.kind == Kind::kBool) {
        if (has_value && value != "true" && value != "false" && value != "1" && value != "0")
          return Error(ErrorCode::kInvalidArgument, "{}: --{} takes no value", command_, name);
        o.value = (!has_value || value == "true" || value == "1") ? "on" : "off";
        continue;
      }
      if (!has_value) {
        if (i + 1 >= args.size())
          return Error(ErrorCode::kInvalidArgument, "{}: option --{} needs a value", command_,
                       name);
        value = args[++i];
      }
      if (o.kind == Kind::kInt) {
        errno = 0;
        char* end = nullptr;
        long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno != 0)
          return Error(ErrorCode::kInvalidArgument, "{}: --{} expects an integer, got '{}'",
                       command_, name, value);
        (void)v;
      } else if (o.kind == Kind::kDouble) {
        char* end = nullptr;
        double v = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !std::isfinite(v))
          return Error(ErrorCode::kInvalidArgument, "{}: --{} expects a number, got '{}'", command_,
                       name, value);
      }
      o.value = value;
      if (o.kind == Kind::kList) o.list.push_back(value);
      continue;
    }
    if (a.size() > 1 && a[0] == '-' && a != "-")
      return Error(ErrorCode::kInvalidArgument, "{}: unknown option {} (see redwing {} --help)",
                   command_, a, command_);
    if (positional_values_.size() >= positional_decl_.size())
      return Error(ErrorCode::kInvalidArgument, "{}: unexpected argument '{}'", command_, a);
    positional_values_.push_back(a);
  }
  for (size_t i = positional_values_.size(); i < positional_decl_.size(); ++i)
    if (positional_required_[i])
      return Error(ErrorCode::kInvalidArgument, "{}: missing <{}> (usage: {})", command_,
                   positional_decl_[i].first, usage_);
  return Status::Ok();
}

std::string Flags::HelpText() const {
  std::string s = fmt::format("usage: {}\n\n{}\n", usage_, summary_);
  if (!positional_decl_.empty()) {
    s += "\narguments:\n";
    for (auto& [n, h] : positional_decl_) s += fmt::format("  {:<24} {}\n", "<" + n + ">", h);
  }
  s += "\noptions:\n";
  for (const std::string& n : order_) {
    const Opt& o = opts_.at(n);
    std::string left = "--" + n + (o.kind == Kind::kBool ? "" : " <v>");
    if (o.kind == Kind::kList) left += " ...";
    std::string def = o.def.empty() ? "" : fmt::format(" (default: {})", o.def);
    s += fmt::format("  {:<24} {}{}\n", left, o.help, def);
  }
  s += fmt::format("  {:<24} {}\n", "--help", "show this help");
  return s;
}

std::string Flags::GetString(const std::string& name) const {
  const Opt& o = opts_.at(name);
  return o.value.value_or(o.def);
}
long long Flags::GetInt(const std::string& name) const {
  return std::strtoll(GetString(name).c_str(), nullptr, 10);
}
double Flags::GetDouble(const std::string& name) const {
  return std::strtod(GetString(name).c_str(), nullptr);
}
bool Flags::GetBool(const std::string& name) const {
  return GetString(name) == "on";
}
const std::vector<std::string>& Flags::GetList(const std::string& name) const {
  return opts_.at(name).list;
}
bool Flags::IsSet(const std::string& name) const {
  return opts_.at(name).value.has_value();
}

Result<std::vector<int>> ParseIdList(const std::string& text, const std::string& flag) {
  return ParseIntList(text, flag, "token id", "2,17,99");
}

Result<std::vector<int>> ParseIntList(const std::string& text, const std::string& flag,
                                      const char* item_name, const char* example) {
  std::vector<int> ids;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 0 || v > 0x7fffffff)
      return Error(ErrorCode::kInvalidArgument, "{}: '{}' is not a {} (expected e.g. {})", flag,
                   item, item_name, example);
    ids.push_back(static_cast<int>(v));
    i = j + 1;
  }
  return ids;
}

Result<unsigned long long> ParseByteSize(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string unit(end);
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KiB" || unit == "k")
    mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TiB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return Error(ErrorCode::kInvalidArgument, "{}: cannot read size '{}' (use e.g. 2G, 512M)", flag,
                 text);
  if (text.empty() || end == text.c_str() || !(v >= 0) || !std::isfinite(v))
    return Error(ErrorCode::kInvalidArgument, "{}: cannot read size '{}' (use e.g. 2G, 512M)", flag,
                 text);
  return static_cast<unsigned long long>(v * mult);
}

}  // namespace rw::cli
