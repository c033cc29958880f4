// Gemma 3n's hard tokens (Model::SetHardTokenRows, MmprojHardTokenRows,
// LoadMmprojTowers; docs/vision.md "Gemma 3n's hard tokens") on the tiny
// Gemma 3n of tests/fixtures/vision/ with its vision mmproj and the gemma3ne
// audio mmproj:
// - against HF transformers 5.23 (tests/tools/audio_e2e_gemma3n_fixtures.py,
//   gemma3nh.*): a token-id prompt with vision- and audio-vocabulary ids in
//   text positions (both ends of each range), then one decode step per
//   range's fed-back id, f32 within 1e-5 relative; without the rows it is
//   far from HF's;
// - without installed rows (none yet, or cleared) nothing changes, bitwise;
//   text ids never change; image prompts' logits are bitwise the same with
//   the rows installed, with and without ImageSplicer's one-row spans;
// - bad installs throw and change nothing; installing while other threads
//   run the model gives each call one of the two results;
// - LoadMmprojTowers and InstallMmprojHardTokenRows install the ranges of
//   the offsets rule, and none for Gemma 3;
// - on a random tiny Gemma 3n whose per-layer row of id 0 is not zero (the
//   fixture's is, as HF's padding row), an installed id runs bitwise as a
//   one-row EmbeddingSpan of its row (per-layer input of id 0, HF's rule).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "audio_fixture.h"
#include "common_test_util.h"
#include "kvshare/audio/audio_encoder.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/vocab.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/runtime/mmproj_towers.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "kvshare/vision/vision_encoder.h"
#include "model_tiny_gemma3n.h"

namespace kvshare {
namespace {

using testing::AudioDir;
using testing::MaxRelDiff;
using testing::ReadF32;

constexpr double kTol = 1e-5;  // f32 against HF, as the image and audio fixture tests

std::string VisionDir() { return AudioDir() + "../vision/"; }

std::vector<float> Vec(std::span<const float> s) { return {s.begin(), s.end()}; }

class HardTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(AudioDir() + "gemma3nh.json");
    ASSERT_TRUE(in) << "missing fixture gemma3nh.json";
    j_ = nlohmann::json::parse(in);
    model_ = Model::Load(AudioDir() + j_["text_gguf"].get<std::string>());
    vision_ = VisionEncoder::Load(AudioDir() + j_["vision_mmproj"].get<std::string>());
    audio_ = AudioEncoder::Load(AudioDir() + j_["audio_mmproj"].get<std::string>());
    prompt_ = j_["prompt_ids"].get<std::vector<std::int32_t>>();
    fed_ = j_["fed_ids"].get<std::vector<std::int32_t>>();
    hf_ = ReadF32(AudioDir() + j_["logits"]["file"].get<std::string>());
    V_ = static_cast<std::size_t>(model_->config().n_vocab);
    ASSERT_EQ(hf_.size(), (prompt_.size() + fed_.size()) * V_);
  }
  std::vector<HardTokenRows> Rows() const {
    return MmprojHardTokenRows(vision_.get(), audio_.get(), model_->config().n_vocab);
  }
  // HF's logits of positions [from, to).
  std::vector<float> Hf(std::size_t from, std::size_t to) const {
    return {hf_.begin() + static_cast<std::ptrdiff_t>(from * V_), hf_.begin() + static_cast<std::ptrdiff_t>(to * V_)};
  }
  // The prompt's logits (every position), then each fed id's as one decode step.
  std::vector<float> Run(int max_step = 256) const {
    auto st = model_->NewState({.max_context = 64, .max_step = max_step});
    std::vector<float> out = Vec(
        model_->Forward(*st, prompt_, nullptr, {.num_logits = static_cast<std::int64_t>(prompt_.size())}));
    for (const std::int32_t id : fed_) {
      const auto row = model_->Forward(*st, std::span(&id, 1), nullptr);
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  }

  nlohmann::json j_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<VisionEncoder> vision_;
  std::unique_ptr<AudioEncoder> audio_;
  std::vector<std::int32_t> prompt_, fed_;
  std::vector<float> hf_;
  std::size_t V_ = 0;
};

TEST_F(HardTokens, RangesFollowTheOffsetsRule) {
  const std::vector<HardTokenRows> rows = Rows();
  const std::size_t W = static_cast<std::size_t>(model_->config().n_embd);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].first, j_["vision_vocabulary"][0].get<std::int32_t>());  // 544 - 16 - 16
  EXPECT_EQ(rows[0].rows, vision_->HardTokenRows(nullptr));
  EXPECT_EQ(rows[1].first, j_["audio_vocabulary"][0].get<std::int32_t>());  // 544 - 16
  ASSERT_EQ(rows[1].rows.size(), 16 * W);
  EXPECT_EQ(std::vector<float>(rows[1].rows.end() - static_cast<std::ptrdiff_t>(W), rows[1].rows.end()),
            audio_->HardToken(15));
  EXPECT_TRUE(MmprojHardTokenRows(nullptr, nullptr, 544).empty());
  EXPECT_THROW(MmprojHardTokenRows(vision_.get(), audio_.get(), 20), Error);  // vocabularies past id 0
}

TEST_F(HardTokens, TokenIdPromptAndDecodeStepsMatchHf) {
  const std::size_t n = prompt_.size(), all = n + fed_.size();
  // Without the rows (the text table's rows, llama.cpp's way) far from HF.
  EXPECT_GT(MaxRelDiff(Run(), hf_), 1e-2);
  model_->SetHardTokenRows(Rows());
  for (const int max_step : {256, 3}) {  // the prompt in one step and in chunks
    SCOPED_TRACE(max_step);
    const std::vector<float> got = Run(max_step);
    EXPECT_LT(MaxRelDiff(std::vector<float>(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n * V_)),
                         Hf(0, n)),
              kTol);
    for (std::size_t i = n; i < all; ++i) {
      EXPECT_LT(MaxRelDiff(std::vector<float>(got.begin() + static_cast<std::ptrdiff_t>(i * V_),
                                              got.begin() + static_cast<std::ptrdiff_t>((i + 1) * V_)),
                           Hf(i, i + 1)),
                kTol)
          << "decode step of id " << fed_[i - n];
    }
  }
  // The same sequence as one batched entry beside another row.
  auto st = model_->NewState({.max_context = 64, .max_batch = 2});
  std::vector<std::int32_t> seq = prompt_;
  seq.insert(seq.end(), fed_.begin(), fed_.end());
  const std::int32_t other = 5;
  const BatchEntry entries[] = {{.row = 1, .tokens = std::span(&other, 1)},
                                {.row = 0, .tokens = seq, .num_logits = static_cast<std::int64_t>(all)}};
  const auto batched = model_->ForwardBatch(*st, entries, nullptr);
  EXPECT_LT(MaxRelDiff(std::vector<float>(batched.begin() + static_cast<std::ptrdiff_t>(V_), batched.end()), hf_), kTol);
  // The Generator's first greedy token is HF's argmax after the prompt.
  const Tokenizer tok(ReadVocab(model_->gguf()));
  Generator gen(*model_, tok, nullptr, {.max_context = 64});
  GenerateOptions o;
  o.max_new_tokens = 1;
  o.sampler.temperature = 0.0f;
  const GenerateStats s = gen.Generate(prompt_, o, [](std::string_view) {});
  const std::vector<float> last = Hf(n - 1, n);
  EXPECT_EQ(s.last_token, std::max_element(last.begin(), last.end()) - last.begin());
}

TEST_F(HardTokens, EmbedTokensTakesTheRowsUnscaled) {
  const std::size_t W = static_cast<std::size_t>(model_->config().n_embd);
  const std::vector<std::int32_t> ids = {5, 512, 543};
  std::vector<float> before(3 * W), after(3 * W);
  model_->EmbedTokens(ids, before.data());
  const std::vector<HardTokenRows> rows = Rows();
  model_->SetHardTokenRows(rows);
  model_->EmbedTokens(ids, after.data());
  EXPECT_EQ(std::vector<float>(after.begin(), after.begin() + W), std::vector<float>(before.begin(), before.begin() + W));
  EXPECT_EQ(std::vector<float>(after.begin() + W, after.begin() + 2 * W),
            std::vector<float>(rows[0].rows.begin(), rows[0].rows.begin() + W));
  EXPECT_EQ(std::vector<float>(after.begin() + 2 * W, after.end()),
            std::vector<float>(rows[1].rows.end() - static_cast<std::ptrdiff_t>(W), rows[1].rows.end()));
}

TEST_F(HardTokens, NothingChangesWithoutRows) {
  EXPECT_EQ(model_->hard_token_rows(), nullptr);
  const std::vector<float> none = Run();
  // Text ids keep their rows with the ranges installed.
  const std::vector<std::int32_t> text = {2, 412, 268, 283, 274, 275};
  auto st = model_->NewState({.max_context = 64});
  const std::vector<float> plain = Vec(model_->Forward(*st, text, nullptr, {.num_logits = 6}));
  model_->SetHardTokenRows(Rows());
  ASSERT_NE(model_->hard_token_rows(), nullptr);
  EXPECT_NE(Run(), none);
  st->Reset();
  EXPECT_EQ(Vec(model_->Forward(*st, text, nullptr, {.num_logits = 6})), plain);
  model_->SetHardTokenRows({});
  EXPECT_EQ(model_->hard_token_rows(), nullptr);
  EXPECT_EQ(Run(), none);
}

TEST_F(HardTokens, BadInstallsThrowAndChangeNothing) {
  const std::vector<HardTokenRows> good = Rows();
  model_->SetHardTokenRows(good);
  const auto installed = model_->hard_token_rows();
  const std::int64_t W = model_->config().n_embd;
  const auto bad = [&](std::vector<HardTokenRows> r, const char* what) {
    try {
      model_->SetHardTokenRows(std::move(r));
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_EQ(model_->hard_token_rows(), installed);
  };
  bad({{.first = 512, .rows = std::vector<float>(W + 1)}}, "multiple of n_embd");
  bad({{.first = 512, .rows = {}}}, "multiple of n_embd");
  bad({{.first = 540, .rows = std::vector<float>(5 * W)}}, "outside this model's vocabulary");
  bad({{.first = -1, .rows = std::vector<float>(W)}}, "outside this model's vocabulary");
  bad({good[0], {.first = 527, .rows = std::vector<float>(W)}}, "overlap");
}

TEST_F(HardTokens, InstallingWhileRunningGivesOneOfBothResults) {
  const std::vector<float> none = Run();
  model_->SetHardTokenRows(Rows());
  const std::vector<float> with = Run();
  model_->SetHardTokenRows({});
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    for (int i = 0; !stop.load(); ++i) model_->SetHardTokenRows(i % 2 ? Rows() : std::vector<HardTokenRows>{});
  });
  int mixed = 0;
  for (int i = 0; i < 20; ++i) {
    auto st = model_->NewState({.max_context = 64});
    const std::vector<float> got = Vec(model_->Forward(*st, prompt_, nullptr, {.num_logits = 1}));
    const std::vector<float> a(none.begin() + static_cast<std::ptrdiff_t>((prompt_.size() - 1) * V_),
                               none.begin() + static_cast<std::ptrdiff_t>(prompt_.size() * V_));
    const std::vector<float> b(with.begin() + static_cast<std::ptrdiff_t>((prompt_.size() - 1) * V_),
                               with.begin() + static_cast<std::ptrdiff_t>(prompt_.size() * V_));
    mixed += got != a && got != b;
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(mixed, 0);
}

TEST_F(HardTokens, LoadMmprojTowersInstallsTheRows) {
  const Tokenizer tok(ReadVocab(model_->gguf()));
  const std::size_t W = static_cast<std::size_t>(model_->config().n_embd);
  {
    const MmprojTowers t = LoadMmprojTowers(VisionDir() + "gemma3n.mmproj.f32.gguf", tok, *model_);
    const auto r = model_->hard_token_rows();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->size(), 1u);  // vision only: A = V = 16
    EXPECT_EQ((*r)[0].first, 512);
    EXPECT_EQ((*r)[0].rows, t.vision->HardTokenRows(nullptr));
  }
  {
    // Another mmproj replaces the rows: this one's audio vocabulary only.
    const MmprojTowers t = LoadMmprojTowers(AudioDir() + "gemma3ne.mmproj.f32.gguf", tok, *model_);
    const auto r = model_->hard_token_rows();
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].first, 528);
    EXPECT_EQ(std::vector<float>((*r)[0].rows.begin(), (*r)[0].rows.begin() + static_cast<std::ptrdiff_t>(W)),
              t.audio->HardToken(0));
  }
  // The CLI's form loads the towers itself.
  model_->SetHardTokenRows({});
  InstallMmprojHardTokenRows(VisionDir() + "gemma3n.mmproj.f32.gguf", nullptr, audio_.get(), *model_);
  const auto r = model_->hard_token_rows();
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].rows, vision_->HardTokenRows(nullptr));
  // Gemma 3: no hard tokens, nothing installed.
  const auto g3 = Model::Load(VisionDir() + "gemma3.f32.gguf");
  const Tokenizer tok3(ReadVocab(g3->gguf()));
  const MmprojTowers t3 = LoadMmprojTowers(VisionDir() + "gemma3.mmproj.f32.gguf", tok3, *g3);
  EXPECT_EQ(g3->hard_token_rows(), nullptr);
  InstallMmprojHardTokenRows(VisionDir() + "gemma3.mmproj.f32.gguf", nullptr, nullptr, *g3);
  EXPECT_EQ(g3->hard_token_rows(), nullptr);
}

// ImageSplicer's one-row spans on <end_of_image> give the row the model now
// applies itself: an image prompt's logits are bitwise the same with spans
// only, rows only, and both.
TEST_F(HardTokens, ImagePromptLogitsUnchanged) {
  std::ifstream in(VisionDir() + "gemma3n.hf.json");
  ASSERT_TRUE(in);
  const nlohmann::json v = nlohmann::json::parse(in);
  const Tokenizer tok(ReadVocab(model_->gguf()));
  const ImageSplicer splicer(tok, *vision_);
  const auto ids = v["prompts"]["two_images"]["prompt_ids"].get<std::vector<std::int32_t>>();
  const int soft = v["encoder"][0]["tokens"].get<int>();
  const std::vector<float> rows = ReadF32(VisionDir() + v["encoder"][0]["features"]["file"].get<std::string>());
  const std::vector<PromptImage> images = {{.rows = rows, .tokens = {soft}, .key = 1},
                                           {.rows = rows, .tokens = {soft}, .key = 2}};
  std::vector<std::size_t> slots;  // after each image's "\n\n": rebuild from HF's ids
  std::vector<std::int32_t> text;
  const std::int32_t begin = v["marker_ids"]["<start_of_image>"].get<std::int32_t>();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == begin) {
      slots.push_back(text.size());
      i += static_cast<std::size_t>(soft) + 1;  // the soft tokens and <end_of_image>
      continue;
    }
    text.push_back(ids[i]);
  }
  const ImagePrompt ip = splicer.Splice(text, slots, images);
  ASSERT_EQ(ip.tokens, ids);
  std::vector<EmbeddingSpan> image_only;
  for (const EmbeddingSpan& e : ip.embeddings) {
    if (e.bidirectional || e.count > 1) image_only.push_back(e);
  }
  ASSERT_EQ(ip.embeddings.size(), 4u);  // two images, two <end_of_image>
  ASSERT_EQ(image_only.size(), 2u);
  const auto run = [&](const std::vector<EmbeddingSpan>& spans) {
    auto st = model_->NewState({.max_context = 128});
    return Vec(model_->Forward(*st, ip.tokens, nullptr,
                               {.num_logits = static_cast<std::int64_t>(ip.tokens.size()), .embeddings = spans}));
  };
  const std::vector<float> spans_only = run(ip.embeddings);
  model_->SetHardTokenRows(Rows());
  EXPECT_EQ(run(ip.embeddings), spans_only);
  EXPECT_EQ(run(image_only), spans_only);
}

TEST(HardTokenRows, RunAsAOneRowSpanOfTheirRow) {
  const testing::TempGguf file = testing::TempGemma3n(testing::TinyGemma3nSpec{}, "hard_tokens");
  const auto model = Model::Load(file.path);
  const int W = model->config().n_embd, n_vocab = model->config().n_vocab;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  HardTokenRows r{.first = n_vocab - 10, .rows = std::vector<float>(static_cast<std::size_t>(5 * W))};
  for (float& v : r.rows) v = normal(rng);
  const std::int32_t id = n_vocab - 7;
  const std::vector<std::int32_t> prompt = {2, 7, id, 9, 11};
  const EmbeddingSpan span{.begin = 2, .count = 1, .rows = r.rows.data() + 3 * W};
  const auto run = [&](std::span<const EmbeddingSpan> spans) {
    auto st = model->NewState({.max_context = 32});
    std::vector<float> out = Vec(model->Forward(*st, prompt, nullptr, {.num_logits = 5, .embeddings = spans}));
    const auto step = model->Forward(*st, std::span(&id, 1), nullptr);  // fed back
    out.insert(out.end(), step.begin(), step.end());
    return out;
  };
  const std::vector<float> text_rows = run({});
  // Ids past the range (n_vocab - 5 ..) keep their text and per-layer rows.
  const std::vector<std::int32_t> past = {2, n_vocab - 5, 9, n_vocab - 1};
  auto st = model->NewState({.max_context = 32});
  const std::vector<float> past_text = Vec(model->Forward(*st, past, nullptr, {.num_logits = 4}));
  model->SetHardTokenRows({r});
  st->Reset();
  EXPECT_EQ(Vec(model->Forward(*st, past, nullptr, {.num_logits = 4})), past_text);
  const std::vector<float> rows = run({});
  EXPECT_NE(rows, text_rows);
  // The prompt's id as a span (the model runs id 0 under it), the fed-back
  // id from the installed rows in both runs: bitwise the same.
  EXPECT_EQ(run(std::span(&span, 1)), rows);
}

}  // namespace
}  // namespace kvshare
