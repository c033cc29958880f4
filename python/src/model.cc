// kvshare._core model bindings: Model (GGUF load, config, tokenizer, logits)
// and streaming generation. Generation runs on a worker thread without the GIL;
// the Python iterator waits (GIL released) for text pieces. Uses only the
// public model / tokenizer / sampler API and the runtime Generator.
#include <pybind11/stl.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "arrays.h"
#include "bind.h"
#include "images.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/drafter_factory.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/runtime/mmproj_towers.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_docs.h"
#include "prompt_args.h"

namespace kvshare::python {
namespace {

// Everything one Python Model owns; streams hold a shared_ptr so an abandoned
// Model outlives its running generation.
struct ModelCore {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Generator> generator;
  // The vision encoder (Model(mmproj=...)) and the splicer of its family's
  // markers; null without one.
  std::unique_ptr<VisionEncoder> vision;
  std::unique_ptr<ImageSplicer> splicer;
  // The audio encoder and its splicer, when the mmproj has one (or why its
  // audio part is unusable beside a working vision tower).
  std::unique_ptr<AudioEncoder> audio;
  std::unique_ptr<AudioSplicer> audio_splicer;
  std::string audio_error;
  // Speculative decoding: the drafter of the last generate() that asked for
  // one (kept, with its state, while later calls ask for the same), for the
  // method, or the draft Model's core or the assistant it runs (held alive
  // while it drafts for this Model; declared first, destroyed last).
  std::string draft_method;
  std::shared_ptr<ModelCore> draft_core;
  std::shared_ptr<const AssistantModel> assistant;
  Speculation speculation;
  std::mutex busy_mu;
  bool busy = false;  // a generation stream is running
  GenerateStats last;
};

struct Cancelled {};

py::str Utf8(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::dict StatsDict(const GenerateStats& s) {
  py::dict d;
  d["prompt_tokens"] = s.prompt_tokens;
  d["generated_tokens"] = s.generated_tokens;
  d["prefill_seconds"] = s.prefill_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["decode_steps"] = s.decode_steps;
  d["kv_bytes"] = s.kv_bytes;
  d["kv_bytes_without_sharing"] = s.kv_bytes_without_sharing;
  d["stop_reason"] = s.stop_reason;
  d["verify_steps"] = s.speculative.rounds;
  d["drafted_tokens"] = s.speculative.drafted;
  d["accepted_tokens"] = s.speculative.accepted;
  return d;
}

// One generation: a worker thread runs Generator::Generate and queues text.
class Stream {
 public:
  // `hold` keeps what options point into (the prompt's image rows) alive.
  Stream(std::shared_ptr<ModelCore> core, std::vector<int32_t> prompt, GenerateOptions options, bool reset,
         std::shared_ptr<const void> hold)
      : core_(std::move(core)), hold_(std::move(hold)) {
    {
      std::lock_guard<std::mutex> lock(core_->busy_mu);
      if (core_->busy) {
        throw Error("another generation is running on this Model; exhaust or close() it first");
      }
      core_->busy = true;
    }
    worker_ = std::thread([this, prompt = std::move(prompt), options, reset] {
      try {
        if (reset) core_->generator->Reset(options.drafter);
        const GenerateStats stats = core_->generator->Generate(prompt, options, [this](std::string_view piece) {
          std::lock_guard<std::mutex> lock(mu_);
          if (cancel_) throw Cancelled{};
          pieces_.emplace_back(piece);
          cv_.notify_all();
        });
        std::lock_guard<std::mutex> lock(mu_);
        stats_ = stats;
        core_->last = stats;
      } catch (const Cancelled&) {
        core_->generator->Reset();  // a half-finished turn is not kept
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(core_->busy_mu);
        core_->busy = false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
  }

  ~Stream() { Close(); }

  // Next piece, or nullopt at the end; rethrows the generator's error.
  std::optional<std::string> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !pieces_.empty() || done_; });
    if (!pieces_.empty()) {
      std::string s = std::move(pieces_.front());
      pieces_.pop_front();
      return s;
    }
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
    return std::nullopt;
  }

  // Stops at the next piece and waits for the worker.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel_ = !done_;
    }
    if (worker_.joinable()) worker_.join();
  }

  std::optional<GenerateStats> Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ && !error_ && !cancel_ ? stats_ : std::nullopt;
  }

 private:
  std::shared_ptr<ModelCore> core_;
  std::shared_ptr<const void> hold_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  bool done_ = false;
  bool cancel_ = false;
  std::exception_ptr error_;
  std::optional<GenerateStats> stats_;
};

// kvshare.Assistant: a Gemma 4 assistant drafter (no state of its own).
class PyAssistant {
 public:
  explicit PyAssistant(const std::string& path) {
    py::gil_scoped_release release;
    model_ = AssistantModel::Load(path);
  }
  py::dict Config() const {
    const AssistantConfig& c = model_->config();
    py::dict d;
    d["n_layer"] = c.n_layer;
    d["n_embd"] = c.n_embd;
    d["n_embd_backbone"] = c.n_embd_backbone;
    d["n_head"] = c.n_head;
    d["n_vocab"] = c.n_vocab;
    d["sliding_window"] = c.sliding_window;
    d["is_sliding"] = c.is_sliding;
    d["layer_head_dim"] = c.layer_head_dim;
    d["ordered_embeddings"] = c.ordered_embeddings;
    return d;
  }
  std::shared_ptr<const AssistantModel> model_;
};

// "f32" or "bf16" as a product precision; `what` names the argument.
GqaMatMulPrecision PrecisionFromName(const std::string& name, const char* what) {
  if (name == "f32") return GqaMatMulPrecision::kF32;
  if (name == "bf16") return GqaMatMulPrecision::kBf16;
  throw Error(std::string(what) + " '" + name + "' is not one of f32, bf16");
}

class PyModel {
 public:
  PyModel(const std::string& path, const std::optional<std::string>& mmproj, int max_context, int max_step,
          int num_threads, const std::string& kv_dtype, std::optional<int> kv_shared_layers,
          const std::string& attention_precision, const std::string& weight_precision)
      : core_(std::make_shared<ModelCore>()) {
    if (num_threads < 0) throw Error("num_threads must be >= 0 (0 = all cores), got " + std::to_string(num_threads));
    state_options_.max_context = max_context;
    state_options_.max_step = max_step;
    state_options_.kv_dtype = KvCacheDTypeFromName(kv_dtype, "kv_dtype");
    state_options_.num_kv_shared_layers = kv_shared_layers;
    state_options_.attention_precision = PrecisionFromName(attention_precision, "attention_precision");
    if (state_options_.attention_precision == GqaMatMulPrecision::kBf16 && !GqaBf16CoversCausal()) {
      throw Error(
          "attention_precision bf16 runs on Intel AMX tiles (AMX-BF16), and this process has none usable; use "
          "attention_precision=\"f32\"");
    }
    const ModelLoadOptions load{.weight_precision = PrecisionFromName(weight_precision, "weight_precision")};
    if (const std::string why = Bf16WeightsUnavailableReason();
        load.weight_precision == GqaMatMulPrecision::kBf16 && !why.empty()) {
      throw Error("weight_precision bf16 runs on Intel AMX tiles (AMX-BF16), and this process has none usable (" + why +
                  "); use weight_precision=\"f32\"");
    }
    const int threads =
        num_threads > 0 ? num_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    {
      py::gil_scoped_release release;
      core_->model = Model::Load(path, load);
      core_->tokenizer = std::make_unique<Tokenizer>(ReadVocab(core_->model->gguf()));
      core_->pool = std::make_unique<ThreadPool>(threads);
      core_->generator =
          std::make_unique<Generator>(*core_->model, *core_->tokenizer, core_->pool.get(), state_options_);
      if (mmproj) LoadVision(*mmproj);
    }
    // What the loader noticed (e.g. llama.cpp would share KV differently): Python warnings.
    for (const std::string& w : core_->model->warnings()) {
      py::module_::import("warnings").attr("warn")(w, py::module_::import("builtins").attr("UserWarning"), 2);
    }
  }

  std::vector<std::string> Warnings() const { return core_->model->warnings(); }

  py::dict Config() const {
    const ModelConfig& c = core_->model->config();
    py::dict d;
    d["architecture"] = c.architecture;
    d["n_layer"] = c.n_layer;
    d["n_embd"] = c.n_embd;
    d["n_ff"] = c.n_ff;
    d["n_head"] = c.n_head;
    d["n_head_kv"] = c.n_head_kv;
    d["head_dim"] = c.head_dim;
    d["n_vocab"] = c.n_vocab;
    d["context_length"] = c.context_length;
    d["sliding_window"] = c.sliding_window;
    d["rope_base_full"] = c.rope_base_full;
    d["rope_base_sliding"] = c.rope_base_sliding;
    d["is_sliding"] = c.is_sliding;
    d["layer_head_dim"] = c.layer_head_dim;
    d["layer_n_head_kv"] = c.layer_n_head_kv;
    d["layer_n_ff"] = c.layer_n_ff;
    d["num_kv_shared_layers"] = c.num_kv_shared_layers;
    return d;
  }

  std::vector<int32_t> Tokenize(const std::string& text, std::optional<bool> add_bos, bool parse_special) const {
    return core_->tokenizer->Encode(
        text, EncodeOptions{.add_bos = add_bos, .add_eos = std::nullopt, .parse_special = parse_special});
  }

  std::vector<int32_t> ChatTokens(const std::vector<std::pair<std::string, std::string>>& messages,
                                  const std::optional<std::string>& template_name) const {
    ChatFormatChoice choice = ChooseChatFormat(core_->model->gguf(), template_name);
    if (choice.format == ChatFormat::kNone && choice.source != ChatFormatSource::kNamed) {
      throw Error("chat_tokens: " + choice.reason + "; name a chat format: template=\"gemma\" or \"gemma4\"");
    }
    std::vector<ChatMessage> msgs;
    for (const auto& [role, content] : messages) msgs.push_back({role, content});
    return ChatTemplate(choice.format, *core_->tokenizer).Encode(msgs);
  }

  py::str Detokenize(const std::vector<int32_t>& ids) const { return Utf8(core_->tokenizer->Decode(ids)); }

  py::array_t<float> Logits(const std::vector<int32_t>& tokens) const {
    std::vector<float> out;
    Exclusive([&] {
      auto state = core_->model->NewState(state_options_);
      const std::span<const float> l = core_->model->Forward(*state, tokens, core_->pool.get());
      out.assign(l.begin(), l.end());
    });
    return py::array_t<float>(static_cast<py::ssize_t>(out.size()), out.data());
  }

  // Model::Embed of texts (tokenized with the vocabulary's BOS / EOS rule).
  py::array_t<float> Embed(const std::vector<std::string>& texts, const std::optional<std::string>& pooling,
                           int dimensions) const {
    std::vector<std::vector<std::int32_t>> ids;
    for (const std::string& t : texts) ids.push_back(core_->tokenizer->Encode(t));
    const EmbedOptions o{.pooling = pooling ? std::optional(PoolingFromName(*pooling)) : std::nullopt,
                         .dimensions = dimensions};
    std::vector<float> out;
    Exclusive([&] { out = core_->model->Embed(ids, o, core_->pool.get()); });
    const auto n = static_cast<py::ssize_t>(texts.size());
    return py::array_t<float>({n, n > 0 ? static_cast<py::ssize_t>(out.size()) / n : 0}, out.data());
  }

  std::unique_ptr<Stream> Generate(const py::object& prompt, int max_new_tokens, float temperature, int top_k,
                                   float top_p, float min_p, float repetition_penalty, float presence_penalty,
                                   float frequency_penalty, std::uint64_t seed, const py::object& chat, bool reset,
                                   const py::object& draft, int draft_max, bool draft_adaptive,
                                   const py::object& images, int max_soft_tokens, bool pan_and_scan,
                                   std::int64_t image_max_pixels, const py::object& audio) {
    const ChatTemplate tmpl(FormatFor(chat), *core_->tokenizer);
    const PreprocessOptions po{.max_soft_tokens = max_soft_tokens, .pan_and_scan = pan_and_scan};
    if (image_max_pixels < 1) {
      throw Error("image_max_pixels must be at least 1, got " + std::to_string(image_max_pixels));
    }
    const ImageLimits limits{.max_pixels = image_max_pixels, .max_pixels_hint = "raise it with image_max_pixels="};
    const std::vector<ImageArg> image_args = ImageArgs(images, po, limits);
    if (!audio.is_none() && py::len(audio) > 0) NeedAudio();  // no encoder: the error before any clip is read
    const std::vector<AudioArg> clips =
        ReadAudioArgs(audio, core_->audio ? MaxAudioSeconds(core_->audio->config().projector) : 0.0);
    if ((!image_args.empty() || !clips.empty()) && !py::isinstance<py::str>(prompt)) {
      throw Error(std::string(image_args.empty() ? "audio goes" : "images go") +
                  " with a str prompt (put before its text in the user message), not token ids");
    }
    std::vector<int32_t> ids;
    std::vector<std::size_t> slots, audio_slots;
    if (py::isinstance<py::str>(prompt)) {
      // Continuing a sequence: no second BOS.
      const bool continuing = !reset && core_->generator->state().length() > 0;
      std::vector<ChatMessage> msgs = {{"user", Utf8Text(prompt, "prompt")}};
      // The images, the clips, then the text (as kvshare generate --image / --audio).
      msgs[0].image_at.assign(image_args.size(), 0);
      msgs[0].audio_at.assign(clips.size(), 0);
      ChatTemplateOptions co{.add_bos = !continuing};
      if (!image_args.empty()) co.image_padding_text = core_->splicer->padding_text();
      if (!clips.empty()) co.audio_padding_text = core_->audio_splicer->padding_text();
      ids = tmpl.Encode(msgs, co, image_args.empty() ? nullptr : &slots, clips.empty() ? nullptr : &audio_slots);
    } else {
      ids = TokenIdsArg(prompt, "prompt", core_->model->config().n_vocab);
    }
    std::shared_ptr<EncodedPrompt> encoded;
    if (!image_args.empty() || !clips.empty()) {
      const PromptMedia media{.vision = core_->vision.get(), .image_splicer = core_->splicer.get(),
                              .images = image_args, .options = po, .image_slots = slots,
                              .audio = core_->audio.get(), .audio_splicer = core_->audio_splicer.get(),
                              .clips = clips, .audio_slots = audio_slots};
      Exclusive([&] {
        const PromptRoom room{.max_context = state_options_.max_context,
                              .cached = reset ? 0 : core_->generator->state().length(),
                              .max_new_tokens = max_new_tokens};
        encoded = EncodePromptMedia(media, room, ids, core_->pool.get());
        if (FitStep(encoded->max_span, reset)) reset = true;
      });
      ids = encoded->prompt.tokens;
    }
    GenerateOptions o;
    o.max_new_tokens = max_new_tokens;
    o.sampler = SamplerOptions{.temperature = temperature,
                               .top_k = top_k,
                               .top_p = top_p,
                               .min_p = min_p,
                               .repetition_penalty = repetition_penalty,
                               .repeat_last_n = 64,
                               .presence_penalty = presence_penalty,
                               .frequency_penalty = frequency_penalty,
                               .seed = seed};
    o.stop_tokens = tmpl.StopTokens();
    Sampler validate(o.sampler);  // option errors raise here, before the worker starts
    o.speculative = {.draft_max = draft_max, .adaptive = draft_adaptive};
    o.drafter = DrafterFor(draft, o.speculative);
    if (encoded) o.prompt_embeddings = encoded->prompt.embeddings;
    return std::make_unique<Stream>(core_, std::move(ids), o, reset, encoded);
  }

  bool TakesImages() const { return core_->vision != nullptr; }
  bool TakesAudio() const { return core_->audio != nullptr; }

  py::object VisionConfig() const {
    if (!core_->vision) return py::none();
    return VisionConfigDict(core_->vision->config());
  }

  py::list PreprocessImage(const py::handle& image, int max_soft_tokens, bool pan_and_scan) const {
    const PreprocessOptions po{.max_soft_tokens = max_soft_tokens, .pan_and_scan = pan_and_scan};
    const ImageArg arg = ReadImageArg(image, "image", po);
    std::vector<PixelTensor> pixels;
    {
      py::gil_scoped_release release;
      pixels = Vision().Preprocess(arg.image, po);
    }
    py::list out;
    for (const PixelTensor& p : pixels) out.append(PixelsToArray(p));
    return out;
  }

  py::array_t<float> EncodeImage(const py::handle& image, int max_soft_tokens, bool pan_and_scan) const {
    const PreprocessOptions po{.max_soft_tokens = max_soft_tokens, .pan_and_scan = pan_and_scan};
    const ImageArg arg = ReadImageArg(image, "image", po);
    PromptImage encoded;
    Exclusive([&] { encoded = EncodePromptImage(Vision(), arg.image, arg.key, po, core_->pool.get()); });
    return RowsToArray(encoded.rows, Vision().config().n_embd_text);
  }

  py::array_t<float> EncodePixels(const py::handle& pixels) const {
    const VisionEncoder& vision = Vision();
    const PixelTensor p = PixelsFromArray(pixels, "pixels");
    std::vector<float> rows;
    Exclusive([&] { rows = vision.Encode(p, core_->pool.get()); });
    return RowsToArray(rows, vision.config().n_embd_text);
  }

  void Reset() {
    std::lock_guard<std::mutex> lock(core_->busy_mu);
    if (core_->busy) throw Error("a generation is running on this Model; exhaust or close() it first");
    core_->generator->Reset();
  }

  std::int64_t CachedTokens() const { return core_->generator->state().length(); }
  py::dict LastStats() const { return StatsDict(core_->last); }

 private:
  // generate()'s chat argument as a format: None = as the file says (plain
  // completion without a template; a UserWarning when the file's template is
  // unknown), False = none, True = the file's (an error when it has none
  // kvshare knows), a str = that format by name.
  ChatFormat FormatFor(const py::object& chat) const {
    if (py::isinstance<py::str>(chat)) return ChooseChatFormat(core_->model->gguf(), chat.cast<std::string>()).format;
    if (!chat.is_none() && !py::isinstance<py::bool_>(chat)) {
      throw py::type_error("chat must be None, a bool or a chat format name (\"gemma\", \"gemma4\", \"none\")");
    }
    if (!chat.is_none() && !chat.cast<bool>()) return ChatFormat::kNone;
    const ChatFormatChoice choice = ChooseChatFormat(core_->model->gguf());
    if (chat.is_none() && choice.source == ChatFormatSource::kFileUnrecognized) {
      const std::string msg = choice.reason +
                              "; using plain completion. Name a format with chat=\"gemma\" or "
                              "\"gemma4\" (chat=False silences this warning)";
      if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) != 0) throw py::error_already_set();
    }
    if (!chat.is_none() && choice.format == ChatFormat::kNone) {
      throw Error("chat=True needs a chat template, but " + choice.reason +
                  "; name a format with chat=\"gemma\" or \"gemma4\", or pass chat=None for plain completion");
    }
    return choice.format;
  }

  // generate()'s draft argument as this model's drafter (null: none): its
  // type picks the request's field; the runtime's factory checks and makes it
  // (kvshare/runtime/drafter_factory.h).
  Drafter* DrafterFor(const py::object& draft, const SpeculativeOptions& options) {
    if (draft.is_none()) return nullptr;
    const std::string choices = "None, \"ngram\" (prompt lookup), a kvshare.Model or a kvshare.Assistant";
    SpeculationRequest r{.speculative = options,
                         .names = {.method = "draft", .draft = "draft", .method_choices = choices}};
    std::shared_ptr<ModelCore> draft_core;
    std::shared_ptr<const AssistantModel> assistant;
    std::lock_guard<std::mutex> lock(core_->busy_mu);
    if (core_->busy) throw Error("another generation is running on this Model; exhaust or close() it first");
    if (py::isinstance<py::str>(draft)) {
      r.method = draft.cast<std::string>();
      // "" would ask for no drafter, as None does; as a str it is a mistake.
      if (r.method.empty()) throw Error("draft must be " + choices + ", got \"\"");
    } else if (py::isinstance<PyAssistant>(draft)) {
      assistant = draft.cast<PyAssistant&>().model_;
      r.assistant = assistant.get();
    } else if (py::isinstance<PyModel>(draft)) {
      draft_core = draft.cast<PyModel&>().core_;
      r.draft_model = draft_core->model.get();
    } else {
      throw py::type_error("draft must be None, \"ngram\", a kvshare.Model or a kvshare.Assistant");
    }
    CheckSpeculation(r);
    Speculation& s = core_->speculation;
    if (!s.drafter || core_->draft_method != r.method || core_->draft_core != draft_core ||
        core_->assistant != assistant) {
      s = {};  // the old drafter and its state go before the new one is made
      s = MakeSpeculation(
          r, *core_->model,
          {.max_context = state_options_.max_context, .kv_dtype = state_options_.kv_dtype, .pool = core_->pool.get()});
      core_->draft_method = r.method;
      core_->draft_core = std::move(draft_core);
      core_->assistant = std::move(assistant);
    }
    return s.drafter.get();
  }

  // Runs `f` without the GIL and with this Model's pool to itself: throws
  // when a generation stream is running (it owns the pool until it ends).
  template <typename F>
  void Exclusive(F&& f) const {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(core_->busy_mu);
    if (core_->busy) throw Error("a generation is running on this Model; exhaust or close() it first");
    f();
  }

  const VisionEncoder& Vision() const {
    if (!core_->vision) {
      throw Error(
          "this Model takes no images: load its vision encoder with kvshare.Model(path, mmproj=PATH) (the "
          "model's mmproj GGUF)");
    }
    return *core_->vision;
  }

  void NeedAudio() const {
    if (core_->audio) return;
    throw Error(!core_->audio_error.empty() ? core_->audio_error
                                            : "this Model takes no audio: load kvshare.Model(path, mmproj=PATH) with "
                                              "an mmproj that has an audio encoder (Gemma 3n, Gemma 4 E2B / E4B)");
  }

  void LoadVision(const std::string& path) {
    try {
      MmprojTowers t = LoadMmprojTowers(path, *core_->tokenizer, *core_->model, core_->pool.get());
      core_->vision = std::move(t.vision);
      core_->splicer = std::move(t.image_splicer);
      core_->audio = std::move(t.audio);
      core_->audio_splicer = std::move(t.audio_splicer);
      if (!t.audio_error.empty()) core_->audio_error = "mmproj " + path + ": " + t.audio_error;
    } catch (const Error& e) {
      throw Error("mmproj " + path + ": " + e.what());
    }
  }


  // generate()'s images (None or a list) as decoded images.
  std::vector<ImageArg> ImageArgs(const py::object& images, const PreprocessOptions& po,
                                  const ImageLimits& limits) const {
    std::vector<ImageArg> out;
    if (images.is_none()) return out;
    if (!py::isinstance<py::list>(images) && !py::isinstance<py::tuple>(images)) {
      throw py::type_error("images must be a list of images (paths, bytes or uint8 numpy arrays), got " +
                           std::string(py::str(py::type::of(images).attr("__name__"))));
    }
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(images);
    if (seq.size() > 0) Vision();  // no encoder: the error before any image is read
    for (std::size_t i = 0; i < seq.size(); ++i) {
      out.push_back(ReadImageArg(seq[i], "images[" + std::to_string(i) + "]", po, limits));
    }
    return out;
  }

  // An image's soft tokens see each other, so each runs in one step
  // (EmbeddingSpan): a larger one than the generator's max_step makes a new
  // generator, which only a new sequence may do. Call under busy_mu.
  // Returns whether it made a new generator.
  bool FitStep(int span, bool reset) {
    if (span <= state_options_.max_step) return false;
    if (!reset && core_->generator->state().length() > 0) {
      throw Error("an image of " + std::to_string(span) + " soft tokens needs a step of that many tokens (this " +
                  "sequence has " + std::to_string(state_options_.max_step) +
                  "); send it with reset=True, or fewer soft tokens (max_soft_tokens)");
    }
    ModelStateOptions so = state_options_;
    so.max_step = span;
    core_->generator = std::make_unique<Generator>(*core_->model, *core_->tokenizer, core_->pool.get(), so);
    state_options_ = so;
    return true;
  }

  std::shared_ptr<ModelCore> core_;
  ModelStateOptions state_options_;
};

}  // namespace

void BindModel(py::module_& m) {
  py::class_<Stream>(m, "GenerationStream", "Iterator of generated text pieces (see Model.generate).")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](Stream& s) {
             std::optional<std::string> piece;
             {
               py::gil_scoped_release release;
               piece = s.Next();
             }
             if (!piece) throw py::stop_iteration();
             return Utf8(*piece);
           })
      .def(
          "close",
          [](Stream& s) {
            py::gil_scoped_release release;
            s.Close();
          },
          "Stops the generation (at the next token) and waits for it.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](Stream& s, const py::object&, const py::object&, const py::object&) {
             py::gil_scoped_release release;
             s.Close();
           })
      .def_property_readonly(
          "stats",
          [](Stream& s) -> py::object {
            auto st = s.Stats();
            if (!st) return py::none();
            return StatsDict(*st);
          },
          "prompt_tokens, generated_tokens, prefill/decode seconds, decode_steps, kv_bytes, stop_reason, "
          "verify_steps, drafted_tokens, accepted_tokens; None until the generation has finished.");

  py::class_<PyAssistant>(m, "Assistant",
                          "Gemma 4's assistant drafter from a gemma4-assistant GGUF: Assistant(path). Pass it as "
                          "Model.generate(..., draft=assistant); it reads the model's KV cache (no cache of its own).")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_property_readonly("config", &PyAssistant::Config, "Hyperparameters read from the GGUF metadata (a dict).");

  py::class_<PyModel>(m, "Model", kModelDoc)
      .def(py::init<const std::string&, const std::optional<std::string>&, int, int, int, const std::string&,
                    std::optional<int>, const std::string&, const std::string&>(),
           py::arg("path"), py::kw_only(), py::arg("mmproj") = py::none(), py::arg("max_context") = 4096,
           py::arg("max_step") = ModelStateOptions{}.max_step, py::arg("num_threads") = 0,
           py::arg("kv_dtype") = "float32", py::arg("kv_shared_layers") = py::none(),
           py::arg("attention_precision") = "f32", py::arg("weight_precision") = "f32")
      .def_property_readonly("config", &PyModel::Config, "Hyperparameters read from the GGUF metadata (a dict).")
      .def_property_readonly("warnings", &PyModel::Warnings,
                             "What the loader noticed that does not stop the model (also issued as UserWarning).")
      .def("tokenize", &PyModel::Tokenize, py::arg("text"), py::kw_only(), py::arg("add_bos") = py::none(),
           py::arg("parse_special") = false, "Token ids of text (list of int).")
      .def("chat_tokens", &PyModel::ChatTokens, py::arg("messages"), py::kw_only(), py::arg("template") = py::none(),
           "Token ids of a chat over [(role, content), ...], <bos> first, ending with the model's turn. template: "
           "None = the file's tokenizer.chat_template (kvshare.Error when it has none kvshare knows), or "
           "\"gemma\", \"gemma4\", \"none\".")
      .def("detokenize", &PyModel::Detokenize, py::arg("ids"), "Text of token ids.")
      .def("logits", &PyModel::Logits, py::arg("tokens"),
           "float32 (n_vocab,) logits of the last token after running tokens through a fresh sequence.")
      .def("embed", &PyModel::Embed, py::arg("texts"), py::kw_only(), py::arg("pooling") = py::none(),
           py::arg("dimensions") = 0,
           "float32 (len(texts), d) L2-normalized sentence embeddings (kvshare/model/embedding.h). pooling: None = "
           "the file's (EmbeddingGemma: mean), or \"mean\" / \"last\" (needed for a text generation model); "
           "dimensions: 0 = all, else the first d values renormalized (Matryoshka).")
      .def("generate", &PyModel::Generate, py::arg("prompt"), py::kw_only(), py::arg("max_new_tokens") = 128,
           py::arg("temperature") = 0.0f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("min_p") = 0.0f,
           py::arg("repetition_penalty") = 1.0f, py::arg("presence_penalty") = 0.0f,
           py::arg("frequency_penalty") = 0.0f, py::arg("seed") = 0, py::arg("chat") = py::none(),
           py::arg("reset") = true, py::arg("draft") = py::none(),
           py::arg("draft_max") = SpeculativeOptions{}.draft_max,
           py::arg("draft_adaptive") = SpeculativeOptions{}.adaptive, py::arg("images") = py::none(),
           py::arg("max_soft_tokens") = PreprocessOptions{}.max_soft_tokens,
           py::arg("pan_and_scan") = PreprocessOptions{}.pan_and_scan,
           py::arg("image_max_pixels") = ImageLimits{}.max_pixels, py::arg("audio") = py::none(), kGenerateDoc)
      .def_property_readonly("takes_images", &PyModel::TakesImages,
                             "True when the Model was loaded with its vision encoder (mmproj=...).")
      .def_property_readonly("takes_audio", &PyModel::TakesAudio, "True when the Model's mmproj has an audio encoder.")
      .def_property_readonly("vision_config", &PyModel::VisionConfig,
                             "The vision encoder's geometry read from the mmproj (a dict), or None without one.")
      .def("preprocess_image", &PyModel::PreprocessImage, py::arg("image"), py::kw_only(),
           py::arg("max_soft_tokens") = PreprocessOptions{}.max_soft_tokens,
           py::arg("pan_and_scan") = PreprocessOptions{}.pan_and_scan, kPreprocessDoc)
      .def("encode_image", &PyModel::EncodeImage, py::arg("image"), py::kw_only(),
           py::arg("max_soft_tokens") = PreprocessOptions{}.max_soft_tokens,
           py::arg("pan_and_scan") = PreprocessOptions{}.pan_and_scan, kEncodeImageDoc)
      .def("encode_pixels", &PyModel::EncodePixels, py::arg("pixels"), kEncodePixelsDoc)
      .def("reset", &PyModel::Reset, "Forgets the cached sequence.")
      .def_property_readonly("cached_tokens", &PyModel::CachedTokens, "Tokens in the generator's KV cache.")
      .def_property_readonly("last_stats", &PyModel::LastStats, "Stats of the last finished generation (a dict).");
}

}  // namespace kvshare::python
