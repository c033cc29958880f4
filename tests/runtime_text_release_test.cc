// TextReleaser (src/runtime/text_release.h): streaming text that holds back
// what could still become a stop string and cuts at the first stop string.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/text_release.h"

namespace kvshare::detail {
namespace {

// Feeds pieces one by one; returns the text released after each Add.
std::vector<std::string> Stream(TextReleaser& r, const std::vector<std::string>& pieces) {
  std::vector<std::string> after;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    std::vector<ReleasedPiece> out;
    r.Add(i, pieces[i], out);
    std::string t;
    for (const ReleasedPiece& p : out) t += p.text;
    after.push_back(t);
  }
  return after;
}

TEST(TextReleaser, NoStopsReleasesEachPieceAtOnce) {
  TextReleaser r({});
  EXPECT_EQ(Stream(r, {"a", "", "bc"}), (std::vector<std::string>{"a", "", "bc"}));
  EXPECT_FALSE(r.stopped());
}

TEST(TextReleaser, HoldsBackAPossibleStopThenReleasesIt) {
  TextReleaser r({"END"});
  // "xE" may start "END": "E" waits; "Ex" cannot: released with the next piece.
  EXPECT_EQ(Stream(r, {"x", "E", "N", "x", "y"}), (std::vector<std::string>{"x", "", "", "ENx", "y"}));
  EXPECT_FALSE(r.stopped());
}

TEST(TextReleaser, CutsAtTheStopAcrossPieces) {
  TextReleaser r({"END"});
  std::vector<ReleasedPiece> out;
  r.Add(0, "abE", out);
  ASSERT_EQ(out.size(), 0u);  // the whole piece waits ("E" could start "END")
  r.Add(1, "NDzz", out);
  ASSERT_TRUE(r.stopped());
  EXPECT_EQ(r.matched(), "END");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token, 0u);
  EXPECT_EQ(out[0].text, "ab");  // cut where the stop string starts; token 1 dropped
  out.clear();
  r.Add(2, "more", out);
  r.Flush(out);
  EXPECT_TRUE(out.empty()) << "nothing after a stop";
}

TEST(TextReleaser, EarliestOfSeveralStopsWins) {
  TextReleaser r({"cd", "b", ""});  // "" is ignored
  std::vector<ReleasedPiece> out;
  r.Add(0, "abcd", out);
  ASSERT_TRUE(r.stopped());
  EXPECT_EQ(r.matched(), "b");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "a");
}

TEST(TextReleaser, StopAtTheVeryStartReleasesNothing) {
  TextReleaser r({"\n\n"});
  std::vector<ReleasedPiece> out;
  r.Add(0, "\n", out);
  r.Add(1, "\nx", out);
  EXPECT_TRUE(r.stopped());
  std::string t;
  for (const ReleasedPiece& p : out) t += p.text;
  EXPECT_EQ(t, "");
}

TEST(TextReleaser, FlushReleasesTheHeldTail) {
  TextReleaser r({"stop"});
  std::vector<ReleasedPiece> out;
  r.Add(0, "go st", out);
  EXPECT_TRUE(out.empty());
  r.Add(1, "", out);  // an empty piece (an unfinished UTF-8 character) waits in order
  r.Flush(out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "go st");
  EXPECT_EQ(out[1].token, 1u);
  EXPECT_FALSE(r.stopped());
}

}  // namespace
}  // namespace kvshare::detail
