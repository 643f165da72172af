// redwing tokenize --model <dir> [--file F] [--decode] [--bos]: text to ids (a JSON array) and
// back, with the model directory's tokenizer.json.
#include <cstdio>

#include "base/file.h"
#include "base/json.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/generation_flags.h"
#include "tokenizer/tokenizer.h"

namespace rw::cli {
namespace {

// "[2, 17, 99]" or "2 17 99" or "2,17,99".
Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  auto flush = [&]() -> Status {
    if (item.empty()) return Status::Ok();
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX)
      return Error(ErrorCode::kInvalidArgument, "'{}' is not a token id", item);
    ids.push_back(static_cast<int32_t>(v));
    item.clear();
    return Status::Ok();
  };
  for (char c : text) {
    if (c == '[' || c == ']' || c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      RW_RETURN_IF_ERROR(flush());
    } else {
      item += c;
    }
  }
  RW_RETURN_IF_ERROR(flush());
  return ids;
}

int Tokenize(const Args& args) {
  Flags flags("tokenize", "redwing tokenize --model <dir> [--file <text file>] [--decode] [--bos]",
              "Encodes text (standard input by default, taken byte for byte: a trailing newline is "
              "part of it) into token ids, printed as a JSON array. With --decode, reads ids (a "
              "JSON array, or separated by spaces or commas) and prints their text.");
  flags.String("model", "", "model directory holding tokenizer.json, or the tokenizer.json file");
  flags.String("file", "", "read the input from this file instead of standard input");
  flags.Bool("decode", "ids in, text out");
  flags.Bool("bos", "encode: prepend the <bos> id");
  flags.Bool("skip-special", "decode: leave out special tokens");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("tokenize", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  std::string path = flags.GetString("model");
  if (path.empty())
    return ReportError("tokenize", Status(ErrorCode::kInvalidArgument, "--model is required"));
  if (IsDirectory(path)) path = JoinPath(path, "tokenizer.json");
  if (!PathExists(path))
    return ReportError("tokenize",
                       Status(ErrorCode::kNotFound, fmt::format("{} does not exist", path)));
  if (flags.GetBool("decode") && flags.GetBool("bos"))
    return ReportError("tokenize", Status(ErrorCode::kInvalidArgument,
                                          "--bos applies to encoding, not to --decode"));
  auto tok = Tokenizer::Load(path);
  if (!tok.ok()) return ReportError("tokenize", tok.status());

  Result<std::string> input =
      flags.GetString("file").empty() ? ReadAllStdin() : ReadFileToString(flags.GetString("file"));
  if (!input.ok()) return ReportError("tokenize", input.status());

  if (flags.GetBool("decode")) {
    auto ids = ParseIds(*input);
    if (!ids.ok()) return ReportError("tokenize", ids.status());
    for (int32_t id : *ids)
      if (id >= tok->vocab_size())
        return ReportError("tokenize",
                           Status(ErrorCode::kOutOfRange,
                                  fmt::format("token id {} is outside the vocabulary [0, {})", id,
                                              tok->vocab_size())));
    const std::string text = tok->Decode(*ids, flags.GetBool("skip-special"));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  const std::vector<int32_t> ids = tok->Encode(*input, flags.GetBool("bos"));
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}

REDWING_COMMAND("tokenize", "turn text into token ids (or back, with --decode)", Tokenize);

}  // namespace
}  // namespace rw::cli
