"""Writes tests/fixtures/gemma4/: tiny random-weight Gemma 4 models as GGUF, with
HF transformers' logits and llama.cpp's greedy outputs on them, and tokenizer
cases. Run by hand, never in CI; only its outputs (small GGUFs and JSON, plain
data) are kept in the tree. The reference environment (torch, transformers,
llama-cpp-python and llama.cpp's own converter) lives outside the repo.

Set-up in a reference folder REF outside the repo ($KVSHARE_REF_DIR, default
/opt/kvshare-ref; about 6 GB, most of it the CUDA wheels that PyPI's Linux
torch pulls in; the CPU is all that is used), then run:

  python3 -m venv $REF/venv
  $REF/venv/bin/pip install numpy typing-extensions jinja2 diskcache
  $REF/venv/bin/pip install torch transformers==5.23.0 tokenizers \
      safetensors sentencepiece gguf pyyaml tqdm requests
  # llama-cpp-python 0.3.36 from its sdist (builds llama.cpp, ~20 min on 2 cores);
  # the unpacked sdist also provides vendor/llama.cpp/convert_hf_to_gguf.py
  pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d $REF
  tar xzf $REF/llama_cpp_python-0.3.36.tar.gz -C $REF
  CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="-DLLAVA_BUILD=OFF" \
      $REF/venv/bin/pip install $REF/llama_cpp_python-0.3.36.tar.gz
  $REF/venv/bin/python tests/tools/gemma4_fixtures.py \
      [--llama-cpp $REF/llama_cpp_python-0.3.36/vendor/llama.cpp] \
      [--work $REF/gemma4_work] [--stages tok,models,hf,llamacpp,tokcases,check]

Versions used for the committed fixtures: Python 3.11.7, torch 2.15.0 (+cu132
wheel, run on CPU), transformers 5.23.0, tokenizers 0.23.3, safetensors 0.8.0,
numpy 2.4.6, llama-cpp-python 0.3.36 (vendored llama.cpp ggml-org/llama.cpp@0c1e57098,
its convert_hf_to_gguf.py and gguf-py 0.19.0), PyPI gguf 0.19.0 for the checks.

Stages (all by default, in this order):
  tok       trains the BPE tokenizer on CORPUS below, writes tokenizer.json and
            tokenizer_config.json (Gemma 4's chat template from llama.cpp's
            models/templates/google-gemma-4-31B-it.jinja) to the fixture folder.
  models    builds each config in CONFIGS as a Gemma4ForCausalLM (fp32, eager,
            seeded), randomizes every norm weight, layer_scalar, router scale and
            per_expert_scale (they start at 1), save_pretrained()s it with the
            tokenizer into WORK/<name>, and converts it with llama.cpp's
            convert_hf_to_gguf.py (--outtype f32; e2b also f16) into the fixtures;
            then quantizes e2b.f32.gguf with llama.cpp's quantizer to Q8_0 and
            Q4_K_M (llama_cpp.llama_model_quantize).
  hf        <name>.hf.json: HF's logits (see FORMATS), computed twice (the model
            reloaded) and required to be bit-identical, and required to match one
            full forward over the whole sequence to 1e-4.
  llamacpp  <name>.llamacpp.json (not for hfrule, whose layout llama.cpp shares
            differently): llama.cpp's greedy run from the same prompt ids, and a
            comparison against the HF fixture (needs WORK/<name> from "models").
  tokcases  tokenizer_cases.json.
  check     reads every GGUF back with PyPI gguf's GGUFReader and prints its
            sha256, keys, token types and tensors (shape, type).

FORMATS (every file one line per row/step, floats as %.7g):
  <name>.hf.json:
    source, versions{python,torch,transformers,tokenizers}, model, gguf (the f32
    file converted from the same weights), seed, notes,
    hf_config        config.json exactly as save_pretrained wrote it
    layer_types, num_kv_shared_layers,
    kv_sharing_modes HF's Gemma4TextConfig.kv_sharing_modes (None|"store"|"reuse")
    kv_source_layer  per layer: the layer whose K/V it attends to under HF's rule
                     (itself for owning layers)
    llamacpp_kv_source_layer  the same under llama.cpp's rule (il >= L-N reads
                     L-N-2 if sliding else L-N-1), for information
    vocab_size, prompt_ids (starts with <bos> = 2), steps,
    min_top2_margin  smallest top-1 minus top-2 logit over step_logits
    tokens           HF's greedy tokens, steps of them
    prefill_logits   [len(prompt_ids)][vocab]: logits at every prompt position
                     (row j predicts the token after prompt_ids[j])
    step_logits      [steps][vocab]: row i predicts tokens[i], i.e. it is computed
                     after the prompt and tokens[:i] (row 0 == prefill_logits[-1]).
    Every forward is a full recompute without a KV cache (use_cache=False).
  <name>.llamacpp.json:
    source, system_info, llama_params (how the context was made), steps, top_k,
    cases: one per GGUF of that model (e2b: f32, f16, q8_0, q4_k_m), each with
      gguf, tensor_types {tensor name: ggml type}, prompt_ids,
      tokens           llama.cpp's greedy tokens (prompt evaluated in one batch,
                       then one token per eval)
      top              [steps][top_k] of [token, logit], best first, at step i
                       (the logits that predict tokens[i])
      vs_hf            comparison with <name>.hf.json: greedy_agree (number of
                       leading steps whose token equals HF's), first_divergence
                       (step or null), margin_at_divergence /
                       hf_margin_at_divergence (llama.cpp's / HF's top-1 minus top-2
                       logit there), min_margin (llama.cpp's smallest over its steps),
                       forced_positions, forced_max_abs_diff /
                       forced_max_rel_diff / forced_argmax_agree: llama.cpp run on
                       HF's sequence (prompt + HF tokens[:-1], one batch) vs HF's
                       prefill_logits + step_logits over all those positions;
                       forced_max_abs_diff_hf_fp16_gelu: the same against HF run with
                       llama.cpp's fp16-table GELU emulated (hf_gelu16_logits), which shows
                       how much of the difference is that GELU;
                       llama_batch_vs_single_max_abs_diff: llama.cpp on that sequence in
                       one batch vs one token per eval (its own noise floor).
  tokenizer_cases.json:
    source, tokenizer, gguf, modes (what each id list means, exactly),
    hf_vs_llama_differences (cases where hf != llama), cases:
    [{text, hf, hf_bos, hf_split_special, llama, llama_bos, llama_nospecial}],
    decode: [{ids, hf, hf_skip_special, llama, llama_special}] (+ llama_hex /
    llama_special_hex with the raw bytes where llama.cpp's output is not UTF-8).
"""
import argparse
import ctypes
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "gemma4"
# Where the local references live (never part of the repository): $KVSHARE_REF_DIR.
REF = Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref"))
DEFAULT_LLAMA_CPP = REF / "llama_cpp_python-0.3.36/vendor/llama.cpp"
DEFAULT_WORK = REF / "gemma4_work"

STEPS = 32
TOP_K = 8
VOCAB = 512

# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # ids 0..4
GEMMA4_SPECIALS = [  # ids 5..19; the template's control tokens (llama.cpp forces the 7 in
    "<|turn>", "<turn|>", "<|think|>",  # gemma.py's visible_tokens to USER_DEFINED)
    "<|channel>", "<channel|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
    "<|tool_response>", "<tool_response|>", '<|"|>', "<|image|>", "<|audio|>", "<|video|>",
]
ALL_SPECIALS = SPECIALS + GEMMA4_SPECIALS
BYTE_BASE = len(ALL_SPECIALS)  # <0x00> .. <0xFF> at ids 20..275
LIMIT_ALPHABET = 72

CORPUS = r'''
The quick brown fox jumps over the lazy dog. The dog did not seem to mind at all.
It was a bright cold day in April, and the clocks were striking thirteen.
In the beginning there was the token, and the token was split into bytes.
She sells sea shells by the sea shore; the shells she sells are surely sea shells.
A model reads the prompt, then writes one token at a time, and each new token
looks back at every token before it. That is what the cache is for: keys and
values of the past, kept so that they need not be computed again.
Sliding-window layers only look at the last few tokens; full layers look at all
of them. Some layers share the cache of an earlier layer of the same kind.
The weather today: sunny, 21 degrees, light wind from the north-west (12 km/h).
Prices went up 3.5% in March, 2.75% in April and 0.9% in May; about $1,250,000 in all.
Call me at +1 (555) 010-4477 or write to info@example.com before 5:30 pm.
"Hello," she said. "Is anyone there?" Nobody answered, so she said it again!
Questions? Answers. Lists: apples, pears, plums, cherries, and more apples.
The rain in Spain stays mainly in the plain, or so they say in the songs.
We hold these truths to be self-evident, that all tokens are created equal.

def fibonacci(n):
    """Return the n-th Fibonacci number."""
    if n <= 1:
        return n
    a, b = 0, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return b


class Cache:
    def __init__(self, size: int) -> None:
        self.size = size
        self.keys = [None] * size
        self.values = [None] * size

    def put(self, index: int, key, value) -> None:
        self.keys[index % self.size] = key
        self.values[index % self.size] = value


for i in range(10):
    print(f"step {i}: {fibonacci(i)}")

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
    std::vector<float> logits(512, 0.0f);
    for (size_t i = 0; i < logits.size(); ++i) {
        logits[i] = static_cast<float>(i) * 0.5f;
    }
    if (argc > 1) {
        std::printf("%s\n", argv[1]);
    }
    return 0;
}

{"name": "gemma", "layers": [0, 1, 2, 3], "sliding": true, "window": 512}
SELECT id, name FROM users WHERE age >= 18 ORDER BY name;
$ ls -la /tmp && echo "done" | grep -v error > out.txt
<div class="note"><p>Hello &amp; welcome</p></div>
| column | value |
|--------|-------|
| alpha  | 0.125 |
| beta   | 1e-06 |

Déjà vu: the café served crème brûlée and a piña colada; naïve façade.
Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Fluß.
El niño comió una manzana. ¿Dónde está la biblioteca? ¡Olé!
Съешь же ещё этих мягких французских булок, да выпей чаю.
Ελληνικά: καλημέρα κόσμε. Αλφα, βήτα, γάμμα.
日本語のテキスト：東京は日本の首都です。ひらがなとカタカナ。
中文文本：今天天气很好，我们去公园散步吧。
한국어 문장: 안녕하세요, 만나서 반갑습니다.
العربية: مرحبا بالعالم. هذه جملة قصيرة.
עברית: שלום עולם, מה שלומך?
हिन्दी: नमस्ते दुनिया।
Emoji: 😀 🎉 👍🏽 ❤️ 🚀 👨‍👩‍👧 🇫🇷
Combining: e\u0301 a\u0308 n\u0303 o\u0302 — café vs cafe\u0301.
Math: ∀x ∈ ℝ, x² ≥ 0; ∑ᵢ aᵢ = 1; π ≈ 3.14159; α → β ⇒ γ.
Tabs	between	words	and    runs     of   spaces.
Line one.

Line three after a blank line.



Three blank lines above.
'''.replace("\\u0301", "\u0301").replace("\\u0308", "\u0308").replace("\\u0303", "\u0303").replace("\\u0302", "\u0302")

# Extra tokens appended after training: runs of whitespace, as SentencePiece vocabularies have
# (the training split below puts every "▁" at the start of a piece, so BPE never learns them).
MANUAL_MERGES = [("▁", "▁"), ("▁▁", "▁▁"), ("\n", "\n"), ("\t", "\t")]


def _training_tokenizer():
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\n+"), "isolated"),
        pre_tokenizers.Split("▁", "merged_with_next"),
    ])
    return tok


def build_tokenizer(out_dir: Path, llama_cpp: Path):
    """Trains a BPE on CORPUS and assembles a Gemma-4-style tokenizer.json: specials first,
    then the 256 byte-fallback tokens, then the learned pieces and merges; normalizer
    " " -> "▁", no pre-tokenizer (Gemma's Split(" ") is a no-op after the normalizer),
    post-processor "<bos> $A", decoder Replace/ByteFallback/Fuse."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors, trainers

    # The alphabet is chosen here (most frequent characters, ties by code point): the trainer's
    # own limit_alphabet breaks ties in hash order, which made runs differ.
    counts = {}
    for ch in CORPUS.replace(" ", "▁"):
        counts[ch] = counts.get(ch, 0) + 1
    forced = ["\t", "\n", "▁"]
    alphabet = forced + [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c not in forced]
    alphabet = alphabet[:LIMIT_ALPHABET]
    n_manual = len(MANUAL_MERGES)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - BYTE_BASE - 256 - n_manual, special_tokens=[],
                                  limit_alphabet=len(alphabet), initial_alphabet=alphabet, show_progress=False)
    trained = _training_tokenizer()
    trained.train_from_iterator(CORPUS.split("\n\n"), trainer)
    t_json = json.loads(trained.to_str())
    t_vocab = sorted(t_json["model"]["vocab"].items(), key=lambda kv: kv[1])
    t_merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in t_json["model"]["merges"]]

    vocab = {t: i for i, t in enumerate(ALL_SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = BYTE_BASE + b
    for piece, _ in t_vocab:
        assert piece not in vocab, piece
        vocab[piece] = len(vocab)
    merges = list(t_merges)
    for a, b in MANUAL_MERGES:
        assert a in vocab and b in vocab, (a, b)
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    while len(vocab) < VOCAB:  # only if the trainer stopped early: pad with unused pieces
        vocab[f"<unused{len(vocab)}>"] = len(vocab)
    assert len(vocab) == VOCAB, len(vocab)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ALL_SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 2)])
    assert tok.get_vocab_size() == VOCAB
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))

    template = (llama_cpp / "models" / "templates" / "google-gemma-4-31B-it.jinja").read_text()
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
        "mask_token": "<mask>",
        "extra_special_tokens": GEMMA4_SPECIALS,
        "add_bos_token": True, "add_eos_token": False,
        "model_max_length": 8192,
        "padding_side": "left",
        "chat_template": template,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    print(f"tokenizer: {VOCAB} tokens, {len(merges)} merges ({len(t_merges)} trained)")


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------
S, F = "sliding_attention", "full_attention"

# Every config: sequence (prompt + STEPS) longer than sliding_window, global_head_dim*0.25/2 an
# integer >= 2, last layer full, each layer type present before L-N; for e2b/keqv/moe/noshare
# the layout makes HF's and llama.cpp's sharing rules agree (layer L-N-1 full, L-N-2 sliding).
# Seeds were picked from a handful by hand so that HF's greedy steps have a top-2 margin of at least
# ~0.05 and do not just repeat one token (random models like to).
COMMON = dict(vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, max_position_embeddings=512,
              rms_norm_eps=1e-6, final_logit_softcapping=30.0,
              pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
              hidden_activation="gelu_pytorch_tanh", architectures=["Gemma4ForCausalLM"])
CONFIGS = {
    # (a) E2B-like: PLE, KV sharing (3 -> 1, 4 -> 2 under both rules), double-wide MLP on the
    # shared layers, global head dim 64 != sliding 32. hidden 256 so every matrix that reads the
    # residual has 256-wide rows (Q4_K blocks).
    "e2b": dict(hidden_size=256, intermediate_size=32, num_hidden_layers=5, layer_types=[S, S, F, S, F],
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                num_kv_shared_layers=2, hidden_size_per_layer_input=16, use_double_wide_mlp=True,
                sliding_window=12, prompt_len=32, seed=16, initializer_range=0.12),
    # (b) 31B-like: k_eq_v (no v_proj on full layers), 2 KV heads on sliding layers, 1 on full.
    # The smaller models use hidden 64 (below the attention width) to stay small.
    "keqv": dict(hidden_size=64, intermediate_size=64, num_hidden_layers=6, layer_types=[S, S, F, S, S, F],
                 num_attention_heads=4, num_key_value_heads=2, num_global_key_value_heads=1,
                 attention_k_eq_v=True, head_dim=32, global_head_dim=64, num_kv_shared_layers=0,
                 hidden_size_per_layer_input=0, sliding_window=8, prompt_len=28, seed=7,
                 initializer_range=0.24),
    # (c) 26B-A4B-like: dense MLP + MoE block on every layer (4 experts, top-2), k_eq_v with
    # per-layer KV heads as the real one.
    "moe": dict(hidden_size=64, intermediate_size=64, num_hidden_layers=5, layer_types=[S, S, F, S, F],
                num_attention_heads=4, num_key_value_heads=2, num_global_key_value_heads=1,
                attention_k_eq_v=True, head_dim=32, global_head_dim=64, num_kv_shared_layers=0,
                hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=4, top_k_experts=2,
                moe_intermediate_size=32, sliding_window=8, prompt_len=24, seed=3,
                initializer_range=0.24),
    # (d) E2B-like without sharing (use_double_wide_mlp set but then a no-op).
    "noshare": dict(hidden_size=64, intermediate_size=64, num_hidden_layers=5, layer_types=[S, S, F, S, F],
                    num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                    num_kv_shared_layers=0, hidden_size_per_layer_input=16, use_double_wide_mlp=True,
                    sliding_window=16, prompt_len=36, seed=3,
                    initializer_range=0.24),
    # (e) HF's and llama.cpp's sharing rules disagree: HF 4 -> 3, 5 -> 2; llama.cpp 4 -> 2, 5 -> 3.
    # Compared with HF only.
    "hfrule": dict(hidden_size=64, intermediate_size=64, num_hidden_layers=6, layer_types=[S, S, F, S, S, F],
                   num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                   num_kv_shared_layers=2, hidden_size_per_layer_input=16, use_double_wide_mlp=True,
                   sliding_window=10, prompt_len=30, seed=1,
                   initializer_range=0.24),
}
LLAMACPP_MODELS = ["e2b", "keqv", "moe", "noshare"]
E2B_VARIANTS = ["f32", "f16", "q8_0", "q4_k_m"]


def hf_config(name):
    from transformers import Gemma4TextConfig

    c = {k: v for k, v in CONFIGS[name].items() if k not in ("prompt_len", "seed")}
    return Gemma4TextConfig(**dict(COMMON, **c))


def kv_sources(cfg):
    """(HF modes, HF source per layer, llama.cpp source per layer)."""
    modes = list(cfg.kv_sharing_modes)
    L, N = cfg.num_hidden_layers, cfg.num_kv_shared_layers
    store = {cfg.layer_types[i]: i for i, m in enumerate(modes) if m == "store"}
    hf = [store[cfg.layer_types[i]] if m == "reuse" else i for i, m in enumerate(modes)]
    lc = [i if i < L - N else (L - N) - (2 if cfg.layer_types[i] == S else 1) for i in range(L)]
    return modes, hf, lc


def randomize(model, seed):
    """Norm weights, layer_scalar, router scale / per_expert_scale start at 1 and the router
    projection is tiny at initializer_range: give them values that make them matter."""
    import torch

    g = torch.Generator().manual_seed(seed)
    uni = lambda t, lo, hi: t.copy_(lo + (hi - lo) * torch.rand(t.shape, generator=g, dtype=t.dtype))
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                uni(p, 0.2, 0.6)  # attention scale is 1: keep q.k around unit spread
            elif ".post_" in name and (name.endswith("norm.weight") or "layernorm" in name):
                uni(p, 1.0, 3.0)  # branch outputs outweigh the embedding: fewer self-repeats
            elif name.endswith("norm.weight") or "layernorm" in name:
                uni(p, 0.5, 1.5)
            elif name.endswith("layer_scalar"):
                uni(p, 0.4, 1.2)
            elif name.endswith(("router.scale", "router.per_expert_scale")):
                uni(p, 0.5, 1.5)
            elif name.endswith("router.proj.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 1.0)
    # everything that starts at 1 must have moved
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if "inv_freq" in name or "embed_scale" in name:
            continue
        assert not bool((p == 1).all()), f"{name} still all ones"


def build_model(name, work: Path, tok_dir: Path):
    import torch
    from transformers import Gemma4ForCausalLM

    spec = CONFIGS[name]
    cfg = hf_config(name)
    torch.manual_seed(spec["seed"])
    model = Gemma4ForCausalLM(cfg).to(torch.float32)
    randomize(model, spec["seed"] + 1000)
    model.eval()
    d = work / name
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, d / f)
    n = sum(p.numel() for p in model.parameters())
    print(f"{name}: {n} parameters saved to {d}")
    return d


def convert(model_dir: Path, outtype: str, out: Path, llama_cpp: Path):
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(model_dir),
           "--outtype", outtype, "--outfile", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"convert failed: {' '.join(cmd)}")
    print(f"  {out.name}: {out.stat().st_size} bytes")


def quantize(src: Path, dst: Path, ftype_name: str):
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"quantize {ftype_name} failed: {rc}")
    print(f"  {dst.name}: {dst.stat().st_size} bytes")


def gguf_name(name, variant="f32"):
    return f"{name}.{variant}.gguf"


# ----------------------------------------------------------------------------------------------
# HF logits
# ----------------------------------------------------------------------------------------------
def prompt_ids(name):
    spec = CONFIGS[name]
    rng = np.random.default_rng(spec["seed"])
    # ids spread over the whole vocab outside the specials: bytes, single characters, merges
    body = rng.choice(np.arange(BYTE_BASE, VOCAB), size=spec["prompt_len"] - 1, replace=False)
    return [2] + [int(t) for t in body]


def hf_run(model, ids):
    import torch

    with torch.no_grad():
        pre = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        seq, tokens, steps = list(ids), [], []
        for i in range(STEPS):
            logits = pre[-1] if i == 0 else \
                model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float().numpy()
            t = int(np.argmax(logits))
            steps.append(logits.copy())
            tokens.append(t)
            seq.append(t)
    return pre, tokens, np.stack(steps)


def fmt_row(row):
    assert np.all(np.isfinite(row))
    return "[" + ",".join("%.7g" % float(x) for x in row) + "]"


def top_entry(logits, k):
    """One greedy step's record: logits' top k as [[id, logit]] (stable order),
    the top-2 margin and the argmax."""
    order = np.argsort(-logits, kind="stable")
    top = [[int(t), float("%.7g" % logits[t])] for t in order[:k]]
    return top, float(logits[order[0]] - logits[order[1]]), int(order[0])


def top2_margin(row):
    s = sorted(row)
    return float("%.4g" % (s[-1] - s[-2]))


def quantize_with_binary(llama_bin: Path, src: Path, dst: Path, ftype: str, threads: int = 2):
    """llama-quantize from a llama.cpp build directory (llama_bin/llama-quantize)."""
    cmd = [str(llama_bin / "llama-quantize"), str(src), str(dst), ftype, str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"quantize failed: {' '.join(cmd)}")
    print(f"  {dst.name}: {dst.stat().st_size} bytes")


def vendored_gguf(llama_cpp: Path):
    """llama.cpp's own gguf-py (the one its converter uses; PyPI gguf 0.19.0
    lacks some of its tensor names), imported in place of any other."""
    path = str(llama_cpp / "gguf-py")
    mod = sys.modules.get("gguf")
    if mod is not None and not str(getattr(mod, "__file__", "")).startswith(path):
        for k in [k for k in sys.modules if k == "gguf" or k.startswith("gguf.")]:
            del sys.modules[k]
    if path not in sys.path:
        sys.path.insert(0, path)
    import gguf

    assert gguf.__file__.startswith(path), gguf.__file__
    return gguf


def dump_lines(head: dict, blocks: dict):
    """JSON: head fields one per line (dicts indented), then each block (a list of rows, or
    of pre-rendered strings) one row per line."""
    lines = ["{"]
    items = [(k, json.dumps(v, ensure_ascii=False, indent=1).replace("\n", "\n ") if isinstance(v, dict)
              else json.dumps(v, ensure_ascii=False)) for k, v in head.items()]
    for k, rows in blocks.items():
        items.append((k, "[\n" + ",\n".join("  " + r for r in rows) + "\n ]"))
    for i, (k, v) in enumerate(items):
        lines.append(f" {json.dumps(k)}: {v}" + ("," if i + 1 < len(items) else ""))
    return "\n".join(lines + ["}"]) + "\n"


def versions():
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "numpy": np.__version__}


def load_hf(name, work: Path):
    import torch
    from transformers import Gemma4ForCausalLM

    torch.set_num_threads(2)
    model = Gemma4ForCausalLM.from_pretrained(work / name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def write_hf(name, work: Path):
    model = load_hf(name, work)
    cfg = model.config
    ids = prompt_ids(name)
    pre, tokens, steps = hf_run(model, ids)
    pre2, tokens2, steps2 = hf_run(load_hf(name, work), ids)  # reloaded: must be bit-identical
    assert tokens == tokens2 and np.array_equal(pre, pre2) and np.array_equal(steps, steps2), \
        f"{name}: HF logits not deterministic"
    # a single full forward over the whole sequence must give the same rows (causality)
    import torch
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids + tokens[:-1]]), use_cache=False).logits[0].numpy()
    ref = np.concatenate([pre, steps[1:]])
    full_diff = float(np.max(np.abs(full - ref)))
    assert full_diff < 1e-4, (name, full_diff)
    modes, src, lc = kv_sources(cfg)
    saved = json.loads((work / name / "config.json").read_text())
    margins = np.sort(steps, axis=1)
    head = {
        "source": "HF transformers Gemma4ForCausalLM, CPU, fp32, eager attention, use_cache=False "
                  "(full recompute per step), greedy",
        "versions": versions(),
        "model": name,
        "gguf": gguf_name(name),
        "seed": CONFIGS[name]["seed"],
        "notes": "weights: torch.manual_seed(seed) init at initializer_range, then norm weights, "
                 "layer_scalar, router scale/per_expert_scale (and router proj) randomized with "
                 "torch.Generator(seed + 1000); one full forward over prompt + tokens[:-1] matches "
                 f"these rows to {full_diff:.2g}; two runs were bit-identical",
        "hf_config": saved,
        "layer_types": list(cfg.layer_types),
        "num_kv_shared_layers": cfg.num_kv_shared_layers,
        "kv_sharing_modes": modes,
        "kv_source_layer": src,
        "llamacpp_kv_source_layer": lc,
        "vocab_size": cfg.vocab_size,
        "prompt_ids": ids,
        "steps": STEPS,
        "min_top2_margin": float(np.min(margins[:, -1] - margins[:, -2])),
        "tokens": tokens,
    }
    text = dump_lines(head, {"prefill_logits": [fmt_row(r) for r in pre],
                             "step_logits": [fmt_row(r) for r in steps]})
    (OUT / f"{name}.hf.json").write_text(text)
    print(f"  {name}.hf.json: tokens {tokens[:8]}..., min top-2 margin {head['min_top2_margin']:.3f}, "
          f"{len(text)} bytes")


# ----------------------------------------------------------------------------------------------
# llama.cpp
# ----------------------------------------------------------------------------------------------
LLAMA_PARAMS = dict(n_ctx=128, n_batch=128, n_ubatch=128, logits_all=True, n_threads=2,
                    n_threads_batch=2, seed=0, verbose=False)


def llama_open(path: Path, **kw):
    import llama_cpp
    from llama_cpp import Llama

    params = dict(LLAMA_PARAMS, **kw)
    params.setdefault("type_k", llama_cpp.GGML_TYPE_F32)
    params.setdefault("type_v", llama_cpp.GGML_TYPE_F32)
    params.setdefault("flash_attn", False)
    return Llama(model_path=str(path), **params)


def tensor_types(path: Path):
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    return {t.name: t.tensor_type.name for t in r.tensors}


def hf_gelu16_logits(name, work: Path, seq):
    """HF's logits on seq with llama.cpp's CPU GELU (GGML_GELU_FP16: x rounded to fp16, tanh-GELU
    looked up in an fp16 table; identity above 10, 0 below -10) in place of HF's. Used only to
    show how much of the HF-vs-llama.cpp difference is that GELU."""
    import torch

    class Fp16TableGelu(torch.nn.Module):
        def forward(self, x):
            y = torch.nn.functional.gelu(x.half().float(), approximate="tanh").half().float()
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    model = load_hf(name, work)
    for m in model.modules():
        if hasattr(m, "act_fn"):
            m.act_fn = Fp16TableGelu()
    with torch.no_grad():
        return model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].double().numpy()


def llama_case(path: Path, hf: dict, gelu16=None):
    llm = llama_open(path)
    ids = hf["prompt_ids"]
    llm.reset()
    llm.eval(ids)
    top, tokens, margins = [], [], []
    for _ in range(STEPS):
        entry, margin, best = top_entry(np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64), TOP_K)
        top.append(entry)
        margins.append(margin)
        tokens.append(best)
        llm.eval([best])
    # teacher-forced: HF's sequence in one batch, every row against HF's logits
    seq = ids + hf["tokens"][:-1]
    llm.reset()
    llm.eval(seq)
    got = np.asarray(llm.scores[: len(seq)], dtype=np.float64)
    llm.reset()  # the same sequence one token per eval: llama.cpp's own noise floor
    single = []
    for t in seq:
        llm.eval([t])
        single.append(np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64))
    self_diff = np.abs(np.array(single) - got).max()
    ref = np.asarray(hf["prefill_logits"] + hf["step_logits"][1:], dtype=np.float64)
    diff = np.abs(got - ref)
    agree = 0
    while agree < STEPS and tokens[agree] == hf["tokens"][agree]:
        agree += 1
    vs = {
        "greedy_agree": agree,
        "first_divergence": None if agree == STEPS else agree,
        "margin_at_divergence": None if agree == STEPS else float("%.4g" % margins[agree]),
        "hf_margin_at_divergence": None if agree == STEPS else top2_margin(hf["step_logits"][agree]),
        "forced_max_abs_diff": float("%.4g" % diff.max()),
        "forced_max_rel_diff": float("%.4g" % (diff.max() / np.abs(ref).max())),
        "forced_argmax_agree": int(np.sum(np.argmax(got, 1) == np.argmax(ref, 1))),
        "forced_positions": len(seq),
        "llama_batch_vs_single_max_abs_diff": float("%.4g" % self_diff),
        "min_margin": float("%.4g" % min(margins)),
    }
    if gelu16 is not None:  # HF with llama.cpp's fp16-table GELU on the same sequence
        vs["forced_max_abs_diff_hf_fp16_gelu"] = float("%.4g" % np.abs(got - gelu16).max())
    del llm
    return {"gguf": path.name, "tensor_types": tensor_types(path), "prompt_ids": ids, "tokens": tokens,
            "top": top, "vs_hf": vs}


def write_llamacpp(name, work: Path):
    import llama_cpp

    hf = json.loads((OUT / f"{name}.hf.json").read_text())
    variants = E2B_VARIANTS if name == "e2b" else ["f32"]
    gelu16 = hf_gelu16_logits(name, work, hf["prompt_ids"] + hf["tokens"][:-1])
    cases = [llama_case(OUT / gguf_name(name, v), hf, gelu16) for v in variants]
    head = {
        "source": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp ggml-org/llama.cpp@0c1e57098), "
                  "CPU, greedy, logits_all",
        "system_info": llama_cpp.llama_cpp.llama_print_system_info().decode().strip(),
        "llama_params": dict(LLAMA_PARAMS, type_k="f32", type_v="f32", flash_attn=False),
        "model": name,
        "steps": STEPS,
        "top_k": TOP_K,
    }
    rows = []
    for c in cases:
        compact = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        rows.append("{" + ", ".join(f"{json.dumps(k)}: {compact(c[k])}"
                                     for k in ("gguf", "vs_hf", "tensor_types", "prompt_ids", "tokens"))
                    + ', "top": [\n' + ",\n".join("   " + compact(s) for s in c["top"]) + "\n  ]}")
    (OUT / f"{name}.llamacpp.json").write_text(dump_lines(head, {"cases": rows}))
    for c in cases:
        print(f"  {c['gguf']}: {c['vs_hf']}")


# ----------------------------------------------------------------------------------------------
# Tokenizer cases
# ----------------------------------------------------------------------------------------------
def tokenizer_strings():
    base = [
        "", " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\n\n\n\n\n", "\r\n", " \n ",
        "a", "A", "hello", "Hello", " hello", "hello ", " hello ", "  hello  world  ", "hello\tworld",
        "hello\n\nworld", "hello\n \nworld", "\nhello", "hello\n", "The quick brown fox jumps over the lazy dog.",
        "It was a bright cold day in April, and the clocks were striking thirteen.",
        "Tokens, tokens everywhere; not a byte to spare!",
        "don't won't can't it's I'm you're they've we'll",
        "UPPER lower MiXeD CaSe", "snake_case_name camelCaseName kebab-case-name",
        "3.14159 2.71828 1e-06 -42 +7 0x1F 0b1010 1_000_000", "$1,250,000.00 (12%)", "2024-05-17T12:34:56Z",
        "info@example.com https://example.com/path?q=1&r=2#frag",
        "def f(x):\n    return x * 2\n", "    indented four", "\tindented tab",
        "if (a && b || !c) { return a[i] + b->c; }", "for (int i = 0; i < n; ++i) {\n\tsum += x[i];\n}",
        "print(f\"step {i}: {fibonacci(i)}\")", "#include <cstdio>", "std::vector<float> v(512, 0.0f);",
        "SELECT * FROM t WHERE x >= 18;", "<div class=\"a\">x &amp; y</div>", "{\"k\": [1, 2, {\"z\": null}]}",
        "| a | b |\n|---|---|", "~`!@#$%^&*()-_=+[]{}\\|;:'\",.<>/?",
        "Déjà vu café crème brûlée", "Straße Größe Fluß", "¿Dónde está? ¡Olé!", "naïve façade coöperate",
        "Съешь же ещё этих мягких французских булок", "καλημέρα κόσμε", "東京は日本の首都です。",
        "今天天气很好", "안녕하세요", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "ไทย ภาษา",
        "Ελληνικά and English mixed 日本語 too", "😀", "🎉🎉🎉", "👍🏽", "❤️", "👨‍👩‍👧", "🇫🇷🇩🇪", "a😀b",
        "e\u0301", "cafe\u0301 vs café", "a\u0308\u0304", "\u0301 leading combining mark",
        "\u200b zero width space", "\u00a0non-breaking space", "\u3000ideographic space", "\ufeffBOM",
        "∀x ∈ ℝ, x² ≥ 0", "∑ᵢ aᵢ = 1", "π ≈ 3.14159", "α → β ⇒ γ", "½ ¼ ¾", "①②③", "ﬁ ligature",
        "\x00 nul", "\x7f del", "\x1b[31mred\x1b[0m", "tab\tand\ttabs\t\t\tend",
        "<|turn>", "<turn|>", "<|turn>user\nHi<turn|>\n<|turn>model\n", "<bos>", "<eos>", "<pad>", "<unk>",
        "<mask>", "<bos>text<eos>", "text <|turn> text", "<|turn><|turn>", "<|tur", "<|turn", "turn|>",
        "<|think|>", "<|channel>thought<channel|>", "<|tool_call>call:f{}<tool_call|>", '<|"|>quoted<|"|>',
        "<|tool_response>", "<tool_response|>", "<|image|><|audio|><|video|>", "< |turn>", "<|TURN>",
        "<0x41>", "<0xFF>", "<unused300>", "▁", "▁▁", "▁hello", "hello▁world", "▁ mixed ▁ ",
    ]
    words = ["the", "cache", "token", "layer", "window", "share", "key", "value", "model", "gemma",
             "fox", "dog", "tree", "apple", "x", "y", "42", "3.5", "é", "日本", "😀", "<|turn>", "\t", "\n"]
    rng = np.random.default_rng(2024)
    gen = []
    for n in range(130):  # random mixes of pieces, whitespace runs and unicode
        k = int(rng.integers(1, 9))
        parts = []
        for _ in range(k):
            parts.append(words[int(rng.integers(len(words)))])
            parts.append(["", " ", "  ", "   ", "\n", "\n\n", "\t", " \n"][int(rng.integers(8))])
        s = "".join(parts)
        if rng.random() < 0.2:
            s = " " + s
        gen.append(s)
    corpus_lines = [l for l in CORPUS.split("\n") if l.strip()]
    picks = [corpus_lines[i] for i in range(0, len(corpus_lines), 2)]
    chunks = [c for c in CORPUS.split("\n\n") if c.strip()][:12]
    out, seen = [], set()
    for s in base + gen + picks + chunks:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def llama_detokenize(llm, ids, special):
    """llama.cpp's own llama_detokenize (remove_special=False, unparse_special=special); the
    binding's Llama.detokenize would also drop a leading space after <bos>."""
    import llama_cpp

    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    size = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_detokenize(llm._model.vocab, arr, len(ids), buf, size, False, special)
    assert 0 <= n <= size, n
    return buf.raw[:n]


def write_tokcases():
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tok = Tokenizer.from_file(str(OUT / "tokenizer.json"))
    tok_split = Tokenizer.from_file(str(OUT / "tokenizer.json"))
    tok_split.encode_special_tokens = True
    auto = AutoTokenizer.from_pretrained(str(OUT), local_files_only=True)
    llm = llama_open(OUT / gguf_name("e2b"), vocab_only=True)
    cases, n_diff = [], 0
    for s in tokenizer_strings():
        c = {"text": s,
             "hf": tok.encode(s, add_special_tokens=False).ids,
             "hf_bos": tok.encode(s).ids,
             "hf_split_special": tok_split.encode(s, add_special_tokens=False).ids,
             "llama": llm.tokenize(s.encode(), add_bos=False, special=True),
             "llama_bos": llm.tokenize(s.encode(), add_bos=True, special=True),
             "llama_nospecial": llm.tokenize(s.encode(), add_bos=False, special=False)}
        assert auto(s)["input_ids"] == c["hf_bos"], s
        assert auto.encode(s, add_special_tokens=False) == c["hf"], s
        n_diff += c["hf"] != c["llama"]
        cases.append(c)
    dec_ids = [c["hf_bos"] for c in cases[::9]] + [
        [2, 5] + cases[20]["hf"] + [6], [BYTE_BASE + 0xE6, BYTE_BASE + 0x97, BYTE_BASE + 0xA5],
        [BYTE_BASE + 0xE6], [BYTE_BASE + 0xF0, BYTE_BASE + 0x9F], list(range(0, 40)), list(range(270, 330)),
        [VOCAB - 1, VOCAB - 2, VOCAB - 3], [1, 2, 3, 0, 4]]
    decode = []
    for ids in dec_ids:
        d = {"ids": ids,
             "hf": tok.decode(ids, skip_special_tokens=False),
             "hf_skip_special": tok.decode(ids, skip_special_tokens=True)}
        for key, special in (("llama", False), ("llama_special", True)):
            raw = llama_detokenize(llm, ids, special)
            d[key] = raw.decode("utf-8", errors="replace")
            if d[key].encode() != raw:
                d[key + "_hex"] = raw.hex()
        decode.append(d)
    head = {
        "source": f"tokenizers {versions()['tokenizers']}, transformers {versions()['transformers']}, "
                  "llama-cpp-python 0.3.36 (llama.cpp@0c1e57098)",
        "tokenizer": "tokenizer.json (+ tokenizer_config.json) in this folder",
        "gguf": gguf_name("e2b"),
        "modes": {
            "hf": "tokenizers.Tokenizer.from_file('tokenizer.json').encode(text, add_special_tokens=False).ids; "
                  "added/special token text (<bos>, <|turn>, ...) is matched as a token, as HF does by default; "
                  "equals AutoTokenizer.encode(text, add_special_tokens=False)",
            "hf_bos": "the same with add_special_tokens=True: the post-processor prepends <bos> (2); "
                      "equals AutoTokenizer(text)['input_ids']",
            "hf_split_special": "the same as hf with Tokenizer.encode_special_tokens = True: special-token text "
                                "is tokenized as ordinary text",
            "llama": "llama_cpp.Llama(gguf, vocab_only=True).tokenize(text.encode(), add_bos=False, special=True)",
            "llama_bos": "the same with add_bos=True",
            "llama_nospecial": "add_bos=False, special=False: CONTROL tokens are not parsed (USER_DEFINED ones, "
                               "which the converter makes of <|channel> <channel|> <|tool_call> <tool_call|> "
                               "<|tool_response> <tool_response|> <|\"|>, still are)",
            "decode.hf": "Tokenizer.decode(ids, skip_special_tokens=False); hf_skip_special: True",
            "decode.llama": "llama_cpp.llama_detokenize(vocab, ids, remove_special=False, unparse_special=False) "
                            "as UTF-8 with invalid bytes replaced (then llama_hex holds the raw bytes); "
                            "llama_special: unparse_special=True",
        },
        "hf_vs_llama_differences": n_diff,
    }
    compact = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    text = dump_lines(head, {"cases": [compact(c) for c in cases], "decode": [compact(d) for d in decode]})
    (OUT / "tokenizer_cases.json").write_text(text)
    print(f"tokenizer_cases.json: {len(cases)} strings, hf != llama (special=True, no bos) on {n_diff}")
    for c in cases:
        if c["hf"] != c["llama"]:
            print(f"  differs: {c['text']!r}: hf {c['hf']} llama {c['llama']}")


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------
def check_ggufs():
    from collections import Counter

    from gguf import GGUFReader, GGUFValueType

    for path in sorted(OUT.glob("*.gguf")):
        r = GGUFReader(str(path))
        print(f"== {path.name}: {path.stat().st_size} bytes, sha256 "
              f"{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}")
        for f in r.fields.values():
            if f.name == "tokenizer.ggml.token_type":
                names = {int(v): v.name for v in __import__("gguf").TokenType}
                print(f"  {f.name}: {dict(Counter(names[int(t)] for t in f.contents()))}")
            elif f.types and f.types[0] == GGUFValueType.ARRAY and len(f.data) > 64:
                print(f"  {f.name}: [{len(f.data)} items] {f.contents()[:6]}...")
            elif f.name == "tokenizer.chat_template":
                print(f"  {f.name}: [{len(f.contents())} chars]")
            else:
                print(f"  {f.name}: {f.contents()}")
        types = Counter(t.tensor_type.name for t in r.tensors)
        print(f"  {len(r.tensors)} tensors: {dict(types)}")
        for t in r.tensors:
            print(f"    {t.name} {list(map(int, t.shape))} {t.tensor_type.name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, default=Path(os.environ.get("LLAMA_CPP_DIR", DEFAULT_LLAMA_CPP)))
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--stages", default="tok,models,hf,llamacpp,tokcases,check")
    ap.add_argument("--models", default=",".join(CONFIGS))
    a = ap.parse_args()
    stages = a.stages.split(",")
    names = a.models.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    if "tok" in stages:
        build_tokenizer(OUT, a.llama_cpp)
    if "models" in stages:
        for name in names:
            d = build_model(name, a.work, OUT)
            convert(d, "f32", OUT / gguf_name(name), a.llama_cpp)
            if name == "e2b":
                convert(d, "f16", OUT / gguf_name(name, "f16"), a.llama_cpp)
                quantize(OUT / gguf_name(name), OUT / gguf_name(name, "q8_0"), "LLAMA_FTYPE_MOSTLY_Q8_0")
                quantize(OUT / gguf_name(name), OUT / gguf_name(name, "q4_k_m"), "LLAMA_FTYPE_MOSTLY_Q4_K_M")
    if "hf" in stages:
        for name in names:
            write_hf(name, a.work)
    if "llamacpp" in stages:
        for name in names:
            if name in LLAMACPP_MODELS:
                write_llamacpp(name, a.work)
    if "tokcases" in stages:
        write_tokcases()
    if "check" in stages:
        check_ggufs()


if __name__ == "__main__":
    main()
