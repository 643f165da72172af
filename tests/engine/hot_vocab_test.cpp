// The hot-vocabulary loader: the shipped list parses (distinct ids inside Gemma's vocabulary, as
// many as its header says, the most common tokens first), and malformed files are errors that
// say what is wrong.
#include "engine/hot_vocab.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "base/file.h"

namespace rw {
namespace {

constexpr int kGemmaVocab = 262144;

TEST(HotVocab, TheShippedListLoads) {
  const std::string path = JoinPath(REDWING_SOURCE_DIR, "data/hot_vocab_32k.txt");
  auto ids = LoadHotVocab(path, kGemmaVocab);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->size(), 32768u);
  // Its header names the corpus and the coverage, as the build script writes them.
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("# corpus: "), std::string::npos);
  EXPECT_NE(text->find("# coverage of the corpus tokens by the first K ids (in-sample): 4K"),
            std::string::npos);
  EXPECT_LT(text->size(), 1u << 20);
  // A newline (id 107 in Gemma's vocabulary) and "▁the" (506) are among the
  // most common tokens of English prose and code.
  auto rank = [&](int id) { return std::find(ids->begin(), ids->end(), id) - ids->begin(); };
  EXPECT_LT(rank(107), 20);
  EXPECT_LT(rank(506), 50);
  // A smaller vocabulary does not hold its ids.
  auto small = LoadHotVocab(path, 1000);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("outside the vocabulary"), std::string::npos);
}

TEST(HotVocab, ParsesTheFormat) {
  auto ids = ParseHotVocab("# redwing-hot-vocab/1\n# ids: 3\n# any note\n5\n0\n9\n", 10);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<int>{5, 0, 9}));
  // CRLF line ends and no final newline.
  ids = ParseHotVocab("# redwing-hot-vocab/1\r\n# ids: 2\r\n7\r\n8", 10);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<int>{7, 8}));
}

TEST(HotVocab, MalformedFilesAreClearErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"1\n2\n", "line 1 must be '# redwing-hot-vocab/1'"},
      {"# redwing-hot-vocab/2\n# ids: 1\n1\n", "line 1 must be"},
      {"# redwing-hot-vocab/1\n1\n2\n", "no '# ids: N' header"},
      {"# redwing-hot-vocab/1\n# ids: x\n1\n", "line 2: '# ids:' needs a count"},
      {"# redwing-hot-vocab/1\n# ids: 3\n1\n2\n", "header says 3 ids but the file has 2"},
      {"# redwing-hot-vocab/1\n# ids: 2\n1\nabc\n", "line 4: 'abc' is not a token id"},
      {"# redwing-hot-vocab/1\n# ids: 2\n1\n2 \n", "line 4: '2 ' is not a token id"},
      {"# redwing-hot-vocab/1\n# ids: 2\n1\n-3\n", "outside the vocabulary"},
      {"# redwing-hot-vocab/1\n# ids: 2\n1\n10\n",
       "line 4: id 10 is outside the vocabulary (0..9)"},
      {"# redwing-hot-vocab/1\n# ids: 2\n4\n4\n", "line 4: id 4 appears twice"},
      {"# redwing-hot-vocab/1\n# ids: 2\n4\n# late\n5\n", "line 4: a '#' line after the ids"},
  };
  for (const auto& [text, expect] : cases) {
    auto ids = ParseHotVocab(text, 10);
    ASSERT_FALSE(ids.ok()) << text;
    EXPECT_NE(ids.status().message().find(expect), std::string::npos)
        << "got: " << ids.status().message() << "\nwant: " << expect;
  }
  const std::string path = "hot_vocab_test_bad.txt";
  ASSERT_TRUE(WriteFileAtomic(path, "# redwing-hot-vocab/1\n# ids: 1\n99\n").ok());
  auto bad = LoadHotVocab(path, 10);
  std::remove(path.c_str());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path), std::string::npos);  // names the file
  EXPECT_FALSE(LoadHotVocab("no_such_hot_vocab.txt", 10).ok());
}

}  // namespace
}  // namespace rw
