// BuildRequest (openai_request.h): a parsed request made into scheduler
// input with the served model's tokenizer and chat template.
#include <algorithm>
#include <optional>
#include <random>
#include <string>

#include "api_error.h"
#include "grammar_key.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/grammar/grammar_cache.h"
#include "kvshare/grammar/schema_refs.h"
#include "kvshare/runtime/tool_calls.h"
#include "openai_request.h"
#include "request_images.h"

namespace kvshare::server {
namespace {

constexpr int kDefaultCompletionTokens = 16;  // OpenAI's legacy completions default

// The grammar kept under `key` (ModelContext::grammars), or compile()'s.
std::shared_ptr<const Grammar> Cached(const ModelContext& ctx, const std::string& key,
                                      const GrammarCache::Compile& compile) {
  return ctx.grammars != nullptr ? ctx.grammars->GetOrCompile(key, compile) : compile();
}

}  // namespace

RequestOptions BuildRequest(const CompletionRequest& req, const ModelContext& ctx, std::size_t prompt_index) {
  if (ctx.strict_model && !req.model.empty() && req.model != ctx.model_id) {
    throw ApiError(404, "The model `" + req.model + "` does not exist. This server serves `" + ctx.model_id + "`.",
                   "invalid_request_error", "model", "model_not_found");
  }
  RequestOptions r;
  const std::string what = req.chat ? "messages" : "prompt";
  if (req.chat) {
    if (!ctx.chat_unavailable.empty()) {
      throw BadRequest("This model has no chat template (" + ctx.chat_unavailable +
                           "); start kvshare serve with --chat-template gemma|gemma4, or use /v1/completions.",
                       "messages", "chat_template_missing");
    }
    const std::optional<ToolOffer> offer = OfferedTools(req);
    ChatTemplateOptions co;
    if (offer) {
      for (const OfferedTool& t : offer->tools) co.tools.push_back(t.function);
      co.parallel_tool_calls = offer->parallel;
    }
    std::vector<std::size_t> image_slots, audio_slots;
    // The text around each image / clip, as HF's processors write it ("\n\n" for Gemma 3 / 3n).
    if (ctx.images.splicer != nullptr) co.image_padding_text = ctx.images.splicer->padding_text();
    if (ctx.audio.splicer != nullptr) co.audio_padding_text = ctx.audio.splicer->padding_text();
    try {
      r.prompt = ctx.chat->Encode(req.messages, co, req.images.empty() ? nullptr : &image_slots,
                                  req.audio.empty() ? nullptr : &audio_slots);
    } catch (const Error& e) {
      throw BadRequest(std::string("Invalid 'messages': ") + e.what() + ".", "messages", "invalid_value");
    }
    if (!req.images.empty() || !req.audio.empty()) AttachMedia(req, ctx, image_slots, audio_slots, r);
    r.stop_tokens = ctx.chat->StopTokens();
    if (offer) {
      for (std::int32_t t : ctx.chat->ToolStopTokens()) r.stop_tokens.push_back(t);
      try {
        r.grammar = Cached(ctx, ToolCallGrammarKey(*offer, ctx.tool_grammar_identity),
                           [&] { return ctx.chat->ToolCallGrammar(*offer); });
      } catch (const Error& e) {
        throw BadRequest(std::string(offer->forced() ? "Invalid 'tools': the call cannot be enforced: "
                                                     : "Invalid 'tools': the strict calls cannot be enforced: ") +
                             e.what() + ".",
                         "tools", "invalid_schema");
      }
    }
  } else if (const CompletionRequest::Prompt& p = req.prompts.at(prompt_index); !p.text) {
    if (p.tokens.empty()) throw BadRequest("Invalid 'prompt': the prompt is empty.", "prompt", "invalid_value");
    for (std::int32_t t : p.tokens) {
      if (t >= ctx.tokenizer->vocab_size()) {
        throw BadRequest("Invalid 'prompt': token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(ctx.tokenizer->vocab_size()) + ").",
                         "prompt", "invalid_value");
      }
    }
    r.prompt = p.tokens;
  } else {
    if (p.text->empty()) throw BadRequest("Invalid 'prompt': the prompt is empty.", "prompt", "invalid_value");
    const std::vector<ChatMessage> msgs = {{"user", *p.text}};
    // Plain completion, as `kvshare generate --raw`: <bos> and the text as is.
    r.prompt = ChatTemplate(ChatFormat::kNone, *ctx.tokenizer).Encode(msgs);
  }
  const std::int64_t n = static_cast<std::int64_t>(r.prompt.size());
  if (n >= ctx.max_context) {
    throw BadRequest("This model's maximum context length is " + std::to_string(ctx.max_context) +
                         " tokens. However, your " + what + " resulted in " + std::to_string(n) +
                         " tokens. Please reduce the length of the " + what + ".",
                     what, "context_length_exceeded");
  }
  const int max_tokens = req.max_tokens.value_or(
      req.chat ? static_cast<int>(ctx.max_context - n)
               : std::min<int>(kDefaultCompletionTokens, static_cast<int>(ctx.max_context - n)));
  if (n + max_tokens > ctx.max_context) {
    throw BadRequest("This model's maximum context length is " + std::to_string(ctx.max_context) +
                         " tokens. However, you requested " + std::to_string(n + max_tokens) + " tokens (" +
                         std::to_string(n) + " in the " + what + ", " + std::to_string(max_tokens) +
                         " in the completion). Please reduce the length of the " + what + " or completion.",
                     what, "context_length_exceeded");
  }
  r.max_tokens = max_tokens;
  r.sampler = req.sampler;
  if (!req.seed_given) r.sampler.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  r.stop = req.stop;
  r.ignore_eos = req.ignore_eos;
  r.speculative = req.speculative;
  r.top_logprobs = req.logprobs ? req.top_logprobs : -1;
  // best_of ranks the candidates by their tokens' logprobs.
  if (req.best_of > req.n) r.top_logprobs = std::max(r.top_logprobs, 0);
  if (req.echo && req.logprobs) r.prompt_logprobs = req.top_logprobs;
  for (const auto& [id, bias] : req.logit_bias) {
    if (id >= ctx.tokenizer->vocab_size()) {
      throw BadRequest("Invalid 'logit_bias': token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(ctx.tokenizer->vocab_size()) + ").",
                       "logit_bias", "invalid_value");
    }
  }
  r.logit_bias = req.logit_bias;
  using Type = CompletionRequest::ResponseFormat::Type;
  const std::optional<ToolOffer> offer = req.chat ? OfferedTools(req) : std::nullopt;
  // A forced call makes the reply a call: the format has nothing to hold.
  if (req.response_format.type != Type::kText && !(offer && offer->forced())) {
    const std::string where =
        req.response_format.type == Type::kJsonObject ? "response_format.schema" : "response_format.json_schema.schema";
    const std::string& schema = req.response_format.schema;
    const JsonGrammarOptions json_options;  // the key names what the compile reads
    try {
      r.grammar = Cached(ctx, ResponseFormatGrammarKey(schema, json_options, offer), [&] {
        if (offer) {
          // Tools offered freely: the reply is one JSON document, either a
          // call in the JSON convention (as a forced call) or the format's
          // document.
          const std::string doc = schema.empty() ? R"({"type":"object"})" : schema;
          return CompileJsonSchema(R"({"anyOf":[)" + EmbedSchemaRefs(ForcedToolCallSchema(*offer), "#/anyOf/0") + "," +
                                       EmbedSchemaRefs(doc, "#/anyOf/1") + "]}",
                                   json_options);
        }
        return schema.empty() ? AnyJsonObjectGrammar(json_options) : CompileJsonSchema(schema, json_options);
      });
    } catch (const Error& e) {
      throw BadRequest("Invalid '" + where + "': " + e.what() + ".", where, "invalid_schema");
    }
  }
  return r;
}

}  // namespace kvshare::server
