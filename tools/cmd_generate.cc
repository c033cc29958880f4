// `kvshare generate`: streams text from a GGUF model (one prompt, or an
// interactive chat on stdin), then prints timing stats to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "commands.h"
#include "audio_flags.h"
#include "device_flags.h"
#include "image_flags.h"
#include "kv_options.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/mmproj_towers.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_path.h"
#include "sampler_flags.h"
#include "spec_flags.h"

namespace kvshare::cli {
namespace {

struct GenerateCliOptions {
  std::string model;
  std::optional<std::string> prompt;  // given, even empty (llama-cli's -p "": generate from <bos>)
  bool chat = false;
  bool raw = false;
  std::string chat_template;  // --chat-template NAME; empty: as the file says
  int n = 128;
  SamplerFlags sampling;
  SpecFlags spec;
  int threads = 0;
  int max_context = 4096;
  int kv_shared_layers = -1;  // -1: the model's own (0 for Gemma 3)
  std::string kv_dtype = "f32";
  std::string attention_precision = "f32";
  std::string weight_precision = "f32";
  std::string device = "cpu";
  bool verbose = false;
  ImageFlags image;
  AudioFlags audio;
};

void PrintStats(const GenerateStats& s) {
  const double pre = s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0;
  // Tokens that came out of decode steps: all but the one the prefill's logits chose.
  const double dec = s.decode_seconds > 0 ? static_cast<double>(s.generated_tokens - 1) / s.decode_seconds : 0;
  std::fprintf(stderr,
               "\n[kvshare] prompt %lld tokens, prefill %.1f tok/s (%.3f s), decode %.1f tok/s (%lld steps), "
               "generated %lld tokens (stop: %s), KV cache %.1f MiB",
               static_cast<long long>(s.prompt_tokens), pre, s.prefill_seconds, dec,
               static_cast<long long>(s.decode_steps), static_cast<long long>(s.generated_tokens),
               s.stop_reason.c_str(), s.kv_bytes / (1024.0 * 1024.0));

  if (s.kv_bytes != s.kv_bytes_without_sharing) {
    std::fprintf(stderr, " (%.1f MiB without KV sharing)", s.kv_bytes_without_sharing / (1024.0 * 1024.0));
  }
  if (s.speculative.rounds > 0) {
    std::fprintf(stderr, ", speculative: %lld verify steps, accepted %lld / drafted %lld (%.1f%%)",
                 static_cast<long long>(s.speculative.rounds), static_cast<long long>(s.speculative.accepted),
                 static_cast<long long>(s.speculative.drafted), 100.0 * s.speculative.acceptance());
  }
  std::fprintf(stderr, "\n");
}

// --kv-shared-layers and --kv-dtype as state options; throws kvshare::Error
// naming the flag and the valid values.
ModelStateOptions StateOptions(const GenerateCliOptions& o, const ModelConfig& config) {
  ModelStateOptions so{.max_context = o.max_context};
  if (o.kv_shared_layers >= 0) {
    const int max_shared = MaxKvSharedLayers(config);
    if (o.kv_shared_layers > max_shared) {
      throw Error("--kv-shared-layers " + std::to_string(o.kv_shared_layers) + " is out of range for this model: " +
                  "valid 0.." + std::to_string(max_shared) + " (" + std::to_string(config.n_layer) +
                  " layers; every shared layer needs a non-shared layer of its type, sliding or full, before the "
                  "first shared one)");
    }
    so.num_kv_shared_layers = o.kv_shared_layers;
  }
  so.kv_dtype = ParseKvDtype(o.kv_dtype);
  so.attention_precision = ParseAttentionPrecision(o.attention_precision, so.kv_dtype);
  so.image_attention = ImageAttentionFlag(o.image);
  return so;
}

// The chat format: --raw means none; --chat-template NAME names one; else the
// file's tokenizer.chat_template decides (plain completion when it has none).
// Warns on stderr when the file's template is not one kvshare knows.
ChatFormatChoice ChooseFormat(const GenerateCliOptions& o, const GgufFile& file) {
  std::optional<std::string_view> name;
  if (o.raw) {
    name = "none";
  } else if (!o.chat_template.empty()) {
    name = o.chat_template;
  }
  ChatFormatChoice choice = ChooseChatFormat(file, name);
  if (choice.source == ChatFormatSource::kNamed) choice.reason = o.raw ? "--raw" : "named with --chat-template";
  if (choice.source == ChatFormatSource::kFileUnrecognized) {
    std::fprintf(stderr,
                 "kvshare: warning: %s; using plain completion. If the model has a chat format kvshare knows, name "
                 "it with --chat-template gemma|gemma4 (--chat-template none silences this warning)\n",
                 choice.reason.c_str());
  }
  return choice;
}

void RunGenerate(const GenerateCliOptions& o) {
  if (!o.prompt && !o.chat) throw Error("give --prompt TEXT or --chat");
  if (o.prompt && o.chat) throw Error("--prompt and --chat are exclusive");
  CheckSpecFlags(o.spec, o.device);
  const DeviceSupport support = SupportOn(DeviceFromFlag(o.device));
  if (!support.media_inputs && (!o.image.mmproj.empty() || !o.image.images.empty() || !o.audio.clips.empty())) {
    throw Error(DeviceRefusal(support.device,
                              !o.image.images.empty()  ? "--image"
                              : !o.audio.clips.empty() ? "--audio"
                                                       : "--mmproj",
                              "drop --device cuda to run this prompt on the CPU"));
  }
  const std::string path = ResolveModel(o.model);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::unique_ptr<Model> model =
      Placement(o.device).Apply(LoadModel(path, {.weight_precision = ParseWeightPrecision(o.weight_precision)}));
  Tokenizer tok(ReadVocab(model->gguf()));
  const ChatFormatChoice choice = ChooseFormat(o, model->gguf());
  const ChatTemplate tmpl(choice.format, tok);
  if (o.verbose) {
    std::fprintf(stderr, "[kvshare] chat template: %s%s: %s\n", std::string(ChatFormatName(choice.format)).c_str(),
                 choice.format == ChatFormat::kNone ? " (plain completion)" : "", choice.reason.c_str());
  }
  if (o.chat && tmpl.format() == ChatFormat::kNone) {
    throw Error("--chat needs a chat template, but " +
                (choice.source == ChatFormatSource::kNamed ? std::string("none was chosen") : choice.reason) +
                "; name one with --chat-template gemma|gemma4, or use --prompt TEXT for plain completion");
  }
  ThreadPool pool(threads);
  if (o.chat && !o.image.images.empty()) throw Error("--image goes with --prompt (not --chat)");
  if (o.chat && !o.audio.clips.empty()) throw Error("--audio goes with --prompt (not --chat)");
  EncodedImages images = PrepareImageFlags(o.image, *model);  // encoded once the prompt fits
  const EncodedAudio audio = EncodeAudioFlags(o.audio, o.image.mmproj, *model, &pool);
  if (!o.image.mmproj.empty()) {
    // Gemma 3n: the ids of its vision / audio vocabularies, wherever they
    // occur (prompt, fed-back tokens), take the mmproj's hard-token rows.
    try {
      InstallMmprojHardTokenRows(o.image.mmproj, images.encoder.get(), audio.encoder.get(), *model, &pool);
    } catch (const Error& e) {
      throw Error("--mmproj " + o.image.mmproj + ": " + e.what());
    }
  }
  ModelStateOptions so = StateOptions(o, model->config());
  for (const PromptImage& im : images.images) {
    // An image's tokens see each other, so each runs in one step.
    for (int n : im.tokens) so.max_step = std::max(so.max_step, n);
  }
  const Speculation spec = MakeSpeculation(
      o.spec, *model, {.max_context = so.max_context, .kv_dtype = so.kv_dtype, .pool = &pool}, o.device);
  Generator gen(*model, tok, &pool, so);
  if (o.verbose) std::fprintf(stderr, "[kvshare] KV cache:\n%s", gen.state().kv_cache().Memory().ToString().c_str());
  if (o.verbose && spec.drafter) {
    std::fprintf(stderr, "[kvshare] speculative decoding: %s drafter, up to %d drafts per step%s\n",
                 spec.drafter->name().c_str(), spec.options.draft_max, spec.options.adaptive ? " (adaptive)" : "");
  }
  GenerateOptions go;
  go.max_new_tokens = o.n;
  go.sampler = ToSamplerOptions(o.sampling);
  go.stop_tokens = tmpl.StopTokens();
  go.drafter = spec.drafter.get();
  go.speculative = spec.options;
  auto print = [](std::string_view t) {
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
  };

  if (!o.chat) {
    std::vector<ChatMessage> msgs = {{"user", *o.prompt}};
    msgs[0].image_at.assign(images.images.size(), 0);  // the images, the clips, then the text
    msgs[0].audio_at.assign(audio.clips.size(), 0);
    std::vector<std::size_t> slots, audio_slots;
    std::optional<ImageSplicer> splicer;
    std::optional<AudioSplicer> audio_splicer;
    ChatTemplateOptions co;
    if (!images.images.empty()) {
      splicer.emplace(tok, *images.encoder, &pool);
      co.image_padding_text = splicer->padding_text();
    }
    if (!audio.clips.empty()) {
      audio_splicer.emplace(tok, audio.encoder->config().projector);
      co.audio_padding_text = audio_splicer->padding_text();
    }
    std::vector<int32_t> ids = tmpl.Encode(msgs, co, &slots, &audio_slots);
    std::vector<MediaInsert> audio_inserts;
    if (audio_splicer) audio_inserts = audio_splicer->Inserts(audio_slots, audio.clips);
    MediaPrompt ip;
    if (splicer) {
      // The spliced prompt's length from the token counts, before any image
      // is encoded (the rows are not read yet).
      const auto n =
          static_cast<std::int64_t>(splicer->SpliceWith(ids, slots, images.images, audio_inserts).tokens.size());
      if (n + o.n > so.max_context) {
        throw Error("prompt of " + std::to_string(n) + " tokens with its " + std::to_string(images.images.size()) +
                    " image(s) + " + std::to_string(o.n) + " new tokens exceeds --max-context " +
                    std::to_string(so.max_context) + "; increase --max-context to at least " +
                    std::to_string(n + o.n) + " or send fewer or smaller images (nothing was encoded)");
      }
      EncodeImages(images, &pool);
      ip = splicer->SpliceWith(ids, slots, images.images, std::move(audio_inserts));
      std::fprintf(stderr, "[kvshare] %zu image(s): %zu embedding span(s), encoded in %.3f s\n", images.images.size(),
                   ip.embeddings.size(), images.seconds);
    } else if (!audio_inserts.empty()) {
      ip = SpliceMedia(ids, audio_inserts);
    }
    if (!ip.tokens.empty()) {
      ids = ip.tokens;
      go.prompt_embeddings = ip.embeddings;
    }
    if (audio_splicer) {
      std::fprintf(stderr, "[kvshare] %zu audio clip(s) encoded in %.3f s\n", audio.clips.size(), audio.seconds);
    }
    if (o.verbose) {
      std::fprintf(stderr, "[kvshare] prompt ids:");
      for (int32_t id : ids) std::fprintf(stderr, " %d", id);
      std::fprintf(stderr, "\n");
    }
    PrintStats(gen.Generate(ids, go, print));
    return;
  }
  // Interactive chat: the cache keeps every turn.
  std::fprintf(stderr, "kvshare chat (%s, chat template %s); empty line or EOF ends.\n", path.c_str(),
               std::string(ChatFormatName(tmpl.format())).c_str());
  GenerateStats last;
  bool first = true;
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    const std::vector<ChatMessage> msgs = {{"user", line}};
    std::vector<int32_t> ids = tmpl.Encode(msgs, {.add_bos = first});
    if (!first) {
      // Close the previous model turn; its last sampled token is not in the
      // cache yet when generation stopped on it.
      std::vector<int32_t> prefix;
      if (!last.last_token_in_cache && last.last_token >= 0) prefix.push_back(last.last_token);
      const std::vector<int32_t> close = tmpl.CloseModelTurn(last.last_token == tmpl.end_of_turn_id());
      prefix.insert(prefix.end(), close.begin(), close.end());
      ids.insert(ids.begin(), prefix.begin(), prefix.end());
    }
    last = gen.Generate(ids, go, print);
    first = false;
    PrintStats(last);
  }
}

}  // namespace

void RegisterGenerate(CLI::App& app) {
  static GenerateCliOptions o;
  auto* cmd = app.add_subcommand("generate",
                                 "Generate text with a GGUF model (Gemma 3, 3n or 4): one prompt, or a chat on stdin");
  AddModelOption(*cmd, o.model);
  cmd->add_option("--prompt", o.prompt,
                  "Prompt text, wrapped in the model's chat template when its file has one (see --chat-template)");
  cmd->add_flag("--chat", o.chat, "Interactive chat: one user turn per stdin line (needs a chat template)");
  auto* tmpl =
      cmd->add_option("--chat-template", o.chat_template,
                      "Chat format: gemma (Gemma 2, 3, 3n), gemma4 (Gemma 4) or none (plain completion). Default: "
                      "the one the file's tokenizer.chat_template uses; none when it has no template");
  tmpl->check(CLI::IsMember(std::vector<std::string>(ChatFormatNames().begin(), ChatFormatNames().end())));
  cmd->add_flag("--raw", o.raw, "Plain completion: --prompt as is (with <bos>), no chat template")->excludes(tmpl);
  cmd->add_option("-n,--max-tokens", o.n, "Maximum new tokens")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  AddSamplerFlags(*cmd, o.sampling);
  AddSpecFlags(*cmd, o.spec);
  AddImageFlags(*cmd, o.image);
  AddAudioFlags(*cmd, o.audio);
  cmd->add_option("--threads", o.threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024))->capture_default_str();
  cmd->add_option("--max-context", o.max_context, "KV cache capacity in tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--kv-shared-layers", o.kv_shared_layers,
                  "Make the last N layers reuse the KV cache of the last earlier layer of their type (Gemma 3n/4 "
                  "sharing; changes a Gemma 3 model's outputs, saves KV memory). Default: the model's own")
      ->check(CLI::Range(0, 1 << 20));
  AddKvDtypeOption(*cmd, o.kv_dtype);
  AddAttentionPrecisionOption(*cmd, o.attention_precision);
  AddWeightPrecisionOption(*cmd, o.weight_precision);
  AddDeviceOption(*cmd, o.device);
  cmd->add_flag("-v,--verbose", o.verbose,
                "Print the chat template used and why, the prompt token ids and the KV cache layout to stderr");
  cmd->callback([] { RunGenerate(o); });
}

}  // namespace kvshare::cli
