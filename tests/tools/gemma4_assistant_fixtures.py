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

Two work-arounds for transformers 5.23.0 (both applied in-process, see patch_hf()):
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
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemma4_fixtures import (CORPUS, dump_lines, fmt_row, quantize_with_binary, top_entry,  # noqa: E402
                             vendored_gguf)  # (same corpus, JSON style and llama.cpp tools)

OUT = ROOT / "tests" / "fixtures" / "gemma4_assistant"
TOK_DIR = ROOT / "tests" / "fixtures" / "gemma4"
TEXT = ROOT / "tests" / "fixtures" / "text" / "public_domain.txt"
# Where the local references live (never part of the repository): $KVSHARE_REF_DIR.
REF = Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref"))
DEFAULT_LLAMA_CPP = REF / "llama_cpp_python-0.3.36/vendor/llama.cpp"
DEFAULT_LLAMA_BIN = REF / "llama-build/bin"
DEFAULT_WORK = REF / "gemma4_assistant_work"

VOCAB = 512
BOS = 2
STEPS = 32
TOP_K = 8
K_DRAFT = 4
THREADS = 2
S, F = "sliding_attention", "full_attention"

# The target: S S S F S F with 2 KV-shared layers, so that HF's rule (shared layer reads the last
# non-shared layer of its type: 4 -> 2, 5 -> 3) and llama.cpp's (il >= L-N reads L-N-2 if sliding
# else L-N-1) agree, and HF's "store" layers (2 sliding, 3 full) are the ones llama.cpp's assistant
# reaches through the target's layers L-2 / L-1. PLE kept small (16 per layer).
CONFIG_TARGET = dict(
    vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=128, intermediate_size=128,
    num_hidden_layers=6, layer_types=[S, S, S, F, S, F], num_attention_heads=2, num_key_value_heads=1,
    head_dim=32, global_head_dim=64, num_kv_shared_layers=2, hidden_size_per_layer_input=16,
    sliding_window=16, max_position_embeddings=512, rms_norm_eps=1e-6, final_logit_softcapping=30.0,
    pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    hidden_activation="gelu_pytorch_tanh", architectures=["Gemma4ForCausalLM"])
# The assistant's text_config: two layers, one sliding (reads the target's sliding store layer) and
# one full; heads / KV heads / head dims must match the target's K/V. final_logit_softcapping is set
# as in real checkpoints' text configs: neither HF's assistant nor llama.cpp's graph applies it.
CONFIG_ASSISTANT_TEXT = dict(
    vocab_size=VOCAB, vocab_size_per_layer_input=0, hidden_size=64, intermediate_size=128,
    num_hidden_layers=2, layer_types=[S, F], num_attention_heads=2, num_key_value_heads=1,
    head_dim=32, global_head_dim=64, hidden_size_per_layer_input=0, sliding_window=16,
    max_position_embeddings=512, rms_norm_eps=1e-6, final_logit_softcapping=30.0,
    pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    hidden_activation="gelu_pytorch_tanh")
NUM_CENTROIDS = 8
CENTROID_TOP_K = 2

SEED_TARGET = 1
SEED_DATA = 2
SEED_ASSIST = 3
SEED_CENTROIDS = 4
TRAIN_TARGET = dict(steps=1000, batch=16, seq_len=64, lr=4e-3, warmup=30)
TRAIN_ASSIST = dict(steps=250, batch=16, lr=4e-3, warmup=20)
TRAIN_CENTROIDS = dict(steps=300, lr=2e-2)
DATA = dict(stride=4, prompt_len=16, new_tokens=48)

PROMPTS = [
    ("gettysburg", "Four score and seven years ago our fathers brought forth"),
    ("fox", "The quick brown fox jumps over the lazy dog. The dog"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("novel", "The cache of the model looks back at the weather in"),
]
# draft cases: (prompt name, L); the seq is prompt ids + the target's greedy tokens, cut to L
DRAFT_CASES = [("fox", 8), ("fox", 16), ("gettysburg", 17), ("gettysburg", 30), ("code", 45), ("novel", 40)]

TARGET = "target"
ASSISTANTS = ["assistant_plain", "assistant_ordered"]


# ----------------------------------------------------------------------------------------------
# HF set-up
# ----------------------------------------------------------------------------------------------
def patch_hf():
    """See the docstring: transformers 5.23.0 cannot build an assistant without this."""
    from transformers import Gemma4TextConfig

    orig = Gemma4TextConfig.kv_sharing_modes
    if getattr(orig, "_kvshare_patched", False):
        return

    def modes(self):
        if self.num_hidden_layers > 0 and self.num_kv_shared_layers == self.num_hidden_layers:
            return ["reuse"] * self.num_hidden_layers
        return orig.fget(self)

    modes._kvshare_patched = True
    prop = property(modes)
    prop.fget._kvshare_patched = True
    Gemma4TextConfig.kv_sharing_modes = prop


def torch_setup():
    import torch

    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    return torch


def versions():
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__}


def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOK_DIR / "tokenizer.json"))


def corpus_ids():
    text = CORPUS + "\n" + TEXT.read_text()
    return tokenizer().encode(text, add_special_tokens=False).ids


def prompt_ids(text):
    ids = tokenizer().encode(text).ids
    assert ids[0] == BOS
    return ids


def target_config():
    from transformers import Gemma4TextConfig

    return Gemma4TextConfig(**CONFIG_TARGET)


def assistant_config(ordered):
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig

    patch_hf()
    text = Gemma4TextConfig(**CONFIG_ASSISTANT_TEXT)
    cfg = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=CONFIG_TARGET["hidden_size"],
                                use_ordered_embeddings=ordered, num_centroids=NUM_CENTROIDS,
                                centroid_intermediate_top_k=CENTROID_TOP_K, tie_word_embeddings=True,
                                architectures=["Gemma4AssistantForCausalLM"])
    cfg.validate_architecture()
    return cfg


def load_target(work: Path, attn="eager"):
    import torch
    from transformers import Gemma4ForCausalLM

    m = Gemma4ForCausalLM.from_pretrained(work / TARGET, dtype=torch.float32, attn_implementation=attn)
    m.eval()
    return m


def load_assistant(work: Path, name, attn="eager"):
    import torch
    from transformers import Gemma4AssistantForCausalLM

    patch_hf()
    m = Gemma4AssistantForCausalLM.from_pretrained(work / name, dtype=torch.float32, attn_implementation=attn)
    m.eval()
    m.generation_config.num_assistant_tokens = K_DRAFT
    m.generation_config.num_assistant_tokens_schedule = "constant"
    return m


def save_with_tokenizer(model, d: Path):
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOK_DIR / f, d / f)


def lr_at(step, total, base, warmup):
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))


# ----------------------------------------------------------------------------------------------
# Target training
# ----------------------------------------------------------------------------------------------
def train_target(work: Path):
    torch = torch_setup()
    from transformers import Gemma4ForCausalLM

    cfg = target_config()
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(SEED_TARGET)
    model = Gemma4ForCausalLM(cfg).to(torch.float32)
    model.train()
    ids = np.array(corpus_ids(), dtype=np.int64)
    tr = TRAIN_TARGET
    opt = torch.optim.AdamW(model.parameters(), lr=tr["lr"], betas=(0.9, 0.98), weight_decay=0.0)
    rng = np.random.default_rng(SEED_TARGET)
    T, B = tr["seq_len"], tr["batch"]
    t0 = time.time()
    losses = []
    for step in range(tr["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tr["steps"], tr["lr"], tr["warmup"])
        starts = rng.integers(0, len(ids) - T, size=B)
        # <bos> + a window from anywhere in the corpus, predicting the window
        x = np.stack([np.concatenate([[BOS], ids[s:s + T - 1]]) for s in starts])
        y = np.stack([ids[s:s + T] for s in starts])
        out = model(input_ids=torch.from_numpy(x), use_cache=False)
        loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), torch.from_numpy(y).reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == tr["steps"] - 1:
            print(f"  target step {step}: loss {np.mean(losses[-50:]):.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    model.config._attn_implementation = "eager"
    save_with_tokenizer(model, work / TARGET)
    info = dict(tr, final_loss=round(float(np.mean(losses[-50:])), 4), train_tokens=int(len(ids)))
    (work / "target_training.json").write_text(json.dumps(info))
    print(f"target: {sum(p.numel() for p in model.parameters())} parameters, {info}, {time.time() - t0:.0f} s")


# ----------------------------------------------------------------------------------------------
# Target features (hidden states after the final norm, shared K/V of the store layers)
# ----------------------------------------------------------------------------------------------
def target_features(target, seqs):
    """seqs [B, T] int64 -> logits [B,T,V], hidden [B,T,H] (after the final norm),
    kv {layer_type: (K [B,nkv,T,hd], V)} from the target's 'store' layers (use_cache=False: full length)."""
    import torch

    with torch.no_grad():
        out = target(input_ids=torch.as_tensor(seqs), use_cache=False, output_hidden_states=True,
                     return_shared_kv_states=True)
    kv = {k: (v[0].detach(), v[1].detach()) for k, v in out.shared_kv_states.items()}
    return out.logits.detach(), out.hidden_states[-1].detach(), kv


def greedy_data(target):
    """The target's greedy continuations (HF generate, KV cache, batches of 64, DATA['new_tokens'] tokens)
    of <bos> + DATA['prompt_len']-1 corpus tokens, from every DATA['stride']-th corpus offset."""
    import torch

    ids = np.array(corpus_ids(), dtype=np.int64)
    P = DATA["prompt_len"]
    starts = np.arange(0, len(ids) - P, DATA["stride"])
    seqs = np.stack([np.concatenate([[BOS], ids[s:s + P - 1]]) for s in starts])
    out = []
    for b in range(0, len(seqs), 64):
        x = torch.from_numpy(seqs[b:b + 64])
        with torch.no_grad():
            y = target.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                                max_new_tokens=DATA["new_tokens"], min_new_tokens=DATA["new_tokens"], pad_token_id=0)
        out.append(y.numpy())
    return np.concatenate(out)


# ----------------------------------------------------------------------------------------------
# Masks for the drafter (HF generation-time semantics) and the independent reference
# ----------------------------------------------------------------------------------------------
def visible(p, T, kind, window, W):
    """bool [T]: which cached positions 0..T-1 a draft query at position p sees."""
    pos = np.arange(T)
    vis = pos < p
    if kind == S:
        lo = p - W - 1 if window == "hf" else p - W + 1
        vis &= pos >= lo
    return vis


def additive_mask(vis):
    """[.., Q, K] bool -> float additive mask (0 visible, -inf hidden), as eager attention adds."""
    import torch

    m = torch.zeros(vis.shape, dtype=torch.float32)
    m[~torch.as_tensor(vis)] = float("-inf")
    return m


class Reference:
    """Independent re-implementation of one Gemma4AssistantForCausalLM draft step (fp32 torch), from
    the state dicts of the target (embedding) and the assistant. Used to check the notes, to run the
    llama.cpp window, and for the clean speculative loops."""

    def __init__(self, target, assistant):
        import torch

        self.torch = torch
        tsd = {k: v.detach().float() for k, v in target.state_dict().items()}
        asd = {k: v.detach() for k, v in assistant.state_dict().items()}
        tc, ac = target.config, assistant.config
        self.t_embed = tsd["model.embed_tokens.weight"]
        self.t_scale = torch.tensor(float(tc.hidden_size) ** 0.5, dtype=torch.float32)
        self.a = {k: (v.float() if v.is_floating_point() else v) for k, v in asd.items()}
        self.tc = ac.text_config
        self.eps = self.tc.rms_norm_eps
        self.ordered = ac.use_ordered_embeddings
        self.nc, self.topk = ac.num_centroids, ac.centroid_intermediate_top_k
        self.W = self.tc.sliding_window
        self.inv = {}
        for lt in (S, F):
            layer = self.tc.layer_types.index(lt)
            hd = self.head_dim(layer)
            rp = self.tc.rope_parameters[lt]
            if rp["rope_type"] == "proportional":
                rot = int(rp["partial_rotary_factor"] * hd // 2)
                inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, 2 * rot, 2, dtype=torch.int64).float() / hd))
                inv = torch.cat([inv, torch.zeros(hd // 2 - rot)])
            else:
                inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
            self.inv[lt] = inv

    def head_dim(self, layer):
        return self.tc.per_layer_config[layer].head_dim

    def rms(self, x, w=None):
        torch = self.torch
        y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        return y * w if w is not None else y

    def rope(self, x, pos, lt):
        torch = self.torch
        freqs = float(pos) * self.inv[lt]
        emb = torch.cat([freqs, freqs])
        cos, sin = emb.cos(), emb.sin()
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
        return x * cos + rot * sin

    def step(self, token, h_prev, pos, kv, vis):
        """token id, h_prev [Hb], pos int, kv {lt: (K [nkv,T,hd], V)}, vis {lt: bool [T]} ->
        dict(logits [V], proj [Hb], hidden [H] (after final norm), extra for the ordered head)."""
        torch, a = self.torch, self.a
        e = self.t_embed[token] * self.t_scale
        x = a["pre_projection.weight"] @ torch.cat([e, h_prev])
        nh = self.tc.num_attention_heads
        for layer, lt in enumerate(self.tc.layer_types):
            p = f"model.layers.{layer}."
            hd = self.head_dim(layer)
            r = x
            n = self.rms(x, a[p + "input_layernorm.weight"])
            q = (a[p + "self_attn.q_proj.weight"] @ n).view(nh, hd)
            q = self.rms(q, a[p + "self_attn.q_norm.weight"])
            q = self.rope(q, pos, lt)
            K, V = kv[lt]
            groups = nh // K.shape[0]
            K = K.repeat_interleave(groups, 0)
            V = V.repeat_interleave(groups, 0)
            sc = torch.einsum("hd,htd->ht", q, K) * 1.0
            sc = sc.masked_fill(~torch.as_tensor(vis[lt])[None, :], float("-inf"))
            att = torch.softmax(sc, dim=-1)
            o = torch.einsum("ht,htd->hd", att, V).reshape(-1)
            o = a[p + "self_attn.o_proj.weight"] @ o
            x = r + self.rms(o, a[p + "post_attention_layernorm.weight"])
            r = x
            n = self.rms(x, a[p + "pre_feedforward_layernorm.weight"])
            g = torch.nn.functional.gelu(a[p + "mlp.gate_proj.weight"] @ n, approximate="tanh")
            m = a[p + "mlp.down_proj.weight"] @ (g * (a[p + "mlp.up_proj.weight"] @ n))
            x = r + self.rms(m, a[p + "post_feedforward_layernorm.weight"])
            x = x * a[p + "layer_scalar"]
        hn = self.rms(x, a["model.norm.weight"])
        proj = a["post_projection.weight"] @ hn
        E = a["lm_head.weight"] if "lm_head.weight" in a else a["model.embed_tokens.weight"]
        plain = E @ hn
        res = {"proj": proj, "hidden": hn, "plain": plain, "logits": plain}
        if self.ordered:
            cl = a["masked_embedding.centroids.weight"] @ hn
            _, top = torch.topk(cl, k=self.topk)
            per = VOCAB // self.nc
            toks = a["masked_embedding.token_ordering"].long().view(self.nc, per)[top].reshape(-1)
            sel = E[toks] @ hn
            fill = float(sel.min()) - 1.0
            out = torch.full((VOCAB,), fill, dtype=torch.float32)
            out[toks] = sel
            res.update(logits=out, centroid_logits=cl, top=top, fill=fill)
        return res

    def draft(self, token, h_prev, pos, kv, vis, k=K_DRAFT):
        steps = []
        for _ in range(k):
            r = self.step(token, h_prev, pos, kv, vis)
            r["token_in"], r["position"] = int(token), int(pos)
            token = int(self.torch.argmax(r["logits"]))
            r["argmax"] = token
            h_prev = r["proj"]
            steps.append(r)
        return steps


# ----------------------------------------------------------------------------------------------
# Assistant training
# ----------------------------------------------------------------------------------------------
def build_assistant(ordered, seed):
    torch = torch_setup()
    from transformers import Gemma4AssistantForCausalLM

    torch.manual_seed(seed)
    m = Gemma4AssistantForCausalLM(assistant_config(ordered)).to(torch.float32)
    return m


def assistant_batch_forward(assistant, target_embed, target_scale, tokens, h_prev, pos, kv, masks):
    """HF modules, many draft queries at once: tokens [B,Q], h_prev [B,Q,Hb], pos [B,Q],
    kv {lt: (K [B,nkv,T,hd], V)}, masks {lt: additive [B,1,Q,T]} -> (logits, proj, hidden)."""
    import torch

    e = target_embed[tokens] * target_scale
    x = assistant.pre_projection(torch.cat([e, h_prev], dim=-1))
    out = assistant.model(inputs_embeds=x, attention_mask=masks, position_ids=pos, shared_kv_states=kv,
                          use_cache=False, output_hidden_states=True)
    hn = out.last_hidden_state
    return assistant.lm_head(hn), assistant.post_projection(hn), hn


def assistant_training_data(target, seqs):
    """Per sequence z: the target's hidden states / K/V / greedy choices g[q] = argmax logits at q.
    A query at position p (1 <= p <= T-K) feeds z[p] with h[p-1]; step j's label is g[p+j-1] and its
    token input (j > 1) z[p+j-1], valid while z[p+i] == g[p+i-1] for 1 <= i < j (the chain the target
    would have accepted)."""
    import torch

    logits, hidden, kv = [], [], {S: ([], []), F: ([], [])}
    for b in range(0, len(seqs), 64):
        lg, hd, k = target_features(target, seqs[b:b + 64])
        logits.append(lg.argmax(-1))
        hidden.append(hd)
        for lt in (S, F):
            kv[lt][0].append(k[lt][0])
            kv[lt][1].append(k[lt][1])
    g = torch.cat(logits)
    kv = {lt: (torch.cat(kv[lt][0]), torch.cat(kv[lt][1])) for lt in (S, F)}
    T = seqs.shape[1]
    ps = np.arange(1, T - K_DRAFT + 1)
    z = torch.as_tensor(seqs)
    labels, valid = [], []
    ok = torch.ones(len(seqs), len(ps), dtype=torch.bool)
    for j in range(1, K_DRAFT + 1):
        if j > 1:
            ok = ok & (z[:, ps + j - 1] == g[:, ps + j - 2])
        labels.append(g[:, ps + j - 1])
        valid.append(ok.clone())
    W = CONFIG_TARGET["sliding_window"]
    vis = {lt: np.stack([visible(p, T, lt, "hf", W) for p in ps]) for lt in (S, F)}
    masks = {lt: additive_mask(vis[lt])[None, None] for lt in (S, F)}  # [1,1,Q,T]
    return dict(seqs=z, hidden=torch.cat(hidden), kv=kv, ps=torch.as_tensor(ps), masks=masks,
                labels=torch.stack(labels), valid=torch.stack(valid))


def unrolled_loss(assistant, tgt_embed, tgt_scale, data, idx, k=K_DRAFT, extra=None):
    """Mean over the valid (sequence, position, step) entries of step j's loss, the K steps unrolled
    (step j's h input is step j-1's post_projection output; gradients flow through it)."""
    import torch

    seqs, hidden, ps = data["seqs"][idx], data["hidden"][idx], data["ps"]
    B, Q = len(idx), len(ps)
    kv = {lt: (data["kv"][lt][0][idx], data["kv"][lt][1][idx]) for lt in (S, F)}
    masks = {lt: data["masks"][lt].expand(B, 1, Q, -1) for lt in (S, F)}
    pos = ps[None].expand(B, Q)
    tok = seqs[:, ps]
    h = hidden[:, ps - 1]
    total, count = 0.0, 0
    for j in range(1, k + 1):
        logits, proj, hn = assistant_batch_forward(assistant, tgt_embed, tgt_scale, tok, h, pos, kv, masks)
        label, valid = data["labels"][j - 1][idx], data["valid"][j - 1][idx]
        if extra is None:
            per = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), label.reshape(-1), reduction="none")
        else:
            per = extra(hn, label)
        total = total + (per * valid.reshape(-1)).sum()
        count += int(valid.sum())
        if j < k:
            tok, h = seqs[:, ps + j], proj  # teacher forcing on the token
    return total / max(count, 1)


def train_assistant(work: Path, target, data):
    torch = torch_setup()
    assistant = build_assistant(False, SEED_ASSIST)
    assistant.config._attn_implementation = "eager"
    assistant.train()
    tr = TRAIN_ASSIST
    tgt_embed = target.model.embed_tokens.weight.detach()
    tgt_scale = torch.tensor(float(target.config.hidden_size) ** 0.5)
    params = [p for n, p in assistant.named_parameters()]
    opt = torch.optim.AdamW(params, lr=tr["lr"], betas=(0.9, 0.98), weight_decay=0.0)
    rng = np.random.default_rng(SEED_ASSIST)
    n = data["seqs"].shape[0]
    t0, losses = time.time(), []
    for step in range(tr["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tr["steps"], tr["lr"], tr["warmup"])
        idx = torch.as_tensor(rng.choice(n, size=tr["batch"], replace=False))
        loss = unrolled_loss(assistant, tgt_embed, tgt_scale, data, idx)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == tr["steps"] - 1:
            print(f"  assistant step {step}: loss {np.mean(losses[-50:]):.3f} ({time.time() - t0:.0f} s)", flush=True)
    assistant.eval()
    return assistant, dict(tr, final_loss=round(float(np.mean(losses[-50:])), 4))


def balanced_clusters(E, nc, seed):
    """Token ordering for the centroid head: spherical k-means (nc centres, numpy, seeded) on the
    assistant's output embedding rows, then a balanced assignment (every cluster VOCAB/nc tokens:
    tokens taken in order of their best score, each to its best centre with room). Returns the
    ordering (cluster c = ordering[c*per:(c+1)*per], ascending ids) and the centres."""
    X = E / np.linalg.norm(E, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    C = X[rng.choice(len(X), size=nc, replace=False)]
    for _ in range(25):
        a = np.argmax(X @ C.T, axis=1)
        for c in range(nc):
            if np.any(a == c):
                v = X[a == c].sum(0)
                C[c] = v / np.linalg.norm(v)
    per = len(X) // nc
    score = X @ C.T
    order = np.argsort(-score.max(1), kind="stable")
    room = [per] * nc
    assign = np.full(len(X), -1)
    for t in order:
        for c in np.argsort(-score[t], kind="stable"):
            if room[c] > 0:
                assign[t] = c
                room[c] -= 1
                break
    ordering = np.concatenate([np.sort(np.nonzero(assign == c)[0]) for c in range(nc)])
    assert sorted(ordering.tolist()) == list(range(len(X)))
    return ordering


def make_ordered(work: Path, target, plain, data):
    """The ordered assistant: the plain one's weights, token_ordering from balanced_clusters, and the
    centroids trained (everything else frozen) to put the target's next token's cluster on top."""
    torch = torch_setup()
    ordered = build_assistant(True, SEED_CENTROIDS)
    sd = plain.state_dict()
    missing, unexpected = ordered.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"masked_embedding.centroids.weight", "masked_embedding.token_ordering"}, \
        (missing, unexpected)
    E = ordered.lm_head.weight.detach().numpy()
    ordering = balanced_clusters(E, NUM_CENTROIDS, SEED_CENTROIDS)
    with torch.no_grad():
        ordered.masked_embedding.token_ordering.copy_(torch.as_tensor(ordering, dtype=torch.long))
    cluster_of = torch.empty(VOCAB, dtype=torch.long)
    per = VOCAB // NUM_CENTROIDS
    for c in range(NUM_CENTROIDS):
        cluster_of[torch.as_tensor(ordering[c * per:(c + 1) * per])] = c
    ordered.config._attn_implementation = "eager"
    ordered.eval()
    for p in ordered.parameters():
        p.requires_grad_(False)
    cen = ordered.masked_embedding.centroids.weight
    cen.requires_grad_(True)
    opt = torch.optim.Adam([cen], lr=TRAIN_CENTROIDS["lr"])
    tgt_embed = target.model.embed_tokens.weight.detach()
    tgt_scale = torch.tensor(float(target.config.hidden_size) ** 0.5)
    ce = lambda hn, label: torch.nn.functional.cross_entropy(
        ordered.masked_embedding.centroids(hn).reshape(-1, NUM_CENTROIDS), cluster_of[label].reshape(-1),
        reduction="none")
    rng = np.random.default_rng(SEED_CENTROIDS)
    n = data["seqs"].shape[0]
    t0, losses = time.time(), []
    for step in range(TRAIN_CENTROIDS["steps"]):
        idx = torch.as_tensor(rng.choice(n, size=16, replace=False))
        loss = unrolled_loss(ordered, tgt_embed, tgt_scale, data, idx, extra=ce)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == TRAIN_CENTROIDS["steps"] - 1:
            print(f"  centroids step {step}: loss {np.mean(losses[-50:]):.3f} ({time.time() - t0:.0f} s)", flush=True)
    cen.requires_grad_(False)
    return ordered, dict(TRAIN_CENTROIDS, final_loss=round(float(np.mean(losses[-50:])), 4),
                         clusters=NUM_CENTROIDS, per_cluster=per)


# ----------------------------------------------------------------------------------------------
# Conversion
# ----------------------------------------------------------------------------------------------
def convert(model_dir: Path, outtype: str, out: Path, llama_cpp: Path):
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(model_dir),
           "--outtype", outtype, "--outfile", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"convert failed: {' '.join(cmd)}")
    skipped = sorted(set(re.findall(r"Skipping get tensor '([^']+)'", r.stdout + r.stderr)))
    print(f"  {out.name}: {out.stat().st_size} bytes" + (f" (converter skipped {skipped})" if skipped else ""))
    return r.stdout + r.stderr


def add_centroids(src: Path, dst: Path, model_dir: Path, llama_cpp: Path):
    """Copy src GGUF (keys and tensors in order) and append the centroid tensors + keys."""
    from safetensors.numpy import load_file

    gguf = vendored_gguf(llama_cpp)

    st = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        st.update(load_file(str(f)))
    cfg = json.loads((model_dir / "config.json").read_text())
    cent = st["masked_embedding.centroids.weight"].astype(np.float32)  # [nc, hidden]
    order = st["masked_embedding.token_ordering"].astype(np.int32)  # [vocab]
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch=arch, endianess=r.endianess)
    align = r.fields.get("general.alignment")
    if align is not None:
        w.data_alignment = int(align.contents())
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    w.add_bool(f"{arch}.use_ordered_embeddings", bool(cfg["use_ordered_embeddings"]))
    w.add_uint32(f"{arch}.num_centroids", int(cfg["num_centroids"]))
    w.add_uint32(f"{arch}.centroid_intermediate_top_k", int(cfg["centroid_intermediate_top_k"]))
    for t in r.tensors:
        assert t.tensor_type in (gguf.GGMLQuantizationType.F32,), (t.name, t.tensor_type)
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    name_c = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.MASKED_EMBD_CENTROIDS] + ".weight"
    name_o = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.MASKED_EMBD_ORDERING]
    w.add_tensor(name_c, cent)
    w.add_tensor(name_o, order)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"  {dst.name}: {dst.stat().st_size} bytes (+ {name_c} {list(cent.shape[::-1])} F32, "
          f"{name_o} [{order.shape[0]}] I32)")


def stage_models(work: Path, llama_cpp: Path, llama_bin: Path):
    torch_setup()
    patch_hf()
    work.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    train_target(work)
    target = load_target(work, attn="eager")
    t0 = time.time()
    seqs = greedy_data(target)
    np.save(work / "greedy_data.npy", seqs)
    print(f"greedy data: {seqs.shape} in {time.time() - t0:.0f} s")
    data = assistant_training_data(target, seqs)
    plain, info_plain = train_assistant(work, target, data)
    save_with_tokenizer(plain, work / "assistant_plain")
    ordered, info_ord = make_ordered(work, target, plain, data)
    save_with_tokenizer(ordered, work / "assistant_ordered")
    (work / "assistant_training.json").write_text(json.dumps({"assistant_plain": info_plain,
                                                              "assistant_ordered": info_ord}))
    convert(work / TARGET, "f32", OUT / "target.f32.gguf", llama_cpp)
    quantize_with_binary(llama_bin, OUT / "target.f32.gguf", OUT / "target.q8_0.gguf", "Q8_0")
    convert(work / "assistant_plain", "f32", OUT / "assistant_plain.f32.gguf", llama_cpp)
    log = convert(work / "assistant_ordered", "f32", work / "assistant_ordered.converter.f32.gguf", llama_cpp)
    (work / "assistant_ordered.converter.log").write_text(log)
    add_centroids(work / "assistant_ordered.converter.f32.gguf", OUT / "assistant_ordered.f32.gguf",
                  work / "assistant_ordered", llama_cpp)


# ----------------------------------------------------------------------------------------------
# HF references
# ----------------------------------------------------------------------------------------------
def hf_greedy(target, ids):
    import torch

    seq, tokens, tops, margins = list(ids), [], [], []
    first_logits = None
    hid = None
    with torch.no_grad():
        for i in range(STEPS):
            out = target(input_ids=torch.tensor([seq]), use_cache=False, output_hidden_states=True)
            logits = out.logits[0, -1].numpy().astype(np.float64)
            if i == 0:
                first_logits = logits.copy()
                hid = out.hidden_states[-1][0, -1].numpy().astype(np.float64)
            entry, margin, best = top_entry(logits, TOP_K)
            tops.append(entry)
            margins.append(margin)
            tokens.append(best)
            seq.append(best)
    return tokens, tops, margins, first_logits, hid


def vec_summary(v):
    v = np.asarray(v, dtype=np.float64)
    return {"first8": [float("%.7g" % x) for x in v[:8]], "l2": float("%.7g" % np.linalg.norm(v))}


def kv_sharing_info(cfg):
    modes = list(cfg.kv_sharing_modes)
    store = {cfg.layer_types[i]: i for i, m in enumerate(modes) if m == "store"}
    src = [store[cfg.layer_types[i]] if m == "reuse" else i for i, m in enumerate(modes)]
    return modes, src


def write_target_json(work: Path, run):
    target = load_target(work)
    cfg = target.config
    training = json.loads((work / "target_training.json").read_text())
    modes, src = kv_sharing_info(cfg)
    prompts = []
    for name, text in PROMPTS:
        ids = prompt_ids(text)
        tokens, tops, margins, first_logits, hid = run["greedy"][name]
        prompts.append("{" + ", ".join([
            f'"name": {json.dumps(name)}', f'"text": {json.dumps(text)}', f'"ids": {json.dumps(ids)}',
            f'"tokens": {json.dumps(tokens)}', f'"min_top2_margin": {float("%.4g" % min(margins))}',
            f'"hidden_last_prompt": {json.dumps(vec_summary(hid))}',
            '"top": [\n' + ",\n".join("    " + json.dumps(t, separators=(",", ":")) for t in tops) + "\n   ]",
            f'"last_prompt_logits": {fmt_row(first_logits)}']) + "}")
    head = {
        "source": "HF transformers Gemma4ForCausalLM, CPU, fp32, eager attention, use_cache=False "
                  "(full recompute per step), greedy",
        "versions": versions(),
        "model": TARGET,
        "gguf": "target.f32.gguf (target.q8_0.gguf: llama-quantize Q8_0 of it)",
        "seed": SEED_TARGET,
        "notes": "trained (AdamW, cosine lr) on <bos> + 63-token windows of CORPUS "
                 "(tests/tools/gemma4_fixtures.py) + tests/fixtures/text/public_domain.txt tokenized "
                 "with tests/fixtures/gemma4/tokenizer.json; tied embeddings, final logit softcap 30",
        "hf_config": json.loads((work / TARGET / "config.json").read_text()),
        "training": training,
        "layer_types": list(cfg.layer_types),
        "num_kv_shared_layers": cfg.num_kv_shared_layers,
        "kv_sharing_modes": modes,
        "kv_source_layer": src,
        "sliding_window": cfg.sliding_window,
        "steps": STEPS,
    }
    text = dump_lines(head, {"prompts": prompts})
    (OUT / "target.hf.json").write_text(text)
    print(f"  target.hf.json: {len(text)} bytes")


def hf_candidate_drafts(target, assistant, seq):
    """HF's own SinglePositionMultiTokenCandidateGenerator on the state 'target prefilled with seq
    (as generate() does it: DynamicCache recording its past, logits_to_keep=1), its greedy token
    appended'. Returns (t_next, hidden_in, steps with token_in/position/logits/proj)."""
    import torch
    from transformers import DynamicCache, GenerationConfig
    from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

    cache = DynamicCache(config=target.config)
    cache.activate_past_recording()
    with torch.no_grad():
        out = target(input_ids=torch.tensor([seq]), past_key_values=cache, use_cache=True, logits_to_keep=1,
                     output_hidden_states=True, return_shared_kv_states=True)
    t_next = int(out.logits[0, -1].argmax())
    gen = SinglePositionMultiTokenCandidateGenerator(assistant, target.get_input_embeddings(),
                                                     GenerationConfig(max_length=4096))
    rec = []
    orig = assistant.forward

    def spy(*a, **kw):
        r = orig(*a, **kw)
        rec.append(dict(embeds=kw["inputs_embeds"].detach().clone(), pos=int(kw["position_ids"][0, 0]),
                        logits=r.logits[0, -1].detach().clone(), proj=r.last_hidden_state[0, -1].detach().clone(),
                        kv_len={k: int(v[0].shape[2]) for k, v in kw["shared_kv_states"].items()}))
        return r

    assistant.forward = spy
    try:
        ids = torch.tensor([seq + [t_next]])
        cand, logits = gen.get_candidates(ids, model_kwargs={"attention_mask": torch.ones_like(ids)},
                                          model_outputs=out, is_first_iteration=False, n_last_matches=0)
    finally:
        del assistant.forward
    drafted = cand[0, len(seq) + 1:].tolist()
    hidden_in = out.hidden_states[-1][0, -1].detach()
    return t_next, hidden_in, rec, drafted


def draft_step_json(r, ordered, plain_argmax=None):
    d = {"step": r["step"], "token_in": r["token_in"], "position": r["position"], "argmax": r["argmax"]}
    d["post_projection_first8"] = vec_summary(r["proj"])["first8"]
    d["post_projection_l2"] = vec_summary(r["proj"])["l2"]
    if ordered:
        d["centroid_logits"] = [float("%.7g" % x) for x in np.asarray(r["centroid_logits"], dtype=np.float64)]
        d["centroid_top_k"] = [int(x) for x in r["top"]]
        d["mask_value"] = float("%.7g" % r["fill"])
        d["plain_argmax"] = int(plain_argmax)
    return d


def draft_cases(work: Path):
    """All draft cases, HF's and the reference's. Returns list of dicts (numbers as numpy)."""
    import torch

    target = load_target(work)
    W = target.config.sliding_window
    cases = []
    for name in ASSISTANTS:
        assistant = load_assistant(work, name)
        ref = Reference(target, assistant)
        ordered = assistant.config.use_ordered_embeddings
        for pname, L in DRAFT_CASES:
            ids = prompt_ids(dict(PROMPTS)[pname])
            greedy = hf_greedy_tokens(target, ids, L)
            seq = (ids + greedy)[:L]
            t_next, hidden_in, rec, drafted = hf_candidate_drafts(target, assistant, seq)
            _, hidden, kv = target_features(target, np.array([seq]))
            kv1 = {lt: (kv[lt][0][0], kv[lt][1][0]) for lt in (S, F)}
            assert torch.equal(hidden[0, -1], hidden_in) or float((hidden[0, -1] - hidden_in).abs().max()) < 1e-5
            for window in ("hf", "llamacpp"):
                vis = {lt: visible(L, L, lt, window, W) for lt in (S, F)}
                steps = ref.draft(t_next, hidden_in, L, kv1, vis)
                for j, r in enumerate(steps):
                    r["step"] = j + 1
                plain_argmax = [int(torch.argmax(r["plain"])) for r in steps]
                case = {"case": f"{pname}_L{L}", "assistant": name, "window": window, "seq": seq, "L": L,
                        "target_next": t_next, "hidden_in": vec_summary(hidden_in.numpy()),
                        "visible": {"full": [int(np.nonzero(vis[F])[0][0]), int(np.nonzero(vis[F])[0][-1])],
                                    "sliding": [int(np.nonzero(vis[S])[0][0]), int(np.nonzero(vis[S])[0][-1])]}}
                if window == "hf":
                    # HF's own steps are the fixture; the reference must agree with them
                    diff = 0.0
                    hf_steps = []
                    for j, (h, r) in enumerate(zip(rec, steps)):
                        assert h["pos"] == L and r["token_in"] == (t_next if j == 0 else drafted[j - 1])
                        diff = max(diff, float((h["logits"] - r["logits"]).abs().max()),
                                   float((h["proj"] - r["proj"]).abs().max()))
                        s = dict(r, logits=h["logits"], proj=h["proj"], argmax=int(torch.argmax(h["logits"])),
                                 token_in=(t_next if j == 0 else drafted[j - 1]), position=h["pos"])
                        hf_steps.append(s)
                    assert [s["argmax"] for s in hf_steps] == drafted, (drafted, [s["argmax"] for s in hf_steps])
                    assert diff < 1e-4, (name, pname, L, diff)
                    case.update(source="hf_candidate_generator", ref_vs_hf_max_abs_diff=float("%.3g" % diff),
                                hf_kv_len=rec[0]["kv_len"])
                    steps = hf_steps
                else:
                    case["source"] = "reference"
                case["steps"] = [dict(draft_step_json(r, ordered, pa), logits=r["logits"].numpy())
                                 for r, pa in zip(steps, plain_argmax)]
                cases.append(case)
    return cases


def hf_greedy_tokens(target, ids, L):
    import torch

    seq = list(ids)
    with torch.no_grad():
        while len(seq) < L:
            logits = target(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
            seq.append(int(logits.argmax()))
    return seq[len(ids):]


def write_drafts_json(work: Path, cases):
    rows = []
    for c in cases:
        head = {k: v for k, v in c.items() if k != "steps"}
        srows = []
        for s in c["steps"]:
            meta = {k: v for k, v in s.items() if k != "logits"}
            lg = np.asarray(s["logits"], dtype=np.float64)
            if c["window"] == "hf":
                tail = ', "logits": ' + fmt_row(lg)
            else:  # the reference's llama.cpp-window steps: top-8 only (keeps the file small)
                order = np.argsort(-lg, kind="stable")[:TOP_K]
                tail = ', "top": ' + json.dumps([[int(t), float("%.7g" % lg[t])] for t in order], separators=(",", ":"))
            srows.append("    {" + json.dumps(meta, separators=(",", ":"))[1:-1] + tail + "}")
        rows.append("{" + json.dumps(head, separators=(",", ":"))[1:-1] + ', "steps": [\n' + ",\n".join(srows) + "\n  ]}")
    assistants = {}
    for name in ASSISTANTS:
        assistants[name] = {"gguf": f"{name}.f32.gguf",
                            "hf_config": json.loads((work / name / "config.json").read_text())}
    training = json.loads((work / "assistant_training.json").read_text())
    head = {
        "source": "HF transformers Gemma4AssistantForCausalLM driven by SinglePositionMultiTokenCandidateGenerator"
                  ".get_candidates (transformers/generation/candidate_generator.py), CPU, fp32, eager attention",
        "versions": versions(),
        "assistants": assistants,
        "training": training,
        "k": K_DRAFT,
        "sliding_window": CONFIG_TARGET["sliding_window"],
        "notes": "state: target prefilled with seq (positions 0..L-1); the first draft step feeds target_next "
                 "(the target's greedy token after seq) at position L with the target's post-final-norm hidden "
                 "state at L-1; step j>1 feeds step j-1's argmax with step j-1's post_projection output, same "
                 "position L, same target K/V. window 'hf': what HF does (sliding layers see the last W+1 cached "
                 "positions); window 'llamacpp': llama.cpp's mask (sliding sees L-W+1..L-1), computed by this "
                 "script's reference implementation (which matches HF to ref_vs_hf_max_abs_diff on the hf window). "
                 "logits carry no softcap; for assistant_ordered non-selected tokens hold mask_value.",
    }
    text = dump_lines(head, {"cases": rows})
    (OUT / "drafts.hf.json").write_text(text)
    print(f"  drafts.hf.json: {len(text)} bytes")


# ----------------------------------------------------------------------------------------------
# Speculative decoding: HF generate() and clean loops
# ----------------------------------------------------------------------------------------------
def hf_generate(target, assistant, ids):
    import torch
    from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

    rounds = []
    orig_get = SinglePositionMultiTokenCandidateGenerator.get_candidates
    orig_upd = SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy
    orig_fwd = assistant.forward
    kv_seen = []

    def get(self, input_ids, **kw):
        kv_seen.clear()
        cand, logits = orig_get(self, input_ids, **kw)
        n = cand.shape[1] - input_ids.shape[1]
        if n > 0:
            rounds.append({"pos": int(input_ids.shape[1] - 1), "drafted": n,
                           "drafts": cand[0, input_ids.shape[1]:].tolist(),
                           "kv_full_len": kv_seen[0][F], "kv_sliding_len": kv_seen[0][S]})
        return cand, logits

    def upd(self, input_ids, scores, num_matches):
        if rounds and "accepted" not in rounds[-1]:
            rounds[-1]["accepted"] = int(num_matches)
        return orig_upd(self, input_ids, scores, num_matches)

    def fwd(*a, **kw):
        kv_seen.append({k: int(v[0].shape[2]) for k, v in kw["shared_kv_states"].items()})
        return orig_fwd(*a, **kw)

    SinglePositionMultiTokenCandidateGenerator.get_candidates = get
    SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy = upd
    assistant.forward = fwd
    try:
        with torch.no_grad():
            out = target.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  assistant_model=assistant, do_sample=False, max_new_tokens=STEPS,
                                  pad_token_id=0)
    finally:
        SinglePositionMultiTokenCandidateGenerator.get_candidates = orig_get
        SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy = orig_upd
        del assistant.forward
    return out[0, len(ids):].tolist(), rounds


def clean_loop(target, ref, ids, first, window):
    """Speculative greedy decoding with a full target recompute per round: the drafter sees exactly
    the accepted positions < p. first: 'hf' (prefill the prompt, take its greedy token, then draft)
    or 'lcpp' (prefill prompt[:-1], draft from the last prompt token). Drafts per round:
    min(K, remaining - 1) as HF caps them."""
    W = CONFIG_TARGET["sliding_window"]
    P = len(ids)
    if first == "hf":
        logits, _, _ = target_features(target, np.array([ids]))
        seq = list(ids) + [int(logits[0, -1].argmax())]
    else:
        seq = list(ids)
    rounds = []
    while len(seq) - P < STEPS:
        p = len(seq) - 1  # position of the token fed (not yet in the target's cache)
        remaining = STEPS - (len(seq) - P)
        k = min(K_DRAFT, remaining - 1)
        _, hidden, kv = target_features(target, np.array([seq[:-1]]))
        drafts = []
        if k > 0 and p >= 1:
            kv1 = {lt: (kv[lt][0][0], kv[lt][1][0]) for lt in (S, F)}
            vis = {lt: visible(p, p, lt, window, W) for lt in (S, F)}
            drafts = [r["argmax"] for r in ref.draft(seq[-1], hidden[0, p - 1], p, kv1, vis, k=k)]
        logits, _, _ = target_features(target, np.array([seq + drafts]))
        sel = logits[0, p:].argmax(-1).tolist()  # target's choice after seq[:p+1], then after each draft
        n = 0
        while n < len(drafts) and drafts[n] == sel[n]:
            n += 1
        new = drafts[:n] + [sel[n]]
        new = new[:remaining]
        if drafts:
            rounds.append({"pos": p, "drafted": len(drafts), "accepted": n, "drafts": drafts})
        seq += new
    return seq[P:P + STEPS], rounds


def run_summary(name, how, tokens, rounds, greedy):
    drafted = sum(r["drafted"] for r in rounds)
    accepted = sum(r["accepted"] for r in rounds)
    return {"name": name, "how": how, "tokens": tokens, "equals_greedy": tokens == greedy, "drafted": drafted,
            "accepted": accepted, "acceptance": float("%.4g" % (accepted / drafted)) if drafted else None,
            "rounds": rounds}


def speculative_runs(work: Path, greedy_by_prompt):
    target = load_target(work)
    res = {}
    for name in ASSISTANTS:
        assistant = load_assistant(work, name)
        ref = Reference(target, assistant)
        for pname, text in PROMPTS:
            ids = prompt_ids(text)
            greedy = greedy_by_prompt[pname]
            runs = res.setdefault(pname, [])
            toks, rounds = hf_generate(target, assistant, ids)
            runs.append(run_summary(f"hf_generate_{name}", "target.generate(assistant_model=..., do_sample=False)",
                                    toks, rounds, greedy))
            for first, window in (("hf", "hf"), ("hf", "llamacpp"), ("lcpp", "llamacpp")):
                toks, rounds = clean_loop(target, ref, ids, first, window)
                runs.append(run_summary(f"clean_{first}_{window}_{name}",
                                        f"clean loop, first={first}, window={window}", toks, rounds, greedy))
    return res


def write_speculative_json(res, greedy_by_prompt):
    rows = []
    for pname, text in PROMPTS:
        runs = []
        for r in res[pname]:
            meta = {k: v for k, v in r.items() if k != "rounds"}
            runs.append("    {" + json.dumps(meta, separators=(",", ":"))[1:-1] + ', "rounds": [\n' +
                        ",\n".join("      " + json.dumps(x, separators=(",", ":")) for x in r["rounds"]) + "]}")
        rows.append("{" + f'"prompt": {json.dumps(pname)}, "ids": {json.dumps(prompt_ids(text))}, '
                    f'"greedy": {json.dumps(greedy_by_prompt[pname])}, "runs": [\n' + ",\n".join(runs) + "\n  ]}")
    totals = {}
    for pname in res:
        for r in res[pname]:
            t = totals.setdefault(r["name"].replace("_" + pname, ""), [0, 0, True])
            t[0] += r["drafted"]
            t[1] += r["accepted"]
            t[2] &= r["equals_greedy"]
    head = {
        "source": "HF transformers 5.23.0 generate(assistant_model=Gemma4AssistantForCausalLM) and this script's "
                  "clean loops (full target recompute per round, reference drafter), CPU fp32 eager",
        "versions": versions(),
        "k": K_DRAFT,
        "steps": STEPS,
        "totals": {k: {"drafted": v[0], "accepted": v[1], "acceptance": float("%.4g" % (v[1] / v[0])) if v[0] else None,
                       "all_equal_greedy": v[2]} for k, v in totals.items()},
        "notes": "rounds[].pos: position of the token fed to the drafter (= tokens in the target cache); "
                 "accepted: leading drafts equal to the target's greedy choice; the round then adds "
                 "accepted + 1 tokens. hf_generate rounds carry the K/V lengths HF handed the drafter.",
    }
    text = dump_lines(head, {"prompts": rows})
    (OUT / "speculative.hf.json").write_text(text)
    print(f"  speculative.hf.json: {len(text)} bytes")
    for k, v in head["totals"].items():
        print(f"    {k}: {v}")


def stage_hf(work: Path):
    torch_setup()
    patch_hf()
    results = []
    for attempt in range(2):  # second pass with the models reloaded: must be bit-identical
        target = load_target(work)
        greedy = {}
        for pname, text in PROMPTS:
            greedy[pname] = hf_greedy(target, prompt_ids(text))
        cases = draft_cases(work)
        spec = speculative_runs(work, {k: v[0] for k, v in greedy.items()})
        results.append((greedy, cases, spec))
    (g1, c1, s1), (g2, c2, s2) = results
    same = json.dumps(_plain(g1)) == json.dumps(_plain(g2)) and json.dumps(_plain(c1)) == json.dumps(_plain(c2)) \
        and json.dumps(s1) == json.dumps(s2)
    assert same, "HF outputs not deterministic across two runs"
    write_target_json(work, {"greedy": g1})
    write_drafts_json(work, c1)
    write_speculative_json(s1, {k: v[0] for k, v in g1.items()})


def _plain(x):
    import torch

    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.numpy().tolist()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


# ----------------------------------------------------------------------------------------------
# llama.cpp
# ----------------------------------------------------------------------------------------------
# --no-repack: this host's CPU has AMX-INT8, and llama.cpp@0c1e57098's AMX Q8_0 matmul
# (ggml_backend_amx_mul_mat) segfaults on target.q8_0.gguf (128/64-wide rows); F32 never uses it.
LLAMA_COMMON = ["-c", "256", "-t", str(THREADS), "-tb", str(THREADS), "-fa", "off", "-ctk", "f32", "-ctv", "f32",
                "-s", "0", "--no-repack"]
LLAMA_SPEC = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(K_DRAFT), "--spec-draft-n-min", "0",
              "--spec-draft-p-min", "0"]


def _rel(path):
    return str(Path(path).name)


def error_lines(log):
    """The error lines of a llama.cpp log ("E" level), without their timestamps."""
    lines = [re.sub(r"^\d+\.\d+\.\d+\.\d+ E ", "", l) for l in log.splitlines()
             if re.match(r"^\d+\.\d+\.\d+\.\d+ E ", l)]
    return "\n".join(lines) if lines else log[-600:]


class Server:
    """llama-server started (and stopped, by its pid) by this script."""

    def __init__(self, llama_bin, args, log: Path, port):
        self.port, self.log = port, log
        env = dict(os.environ, LLAMA_TRACE="1")
        self.cmd = [str(llama_bin / "llama-server"), *args, "--host", "127.0.0.1", "--port", str(port), "-np", "1"]
        self.fh = open(log, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.fh, stderr=subprocess.STDOUT, env=env)
        t0 = time.time()
        while True:
            if self.proc.poll() is not None:
                self.fh.close()
                raise RuntimeError(f"llama-server exited {self.proc.returncode}: " + log.read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() - t0 > 300:
                self.stop()
                raise RuntimeError("llama-server did not come up")
            time.sleep(0.5)

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.fh.close()


def server_runs(llama_bin: Path, work: Path, tgt: Path, asst, greedy, port):
    """One llama-server (target [+ assistant]); every prompt as token ids, greedy, 32 tokens."""
    args = ["-m", str(tgt), *LLAMA_COMMON]
    if asst is not None:
        args += ["-md", str(asst), *LLAMA_SPEC, "-ctkd", "f32", "-ctvd", "f32"]
    log = work / f"server_{tgt.stem}_{asst.stem if asst else 'none'}.log"
    name = f"server_{tgt.stem}" + (f"+{asst.stem}" if asst else "")
    cmd = " ".join(["llama-server", *[_rel(a) if a.endswith(".gguf") else a for a in args]])
    try:
        srv = Server(llama_bin, args, log, port)
    except RuntimeError as e:
        return [{"name": name, "tool": "llama-server", "command": cmd, "error": error_lines(str(e))}]
    runs = []
    try:
        for pname, text in PROMPTS:
            ids = prompt_ids(text)
            before = log.stat().st_size
            body = {"prompt": ids, "n_predict": STEPS, "temperature": 0.0, "top_k": 1, "return_tokens": True,
                    "cache_prompt": False, "seed": 0}
            if asst is not None:
                body.update({"speculative.n_max": K_DRAFT, "speculative.n_min": 0, "speculative.p_min": 0.0})
            r = srv.post("/completion", body)
            tim = r.get("timings", {})
            for _ in range(40):  # the log is written by an async logger: wait until it has every round
                time.sleep(0.25)
                with open(log, errors="replace") as fh:
                    fh.seek(before)
                    new_log = fh.read()
                found = re.findall(r"accepted\s+(\d+)/\s*(\d+) draft tokens", new_log)
                rounds = [int(a) for a, _ in found]
                drafted_r = [int(b) for _, b in found]
                if asst is None or (sum(rounds) == tim.get("draft_n_accepted") and sum(drafted_r) == tim.get("draft_n")):
                    break
            run = {"name": name, "tool": "llama-server", "prompt": pname, "command": cmd,
                   "request": {k: v for k, v in body.items() if k != "prompt"},
                   "tokens_evaluated": r.get("tokens_evaluated"), "tokens": r.get("tokens"),
                   "equals_hf_greedy": r.get("tokens") == greedy[pname]}
            if asst is not None:
                run.update(draft_n=tim.get("draft_n"), draft_n_accepted=tim.get("draft_n_accepted"),
                           rounds=[{"drafted": d, "accepted": a} for a, d in zip(rounds, drafted_r)])
            runs.append(run)
            print(f"  {name} {pname}: equal {run['equals_hf_greedy']}, draft {run.get('draft_n')} "
                  f"accepted {run.get('draft_n_accepted')}")
    finally:
        srv.stop()
    return runs


def spec_simple_runs(llama_bin: Path, work: Path, tgt: Path, asst: Path, greedy):
    runs = []
    tok = tokenizer()
    for pname, text in PROMPTS:
        args = ["-m", str(tgt), "-md", str(asst), *LLAMA_COMMON, *LLAMA_SPEC, "-ctkd", "f32", "-ctvd", "f32",
                "-n", str(STEPS), "--temp", "0", "--top-k", "1", "-lv", "5", "-p", text]
        cmd = [str(llama_bin / "llama-speculative-simple"), *args]
        for attempt in range(3):  # its async logger has once lost a line: retry until the log is whole
            r = subprocess.run(cmd, capture_output=True, timeout=600)
            r.stdout = r.stdout.decode("utf-8", errors="replace")
            r.stderr = r.stderr.decode("utf-8", errors="replace")
            out = r.stdout + r.stderr
            rounds = re.findall(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)", out)
            m_d = re.search(r"n_drafted\s*=\s*(\d+)", out)
            m_a = re.search(r"n_accept\s*=\s*(\d+)", out)
            if r.returncode != 0 or (m_d and m_a and int(m_d.group(1)) == sum(int(d) for _, d, _ in rounds)
                                     and int(m_a.group(1)) == sum(int(a) for a, _, _ in rounds)):
                break
        name = f"speculative-simple_{tgt.stem}+{asst.stem}"
        shown = " ".join(["llama-speculative-simple", *[_rel(a) if a.endswith(".gguf") else a for a in args[:-1]],
                          json.dumps(text)])
        run = {"name": name, "tool": "llama-speculative-simple", "prompt": pname, "command": shown, "rc": r.returncode}
        if r.returncode != 0:
            run["error"] = error_lines(out)
            runs.append(run)
            continue
        m_p = re.search(r"n_predict\s*=\s*(\d+)", out)
        # HF's 32 tokens may end inside a UTF-8 sequence (byte tokens): drop the trailing U+FFFD
        hf_text = tok.decode(greedy[pname], skip_special_tokens=False).rstrip("\ufffd")
        gen = r.stdout
        run.update(stdout=gen, hf_greedy_text=hf_text,
                   text_starts_with_hf_greedy_text=None,
                   n_predict=int(m_p.group(1)) if m_p else None,
                   draft_n=int(m_d.group(1)) if m_d else None, draft_n_accepted=int(m_a.group(1)) if m_a else None,
                   rounds=[{"accepted": int(a), "drafted": int(d), "last_token": int(t)} for a, d, t in rounds])
        # stdout is "<bos>" + the prompt text followed by the generated text (after blank lines)
        at = gen.find(text)
        body = gen[at + len(text):] if at >= 0 else gen
        body = body.rstrip("\n")
        run["generated_text"] = body
        del run["stdout"]
        n = min(len(body), len(hf_text))
        run["text_starts_with_hf_greedy_text"] = body[:n] == hf_text[:n] and n > 0
        runs.append(run)
        print(f"  {name} {pname}: rounds {len(rounds)}, draft {run['draft_n']} accepted {run['draft_n_accepted']}, "
              f"text agrees {run['text_starts_with_hf_greedy_text']}")
    return runs


def stage_llamacpp(work: Path, llama_bin: Path):
    tj = json.loads((OUT / "target.hf.json").read_text())
    greedy = {p["name"]: p["tokens"] for p in tj["prompts"]}
    runs = []
    port = 18431
    tf, tq = OUT / "target.f32.gguf", OUT / "target.q8_0.gguf"
    ap, ao = OUT / "assistant_plain.f32.gguf", OUT / "assistant_ordered.f32.gguf"
    runs += server_runs(llama_bin, work, tf, None, greedy, port)
    runs += server_runs(llama_bin, work, tq, None, greedy, port)
    runs += server_runs(llama_bin, work, tf, ap, greedy, port)
    runs += server_runs(llama_bin, work, tq, ap, greedy, port)
    runs += server_runs(llama_bin, work, tf, ao, greedy, port)
    runs += spec_simple_runs(llama_bin, work, tf, ap, greedy)
    # the same round structure as this script's clean loops (speculative.hf.json)?
    spec = json.loads((OUT / "speculative.hf.json").read_text())
    clean = {(p["prompt"], r["name"]): [x["accepted"] for x in r["rounds"]] for p in spec["prompts"] for r in p["runs"]}
    for run in runs:
        if "rounds" not in run or "+assistant_plain" not in run["name"]:
            continue
        got = [x["accepted"] for x in run["rounds"]]
        cmp = {}
        for sim in ("clean_hf_hf_assistant_plain", "clean_hf_llamacpp_assistant_plain",
                    "clean_lcpp_llamacpp_assistant_plain", "hf_generate_assistant_plain"):
            ref = clean[(run["prompt"], sim)]
            cmp[sim] = "equal" if got == ref else ("prefix" if got[:len(ref)] == ref else "differs")
        run["rounds_vs_hf_json"] = cmp
    sysinfo = subprocess.run([str(llama_bin / "llama-cli"), "--version"], capture_output=True, text=True)
    head = {
        "source": "llama.cpp ggml-org/llama.cpp@0c1e57098 (llama-cpp-python 0.3.36 sdist's vendor/llama.cpp), "
                  "CPU build, tools run by this script",
        "version": (sysinfo.stdout + sysinfo.stderr).strip().splitlines()[-2:],
        "k": K_DRAFT,
        "steps": STEPS,
        "notes": "server: prompt as token ids (tokens_evaluated = its length), temperature 0, per-request "
                 "speculative.n_max/p_min; rounds parsed from the LLAMA_TRACE=1 log ('accepted a/d draft tokens'). "
                 "speculative-simple: text prompt (tokenizes to the same ids), stdout = prompt + generated text, "
                 "rounds from its -lv 5 log.",
    }
    compact = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    text = dump_lines(head, {"runs": [compact(r) for r in runs]})
    (OUT / "llamacpp.json").write_text(text)
    print(f"  llamacpp.json: {len(text)} bytes")


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------
def check_ggufs(llama_cpp: Path):
    gguf = vendored_gguf(llama_cpp)
    GGUFReader, GGUFValueType = gguf.GGUFReader, gguf.GGUFValueType

    for path in sorted(OUT.glob("*.gguf")):
        r = GGUFReader(str(path))
        print(f"== {path.name}: {path.stat().st_size} bytes, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:16]}")
        for f in r.fields.values():
            if f.name.startswith("tokenizer.ggml.") and f.types and f.types[0] == GGUFValueType.ARRAY:
                print(f"  {f.name}: [{len(f.data)} items]")
            elif f.name == "tokenizer.chat_template":
                print(f"  {f.name}: [{len(f.contents())} chars]")
            else:
                print(f"  {f.name}: {f.contents()}")
        for t in r.tensors:
            print(f"    {t.name} {list(map(int, t.shape))} {t.tensor_type.name}")


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
