#include "openai_response.h"

#include <random>

#include "api_error.h"

namespace kvshare::server {

using nlohmann::json;

namespace {

// OpenAI's call id shape: "call_" and 24 letters and digits.
std::string NewCallId() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

}  // namespace

void CompletionFormatter::EnableToolCalls(ToolCallParserOptions options) {
  if (options.syntax == ToolCallSyntax::kGemma4) {
    // Only markers that decode to no text (control tokens): a user-defined
    // one (as in the tiny fixture) already brings its text.
    for (const char* m : {"<|tool_call>", "<tool_call|>", "<|\"|>"}) {
      if (auto id = tok_.TokenId(m); id && tok_.TokenBytes(*id).empty()) markers_[*id] = m;
    }
  }
  parser_.emplace(std::move(options));
}

std::string CompletionFormatter::MarkedText(const RequestEvent& e) const {
  if (markers_.empty() || e.tokens.empty()) return e.text;
  std::string out;
  for (const OutputToken& t : e.tokens) {
    if (auto m = markers_.find(t.token); m != markers_.end()) out += m->second;
    out += t.text;
  }
  return out;
}

json CompletionFormatter::ToolCallsJson(const std::vector<ToolCall>& calls) const {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

const char* CompletionFormatter::ReasonName(kvshare::FinishReason reason, bool calls) const {
  if (calls && reason == kvshare::FinishReason::kStop) return "tool_calls";
  // OpenAI has no "abort": a cancelled or drained request stops, and says
  // why in AddAbortCause's field.
  if (reason == kvshare::FinishReason::kAbort) return "stop";
  return FinishReasonName(reason);
}

void CompletionFormatter::AddAbortCause(json& choice, const RequestEvent& e) {
  if (e.reason == kvshare::FinishReason::kAbort) choice["kvshare_abort"] = e.detail.empty() ? "abort" : e.detail;
}

std::string CompletionFormatter::DeltaChunks(const ToolCallDelta& d, const json& lp) const {
  std::string out;
  if (!d.content.empty() || !lp.is_null()) {
    out += Sse(Chunk(
        {{"index", choice_.index}, {"delta", {{"content", d.content}}}, {"logprobs", lp}, {"finish_reason", nullptr}}));
  }
  for (const ToolCall& c : d.calls) {
    const std::size_t index = streamed_calls_++;
    json first = {{"index", index},
                  {"id", NewCallId()},
                  {"type", "function"},
                  {"function", {{"name", c.name}, {"arguments", ""}}}};
    out += Sse(Chunk({{"index", choice_.index},
                      {"delta", {{"tool_calls", json::array({first})}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}}));
    json args = {{"index", index}, {"function", {{"arguments", c.arguments}}}};
    out += Sse(Chunk({{"index", choice_.index},
                      {"delta", {{"tool_calls", json::array({args})}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}}));
  }
  return out;
}

CompletionFormatter::CompletionFormatter(const CompletionRequest& request, std::string id, std::int64_t created,
                                         std::string model, const Tokenizer& tokenizer, ChoiceOptions choice)
    : choice_(std::move(choice)),
      chat_(request.chat),
      logprobs_(request.logprobs),
      include_usage_(request.include_usage),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      tok_(tokenizer) {}

std::string CompletionFormatter::Sse(const json& j) { return "data: " + Dump(j) + "\n\n"; }

json CompletionFormatter::UsageJson(const RequestUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string CompletionFormatter::TokenText(std::int32_t id) const { return std::string(tok_.TokenBytes(id)); }

json CompletionFormatter::TokenEntry(std::int32_t id, float logprob) const {
  const std::string text = TokenText(id);
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
}

json CompletionFormatter::ChatLogprobs(const std::vector<OutputToken>& tokens) const {
  json content = json::array();
  for (const OutputToken& t : tokens) {
    json e = TokenEntry(t.token, t.logprob);
    json top = json::array();
    for (const TokenLogprob& a : t.top) top.push_back(TokenEntry(a.token, a.logprob));
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return {{"content", content}};
}

json CompletionFormatter::CompletionLogprobs(const std::vector<OutputToken>& tokens, std::size_t offset,
                                             const std::vector<OutputToken>* prompt) const {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  if (prompt != nullptr && !choice_.prompt.empty()) {
    // The first prompt token has no logprob (nothing before it), as OpenAI's.
    std::size_t at = 0;
    for (std::size_t i = 0; i < choice_.prompt.size() && i <= prompt->size(); ++i) {
      const std::string text = TokenText(choice_.prompt[i]);
      toks.push_back(text);
      offsets.push_back(at);
      at += text.size();
      if (i == 0) {
        lps.push_back(nullptr);
        tops.push_back(nullptr);
        continue;
      }
      const OutputToken& t = (*prompt)[i - 1];
      lps.push_back(t.logprob);
      json top = json::object();
      for (const TokenLogprob& a : t.top) top[TokenText(a.token)] = a.logprob;
      tops.push_back(top);
    }
  }
  for (const OutputToken& t : tokens) {
    toks.push_back(TokenText(t.token));
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& a : t.top) top[TokenText(a.token)] = a.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.text.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json CompletionFormatter::Chunk(json choice) const {
  json j = {{"id", id_},
            {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", json::array({std::move(choice)})}};
  if (include_usage_) j["usage"] = nullptr;
  return j;
}

std::string CompletionFormatter::StreamStart() const {
  if (!chat_) return "";
  return Sse(Chunk({{"index", choice_.index},
                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                    {"logprobs", nullptr},
                    {"finish_reason", nullptr}}));
}

json CompletionFormatter::EchoLogprobs(const std::vector<OutputToken>& prompt_logprobs) const {
  return CompletionLogprobs({}, 0, &prompt_logprobs);
}

std::string CompletionFormatter::StreamEvent(const RequestEvent& event) const {
  std::string out;
  RequestEvent dropped;
  const RequestEvent* ep = &event;
  if (choice_.drop_output) {
    dropped.finished = event.finished;
    dropped.reason = event.reason == kvshare::FinishReason::kAbort ? event.reason : kvshare::FinishReason::kLength;
    dropped.detail = event.detail;
    dropped.error = event.error;
    dropped.usage = event.usage;
    ep = &dropped;
  }
  const RequestEvent& e = *ep;
  if (choice_.echo && !echoed_) {
    echoed_ = true;
    json lp = logprobs_ ? EchoLogprobs(event.prompt_logprobs) : json(nullptr);
    out += Sse(
        Chunk({{"text", choice_.prompt_text}, {"index", choice_.index}, {"logprobs", lp}, {"finish_reason", nullptr}}));
    streamed_bytes_ += choice_.prompt_text.size();
  }
  if (parser_) {
    if (!e.text.empty() || !e.tokens.empty()) {
      json lp = logprobs_ && !e.tokens.empty() ? ChatLogprobs(e.tokens) : json(nullptr);
      out += DeltaChunks(parser_->Feed(MarkedText(e)), lp);
    }
    if (e.finished && !e.error) out += DeltaChunks(parser_->Finish(), nullptr);
  } else if (!e.text.empty() || (logprobs_ && !e.tokens.empty())) {
    json lp = nullptr;
    if (logprobs_) lp = chat_ ? ChatLogprobs(e.tokens) : CompletionLogprobs(e.tokens, streamed_bytes_);
    streamed_bytes_ += e.text.size();
    if (chat_) {
      out += Sse(Chunk(
          {{"index", choice_.index}, {"delta", {{"content", e.text}}}, {"logprobs", lp}, {"finish_reason", nullptr}}));
    } else {
      out += Sse(Chunk({{"text", e.text}, {"index", choice_.index}, {"logprobs", lp}, {"finish_reason", nullptr}}));
    }
  }
  if (!e.finished) return out;
  if (e.error) {
    out += Sse(ApiError(500, e.detail, "server_error").ToJson());
    return choice_.ends_stream ? out + "data: [DONE]\n\n" : out;
  }
  const char* reason = ReasonName(e.reason, streamed_calls_ > 0);
  json last =
      chat_
          ? json{{"index", choice_.index}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}}
          : json{{"text", ""}, {"index", choice_.index}, {"logprobs", nullptr}, {"finish_reason", reason}};
  AddAbortCause(last, e);
  out += Sse(Chunk(last));
  if (choice_.ends_stream) {
    RequestUsage u = e.usage;
    if (choice_.drop_output) u.completion_tokens = 0;
    out += StreamEnd(u);
  }
  return out;
}

std::string CompletionFormatter::StreamEnd(const RequestUsage& total) const {
  std::string out;
  if (include_usage_) {
    json u = {{"id", id_},
              {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", json::array()},
              {"usage", UsageJson(total)}};
    out += Sse(u);
  }
  return out + "data: [DONE]\n\n";
}

void CompletionFormatter::Add(const RequestEvent& e) {
  if (prompt_logprobs_.empty()) prompt_logprobs_ = e.prompt_logprobs;
  if (choice_.drop_output) {
    if (e.finished) {
      finished_ = true;
      last_ = e;
      if (last_.reason != kvshare::FinishReason::kAbort) last_.reason = kvshare::FinishReason::kLength;
    }
    return;
  }
  text_ += e.text;
  if (parser_) {
    ToolCallDelta d = parser_->Feed(MarkedText(e));
    if (e.finished) {
      ToolCallDelta rest = parser_->Finish();
      d.content += rest.content;
      for (ToolCall& c : rest.calls) d.calls.push_back(std::move(c));
    }
    content_ += d.content;
    for (ToolCall& c : d.calls) {
      c.id = NewCallId();
      calls_.push_back(std::move(c));
    }
  }
  tokens_.insert(tokens_.end(), e.tokens.begin(), e.tokens.end());
  if (e.finished) {
    finished_ = true;
    last_ = e;
  }
}

RequestUsage CompletionFormatter::Usage() const {
  RequestUsage u = last_.usage;
  if (choice_.drop_output) u.completion_tokens = 0;
  return u;
}

double CompletionFormatter::LogprobSum() const {
  double sum = 0;
  for (const OutputToken& t : tokens_) sum += t.logprob;
  return sum;
}

json CompletionFormatter::Final() const {
  return {{"id", id_},
          {"object", chat_ ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array({Choice()})},
          {"usage", UsageJson(Usage())}};
}

json CompletionFormatter::Choice() const {
  json lp = nullptr;
  if (logprobs_) {
    lp = chat_ ? ChatLogprobs(tokens_)
               : CompletionLogprobs(tokens_, choice_.echo ? choice_.prompt_text.size() : 0,
                                    choice_.echo ? &prompt_logprobs_ : nullptr);
  }
  const char* reason = ReasonName(last_.reason, !calls_.empty());
  json choice;
  if (chat_) {
    json message = {{"role", "assistant"}, {"content", text_}};
    if (parser_) {
      message["content"] = calls_.empty() || !content_.empty() ? json(content_) : json(nullptr);
      if (!calls_.empty()) message["tool_calls"] = ToolCallsJson(calls_);
    }
    choice = {{"index", choice_.index}, {"message", message}, {"logprobs", lp}, {"finish_reason", reason}};
  } else {
    const std::string text = choice_.echo ? choice_.prompt_text + text_ : text_;
    choice = {{"text", text}, {"index", choice_.index}, {"logprobs", lp}, {"finish_reason", reason}};
  }
  AddAbortCause(choice, last_);
  return choice;
}

}  // namespace kvshare::server
