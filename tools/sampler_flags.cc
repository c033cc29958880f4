#include "sampler_flags.h"

#include <cmath>
#include <string>

namespace kvshare::cli {
namespace {

// A float range check with open or closed ends, e.g. "(0, 1]".
CLI::Validator FloatRange(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string desc = std::string(lo_open ? "(" : "[") + CLI::detail::to_string(lo) + ", " +
                           CLI::detail::to_string(hi) + (hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v)) return "value " + s + " is not a finite number";
        const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
        return ok ? std::string() : "value " + s + " is not in " + desc;
      },
      "FLOAT in " + desc);
}

}  // namespace

void AddSamplerFlags(CLI::App& cmd, SamplerFlags& f) {
  cmd.add_option("--temp", f.temperature, "Temperature (0 = greedy)")
      ->check(FloatRange(0, 100, false, false))
      ->capture_default_str();
  cmd.add_option("--top-k", f.top_k, "Keep the k most likely tokens (0 = off)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  cmd.add_option("--top-p", f.top_p,
                 "Keep the smallest set of most likely tokens whose probability reaches p (1 = off)")
      ->check(FloatRange(0, 1, true, false))
      ->capture_default_str();
  cmd.add_option("--min-p", f.min_p, "Drop tokens less likely than p times the most likely one (0 = off)")
      ->check(FloatRange(0, 1, false, false))
      ->capture_default_str();
  cmd.add_option("--repeat-penalty", f.repeat_penalty,
                 "Divide positive logits (multiply negative ones) of tokens seen in the last --repeat-last-n "
                 "tokens, prompt included, by this (1 = off)")
      ->check(FloatRange(0, 100, true, false))
      ->capture_default_str();
  cmd.add_option("--repeat-last-n", f.repeat_last_n, "Window of --repeat-penalty in tokens (0 = off, -1 = all)")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
  cmd.add_option("--presence-penalty", f.presence_penalty,
                 "Subtract this from the logits of tokens generated so far (OpenAI's presence_penalty; 0 = off)")
      ->check(FloatRange(-2, 2, false, false))
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", f.frequency_penalty,
                 "Subtract this times its count so far from each generated token's logit (OpenAI's "
                 "frequency_penalty; 0 = off)")
      ->check(FloatRange(-2, 2, false, false))
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "Random seed of the sampler")->capture_default_str();
}

SamplerOptions ToSamplerOptions(const SamplerFlags& f) {
  SamplerOptions o;
  o.temperature = f.temperature;
  o.top_k = f.top_k;
  o.top_p = f.top_p;
  o.min_p = f.min_p;
  o.repetition_penalty = f.repeat_penalty;
  o.repeat_last_n = f.repeat_last_n;
  o.presence_penalty = f.presence_penalty;
  o.frequency_penalty = f.frequency_penalty;
  o.seed = f.seed;
  return o;
}

}  // namespace kvshare::cli
