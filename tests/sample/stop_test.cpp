#include <gtest/gtest.h>

#include "sample/stop.h"

namespace rw {
namespace {

std::string FeedAll(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.Push(p);
  return out + m.Flush();
}

TEST(StopStrings, MatchAcrossTokenBoundaries) {
  StopStringMatcher m({"</end>"});
  EXPECT_EQ(m.Push("hello </"), "hello ");  // "</" may start the stop string: held back
  EXPECT_EQ(m.Push("en"), "");
  EXPECT_EQ(m.Push("d> tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "</end>");
}

TEST(StopStrings, ReleasesFalseStarts) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(FeedAll(m, {"a S", "T", "x"}), "a STx");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, EarliestOfSeveral) {
  StopStringMatcher m({"bb", "abc"});
  EXPECT_EQ(FeedAll(m, {"xxab", "cbb"}), "xx");
  EXPECT_EQ(m.matched(), "abc");
}

TEST(StopStrings, NoStopsPassesThrough) {
  StopStringMatcher m({});
  EXPECT_EQ(m.Push("anything"), "anything");
}

}  // namespace
}  // namespace rw
