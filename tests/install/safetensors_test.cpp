#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "base/file.h"
#include "install/safetensors.h"
#include "install/safetensors_writer.h"

namespace rw {
namespace {

std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = JoinPath(::testing::TempDir(), std::string("rw_st_") + info->name());
  EXPECT_TRUE(RemoveAll(dir).ok());
  EXPECT_TRUE(MakeDirectories(dir).ok());
  return dir;
}

std::string Le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A raw file: length prefix (the real one unless given), header text, data bytes.
std::string WriteRaw(const std::string& dir, const std::string& name, const std::string& header,
                     size_t data_bytes, std::optional<uint64_t> length_override = std::nullopt) {
  std::string path = JoinPath(dir, name);
  uint64_t n = length_override.value_or(header.size());
  std::string bytes = Le64(n) + header + std::string(data_bytes, '\x5a');
  EXPECT_TRUE(WriteFileAtomic(path, bytes).ok());
  return path;
}

// Asserts the failure code and that the message names every given fragment (file, tensor, ...).
template <typename R>
void ExpectError(const R& r, ErrorCode code, std::initializer_list<std::string> fragments) {
  Status st;
  if constexpr (std::is_same_v<R, Status>) {
    st = r;
  } else {
    st = r.status();
  }
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const auto& f : fragments)
    EXPECT_NE(st.message().find(f), std::string::npos) << "'" << f << "' not in: " << st.message();
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// ---- writer + reader round trip ----------------------------------------------------------------

TEST(Safetensors, WriteReadRoundTrip) {
  std::string dir = TestDir();
  std::string path = JoinPath(dir, "model.safetensors");
  std::vector<StTensorSpec> specs = {
      {"a.weight", StDType::kBF16, {3, 5}},   // 30 bytes: later tensors start unaligned
      {"b.scalar", StDType::kF32, {}},        // rank 0: one element
      {"c.empty", StDType::kU32, {0, 4}},     // no bytes
      {"d.big", StDType::kU32, {1000, 300}},  // written in uneven pieces
      {"e.i8", StDType::kI8, {7}},
  };
  auto a = Pattern(30, 1), b = Pattern(4, 2), d = Pattern(1'200'000, 3), e = Pattern(7, 4);
  {
    auto w = SafetensorsWriter::Create(path, specs, {{"format", "mlx"}, {"k", "v"}});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(w->WriteTensor("a.weight", a.data(), a.size()).ok());
    ASSERT_TRUE(w->Append("b.scalar", b.data(), 1).ok());
    ASSERT_TRUE(w->Append("b.scalar", b.data() + 1, 3).ok());
    size_t off = 0;
    for (size_t piece : {size_t{1}, size_t{99'999}, size_t{5'000'000 / 8}, size_t{0}}) {
      ASSERT_TRUE(w->Append("d.big", d.data() + off, piece).ok());
      off += piece;
    }
    ASSERT_TRUE(w->Append("d.big", d.data() + off, d.size() - off).ok());
    ASSERT_TRUE(w->WriteTensor("e.i8", e.data(), e.size()).ok());
    EXPECT_FALSE(PathExists(path));  // nothing visible before Finish
    EXPECT_TRUE(PathExists(fmt::format("{}.tmp-{}", path, ::getpid())));
    ASSERT_TRUE(w->Finish().ok());
    EXPECT_FALSE(PathExists(fmt::format("{}.tmp-{}", path, ::getpid())));
  }
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->data_start() % 8, 0u);
  EXPECT_EQ(f->metadata().at("format"), "mlx");
  EXPECT_EQ(f->metadata().at("k"), "v");
  ASSERT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->file_size(), f->data_start() + 30 + 4 + 1'200'000 + 7);
  struct Want {
    const char* name;
    StDType dtype;
    std::vector<int64_t> shape;
    const std::vector<uint8_t>* data;
  };
  std::vector<uint8_t> none;
  for (const Want& want :
       {Want{"a.weight", StDType::kBF16, {3, 5}, &a}, Want{"b.scalar", StDType::kF32, {}, &b},
        Want{"c.empty", StDType::kU32, {0, 4}, &none},
        Want{"d.big", StDType::kU32, {1000, 300}, &d}, Want{"e.i8", StDType::kI8, {7}, &e}}) {
    const StTensor* t = f->Find(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    EXPECT_EQ(t->dtype, want.dtype);
    EXPECT_EQ(t->shape, want.shape);
    EXPECT_EQ(t->size, want.data->size());
    std::vector<uint8_t> got(t->size);
    ASSERT_TRUE(f->Read(*t, got.data()).ok());
    EXPECT_EQ(got, *want.data) << want.name;
  }
  EXPECT_EQ(f->Find("b.scalar")->numel(), 1);
  EXPECT_EQ(f->Find("nope"), nullptr);
  // File order: declared order, contiguous.
  EXPECT_EQ(f->tensors().front().offset, f->data_start());
  const StTensor& big = *f->Find("d.big");
  std::vector<uint8_t> slice(1000);
  ASSERT_TRUE(f->ReadRange(big, 123'456, slice.size(), slice.data()).ok());
  EXPECT_TRUE(std::equal(slice.begin(), slice.end(), d.begin() + 123'456));
  ExpectError(f->ReadRange(big, big.size - 10, 11, slice.data()), ErrorCode::kOutOfRange,
              {path, "d.big"});
  ExpectError(f->ReadRange(big, UINT64_MAX, 2, slice.data()), ErrorCode::kOutOfRange, {"d.big"});
}

TEST(Safetensors, HeaderIsPaddedAndParsesInMemory) {
  std::vector<StTensorSpec> specs = {{"x", StDType::kF16, {2, 3}}, {"y", StDType::kU8, {5}}};
  auto h = BuildSafetensorsHeader(specs, DefaultSafetensorsMetadata());
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->size() % 8, 0u);
  EXPECT_NE(h->find("\"__metadata__\":{\"format\":\"pt\"}"), std::string::npos) << *h;
  EXPECT_NE(h->find("\"x\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]}"),
            std::string::npos)
      << *h;
  std::map<std::string, std::string> meta;
  auto t = SafetensorsFile::ParseHeader(*h, 8 + h->size(), UINT64_MAX, "remote", &meta);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[1].name, "y");
  EXPECT_EQ((*t)[1].offset, 8 + h->size() + 12);
  EXPECT_EQ(meta.at("format"), "pt");
  uint8_t prefix[8];
  std::memcpy(prefix, Le64(h->size()).data(), 8);
  auto n = SafetensorsFile::ParseHeaderLength(prefix, UINT64_MAX, "remote");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, h->size());
  auto none = BuildSafetensorsHeader({}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "{}      ");
}

TEST(Safetensors, WriterRejectsMisuse) {
  std::string dir = TestDir();
  std::string path = JoinPath(dir, "w.safetensors");
  ExpectError(SafetensorsWriter::Create(path, {{"a", StDType::kU8, {1}}, {"a", StDType::kU8, {1}}}),
              ErrorCode::kInvalidArgument, {path, "'a'", "twice"});
  ExpectError(SafetensorsWriter::Create(path, {{"n", StDType::kU8, {-1}}}),
              ErrorCode::kInvalidArgument, {"'n'", "negative"});
  ExpectError(SafetensorsWriter::Create(path, {{"o", StDType::kU8, {1 << 30, 1 << 30, 1 << 30}}}),
              ErrorCode::kInvalidArgument, {"'o'", "overflow"});
  ExpectError(SafetensorsWriter::Create(path, {{"__metadata__", StDType::kU8, {1}}}),
              ErrorCode::kInvalidArgument, {"reserved"});
  ExpectError(SafetensorsWriter::Create(path, {{"bad\xff", StDType::kU8, {1}}}),
              ErrorCode::kInvalidArgument, {path});

  uint8_t buf[16] = {};
  {
    auto w = SafetensorsWriter::Create(path, {{"a", StDType::kU8, {4}}, {"b", StDType::kU8, {4}}});
    ASSERT_TRUE(w.ok());
    ExpectError(w->Append("b", buf, 4), ErrorCode::kInvalidArgument, {path, "'b'", "'a'"});
    ExpectError(w->Append("a", buf, 5), ErrorCode::kInvalidArgument, {"'a'", "overruns"});
    ASSERT_TRUE(w->Append("a", buf, 2).ok());
    ExpectError(w->WriteTensor("a", buf, 2), ErrorCode::kInvalidArgument, {"'a'"});
    ASSERT_TRUE(w->Append("a", buf, 2).ok());
    ASSERT_TRUE(w->Append("b", buf, 3).ok());
    ExpectError(w->Finish(), ErrorCode::kInvalidArgument, {"'b'", "3 of 4"});
    EXPECT_FALSE(PathExists(path));
    EXPECT_FALSE(PathExists(fmt::format("{}.tmp-{}", path, ::getpid())));
  }
  {
    auto w = SafetensorsWriter::Create(path, {{"a", StDType::kU8, {4}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append("a", buf, 1).ok());
  }  // destroyed unfinished: the temporary file goes away
  EXPECT_FALSE(PathExists(path));
  EXPECT_FALSE(PathExists(fmt::format("{}.tmp-{}", path, ::getpid())));
  {
    auto w = SafetensorsWriter::Create(path, {{"a", StDType::kU8, {4}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->WriteTensor("a", buf, 4).ok());
    ExpectError(w->Append("a", buf, 1), ErrorCode::kInvalidArgument, {"complete"});
    ASSERT_TRUE(w->Finish().ok());
    ExpectError(w->Finish(), ErrorCode::kInvalidArgument, {"finished"});
  }
  EXPECT_TRUE(PathExists(path));
}

// ---- hostile single files ----------------------------------------------------------------------

TEST(SafetensorsHostile, ShorterThanLengthPrefix) {
  std::string dir = TestDir();
  std::string path = JoinPath(dir, "short.safetensors");
  ASSERT_TRUE(WriteFileAtomic(path, "abc").ok());
  ExpectError(SafetensorsFile::Open(path), ErrorCode::kCorrupt, {path, "shorter"});
  ExpectError(SafetensorsFile::Open(JoinPath(dir, "missing")), ErrorCode::kNotFound, {"missing"});
}

TEST(SafetensorsHostile, HeaderLengthBeyondFile) {
  std::string dir = TestDir();
  std::string path = WriteRaw(dir, "f.safetensors", "{}", 0, /*length_override=*/1000);
  ExpectError(SafetensorsFile::Open(path), ErrorCode::kCorrupt, {path, "1000", "past the end"});
}

TEST(SafetensorsHostile, HeaderLengthAbsurd) {
  std::string dir = TestDir();
  // A sparse 200 MB file, so that only the cap (not the file size) rejects the length.
  std::string path = WriteRaw(dir, "f.safetensors", "{}", 0, /*length_override=*/150'000'000);
  {
    auto f = File::OpenReadWrite(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Truncate(200'000'000).ok());
  }
  ExpectError(SafetensorsFile::Open(path), ErrorCode::kCorrupt, {path, "150000000", "limit"});
  std::string huge = WriteRaw(dir, "g.safetensors", "{}", 0, /*length_override=*/UINT64_MAX - 1);
  ExpectError(SafetensorsFile::Open(huge), ErrorCode::kCorrupt, {huge, "limit"});
}

struct HostileCase {
  const char* label;
  std::string header;
  size_t data_bytes;
  ErrorCode code;
  std::vector<std::string> fragments;  // besides the path
};

TEST(SafetensorsHostile, HeaderCases) {
  const std::string ok_entry = R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  std::vector<HostileCase> cases = {
      {"malformed", R"({"t": {"dtype": "U8", )", 4, ErrorCode::kCorrupt, {"malformed"}},
      {"not_object", R"([1, 2, 3])", 4, ErrorCode::kCorrupt, {"not a JSON object"}},
      {"bad_utf8", "{\"t\xff\": " + ok_entry + "}", 4, ErrorCode::kCorrupt, {"malformed"}},
      {"trailing_garbage", "{\"t\": " + ok_entry + "} x", 4, ErrorCode::kCorrupt, {"malformed"}},
      {"entry_not_object", R"({"t": 5})", 4, ErrorCode::kCorrupt, {"'t'", "not a JSON object"}},
      {"no_dtype",
       R"({"t": {"shape":[4],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "dtype"}},
      {"no_shape",
       R"({"t": {"dtype":"U8","data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "shape"}},
      {"no_offsets",
       R"({"t": {"dtype":"U8","shape":[4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "data_offsets"}},
      {"dtype_not_string",
       R"({"t": {"dtype":5,"shape":[4],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "dtype"}},
      {"shape_not_array",
       R"({"t": {"dtype":"U8","shape":"4","data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "shape"}},
      {"offsets_one",
       R"({"t": {"dtype":"U8","shape":[4],"data_offsets":[4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "data_offsets"}},
      {"offsets_strings",
       R"({"t": {"dtype":"U8","shape":[4],"data_offsets":["0","4"]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "data_offsets"}},
      {"offsets_negative",
       R"({"t": {"dtype":"U8","shape":[0],"data_offsets":[-4,-4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "data_offsets"}},
      {"unknown_dtype",
       R"({"t": {"dtype":"Q4","shape":[4],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kUnsupported,
       {"'t'", "Q4"}},
      {"negative_dim",
       R"({"t": {"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "shape"}},
      {"fractional_dim",
       R"({"t": {"dtype":"U8","shape":[2.5],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "shape"}},
      {"dim_too_big",
       R"({"t": {"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "overflow"}},
      {"shape_overflow",
       R"({"t": {"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "overflow"}},
      {"bytes_overflow",
       R"({"t": {"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "overflow"}},
      {"begin_after_end",
       R"({"t": {"dtype":"U8","shape":[4],"data_offsets":[4,0]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "begin after end"}},
      {"truncated",
       R"({"t": {"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
       3,
       ErrorCode::kCorrupt,
       {"'t'", "beyond the file"}},
      {"size_mismatch",
       R"({"t": {"dtype":"BF16","shape":[4],"data_offsets":[0,4]}})",
       8,
       ErrorCode::kCorrupt,
       {"'t'", "needs 8"}},
      {"overlap",
       R"({"p": {"dtype":"U8","shape":[4],"data_offsets":[0,4]},
           "q": {"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
       8,
       ErrorCode::kCorrupt,
       {"'q'", "overlaps", "'p'"}},
      {"contained_overlap",
       R"({"p": {"dtype":"U8","shape":[8],"data_offsets":[0,8]},
           "q": {"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
       8,
       ErrorCode::kCorrupt,
       {"'q'", "overlaps", "'p'"}},
      {"duplicate_tensor",
       "{\"t\": " + ok_entry + ", \"t\": " + ok_entry + "}",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "twice"}},
      {"duplicate_field",
       R"({"t": {"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
       4,
       ErrorCode::kCorrupt,
       {"'t'", "'dtype'", "twice"}},
      {"metadata_not_object",
       "{\"__metadata__\": 3, \"t\": " + ok_entry + "}",
       4,
       ErrorCode::kCorrupt,
       {"__metadata__"}},
      {"metadata_value",
       "{\"__metadata__\": {\"k\": 1}, \"t\": " + ok_entry + "}",
       4,
       ErrorCode::kCorrupt,
       {"__metadata__", "'k'"}},
      {"deep_nesting", R"({"t": [[[[[[[[[[[[1]]]]]]]]]]]]})", 4, ErrorCode::kCorrupt, {"deeper"}},
  };
  std::string dir = TestDir();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    std::string path = WriteRaw(dir, std::string(c.label) + ".safetensors", c.header, c.data_bytes);
    auto f = SafetensorsFile::Open(path);
    std::initializer_list<std::string> none = {};
    ExpectError(f, c.code, none);
    if (f.ok()) continue;
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
    for (const auto& frag : c.fragments)
      EXPECT_NE(f.status().message().find(frag), std::string::npos)
          << "'" << frag << "' not in: " << f.status().message();
  }
}

TEST(SafetensorsHostile, GapsAndEmptyTensorsAreAccepted) {
  std::string dir = TestDir();
  std::string path = WriteRaw(dir, "gaps.safetensors",
                              R"({"b": {"dtype":"U8","shape":[2],"data_offsets":[10,12]},
                                  "z": {"dtype":"U8","shape":[0],"data_offsets":[11,11]},
                                  "a": {"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                              16);
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "a");  // file order
  EXPECT_EQ(f->tensors()[1].name, "b");
  EXPECT_EQ(f->tensors()[2].name, "z");
  EXPECT_EQ(f->Find("b")->offset, f->data_start() + 10);
}

// Deterministic mutation fuzzing of a valid header: every outcome is an error or a header whose
// tensors all lie inside the file, size correctly and do not overlap.
TEST(SafetensorsHostile, MutatedHeadersNeverYieldBadTensors) {
  std::vector<StTensorSpec> specs = {{"layer.0.w", StDType::kBF16, {4, 8}},
                                     {"layer.0.s", StDType::kF32, {3}},
                                     {"layer.1.q", StDType::kU32, {2, 2, 2}}};
  auto header = BuildSafetensorsHeader(specs, DefaultSafetensorsMetadata());
  ASSERT_TRUE(header.ok());
  const uint64_t data_start = 8 + header->size();
  const uint64_t file_size = data_start + 64 + 12 + 32;
  const std::string alphabet = "{}[]\":,0123456789-.eE tU\\";
  uint32_t rng = 12345;
  auto next = [&rng]() { return rng = rng * 1664525u + 1013904223u; };
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string h = *header;
    int edits = 1 + next() % 3;
    for (int e = 0; e < edits; ++e) {
      size_t pos = next() % h.size();
      switch (next() % 3) {
        case 0:
          h[pos] = alphabet[next() % alphabet.size()];
          break;
        case 1:
          h.erase(pos, 1);
          break;
        default:
          h.insert(pos, 1, alphabet[next() % alphabet.size()]);
      }
    }
    auto t = SafetensorsFile::ParseHeader(h, data_start, file_size, "fuzz");
    if (!t.ok()) {
      EXPECT_NE(t.status().message().find("fuzz"), std::string::npos);
      continue;
    }
    ++accepted;
    uint64_t prev_end = data_start;
    for (const StTensor& x : *t) {
      EXPECT_LE(x.offset + x.size, file_size);
      EXPECT_EQ(x.size, static_cast<uint64_t>(x.numel()) * StDTypeSize(x.dtype));
      if (x.size > 0) {
        EXPECT_GE(x.offset, prev_end) << x.name;
        prev_end = x.offset + x.size;
      }
    }
  }
  EXPECT_GT(accepted, 0);  // some edits (in names, whitespace) leave a valid header
}

TEST(SafetensorsHostile, TruncatedAfterOpen) {
  std::string dir = TestDir();
  std::string path = JoinPath(dir, "t.safetensors");
  {
    auto w = SafetensorsWriter::Create(path, {{"w", StDType::kF32, {64}}});
    ASSERT_TRUE(w.ok());
    std::vector<float> v(64, 1.0f);
    ASSERT_TRUE(w->WriteTensor("w", v.data(), 256).ok());
    ASSERT_TRUE(w->Finish().ok());
  }
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  {
    auto rw = File::OpenReadWrite(path);
    ASSERT_TRUE(rw.ok());
    ASSERT_TRUE(rw->Truncate(f->data_start() + 100).ok());
  }
  std::vector<uint8_t> buf(256);
  ExpectError(f->Read(*f->Find("w"), buf.data()), ErrorCode::kCorrupt, {path, "'w'", "truncated"});
}

// ---- checkpoints -------------------------------------------------------------------------------

void WriteShard(const std::string& path, const std::vector<std::string>& names) {
  std::vector<StTensorSpec> specs;
  for (const auto& n : names) specs.push_back({n, StDType::kBF16, {2, 2}});
  auto w = SafetensorsWriter::Create(path, specs);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<uint8_t> d = Pattern(8, static_cast<uint8_t>(i));
    ASSERT_TRUE(w->WriteTensor(names[i], d.data(), d.size()).ok());
  }
  ASSERT_TRUE(w->Finish().ok());
}

TEST(SafetensorsCheckpoint, SingleFile) {
  std::string dir = TestDir();
  WriteShard(JoinPath(dir, "model.safetensors"), {"x", "y"});
  auto ck = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"x", "y"}));
  auto e = ck->Find("y");
  ASSERT_NE(e.tensor, nullptr);
  EXPECT_EQ(e.tensor->size, 8u);
  std::vector<uint8_t> got(8);
  ASSERT_TRUE(e.file->Read(*e.tensor, got.data()).ok());
  EXPECT_EQ(got, Pattern(8, 1));
  EXPECT_EQ(ck->Find("z").tensor, nullptr);
  std::string empty = JoinPath(dir, "empty");
  ASSERT_TRUE(MakeDirectories(empty).ok());
  ExpectError(SafetensorsCheckpoint::Open(empty), ErrorCode::kNotFound, {empty});
}

TEST(SafetensorsCheckpoint, Sharded) {
  std::string dir = TestDir();
  WriteShard(JoinPath(dir, "model-00001-of-00002.safetensors"), {"a", "b"});
  WriteShard(JoinPath(dir, "model-00002-of-00002.safetensors"), {"c"});
  ASSERT_TRUE(WriteSafetensorsIndex(JoinPath(dir, "model.safetensors.index.json"),
                                    {{"a", "model-00001-of-00002.safetensors"},
                                     {"b", "model-00001-of-00002.safetensors"},
                                     {"c", "model-00002-of-00002.safetensors"}},
                                    24)
                  .ok());
  auto ck = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->num_files(), 2u);
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"a", "b", "c"}));
  auto c = ck->Find("c");
  ASSERT_NE(c.file, nullptr);
  EXPECT_EQ(BaseName(c.file->path()), "model-00002-of-00002.safetensors");
  std::vector<uint8_t> got(8);
  ASSERT_TRUE(c.file->Read(*c.tensor, got.data()).ok());
  EXPECT_EQ(got, Pattern(8, 0));
  // Moving the checkpoint keeps entries valid.
  SafetensorsCheckpoint moved = std::move(*ck);
  EXPECT_EQ(moved.Find("a").tensor->name, "a");
}

void WriteIndexText(const std::string& dir, const std::string& weight_map) {
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "model.safetensors.index.json"),
                              "{\"metadata\": {}, \"weight_map\": " + weight_map + "}")
                  .ok());
}

TEST(SafetensorsCheckpoint, IndexHostileCases) {
  std::string dir = TestDir();
  const std::string index = JoinPath(dir, "model.safetensors.index.json");
  WriteShard(JoinPath(dir, "s1.safetensors"), {"a", "b"});
  WriteShard(JoinPath(dir, "s2.safetensors"), {"b", "c"});
  WriteShard(JoinPath(dir, "s3.safetensors"), {"d"});

  WriteIndexText(dir, R"({"a": "s1.safetensors", "x": "gone.safetensors"})");
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kNotFound,
              {index, "'x'", "gone.safetensors"});

  WriteIndexText(dir, R"({"a": "s1.safetensors", "zz": "s3.safetensors"})");
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kCorrupt,
              {index, "'zz'", "s3.safetensors"});

  WriteIndexText(dir, R"({"a": "s1.safetensors", "d": "s1.safetensors", "q": "s3.safetensors"})");
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kCorrupt,
              {index, "'d'", "s1.safetensors", "s3.safetensors"});

  WriteIndexText(dir, R"({"a": "s1.safetensors", "c": "s2.safetensors"})");
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kCorrupt,
              {dir, "'b'", "two shards", "s1.safetensors", "s2.safetensors"});

  WriteIndexText(dir, R"({"a": "../s1.safetensors"})");
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kCorrupt,
              {index, "'a'", "plain file name"});

  WriteIndexText(dir, R"({"a": "s1.safetensors", "a": "s1.safetensors"})");
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kCorrupt, {index, "a"});

  WriteIndexText(dir, R"({"a": 7})");
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kCorrupt, {index, "'a'"});

  ASSERT_TRUE(WriteFileAtomic(index, R"({"metadata": {}})").ok());
  ExpectError(SafetensorsCheckpoint::Open(dir), ErrorCode::kCorrupt, {index, "weight_map"});

  // A shard's tensor that the index does not mention is used (with a warning).
  WriteIndexText(dir, R"({"a": "s1.safetensors"})");
  auto ck = SafetensorsCheckpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"a", "b"}));
}

TEST(SafetensorsCheckpoint, ParseIndexInMemory) {
  auto m = ParseSafetensorsIndex(R"({"weight_map": {"t": "s.safetensors"}})", "remote-index");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->at("t"), "s.safetensors");
  ExpectError(ParseSafetensorsIndex(R"({"weight_map": {"t": ".."}})", "remote-index"),
              ErrorCode::kCorrupt, {"remote-index", "'t'"});
  ExpectError(ParseSafetensorsIndex("nope", "remote-index"), ErrorCode::kCorrupt, {"remote-index"});
}

}  // namespace
}  // namespace rw
