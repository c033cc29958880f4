// kvshare/runtime/sampler.h — next-token selection from logits.
//
// Pipeline, in this order (HF / vLLM order: temperature before the filters):
//   1. repetition penalty over the distinct ids among the last repeat_last_n of
//      `history` (CTRL paper, llama.cpp convention): a positive logit is divided
//      by the penalty, a negative one multiplied by it;
//   1b. OpenAI's frequency and presence penalties over the tokens generated
//      so far (history after the first prompt_length ids, set_prompt_length):
//      logit[t] -= count(t) * frequency_penalty + (count(t) > 0) *
//      presence_penalty, on the logits the repetition penalty left (vLLM's
//      order: repetition, then frequency, then presence); -inf stays -inf;
//   2. temperature == 0: greedy — the argmax, ties going to the lowest id;
//   3. otherwise logits / temperature, then top_k (keep the k largest; ties at the
//      boundary resolved towards lower ids), top_p (keep the smallest prefix of the
//      candidates sorted by probability, descending then by id, whose mass reaches
//      top_p; always at least one), min_p (drop tokens whose probability is below
//      min_p × the largest), and a draw from the renormalized distribution.
//      top_k and min_p are applied before top_p; as each keeps a most-likely
//      prefix, the order among them does not change the result. The draw walks
//      the candidates in id order unless top_k/top_p sorted them (then by
//      descending probability); only as much is sorted as the filters need.
//
// Determinism: the draw uses std::mt19937_64 seeded with `seed` and a 53-bit
// uniform made from its output by this code (no implementation-defined
// distribution), so a seed gives the same tokens for the same logits on every
// platform (up to last-bit differences of std::exp between C libraries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvshare {

// Sampler::Verify's decision on one drafted token.
struct DraftVerdict {
  bool accepted = false;
  int32_t token = 0;  // the draft when accepted, else the token drawn in its place
};

struct SamplerOptions {
  float temperature = 0.0f;         // >= 0; 0 → greedy
  int32_t top_k = 0;                // >= 0; 0 → off
  float top_p = 1.0f;               // (0, 1]; 1 → off
  float min_p = 0.0f;               // [0, 1]; 0 → off
  float repetition_penalty = 1.0f;  // > 0; 1 → off
  int32_t repeat_last_n = 64;       // >= -1; -1 → all of history, 0 → off
  float presence_penalty = 0.0f;    // [-2, 2]; 0 → off (OpenAI's; generated tokens only)
  float frequency_penalty = 0.0f;   // [-2, 2]; 0 → off (OpenAI's; generated tokens only)
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Throws kvshare::Error naming the option, the allowed range and the value,
  // e.g. "top_p must be in (0, 1], got 1.5".
  explicit Sampler(const SamplerOptions& options);

  // logits: [vocab] scores of the next token (finite or -inf; not all -inf; no NaN
  // or +inf). history: ids generated or read so far, each in [0, vocab).
  // Returns an id in [0, vocab). Throws kvshare::Error on invalid input, leaving the
  // random state unchanged. Greedy calls never advance the random state; sampling
  // calls advance it by exactly one draw.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history = {});

  // Speculative sampling (Leviathan et al. 2023, "Fast Inference from
  // Transformers via Speculative Decoding", §2.3; Chen et al. 2023) of one
  // drafted token proposed with certainty (q = a point mass at `draft`), against
  // p = the distribution Sample draws from for these logits and history:
  // accepts with probability p(draft); otherwise returns a draw from
  // norm(max(0, p - q)), which is p without the draft, renormalized. The token
  // returned is thus distributed exactly as Sample's. Greedy (temperature 0):
  // accepted iff draft is Sample's argmax, which is returned either way, and
  // no random state is used. Sampling: one draw for the test, and one more
  // when rejected. Throws as Sample, and for a draft outside [0, vocab).
  DraftVerdict Verify(std::span<const float> logits, std::span<const int32_t> history, int32_t draft);

  const SamplerOptions& options() const { return options_; }
  // The first n ids of every `history` passed from now on are the prompt (or
  // earlier turns): the frequency and presence penalties count only the ids
  // after them (OpenAI: "the tokens generated so far"); the repetition
  // penalty's window covers both. Default 0: all of history counts.
  void set_prompt_length(std::size_t n) { prompt_length_ = n; }
  // Restarts the random sequence.
  void Reseed(uint64_t seed);

 private:
  // Uniform double in [0, 1) with 53 random bits.
  double NextUniform();
  // Steps 1-3 of the pipeline: validates, then returns the greedy id, or -1
  // with the kept candidates and their weights in candidates_.
  int32_t Filter(std::span<const float> logits, std::span<const int32_t> history);
  // Step 4: one draw from candidates_, leaving out id `exclude` (-1: none).
  int32_t Draw(int32_t exclude);

  // Step 1b on scratch_ (already a copy of the logits).
  void ApplyOpenAiPenalties(std::span<const int32_t> history);

  SamplerOptions options_;
  std::size_t prompt_length_ = 0;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;    // [vocab] penalized logits
  std::vector<int32_t> counted_;  // scratch: the generated ids, sorted
  struct Candidate {
    float logit;
    int32_t id;
    double weight;  // exp((logit - max) / temperature)
  };
  std::vector<Candidate> candidates_;
};

}  // namespace kvshare
