// Drafters (kvshare/runtime/speculative.h): prompt lookup and a separate draft model.
#include "kvshare/runtime/speculative.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/runtime/sampler.h"

namespace kvshare {
namespace {

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& o) : o_(o) {}
  std::string name() const override { return "ngram"; }

  void Draft(const DraftContext& ctx, int max_tokens, std::vector<std::int32_t>& out) override {
    const std::span<const std::int32_t> t = ctx.tokens;
    const std::int64_t n = static_cast<std::int64_t>(t.size());
    for (std::int64_t len = std::min<std::int64_t>(o_.ngram_max, n - 1); len >= o_.ngram_min; --len) {
      const std::int32_t* suffix = t.data() + n - len;
      // The most recent earlier occurrence with at least one token after it.
      for (std::int64_t j = n - len - 1; j >= 0; --j) {
        if (!std::equal(suffix, suffix + len, t.data() + j)) continue;
        const std::int64_t from = j + len, to = std::min<std::int64_t>(n, from + max_tokens);
        out.insert(out.end(), t.begin() + from, t.begin() + to);
        return;
      }
    }
  }

 private:
  NgramOptions o_;
};

// The vocabulary check of a draft model: same size, and the same token texts
// where both files carry them.
void CheckSameVocabulary(const Model& draft, const Model& target) {
  const int nd = draft.config().n_vocab, nt = target.config().n_vocab;
  if (nd != nt) {
    throw Error("the draft model's vocabulary has " + std::to_string(nd) + " tokens, the target's " +
                std::to_string(nt) + "; a draft model must use the target's vocabulary (the same tokenizer)");
  }
  constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
  const bool hd = draft.gguf().Has(kTokens), ht = target.gguf().Has(kTokens);
  if (hd != ht) {
    throw Error(std::string("the ") + (hd ? "target" : "draft") + " model's file has no " + std::string(kTokens) +
                ", so its vocabulary cannot be checked against the " + (hd ? "draft" : "target") + " model's");
  }
  if (!hd) return;
  const std::vector<std::string_view> a = draft.gguf().GetStringArray(kTokens),
                                      b = target.gguf().GetStringArray(kTokens);
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] != b[i]) {
      throw Error("the draft model's token " + std::to_string(i) + " is '" + std::string(a[i]) + "', the target's '" +
                  std::string(b[i]) + "'; a draft model must use the target's vocabulary (the same tokenizer)");
    }
  }
}

class DraftModelDrafter final : public Drafter {
 public:
  DraftModelDrafter(const Model& draft, const DraftModelOptions& o)
      : model_(draft), pool_(o.pool), held_(static_cast<std::size_t>(std::max(1, o.max_batch))) {
    ModelStateOptions so;
    so.max_context = o.max_context;
    so.max_batch = o.max_batch;
    so.kv_dtype = o.kv_dtype;
    state_ = model_.NewState(so);
  }
  std::string name() const override { return "draft-model"; }

  void Reset(int row) override {
    state_->Reset(row);
    held_[static_cast<std::size_t>(row)].clear();
  }

  void Draft(const DraftContext& ctx, int max_tokens, std::vector<std::int32_t>& out) override {
    if (ctx.row < 0 || ctx.row >= state_->max_batch()) {
      throw Error("draft model: row " + std::to_string(ctx.row) + " is out of range [0, " +
                  std::to_string(state_->max_batch()) + ")");
    }
    std::vector<std::int32_t>& held = held_[static_cast<std::size_t>(ctx.row)];
    const std::span<const std::int32_t> t = ctx.tokens;
    // Keep the longest prefix the draft state already holds; at least the
    // pending token is fed again, for the logits of the first draft.
    std::size_t keep = 0;
    while (keep < held.size() && keep + 1 < t.size() && held[keep] == t[keep]) ++keep;
    if (keep < held.size()) {
      try {
        state_->Rewind(ctx.row, static_cast<std::int64_t>(keep));
      } catch (const Error&) {  // a ring no longer holds that length: start over
        state_->Reset(ctx.row);
        keep = 0;
      }
      held.resize(keep);
    }
    const std::int64_t room = state_->max_context() - static_cast<std::int64_t>(t.size());
    const int n = static_cast<int>(std::min<std::int64_t>(max_tokens, room + 1));
    if (n < 1) return;
    const BatchEntry catch_up{.row = ctx.row, .tokens = t.subspan(keep)};
    std::span<const float> logits = model_.ForwardBatch(*state_, std::span<const BatchEntry>(&catch_up, 1), pool_);
    held.insert(held.end(), t.begin() + static_cast<std::ptrdiff_t>(keep), t.end());
    for (int i = 0; i < n; ++i) {
      const std::int32_t d = greedy_.Sample(logits);
      out.push_back(d);
      if (i + 1 == n) break;
      const BatchEntry one{.row = ctx.row, .tokens = std::span<const std::int32_t>(&out.back(), 1)};
      logits = model_.ForwardBatch(*state_, std::span<const BatchEntry>(&one, 1), pool_);
      held.push_back(d);
    }
  }

 private:
  const Model& model_;
  ThreadPool* pool_;
  std::unique_ptr<ModelState> state_;
  std::vector<std::vector<std::int32_t>> held_;  // per row: the tokens in the draft state's cache
  Sampler greedy_{SamplerOptions{}};
};

class AssistantDrafter final : public Drafter {
 public:
  // On the target's device: the assistant itself on the CPU, else the
  // target's twin of it (Model::AssistantOnDevice).
  AssistantDrafter(const AssistantModel& m, const Model& target, ThreadPool* pool)
      : twin_(target.AssistantOnDevice(m)),
        model_(twin_ ? *twin_ : m),
        target_(target),
        pool_(pool),
        scratch_(model_.NewScratch()) {}
  std::string name() const override { return "gemma4-assistant"; }
  bool needs_target_hidden() const override { return true; }

  void Draft(const DraftContext& ctx, int max_tokens, std::vector<std::int32_t>& out) override {
    if (ctx.target_state == nullptr || ctx.target_hidden.empty()) {
      throw Error("the Gemma 4 assistant drafts from the target's state and hidden state; the caller gave none");
    }
    if (static_cast<std::int64_t>(ctx.tokens.size()) != ctx.target_state->length(ctx.row) + 1) {
      throw Error("the Gemma 4 assistant drafts after the target's cached tokens and the pending one: row " +
                  std::to_string(ctx.row) + " caches " + std::to_string(ctx.target_state->length(ctx.row)) +
                  " tokens but the sequence has " + std::to_string(ctx.tokens.size()));
    }
    hidden_.assign(ctx.target_hidden.begin(), ctx.target_hidden.end());
    std::int32_t token = ctx.tokens.back();
    for (int i = 0; i < max_tokens; ++i) {
      const AssistantStepOut s = model_.Step(*scratch_, {.target = &target_,
                                                         .target_state = ctx.target_state,
                                                         .row = ctx.row,
                                                         .token = token,
                                                         .hidden = hidden_,
                                                         .pool = pool_});
      out.push_back(token = s.argmax);
      hidden_.assign(s.hidden.begin(), s.hidden.end());
    }
  }

 private:
  std::unique_ptr<AssistantModel> twin_;  // null on the CPU
  const AssistantModel& model_;
  const Model& target_;
  ThreadPool* pool_;
  std::unique_ptr<AssistantScratch> scratch_;
  std::vector<float> hidden_;  // [n_embd_backbone]: the step's input hidden state
};

}  // namespace

std::unique_ptr<Drafter> MakeAssistantDrafter(const AssistantModel& assistant, const Model& target, ThreadPool* pool) {
  const ModelConfig& c = target.config();
  assistant.Sources(target, BuildLayerPlan(KvSpecOf(c, c.num_kv_shared_layers)));  // throws when it does not fit
  return std::make_unique<AssistantDrafter>(assistant, target, pool);
}

std::unique_ptr<Drafter> MakeNgramDrafter(const NgramOptions& o) {
  if (o.ngram_min < 1) throw Error("ngram_min must be >= 1, got " + std::to_string(o.ngram_min));
  if (o.ngram_max < o.ngram_min || o.ngram_max > 64) {
    throw Error("ngram_max must be in [ngram_min = " + std::to_string(o.ngram_min) + ", 64], got " +
                std::to_string(o.ngram_max));
  }
  return std::make_unique<NgramDrafter>(o);
}

std::unique_ptr<Drafter> MakeDraftModelDrafter(const Model& draft, const Model& target, const DraftModelOptions& o) {
  CheckSameVocabulary(draft, target);
  return std::make_unique<DraftModelDrafter>(draft, o);
}

void CheckSpeculativeOptions(const SpeculativeOptions& o) {
  if (o.draft_max < 1 || o.draft_max > 64) {
    throw Error("draft_max (--draft-max) must be in [1, 64], got " + std::to_string(o.draft_max));
  }
  if (!(o.verify_cost > 0.0) || !(o.verify_cost < 1e6)) {
    throw Error("verify_cost must be a finite number > 0, got " + std::to_string(o.verify_cost));
  }
}

}  // namespace kvshare
