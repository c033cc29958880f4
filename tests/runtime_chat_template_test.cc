// Chat formats on small synthetic vocabularies: choosing one (from the file's
// template, by name, none, unknown), the exact Gemma 3 / Gemma 4 texts, their
// token ids, end-of-turn lookup by text and missing marker tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "kvshare/common/error.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare {
namespace {

constexpr int kNormal = 1, kControl = 3, kUserDefined = 4, kByte = 6;

// Gemma's layout: <pad>=0, <eos>=1, <bos>=2, <unk>=3, then `control` (e.g. turn
// markers), `user_defined`, "\n" and "\n\n", the 256 byte tokens and a few
// pieces. Gemma 4 stores <|channel> / <channel|> as USER_DEFINED.
VocabData MakeVocab(const std::vector<std::string>& control, const std::vector<std::string>& user_defined = {}) {
  VocabData v;
  auto add = [&v](const std::string& piece, float score, int type) {
    v.tokens.push_back(piece);
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>"}) add(s, -1000.0f, kControl);
  for (const std::string& s : control) add(s, -1000.0f, kControl);
  for (const std::string& s : user_defined) add(s, -1000.0f, kUserDefined);
  add("\n", -1000.0f, kUserDefined);
  add("\n\n", -1000.0f, kUserDefined);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.0f, kByte);
  }
  const std::vector<std::string> pieces = {"▁",  "a",    "b",  "d",   "e",     "g",  "h",       "i",     "l",   "m",
                                           "o",  "r",    "s",  "t",   "u",     "y",  "he",      "ll",    "llo", "hello",
                                           "us", "user", "mo", "mod", "model", "th", "thought", "ought", "ug",  "ht"};
  for (std::size_t i = 0; i < pieces.size(); ++i) add(pieces[i], -static_cast<float>(i), kNormal);
  v.pad = 0;
  v.eos = 1;
  v.bos = 2;
  v.unk = 3;
  return v;
}

VocabData Gemma3Vocab() { return MakeVocab({"<start_of_turn>", "<end_of_turn>"}); }
VocabData Gemma4Vocab() { return MakeVocab({"<|turn>", "<turn|>"}, {"<|channel>", "<channel|>"}); }

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Template texts as the files hold them (shortened; the markers are what counts).
const std::string kGemma3Jinja =
    "{{ bos_token }}{%- for message in loop_messages -%}{{ '<start_of_turn>' + role + '\\n' + "
    "(first_user_prefix if loop.first else \"\") }}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}";
const std::string kGemma4Jinja =
    "{{- bos_token -}}{%- if messages[0]['role'] in ['system', 'developer'] -%}{{- '<|turn>system\\n' -}}"
    "{%- endif %}{{- '<|turn>' + role + '\\n' }}{{- '<turn|>\\n' -}}{{- '<|channel>thought\\n<channel|>' -}}";
const std::string kChatmlJinja =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}";

TEST(ChatFormat, Names) {
  const auto names = ChatFormatNames();
  EXPECT_EQ(std::vector<std::string_view>(names.begin(), names.end()),
            (std::vector<std::string_view>{"gemma", "gemma4", "none"}));
  for (std::string_view n : names) EXPECT_EQ(ChatFormatName(ChatFormatFromName(n)), n);
  EXPECT_EQ(ChatFormatFromName("gemma"), ChatFormat::kGemma);
  EXPECT_EQ(ChatFormatFromName("gemma4"), ChatFormat::kGemma4);
  EXPECT_EQ(ChatFormatFromName("none"), ChatFormat::kNone);
  const std::string e = ErrorOf([] { ChatFormatFromName("chatml"); });
  EXPECT_NE(e.find("unknown chat template \"chatml\""), std::string::npos) << e;
  EXPECT_NE(e.find("gemma4"), std::string::npos) << e;
}

TEST(ChatFormat, DetectsByMarkerTextAsLlamaCpp) {
  EXPECT_EQ(DetectChatFormat(kGemma3Jinja), ChatFormat::kGemma);
  EXPECT_EQ(DetectChatFormat(kGemma4Jinja), ChatFormat::kGemma4);
  EXPECT_EQ(DetectChatFormat("gemma"), ChatFormat::kGemma);  // a name is a template
  EXPECT_EQ(DetectChatFormat("gemma4"), ChatFormat::kGemma4);
  EXPECT_EQ(DetectChatFormat(kChatmlJinja), std::nullopt);
  EXPECT_EQ(DetectChatFormat(""), std::nullopt);
  EXPECT_EQ(DetectChatFormat("start_of_turn"), std::nullopt);  // the marker includes its brackets
}

TEST(ChatFormat, ChoosesFromTheFileOrByName) {
  // No template in the file (a base model): plain completion.
  for (std::optional<std::string_view> none :
       {std::optional<std::string_view>{}, std::optional<std::string_view>{""}}) {
    const ChatFormatChoice c = ChooseChatFormat(none);
    EXPECT_EQ(c.format, ChatFormat::kNone);
    EXPECT_EQ(c.source, ChatFormatSource::kFileHasNone);
    EXPECT_NE(c.reason.find("no tokenizer.chat_template"), std::string::npos) << c.reason;
  }
  // Recognized in the file.
  ChatFormatChoice c = ChooseChatFormat(kGemma3Jinja);
  EXPECT_EQ(c.format, ChatFormat::kGemma);
  EXPECT_EQ(c.source, ChatFormatSource::kFile);
  EXPECT_NE(c.reason.find("contains \"<start_of_turn>\""), std::string::npos) << c.reason;
  c = ChooseChatFormat(kGemma4Jinja);
  EXPECT_EQ(c.format, ChatFormat::kGemma4);
  EXPECT_EQ(c.source, ChatFormatSource::kFile);
  EXPECT_NE(c.reason.find("contains \"<|turn>\""), std::string::npos) << c.reason;
  // Unknown: plain completion, and the reason names the problem and quotes the start.
  c = ChooseChatFormat(kChatmlJinja);
  EXPECT_EQ(c.format, ChatFormat::kNone);
  EXPECT_EQ(c.source, ChatFormatSource::kFileUnrecognized);
  EXPECT_NE(c.reason.find("not a format kvshare knows"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("\"{% for message in messages %}"), std::string::npos) << c.reason;
  // A name wins over the file, either way.
  c = ChooseChatFormat(kGemma3Jinja, "none");
  EXPECT_EQ(c.format, ChatFormat::kNone);
  EXPECT_EQ(c.source, ChatFormatSource::kNamed);
  c = ChooseChatFormat(std::nullopt, "gemma4");
  EXPECT_EQ(c.format, ChatFormat::kGemma4);
  EXPECT_EQ(c.source, ChatFormatSource::kNamed);
  c = ChooseChatFormat(kChatmlJinja, "gemma");
  EXPECT_EQ(c.format, ChatFormat::kGemma);
  EXPECT_EQ(c.source, ChatFormatSource::kNamed);
  EXPECT_NE(ErrorOf([] { ChooseChatFormat(kGemma3Jinja, "llama3"); }).find("unknown chat template \"llama3\""),
            std::string::npos);
}

TEST(ChatFormat, GemmaText) {
  const std::vector<ChatMessage> msgs = {
      {"system", "  Be brief. "}, {"user", "Hi!\n"}, {"assistant", "Hello."}, {"user", "Bye"}};
  EXPECT_EQ(FormatChat(ChatFormat::kGemma, msgs),
            "<start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(FormatChat(ChatFormat::kGemma, std::vector<ChatMessage>{{"user", "x"}},
                       {.add_generation_prompt = false, .bos_text = true}),
            "<bos><start_of_turn>user\nx<end_of_turn>\n");
  const std::string e = ErrorOf([] { FormatChat(ChatFormat::kGemma, std::vector<ChatMessage>{{"function", "x"}}); });
  EXPECT_NE(e.find("chat template gemma: messages[0].role must be"), std::string::npos) << e;
}

// The text google/gemma-4-31B-it's chat_template.jinja renders (no tools,
// enable_thinking unset), checked by hand with jinja2 3.1.6.
TEST(ChatFormat, Gemma4Text) {
  const std::vector<ChatMessage> msgs = {{"system", "  Be brief. "},
                                         {"user", "Hi!\n"},
                                         {"assistant", "<|channel>thought\nhmm<channel|> Hello. "},
                                         {"user", "Bye"}};
  EXPECT_EQ(FormatChat(ChatFormat::kGemma4, msgs),
            "<|turn>system\nBe brief.<turn|>\n"
            "<|turn>user\nHi!<turn|>\n"
            "<|turn>model\nHello.<turn|>\n"
            "<|turn>user\nBye<turn|>\n"
            "<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_EQ(FormatChat(ChatFormat::kGemma4, std::vector<ChatMessage>{{"user", "x"}},
                       {.add_generation_prompt = false, .bos_text = true}),
            "<bos><|turn>user\nx<turn|>\n");
  // A system message after the first keeps its own turn; a model message right
  // after an "assistant" one continues that turn, as the template does.
  EXPECT_EQ(FormatChat(ChatFormat::kGemma4,
                       std::vector<ChatMessage>{{"user", "q"}, {"system", "s"}, {"assistant", "A"}, {"assistant", "B"}},
                       {.add_generation_prompt = false}),
            "<|turn>user\nq<turn|>\n<|turn>system\ns<turn|>\n<|turn>model\nA<turn|>\nB<turn|>\n");
  const std::string e = ErrorOf([] {
    FormatChat(ChatFormat::kGemma4, std::vector<ChatMessage>{{"user", "x"}, {"function", "y"}});
  });
  EXPECT_NE(e.find("chat template gemma4: messages[1].role must be"), std::string::npos) << e;
}

TEST(ChatFormat, NoneIsTheContentsAsTheyAre) {
  EXPECT_EQ(FormatChat(ChatFormat::kNone, std::vector<ChatMessage>{{"user", " The capital of France is"}}),
            " The capital of France is");
  EXPECT_EQ(FormatChat(ChatFormat::kNone, std::vector<ChatMessage>{{"user", "a "}, {"assistant", "b"}}), "a b");
}

TEST(ChatTemplate, EncodesGemma) {
  const Tokenizer tok(Gemma3Vocab());
  const ChatTemplate tmpl(ChatFormat::kGemma, tok);
  const std::int32_t sot = *tok.TokenId("<start_of_turn>"), eot = *tok.TokenId("<end_of_turn>");
  const std::vector<ChatMessage> msgs = {{"user", "hello <end_of_turn>"}};
  const auto ids = tmpl.Encode(msgs);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], tok.bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.bos_id()), 1);
  EXPECT_EQ(ids[1], sot);
  // One end_of_turn (the template's): the user's text stays text.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1);
  EXPECT_EQ(tok.Decode(ids, {.render_special = true}), "<bos>" + FormatChat(ChatFormat::kGemma, msgs));
  // Trusting content: the same ids as encoding the whole text with parse_special.
  const auto trusted = tmpl.Encode(msgs, {.parse_special_in_content = true});
  EXPECT_EQ(trusted, tok.Encode(FormatChat(ChatFormat::kGemma, msgs), {.add_bos = true, .parse_special = true}));
  EXPECT_EQ(std::count(trusted.begin(), trusted.end(), eot), 2);
  // Continuing a cached conversation: no BOS.
  const auto more = tmpl.Encode(msgs, {.add_bos = false});
  EXPECT_EQ(more, std::vector<std::int32_t>(ids.begin() + 1, ids.end()));
}

TEST(ChatTemplate, EncodesGemma4) {
  const Tokenizer tok(Gemma4Vocab());
  const ChatTemplate tmpl(ChatFormat::kGemma4, tok);
  const std::int32_t open = *tok.TokenId("<|turn>"), close = *tok.TokenId("<turn|>");
  const std::vector<ChatMessage> msgs = {{"user", "hello"}};
  const auto ids = tmpl.Encode(msgs);
  EXPECT_EQ(tok.Decode(ids, {.render_special = true}), "<bos>" + FormatChat(ChatFormat::kGemma4, msgs));
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids[0], tok.bos_id());
  EXPECT_EQ(ids[1], open);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), open), 2);  // the user turn and the model turn
  EXPECT_EQ(std::count(ids.begin(), ids.end(), close), 1);
  EXPECT_EQ(ids.back(), *tok.TokenId("<channel|>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok.TokenId("<|channel>")), 1);
}

TEST(ChatTemplate, NoneEncodesPlainCompletion) {
  const Tokenizer tok(Gemma3Vocab());
  const ChatTemplate tmpl(ChatFormat::kNone, tok);
  const std::vector<ChatMessage> msgs = {{"user", "hello <end_of_turn>"}};
  EXPECT_EQ(tmpl.Encode(msgs), tok.Encode("hello <end_of_turn>", {.add_bos = true, .parse_special = false}));
  EXPECT_EQ(tmpl.Encode(msgs, {.add_bos = false}),
            tok.Encode("hello <end_of_turn>", {.add_bos = false, .parse_special = false}));
  EXPECT_EQ(tmpl.end_of_turn_id(), -1);
  EXPECT_TRUE(tmpl.StopTokens().empty());
  EXPECT_TRUE(tmpl.CloseModelTurn(false).empty());
  // Plain completion needs no marker tokens at all.
  const Tokenizer bare(MakeVocab({}));
  EXPECT_EQ(ChatTemplate(ChatFormat::kNone, bare).Encode(msgs).front(), bare.bos_id());
}

TEST(ChatTemplate, EndOfTurnIsLookedUpByText) {
  // Marker ids differ between the two vocabularies; each is found by its text.
  const Tokenizer g3(Gemma3Vocab()), g4(Gemma4Vocab());
  const ChatTemplate t3(ChatFormat::kGemma, g3), t4(ChatFormat::kGemma4, g4);
  EXPECT_EQ(t3.end_of_turn_id(), *g3.TokenId("<end_of_turn>"));
  EXPECT_EQ(t4.end_of_turn_id(), *g4.TokenId("<turn|>"));
  EXPECT_EQ(t3.StopTokens(), std::vector<std::int32_t>{t3.end_of_turn_id()});
  EXPECT_EQ(t4.StopTokens(), std::vector<std::int32_t>{t4.end_of_turn_id()});
  // Closing a model turn: the end of turn unless the model wrote it, then "\n".
  const std::int32_t nl = *g4.TokenId("\n");
  EXPECT_EQ(t4.CloseModelTurn(false), (std::vector<std::int32_t>{t4.end_of_turn_id(), nl}));
  EXPECT_EQ(t4.CloseModelTurn(true), (std::vector<std::int32_t>{nl}));
  EXPECT_EQ(t3.CloseModelTurn(false), (std::vector<std::int32_t>{t3.end_of_turn_id(), *g3.TokenId("\n")}));
}

TEST(ChatTemplate, MissingMarkerTokenIsAnError) {
  const Tokenizer g3(Gemma3Vocab()), g4(Gemma4Vocab());
  std::string e = ErrorOf([&] { ChatTemplate(ChatFormat::kGemma4, g3); });
  EXPECT_NE(e.find("chat template gemma4 needs the token \"<turn|>\""), std::string::npos) << e;
  e = ErrorOf([&] { ChatTemplate(ChatFormat::kGemma, g4); });
  EXPECT_NE(e.find("chat template gemma needs the token \"<end_of_turn>\""), std::string::npos) << e;
  // Each marker counts, not only the end of turn.
  const Tokenizer no_sot(MakeVocab({"<end_of_turn>"}));
  e = ErrorOf([&] { ChatTemplate(ChatFormat::kGemma, no_sot); });
  EXPECT_NE(e.find("needs the token \"<start_of_turn>\""), std::string::npos) << e;
  const Tokenizer no_channel(MakeVocab({"<|turn>", "<turn|>"}, {"<|channel>"}));
  e = ErrorOf([&] { ChatTemplate(ChatFormat::kGemma4, no_channel); });
  EXPECT_NE(e.find("needs the token \"<channel|>\""), std::string::npos) << e;
  EXPECT_NE(e.find("does not have"), std::string::npos) << e;
}

}  // namespace
}  // namespace kvshare
