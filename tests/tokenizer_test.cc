// Tokenizer and stream decoder on small synthetic vocabularies.
// The BPE result is checked against a plain twin written here (quadratic
// merge-by-score loop) as well as hand-computed cases.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

// GCC 12 flags designated initializers that leave members at their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "kvshare/common/error.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "tokenizer_bpe_twin.h"

namespace kvshare {
namespace {

constexpr int kControl = 3, kUserDefined = 4, kByte = 6, kNormal = 1;

struct Entry {
  std::string piece;
  float score;
  int type;
};

VocabData MakeVocab(const std::vector<Entry>& normal, bool add_space_prefix = false) {
  VocabData v;
  auto add = [&v](std::string piece, float score, int type) {
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  // Gemma's layout: <pad>=0, <eos>=1, <bos>=2, <unk>=3 (stored as CONTROL).
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"}) {
    add(s, -1000.0f, kControl);
  }
  add("\n", -1000.0f, kUserDefined);    // 6
  add("\n\n", -1000.0f, kUserDefined);  // 7
  add("  ", -1000.0f, kUserDefined);    // 8 (two spaces, as Gemma stores them)
  for (int b = 0; b < 256; ++b) {       // 9 .. 264
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.0f, kByte);
  }
  for (const Entry& e : normal) add(e.piece, e.score, e.type);
  v.pad = 0;
  v.eos = 1;
  v.bos = 2;
  v.unk = 3;
  v.add_space_prefix = add_space_prefix;
  return v;
}

constexpr int32_t kStartOfTurn = 4, kEndOfTurn = 5, kNl = 6, kNlNl = 7, kTwoSpaces = 8;

constexpr int32_t ByteId(int b) { return 9 + b; }

// Normal pieces with scores decreasing with their index (as in Gemma).
std::vector<Entry> RichPieces() {
  std::vector<std::string> pieces = {
      "▁",    "a",  "b",   "c",   "d",    "e",   "h",    "l",     "o",      "r",    "w",  "s",   "t",     "u",
      "<",    ">",  "_",   "he",  "ll",   "llo", "hell", "hello", "▁hello", "▁w",   "or", "wor", "world", "▁world",
      "▁the", "th", "the", "▁t",  "ab",   "bc",  "abc",  "你",    "好",     "你好", "日", "本",  "st",    "<s",
      "<st",  "ta", "ar",  "art", "tart", "▁▁",  "▁a",   "us",    "user",   "se",   "er"};
  std::vector<Entry> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    out.push_back({pieces[i], -static_cast<float>(i), kNormal});
  }
  return out;
}

std::string RandomText(std::mt19937& rng, int max_units) {
  static const std::vector<std::string> units = {"a",        "b",
                                                 "c",        "h",
                                                 "e",        "l",
                                                 "o",        "w",
                                                 "r",        "d",
                                                 " ",        " ",
                                                 "  ",       "\n",
                                                 "\n\n",     "\t",
                                                 "<",        ">",
                                                 "s",        "t",
                                                 "hello",    "world",
                                                 "the",      "é",
                                                 "ü",        "你",
                                                 "好",       "日本語",
                                                 "😀",        "🎉",
                                                 "👍🏽", "Ω",
                                                 "ß",        "\xF0\x9F\xA6\x80",
                                                 "<bos>",    "<start_of_turn>",
                                                 "~",        "0"};
  std::uniform_int_distribution<int> n_units(0, max_units);
  std::uniform_int_distribution<size_t> pick(0, units.size() - 1);
  std::string s;
  for (int i = n_units(rng); i > 0; --i) s += units[pick(rng)];
  return s;
}

TEST(Tokenizer, HandComputedMerges) {
  const VocabData v = MakeVocab(RichPieces());
  Tokenizer tok(v);
  auto id = [&](const char* s) { return *tok.TokenId(s); };
  // "▁w" (-23) outranks "or" (-24); "▁wor" is no piece, so "▁world" is never reached.
  EXPECT_EQ(tok.Encode("hello world", {.add_bos = false}),
            (std::vector<int32_t>{id("hello"), id("▁w"), id("or"), id("l"), id("d")}));
  EXPECT_EQ(tok.Encode("hello world"), (std::vector<int32_t>{2, id("hello"), id("▁w"), id("or"), id("l"), id("d")}));
  EXPECT_EQ(tok.Encode("wor", {.add_bos = false}), (std::vector<int32_t>{id("wor")}));  // w+(or)
  EXPECT_EQ(tok.Encode(" the", {.add_bos = false}), (std::vector<int32_t>{id("▁the")}));
  EXPECT_EQ(tok.Encode("你好日", {.add_bos = false}), (std::vector<int32_t>{id("你好"), id("日")}));
}

TEST(Tokenizer, MergeOrderFollowsScores) {
  auto encode = [](float ab, float bc) {
    Tokenizer tok(MakeVocab(
        {{"a", -10, kNormal}, {"b", -11, kNormal}, {"c", -12, kNormal}, {"ab", ab, kNormal}, {"bc", bc, kNormal}}));
    std::vector<std::string> pieces;
    for (int32_t id : tok.Encode("abc", {.add_bos = false})) {
      pieces.emplace_back(tok.TokenText(id));
    }
    return pieces;
  };
  EXPECT_EQ(encode(-1, -2), (std::vector<std::string>{"ab", "c"}));
  EXPECT_EQ(encode(-2, -1), (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(encode(-1, -1), (std::vector<std::string>{"ab", "c"}));  // tie: leftmost
  // Leftmost on ties for overlapping identical pairs too.
  Tokenizer tok(MakeVocab({{"a", -1, kNormal}, {"aa", 0, kNormal}}));
  EXPECT_EQ(tok.Encode("aaa", {.add_bos = false}), (std::vector<int32_t>{*tok.TokenId("aa"), *tok.TokenId("a")}));
}

TEST(Tokenizer, ByteFallback) {
  Tokenizer tok(MakeVocab(RichPieces()));
  EXPECT_EQ(tok.Encode("é", {.add_bos = false}), (std::vector<int32_t>{ByteId(0xC3), ByteId(0xA9)}));
  const std::vector<int32_t> emoji = {ByteId(0xF0), ByteId(0x9F), ByteId(0x98), ByteId(0x80)};
  EXPECT_EQ(tok.Encode("😀", {.add_bos = false}), emoji);
  EXPECT_EQ(tok.Decode(emoji), "😀");
  // Mixed: known piece, then an unknown character, then a known one.
  EXPECT_EQ(tok.Encode("aΩb", {.add_bos = false}),
            (std::vector<int32_t>{*tok.TokenId("a"), ByteId(0xCE), ByteId(0xA9), *tok.TokenId("b")}));
}

TEST(Tokenizer, SpecialTokens) {
  Tokenizer tok(MakeVocab(RichPieces()));
  const std::string text = "<start_of_turn>user\nhello<end_of_turn>\n";
  const auto parsed = tok.Encode(text, {.add_bos = false, .parse_special = true});
  ASSERT_GE(parsed.size(), 5u);
  EXPECT_EQ(parsed.front(), kStartOfTurn);
  EXPECT_EQ(parsed[parsed.size() - 2], kEndOfTurn);
  EXPECT_EQ(parsed.back(), kNl);
  EXPECT_EQ(tok.Decode(parsed), "user\nhello\n");  // control tokens decode to nothing
  EXPECT_EQ(tok.Decode(parsed, {.render_special = true}), text);

  // Without parse_special the control text is plain characters; user-defined
  // tokens ("\n", longest match first) are still cut out.
  const auto plain = tok.Encode(text + "\n\n\n", {.add_bos = false});
  for (int32_t id : plain) {
    EXPECT_NE(tok.Type(id), TokenType::kControl) << "id " << id;
  }
  EXPECT_EQ(tok.Decode(plain), text + "\n\n\n");
  EXPECT_EQ(std::vector<int32_t>(plain.end() - 2, plain.end()), (std::vector<int32_t>{kNlNl, kNlNl}));
  EXPECT_EQ(tok.Encode("\n\n\n", {.add_bos = false}), (std::vector<int32_t>{kNlNl, kNl}));
  // "<bos>" text is not BOS unless asked.
  EXPECT_EQ(tok.Encode("<bos>", {.add_bos = false, .parse_special = true}), (std::vector<int32_t>{2}));
  EXPECT_NE(tok.Encode("<bos>", {.add_bos = false}), (std::vector<int32_t>{2}));
  EXPECT_EQ(tok.Encode("a  b", {.add_bos = false}),
            (std::vector<int32_t>{*tok.TokenId("a"), kTwoSpaces, *tok.TokenId("b")}));
}

TEST(Tokenizer, SpecialIdsAndLookups) {
  Tokenizer tok(MakeVocab(RichPieces()));
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 3);
  EXPECT_EQ(tok.start_of_turn_id(), kStartOfTurn);
  EXPECT_EQ(tok.end_of_turn_id(), kEndOfTurn);
  EXPECT_TRUE(tok.IsEndOfGeneration(1));
  EXPECT_TRUE(tok.IsEndOfGeneration(kEndOfTurn));
  EXPECT_FALSE(tok.IsEndOfGeneration(2));
  EXPECT_EQ(tok.Type(ByteId(0x41)), TokenType::kByte);
  EXPECT_EQ(tok.Encode("", {.add_bos = true, .add_eos = true}), (std::vector<int32_t>{2, 1}));
}

TEST(Tokenizer, MatchesPlainTwinOnRandomText) {
  const VocabData v = MakeVocab(RichPieces());
  Tokenizer tok(v);
  const testing::BpeTwin twin(v);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 500; ++trial) {
    std::string s = RandomText(rng, 12);
    if (s.find('<') != std::string::npos) continue;  // the twin handles no control text
    ASSERT_EQ(tok.Encode(s, {.add_bos = false}), twin.Encode(s)) << "text: [" << s << "]";
  }
}

TEST(Tokenizer, RandomUtf8RoundTrips) {
  Tokenizer tok(MakeVocab(RichPieces()));
  std::mt19937 rng(99);
  for (int trial = 0; trial < 500; ++trial) {
    const std::string s = RandomText(rng, 20);
    ASSERT_EQ(tok.Decode(tok.Encode(s)), s) << "[" << s << "]";
    const auto special = tok.Encode(s, {.add_bos = false, .parse_special = true});
    ASSERT_EQ(tok.Decode(special, {.render_special = true}), s) << "[" << s << "]";
  }
}

TEST(Tokenizer, DecodeReplacesIllFormedUtf8) {
  Tokenizer tok(MakeVocab(RichPieces()));
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{ByteId(0xFF)}), fffd);
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{ByteId(0xE4), *tok.TokenId("a")}), fffd + "a");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{ByteId(0xF0), ByteId(0x9F)}), fffd);  // truncated
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{ByteId(0xED), ByteId(0xA0), ByteId(0x80)}),
            fffd + fffd + fffd);  // surrogate: each byte its own maximal subpart
  EXPECT_THROW(tok.Decode(std::vector<int32_t>{tok.vocab_size()}), Error);
  EXPECT_THROW(tok.Decode(std::vector<int32_t>{-1}), Error);
}

TEST(Tokenizer, SpacePrefixOption) {
  Tokenizer tok(MakeVocab(RichPieces(), /*add_space_prefix=*/true));
  const auto ids = tok.Encode("hello", {.add_bos = false});
  EXPECT_EQ(ids, (std::vector<int32_t>{*tok.TokenId("▁hello")}));
  EXPECT_EQ(tok.Decode(ids), "hello");
  EXPECT_EQ(tok.Decode(ids, {.strip_leading_space = false}), " hello");
  TokenStreamDecoder stream(tok);
  EXPECT_EQ(stream.Feed(ids[0]), "hello");
  EXPECT_EQ(stream.Feed(ids[0]), " hello");
}

TEST(TokenStreamDecoder, HoldsPartialUtf8) {
  Tokenizer tok(MakeVocab(RichPieces()));
  TokenStreamDecoder stream(tok);
  EXPECT_EQ(stream.Feed(*tok.TokenId("a")), "a");
  EXPECT_EQ(stream.Feed(ByteId(0xF0)), "");
  EXPECT_EQ(stream.Feed(ByteId(0x9F)), "");
  EXPECT_EQ(stream.Feed(ByteId(0x98)), "");
  EXPECT_EQ(stream.pending_bytes(), 3u);
  EXPECT_EQ(stream.Feed(ByteId(0x80)), "😀");
  EXPECT_EQ(stream.Feed(ByteId(0xE4)), "");
  EXPECT_EQ(stream.Feed(*tok.TokenId("b")),
            "\xEF\xBF\xBD"
            "b");  // broken sequence
  EXPECT_EQ(stream.Feed(ByteId(0xE4)), "");
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");
  EXPECT_THROW(stream.Feed(-5), Error);
}

TEST(TokenStreamDecoder, EqualsFullDecodeForEveryPrefix) {
  Tokenizer tok(MakeVocab(RichPieces()));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any_id(0, tok.vocab_size() - 1);
  std::uniform_int_distribution<int> byte_of(0, 255);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    if (trial % 2 == 0) {
      ids = tok.Encode(RandomText(rng, 15), {.parse_special = true});
    } else {  // random ids, many raw bytes: lots of partial and broken UTF-8
      for (int i = 0; i < 30; ++i) ids.push_back(i % 3 ? ByteId(byte_of(rng)) : any_id(rng));
    }
    for (bool render : {false, true}) {
      TokenStreamDecoder stream(tok, {.render_special = render});
      std::string streamed;
      for (size_t k = 0; k < ids.size(); ++k) {
        streamed += stream.Feed(ids[k]);
        ASSERT_LE(stream.pending_bytes(), 3u);
        TokenStreamDecoder copy = stream;
        const std::string full = tok.Decode(std::span(ids.data(), k + 1), {.render_special = render});
        ASSERT_EQ(streamed + copy.Flush(), full) << "trial " << trial << " prefix " << k + 1;
      }
    }
  }
}

TEST(Tokenizer, RejectsBadVocab) {
  auto expect_error = [](VocabData v, const std::string& needle) {
    try {
      Tokenizer tok(v);
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  VocabData v = MakeVocab(RichPieces());
  {
    auto b = v;
    b.scores.pop_back();
    expect_error(b, "VocabData.scores must have one entry per token");
  }
  {
    auto b = v;
    b.token_types.pop_back();
    expect_error(b, "VocabData.token_types must have");
  }
  {
    auto b = v;
    b.token_types[300] = 9;
    expect_error(b, "must be in [1, 6], got 9");
  }
  {
    auto b = v;
    b.tokens[300] = "";
    expect_error(b, "VocabData.tokens[300] must not be empty");
  }
  {
    auto b = v;
    b.tokens[301] = b.tokens[300];
    expect_error(b, "duplicates token 300");
  }
  {
    auto b = v;
    b.tokens[ByteId(10)] = "<0x0a>";
    expect_error(b, "has type BYTE");
  }
  {
    auto b = v;
    b.unk = -1;
    expect_error(b, "VocabData.unk must name the unknown token");
  }
  {
    auto b = v;
    b.bos = 100000;
    expect_error(b, "VocabData.bos must be -1 or in [0,");
  }
  expect_error(VocabData{}, "VocabData.tokens must not be empty");
}

}  // namespace
}  // namespace kvshare
