// A small, strict command-line parser: every option is declared with its default and help text,
// so --help lists them all, and unknown or malformed flags are errors.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace rw::cli {

class Flags {
 public:
  Flags(std::string command, std::string usage, std::string summary);

  // Declarations. `def` is the default shown in --help ("" = none / required).
  void String(const std::string& name, const std::string& def, const std::string& help);
  void Int(const std::string& name, long long def, const std::string& help);
  void Double(const std::string& name, double def, const std::string& help);
  void Bool(const std::string& name, const std::string& help);  // a switch, default off
  // An option that may be given several times (e.g. --stop a --stop b); empty by default.
  void StringList(const std::string& name, const std::string& help);
  // Positional arguments (named for help); required ones must be given.
  void Positional(const std::string& name, const std::string& help, bool required = true);

  // Parses args (without the program and command names). Returns false and fills *error on a
  // bad flag; sets help_requested() on --help/-h.
  Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_; }
  std::string HelpText() const;

  std::string GetString(const std::string& name) const;
  long long GetInt(const std::string& name) const;
  double GetDouble(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  const std::vector<std::string>& GetList(const std::string& name) const;
  bool IsSet(const std::string& name) const;  // given on the command line
  const std::string& positional(size_t i) const { return positional_values_.at(i); }
  size_t positional_count() const { return positional_values_.size(); }

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kList };
  struct Opt {
    Kind kind;
    std::string def;
    std::string help;
    std::optional<std::string> value;
    std::vector<std::string> list;  // kList: every value given, in order
  };
  std::string command_, usage_, summary_;
  std::map<std::string, Opt> opts_;
  std::vector<std::string> order_;
  std::vector<std::pair<std::string, std::string>> positional_decl_;
  std::vector<bool> positional_required_;
  std::vector<std::string> positional_values_;
  bool help_ = false;
};

// Parses a comma-separated list of non-negative ints ("2,17,99"); an error names the flag, the bad
// item, what an item is and an example.
Result<std::vector<int>> ParseIntList(const std::string& text, const std::string& flag,
                                      const char* item_name, const char* example);
// Token ids: "2,17,99".
Result<std::vector<int>> ParseIdList(const std::string& text, const std::string& flag);
// Parses sizes like "2G", "512M", "4096", "1.5GiB" into bytes.
Result<unsigned long long> ParseByteSize(const std::string& text, const std::string& flag);

}  // namespace rw::cli
