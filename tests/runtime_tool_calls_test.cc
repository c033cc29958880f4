// Tool calling in the runtime layer: the prompt text of a conversation with
// tools, an assistant's calls and a tool's response (Gemma 4's own notation,
// Gemma 3's JSON convention), and the parser that reads calls back out of a
// reply (one call, several, text and a call, malformed ones that stay text,
// and every split of the text into two pieces).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "kvshare/common/error.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/tool_calls.h"

namespace kvshare {
namespace {

std::vector<ToolFunction> WeatherTools() {
  return {{"get_weather", "Current weather in a city",
           R"({"type":"object","properties":{"city":{"type":"string","description":"City name"},)"
           R"("unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]})"}};
}

std::vector<ChatMessage> WeatherConversation() {
  std::vector<ChatMessage> m = {{"system", "You are helpful."}, {"user", "Weather in Paris?"}, {"assistant", ""}};
  m[2].tool_calls = {{"call_1", "get_weather", R"({"city": "Paris"})"}};
  ChatMessage tool{"tool", "18 C, sunny"};
  tool.tool_call_id = "call_1";
  m.push_back(tool);
  m.push_back({"assistant", "It is 18 C and sunny."});
  m.push_back({"user", "And London?"});
  return m;
}

// The declaration text of WeatherTools(), as the template writes it.
const std::string kGemma4Declaration =
    R"(<|tool>declaration:get_weather{description:<|"|>Current weather in a city<|"|>,parameters:{properties:{)"
    R"(city:{description:<|"|>City name<|"|>,type:<|"|>STRING<|"|>},unit:{enum:[<|"|>celsius<|"|>,<|"|>fahrenheit)"
    R"(<|"|>],type:<|"|>STRING<|"|>}},required:[<|"|>city<|"|>],type:<|"|>OBJECT<|"|>}}<tool|>)";

// Expected texts: google-gemma-4-31B-it.jinja rendered by jinja2 (the pytest
// test_chat_template_tools.py checks more conversations the same way).
TEST(ToolCallRendering, Gemma4ConversationWithCallAndResponse) {
  ChatTemplateOptions o;
  o.bos_text = true;
  o.tools = WeatherTools();
  EXPECT_EQ(FormatChat(ChatFormat::kGemma4, WeatherConversation(), o),
            "<bos><|turn>system\nYou are helpful." + kGemma4Declaration +
                "<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n<|turn>model\n"
                R"(<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>)"
                R"(<|tool_response>response:get_weather{value:<|"|>18 C, sunny<|"|>}<tool_response|>)"
                "It is 18 C and sunny.<turn|>\n<|turn>user\nAnd London?<turn|>\n"
                "<|turn>model\n<|channel>thought\n<channel|>");
}

TEST(ToolCallRendering, Gemma4EndsInsideTheModelTurnAfterResponsesOrCalls) {
  ChatTemplateOptions o;
  o.tools = WeatherTools();
  auto m = WeatherConversation();
  m.resize(4);
  EXPECT_TRUE(FormatChat(ChatFormat::kGemma4, m, o)
                  .ends_with(R"(<tool_call|><|tool_response>response:get_weather{)"
                             R"(value:<|"|>18 C, sunny<|"|>}<tool_response|>)"));
  m.resize(3);
  m.erase(m.begin());  // no system message: the tools still open a system turn
  EXPECT_EQ(FormatChat(ChatFormat::kGemma4, m, o),
            "<|turn>system\n" + kGemma4Declaration +
                "<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n<|turn>model\n"
                R"(<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><|tool_response>)");
}

TEST(ToolCallRendering, GemmaJsonConvention) {
  ChatTemplateOptions o;
  o.tools = WeatherTools();
  auto m = WeatherConversation();
  m.resize(5);
  const std::string tools = ToolCallInstructions(o.tools);
  EXPECT_NE(tools.find(R"({"name":"get_weather","description":"Current weather in a city","parameters":{)"),
            std::string::npos);
  EXPECT_NE(tools.find(R"({"tool_calls": [)"), std::string::npos);
  EXPECT_EQ(ToolCallInstructions(o.tools, false).find("tool_calls"), std::string::npos);
  EXPECT_EQ(FormatChat(ChatFormat::kGemma, m, o),
            "<start_of_turn>user\nYou are helpful.\n\n" + tools +
                "\n\nWeather in Paris?<end_of_turn>\n"
                "<start_of_turn>model\n"
                R"({"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}})"
                "<end_of_turn>\n<start_of_turn>user\n"
                R"({"tool_response":{"name":"get_weather","content":"18 C, sunny"}})"
                "<end_of_turn>\n<start_of_turn>model\nIt is 18 C and sunny.<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ToolCallRendering, GemmaSeveralCallsAndResponsesFormOneTurnEach) {
  std::vector<ChatMessage> m = {{"user", "Paris and Rome?"}, {"assistant", "Checking."}};
  m[1].tool_calls = {{"a", "get_weather", R"({"city":"Paris"})"}, {"b", "get_weather", ""}};
  for (const char* id : {"a", "b"}) {
    ChatMessage t{"tool", std::string("r") + id};
    t.tool_call_id = id;
    m.push_back(t);
  }
  ChatTemplateOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(
      FormatChat(ChatFormat::kGemma, m, o),
      "<start_of_turn>user\nParis and Rome?<end_of_turn>\n<start_of_turn>model\nChecking.\n"
      R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}},{"name":"get_weather","arguments":{}}]})"
      "<end_of_turn>\n<start_of_turn>user\n"
      R"({"tool_response":{"name":"get_weather","content":"ra"}})"
      "\n"
      R"({"tool_response":{"name":"get_weather","content":"rb"}})"
      "<end_of_turn>\n");
}

TEST(ToolCallRendering, ToolMessageWithoutIdIsAnError) {
  std::vector<ChatMessage> m = {{"user", "hi"}, {"tool", "x"}};
  for (ChatFormat f : {ChatFormat::kGemma, ChatFormat::kGemma4}) {
    try {
      FormatChat(f, m);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("messages[1] (role \"tool\") has no tool_call_id"), std::string::npos)
          << e.what();
    }
  }
}

// ---- Parsing ----

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
};

Parsed ParseAll(const std::vector<std::string>& pieces, ToolCallParserOptions o) {
  ToolCallParser p(std::move(o));
  Parsed out;
  auto take = [&out](ToolCallDelta d) {
    out.content += d.content;
    for (ToolCall& c : d.calls) out.calls.push_back(std::move(c));
  };
  for (const std::string& s : pieces) take(p.Feed(s));
  take(p.Finish());
  return out;
}

// The result of the whole text, checked equal for every split into two
// pieces and for byte-by-byte feeding.
Parsed ParseEverySplit(const std::string& text, const ToolCallParserOptions& o) {
  const Parsed whole = ParseAll({text}, o);
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  std::vector<std::vector<std::string>> splits = {bytes};
  for (std::size_t i = 0; i <= text.size(); ++i) splits.push_back({text.substr(0, i), text.substr(i)});
  for (const auto& pieces : splits) {
    const Parsed p = ParseAll(pieces, o);
    EXPECT_EQ(p.content, whole.content) << "split of " << pieces.size() << " at " << pieces[0].size();
    EXPECT_EQ(p.calls.size(), whole.calls.size());
    for (std::size_t i = 0; i < std::min(p.calls.size(), whole.calls.size()); ++i) {
      EXPECT_EQ(p.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(p.calls[i].arguments, whole.calls[i].arguments);
    }
  }
  return whole;
}

const ToolCallParserOptions kJson{ToolCallSyntax::kJson, {"get_weather", "get_time"}};
const ToolCallParserOptions kGemma4{ToolCallSyntax::kGemma4, {"get_weather", "get_time"}};

TEST(ToolCallParser, JsonOneCall) {
  const Parsed p =
      ParseEverySplit(R"( {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}} )", kJson);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris"})");
}

TEST(ToolCallParser, JsonParallelCallsAndTextBefore) {
  const Parsed p = ParseEverySplit(
      "Let me look.\n"
      R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]})",
      kJson);
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
}

TEST(ToolCallParser, JsonMalformedStaysText) {
  for (const char* text : {
           R"(Use {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"})",  // unclosed
           R"({"tool_call": {"name": "launch_rockets", "arguments": {}}})",                // unknown name
           R"({"tool_call": {"name": "get_weather", "arguments": [1]}})",                  // not an object
           R"({"tool_call": {"name": "get_weather", "arguments": {}}} and more text)",     // trailing text
           R"(The set {1, 2} has two elements.)",
       }) {
    const Parsed p = ParseEverySplit(text, kJson);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallParser, Gemma4OneCall) {
  const Parsed p = ParseEverySplit(R"(<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>)", kGemma4);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","days":3})");
}

TEST(ToolCallParser, Gemma4ParallelCallsWithTextAndNestedValues) {
  const Parsed p = ParseEverySplit(
      "Sure, checking both.\n"
      R"(<|tool_call>call:get_weather{city:<|"|>Paris, FR<|"|>,opts:{metric:true,days:[1,2.5]},note:null}<tool_call|>)"
      "\n"
      R"(<|tool_call>call:get_time{}<tool_call|>)",
      kGemma4);
  EXPECT_EQ(p.content, "Sure, checking both.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris, FR","opts":{"metric":true,"days":[1,2.5]},"note":null})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
}

TEST(ToolCallParser, Gemma4MalformedStaysText) {
  for (const std::string& text : {
           std::string(R"(<|tool_call>call:get_weather{city:Paris}<tool_call|>)"),  // bare string value
           std::string(R"(<|tool_call>call:launch{}<tool_call|>)"),                 // unknown name
           std::string(R"(<|tool_call>get_weather{}<tool_call|>)"),                 // no "call:"
           std::string("a < b and <|tool but not a call"),
       }) {
    const Parsed p = ParseEverySplit(text, kGemma4);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// A reply cut inside a call (max_tokens): the open call is dropped, never
// returned as markup in content; calls closed before it stay calls.
TEST(ToolCallParser, Gemma4UnclosedCallIsDropped) {
  const Parsed one = ParseEverySplit(R"(before <|tool_call>call:get_weather{city:<|"|>Pa)", kGemma4);
  EXPECT_TRUE(one.calls.empty());
  EXPECT_EQ(one.content, "before");
  const Parsed second = ParseEverySplit(
      R"(<|tool_call>call:get_time{}<tool_call|><|tool_call>call:get_weather{city:<|"|>Pa)", kGemma4);
  ASSERT_EQ(second.calls.size(), 1u);
  EXPECT_EQ(second.calls[0].name, "get_time");
  EXPECT_EQ(second.content, "");
  const Parsed bare = ParseEverySplit("<|tool_call>", kGemma4);
  EXPECT_TRUE(bare.calls.empty());
  EXPECT_EQ(bare.content, "");
}

TEST(ToolCallParser, PlainTextIsContentAsItArrives) {
  ToolCallParser p(kGemma4);
  EXPECT_EQ(p.Feed("Hello wor").content, "Hello wor");
  EXPECT_EQ(p.Feed("ld <|tool").content, "ld");  // the space waits; so does the partial marker
  EXPECT_EQ(p.Feed("s>").content, " <|tools>");
  EXPECT_EQ(p.Finish().content, "");
}

TEST(ToolCallParser, Gemma4CallBody) {
  ToolCall c;
  EXPECT_TRUE(ParseGemma4Call(R"(call:f{a:<|"|>x}y<|"|>,b:-1.5e3,c:[<|"|>p<|"|>,{d:false}]})", c));
  EXPECT_EQ(c.name, "f");
  EXPECT_EQ(c.arguments, R"({"a":"x}y","b":-1500.0,"c":["p",{"d":false}]})");
  EXPECT_FALSE(ParseGemma4Call("call:f{a:1", c));
  EXPECT_FALSE(ParseGemma4Call("call:f{a:1}}", c));
  EXPECT_FALSE(ParseGemma4Call("call:{a:1}", c));
}

// Found by tests/fuzz/tool_call_fuzz.cc: a number beyond double's range made
// the JSON library throw out_of_range (not parse_error) past the parser, and
// bytes that are not UTF-8 made dump() throw; both ended the process.
TEST(ToolCallParser, OverflowingNumbersAndNonUtf8BytesDoNotThrow) {
  const std::string overflow_g4 = "<|tool_call>call:get_weather{days:995999999e999999999999}<tool_call|>";
  const Parsed g = ParseEverySplit(overflow_g4, kGemma4);
  EXPECT_TRUE(g.calls.empty());
  EXPECT_EQ(g.content, overflow_g4);
  const std::string overflow_json = R"({"tool_call": {"name": "get_weather", "arguments": {"days": 1e400}}})";
  const Parsed j = ParseEverySplit(overflow_json, kJson);
  EXPECT_TRUE(j.calls.empty());
  EXPECT_EQ(j.content, overflow_json);
  ToolCall c;
  ASSERT_TRUE(ParseGemma4Call("call:f\xF0x{k\xF0:<|\"|>v\xFF<|\"|>}", c));
  EXPECT_EQ(c.name, "f\xEF\xBF\xBDx");
  EXPECT_EQ(c.arguments, "{\"k\xEF\xBF\xBD\":\"v\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace kvshare
