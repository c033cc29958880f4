"""Writes tests/fixtures/gemma4_assistant/: a tiny TRAINED Gemma 4 target (Gemma4ForCausalLM) and
its two Gemma 4 "assistant" drafters (Gemma4AssistantForCausalLM, model_type gemma4_assistant:
every layer KV-shared, attending to the target's cache), as GGUF, with HF transformers' draft
steps, HF's speculative generate() and llama.cpp's speculative runs on them. Run by hand, never
in CI; only its outputs (small GGUFs and JSON, plain data) are kept in the tree. The reference
environment (torch, transformers, gguf-py, llama.cpp built from the llama-cpp-python 0.3.36 sdist)
lives outside the repo.

Set-up in REF ($KVSHARE_REF_DIR, outside the repo; see tests/tools/gemma4_fixtures.py for the venv and the sdist):

  python3 -m venv $REF/venv
  $REF/venv/bin/pip install torch transformers==5.23.0 tokenizers safetensors \
      sentencepiece pyyaml tqdm requests gguf
  # llama.cpp tools from the sdist's vendored llama.cpp (~25 min on 2 cores)
  cmake -S $REF/llama_cpp_python-0.3.36/vendor/llama.cpp -B $REF/llama-build \
      -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  cmake --build $REF/llama-build -j2 --target llama-server llama-speculative-simple \
      llama-quantize llama-cli llama-completion llama-bench llama-speculative llama-lookup \
      llama-lookup-stats llama-perplexity
  $REF/venv/bin/python tests/tools/gemma4_assistant_fixtures.py \
      [--llama-cpp $REF/llama_cpp_python-0.3.36/vendor/llama.cpp] \
      [--llama-bin $REF/llama-build/bin] [--work $REF/gemma4_assistant_work] \
      [--stages models,hf,llamacpp,check]

Versions used for the committed fixtures: Python 3.11.7, torch 2.15.0 (+cu132 wheel, run on CPU,
2 threads, deterministic algorithms), transformers 5.23.0, tokenizers 0.23.3, safetensors 0.8.0,
numpy 2.4.6, llama.cpp ggml-org/llama.cpp@0c1e57098 (vendored in llama-cpp-python 0.3.36: its
convert_hf_to_gguf.py, llama-quantize, llama-server, llama-speculative-simple, built as above, and
its own gguf-py, used here to write the centroid tensors and to read the GGUFs back: PyPI gguf
0.19.0 lacks MODEL_TENSOR.MASKED_EMBD_*).

Two work-arounds for transformers 5.23.0 (both applied in-process, see gemma4_assistant_common.patch_hf()):
  * Gemma4TextConfig.kv_sharing_modes raises "The set of layer types producing a cache is
    different than the set of layer types using them" when num_kv_shared_layers ==
    num_hidden_layers, which Gemma4AssistantConfig.__post_init__ / validate_architecture
    require, so no Gemma4AssistantForCausalLM can be built or loaded. Patched to return
    ["reuse"] * num_hidden_layers in that case (what the assistant's modeling assumes: every
    layer reads shared_kv_states[layer_type]).
  * Gemma4TextModel._maybe_slice_kv_shared_inputs subscripts per_layer_inputs (None without PLE)
    when seq_len > 1, logits_to_keep is an int and no output is recorded. The target here has
    PLE (so it never hits this); the assistant training forward passes output_hidden_states=True.

Stages (all by default, in this order):
  models    trains the TARGET (CONFIG_TARGET) on CORPUS (tests/tools/gemma4_fixtures.py) +
            tests/fixtures/text/public_domain.txt; makes greedy continuations of the target
            from every 4th corpus offset; trains the plain ASSISTANT (CONFIG_ASSISTANT_TEXT,
            use_ordered_embeddings=False) on the target's own post-norm hidden states, store-layer
            K/V (HF's drafting mask) and greedy choices: a query at p feeds z[p] with h[p-1], step j
            predicts the target's argmax at p+j-1, the 4 chained steps unrolled (step j's h = step
            j-1's post_projection, as HF's candidate generator chains them); derives the ORDERED
            assistant (the same weights + token_ordering from a balanced k-means of the output
            embedding + centroids trained on the label's cluster, use_ordered_embeddings=True);
            save_pretrained()s all three with the fixture tokenizer
            (tests/fixtures/gemma4/tokenizer*.json) into WORK/<name>; converts them with llama.cpp's
            convert_hf_to_gguf.py (--outtype f32), the target also to Q8_0 (llama-quantize), and
            writes assistant_ordered.f32.gguf = the converted file + the two centroid tensors the
            converter drops (see CENTROID GGUF below).
  hf        target.hf.json, drafts.hf.json and speculative.hf.json (FORMATS), every number computed
            twice (models reloaded) and required to be bit-identical.
  llamacpp  llamacpp.json: llama-server (target f32 / Q8_0, alone and with assistant_plain; with
            assistant_ordered.f32.gguf, which llama.cpp fails to load) and llama-speculative-simple
            (target f32 + assistant_plain) on the GGUFs; every tool gets --no-repack (this host's
            AMX Q8_0 matmul segfaults on the Q8_0 target otherwise).
  check     reads every GGUF back with llama.cpp's gguf-py and prints sha256, keys and tensors.

Code: this file is the entry point (the command line, main()); the stages live in
gemma4_assistant_models.py (models), gemma4_assistant_hf.py (hf) and gemma4_assistant_llamacpp.py
(llamacpp, check), which share gemma4_assistant_common.py (configuration, HF set-up, tokenizer,
target features, masks, the reference drafter) and gemma4_fixtures.py (corpus, JSON style, llama.cpp
tools).

Semantics (details and sources in the notes; "p" is the position of the token fed to the drafter):
  * draft step input: concat(target_embed[token] * sqrt(target_hidden), h) (token first),
    h = the target's hidden state after its final norm at position p-1 for the first step, the
    previous step's post_projection output for the later steps; all steps of a round use the
    same position p and the same (target) KV: positions < p.
  * HF's visible keys for a draft query at p (hf window): full layers every cached position
    (< p); sliding layers the last sliding_window + 1 cached positions (p-W-1 .. p-1), from
    HF's bidirectional sliding-window mask (|q-kv| <= W) flipped along the kv axis.
    llama.cpp (llamacpp window): full the same; sliding p-W+1 .. p-1 (W-1 keys; its SWA rule
    p - p_kv < W with position p itself not in the cache).
  * HF's generate() after a partly rejected round: the target's KV handed to the drafter
    is the verification forward's, cut to len(input_ids) on the kv axis: the full layers then
    also hold position p (a rejected draft's K/V) and the sliding layers the last W+1 of the
    verification window, rejected drafts included. The "clean" simulations below instead
    recompute the target on the accepted tokens only.

CENTROID GGUF: llama.cpp's converter (Gemma4AssistantModel.filter_tensors) drops every
"masked_embedding" tensor. assistant_ordered.f32.gguf adds them under llama.cpp's own names
(gguf-py MODEL_TENSOR.MASKED_EMBD_CENTROIDS / MASKED_EMBD_ORDERING):
  masked_embd_centroids.weight  F32, GGUF shape [hidden, num_centroids] (HF [num_centroids, hidden])
  masked_embd_ordering          I32, GGUF shape [vocab] (HF int64 buffer token_ordering, same values)
llama.cpp defines no metadata keys for them; these are added:
  gemma4-assistant.use_ordered_embeddings  bool
  gemma4-assistant.num_centroids           uint32
  gemma4-assistant.centroid_intermediate_top_k  uint32
(everything else in that file is byte-for-byte what the converter wrote for the same weights:
tensors and keys copied in order, then the additions).

FORMATS (floats %.7g; one row per line):
  target.hf.json
    source, versions, model, gguf, seed, notes, hf_config (config.json as saved), training
    {steps, batch, seq_len, lr, final_loss, train_tokens}, layer_types, num_kv_shared_layers,
    kv_sharing_modes, kv_source_layer, sliding_window, steps,
    prompts: [{name, text, ids (HF tokenizer, starts with <bos> = 2), tokens (32 greedy tokens, full
      recompute per step, use_cache=False), min_top2_margin,
      top: [steps][8] of [token, logit] best first (logits after the final softcap),
      last_prompt_logits: [vocab] logits at the last prompt position (predicting tokens[0]),
      hidden_last_prompt: {first8, l2}: the target's post-final-norm hidden state there}]
  drafts.hf.json
    source, versions, assistants {name: {gguf, hf_config}}, training {assistant_plain: {steps,
    batch, lr, warmup, final_loss}, assistant_ordered: {centroid training: steps, lr, final_loss,
    clusters, per_cluster}}, k (= 4), sliding_window, notes,
    cases: one per (prompt, L) for each assistant variant / window:
      {case, assistant ("assistant_plain" | "assistant_ordered"), window ("hf" | "llamacpp"),
       source ("hf_candidate_generator": HF's SinglePositionMultiTokenCandidateGenerator.get_candidates
               itself | "reference": this script's independent re-implementation, checked equal
               to HF's on the "hf" window),
       seq (the L ids in the target's cache, positions 0..L-1), L,
       target_next (the target's greedy token after seq: the first token fed, at position L),
       hidden_in {first8, l2}: target post-norm hidden at position L-1,
       visible {full: [first, last] position, sliding: [first, last]},
       ref_vs_hf_max_abs_diff (reference vs HF logits / post_projection over the 4 steps; "hf" only),
       hf_kv_len {layer type: K/V rows HF handed the drafter} ("hf" only),
       steps: [k] of {step, token_in, position, argmax, post_projection_first8, post_projection_l2,
              logits: [vocab] (assistant logits, no softcap; window "hf" only),
              top: [8] of [token, logit] best first (window "llamacpp" only, in place of logits),
              ordered only: centroid_logits [num_centroids], centroid_top_k [top_k ids, best first],
              mask_value (the fill of non-selected tokens: min selected logit - 1),
              plain_argmax (argmax of the plain tied head on the same hidden)}]}
  speculative.hf.json
    source, versions, k, steps, totals {run name less the prompt: {drafted, accepted, acceptance,
    all_equal_greedy}} over the 4 prompts, notes,
    prompts: [{prompt, ids, greedy (target.hf.json tokens), runs: [...]}], runs:
      {name, how, tokens (32), equals_greedy, rounds: [{pos (position of the token fed), drafted,
       accepted, drafts}], drafted, accepted, acceptance}
      hf_generate_<assistant>: target.generate(ids, assistant_model=..., do_sample=False,
        max_new_tokens=32), assistant generation_config.num_assistant_tokens = 4 (constant);
        rounds from HF's own loop (get_candidates / n_matches), plus the KV lengths HF handed
        the drafter (kv_full_len, kv_sliding_len) per round;
      clean_<first>_<window>_<assistant>: this script's loop with a full target recompute each
        round (the drafter sees exactly the accepted positions < p); first = "hf" (the first
        round drafts after the prefill's token, as HF and llama-server) or "lcpp" (the first round
        drafts from the last prompt token with h at P-2, as llama-speculative-simple); window as
        above.
  llamacpp.json
    source, version (llama-cli --version), k, steps, notes, runs: one per (tool, GGUFs, prompt):
      {name, tool ("llama-server" | "llama-speculative-simple"), prompt, command (GGUF paths shortened),
       server: request (the /completion body less the prompt ids), tokens_evaluated, tokens (32),
         equals_hf_greedy (tokens == target.hf.json's);
       speculative-simple: rc, generated_text (stdout after the prompt), hf_greedy_text (HF's 32
         tokens decoded, trailing U+FFFD dropped), text_starts_with_hf_greedy_text, n_predict (it stops
         once more than 32 tokens are out, so it can run past 32);
       with an assistant: draft_n, draft_n_accepted, rounds [{drafted, accepted(, last_token)}] (server:
         LLAMA_TRACE=1 log lines "accepted a/d draft tokens"; speculative-simple: its -lv 5 log),
         rounds_vs_hf_json {run name in speculative.hf.json: "equal" | "prefix" | "differs"} comparing
         the accepted-count sequence with the HF / clean runs of the same prompt;
       error (last lines of the tool's log) where the tool failed}
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemma4_assistant_common import DEFAULT_LLAMA_BIN, DEFAULT_LLAMA_CPP, DEFAULT_WORK  # noqa: E402
from gemma4_assistant_hf import stage_hf  # noqa: E402
from gemma4_assistant_llamacpp import check_ggufs, stage_llamacpp  # noqa: E402
from gemma4_assistant_models import stage_models  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, default=Path(os.environ.get("LLAMA_CPP_DIR", DEFAULT_LLAMA_CPP)))
    ap.add_argument("--llama-bin", type=Path, default=DEFAULT_LLAMA_BIN)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--stages", default="models,hf,llamacpp,check")
    a = ap.parse_args()
    stages = a.stages.split(",")
    if "models" in stages:
        stage_models(a.work, a.llama_cpp, a.llama_bin)
    if "hf" in stages:
        stage_hf(a.work)
    if "llamacpp" in stages:
        stage_llamacpp(a.work, a.llama_bin)
    if "check" in stages:
        check_ggufs(a.llama_cpp)


if __name__ == "__main__":
    main()
