"""Writes tests/fixtures/gemma3n/: tiny random-weight Gemma 3n text decoders (Gemma3nForCausalLM,
GGUF arch "gemma3n") as GGUF, with HF transformers' logits and intermediate activations and
llama.cpp's greedy outputs on them. Run by hand, never in CI; only its outputs (small GGUFs, a
SentencePiece tokenizer.model and JSON, plain data) are kept in the tree. The reference environment
(torch, transformers, sentencepiece, llama.cpp's converter and binaries) lives outside the repo.

Set-up in REF ($KVSHARE_REF_DIR, outside the repo; see tests/tools/gemma4_fixtures.py and gemma4_assistant_fixtures.py for the
venv, the llama-cpp-python 0.3.36 sdist and the llama.cpp builds):

  $REF/venv                 torch, transformers==5.23.0, tokenizers, safetensors, sentencepiece, gguf
  $REF/llama_cpp_python-0.3.36/vendor/llama.cpp      convert_hf_to_gguf.py, gguf-py, sources
  $REF/llama-build/bin      llama-quantize (native build)
  WORK/llama/lcdump, WORK/llama/bin/libllama.so*   the patched libllama and its driver (below), built
                                 outside the repo from a llama.cpp build without AMX
  $REF/venv/bin/python tests/tools/gemma3n_fixtures.py \
      [--llama-cpp DIR] [--llama-bin DIR] [--work $REF/gemma3n_work] \
      [--stages tok,models,hf,llamacpp,check] [--models e2b,pattern5]

Versions used for the committed fixtures: Python 3.11.7, torch 2.15.0 (+cu132 wheel, run on CPU,
2 threads, deterministic algorithms), transformers 5.23.0, tokenizers 0.23.3, safetensors 0.8.0,
sentencepiece 0.2.3, numpy 2.4.6, llama.cpp ggml-org/llama.cpp@0c1e57098 (vendored in llama-cpp-python
0.3.36: its convert_hf_to_gguf.py + gguf-py, llama-quantize, and libllama patched as below).

WHY A PATCHED libllama: llama.cpp@0c1e57098 ignores the Gemma 3n GGUF keys its own converter writes and
hardcodes the E2B/E4B values (src/models/gemma3n.cpp:7, src/models/models.h:843-844,
src/llama-hparams.h:264-267): altup num_inputs 4, active_idx 0, laurel rank 64, per-layer-input width
256, KV-owning layers 20, activation sparsity on layers 0..9 at icdf(0.95). A model honouring all of
that has a per-layer embedding table of vocab x n_layer(>= 21) x 256 (11 MB in f32 at vocab 512), so the
fixtures are smaller models and llama.cpp is run with a patch to src/models/gemma3n.cpp only, reading
gemma3n.altup.num_inputs / altup.active_idx / embedding_length_per_layer_input /
attention.shared_kv_layers (n_layer_kv_from_start = n_layer - it) / activation_sparsity_scale
(per layer; -inf = dense) and the laurel rank from blk.0.laurel_l's shape, falling back to the old
constants when a key is missing. One change to the graph: the Gaussian top-k's std divides by n, as
HF's torch.std(unbiased=False), instead of llama.cpp's n - 1 (src/models/gemma3n.cpp:394-395), unless
KVSHARE_GEMMA3N_N1_STD is set in the environment. On these 256-wide gates n - 1 alone moves the logits
by 0.1-0.3 (on the real 8192/16384-wide ones by ~1e-4 sigma of the cutoff, i.e. nothing), which would
swamp every other comparison; both are recorded (FORMATS). Checked: with KVSHARE_GEMMA3N_N1_STD set
and llama.cpp's own icdf(0.95) constant in the GGUF, the patched and the unpatched libllama give
bit-identical logits on a model that honours all the hardcoded values. The patch and its build are
kept out of the repo (we run references, we do not ship their code). The driver, WORK/llama/lcdump,
uses only llama.cpp's C API: `lcdump GGUF OUT.f32 greedy|batch|single STEPS IDS` (IDS comma-separated)
loads the model with one context (n_ctx = n_batch = n_ubatch 128, 2 threads, F32 K/V, no flash
attention) and writes full logits rows as little-endian f32 to OUT: greedy = the prompt in one batch
then STEPS greedy tokens one per decode (a row per step); batch = IDS in one batch, every row; single
= one token per decode, a row each. It prints "N_VOCAB n" and "SYSTEM_INFO ..." on stdout, and the
patched libllama logs "[kvshare patch] ..." on stderr, which is checked on every run.

KV-SHARED LAYERS IN THE CHECKPOINT: transformers 5.23 builds no k_proj / v_proj / k_norm for KV-shared
layers (modeling_gemma3n.py:1185-1193) and drops them on load (1627-1633: an ignore list kept for
exactly these keys, i.e. Google's released checkpoints carry them), and llama.cpp requires
blk.N.attn_k / attn_v / attn_k_norm on every layer (src/models/gemma3n.cpp:50,54; create_tensor_qkv
flags 0; without them: "check_tensor_dims: tensor 'blk.4.attn_k.weight' not found"). "models" therefore
adds seeded random, UNUSED k_proj / v_proj / k_norm for the shared layers to model.safetensors after
save_pretrained() (checked: HF reloads the folder with identical logits); a correct implementation never
reads them.

Stages (all by default, in this order):
  tok       trains a SentencePiece BPE (512 pieces, byte fallback, Gemma ids <pad> 0 <eos> 1 <bos> 2
            <unk> 3, then <mask> <start_of_turn> <end_of_turn> "\n" "\t" as user-defined pieces 4-8, the
            256 byte pieces 9-264) on CORPUS (tests/tools/gemma4_fixtures.py) +
            tests/fixtures/text/public_domain.txt, twice (must be byte-identical), writes tokenizer.model,
            tokenizer_config.json (ids 0-6 in added_tokens_decoder as special, so the converter marks
            them CONTROL) and .gitignore (un-ignores *.gguf here). No chat template.
  models    each config in CONFIGS as a Gemma3nForCausalLM (fp32, eager, seeded), randomizes every norm
            weight, correct_output_scale (starts at 0) and the AltUp router / coefficients (so that
            AltUp, Laurel and the per-layer inputs all matter), save_pretrained()s it with the tokenizer
            into WORK/<name>, adds the unused shared-layer K/V (above), converts it with
            convert_hf_to_gguf.py (--outtype f32; e2b also f16), and quantizes e2b.f32.gguf with
            llama-quantize to Q8_0 and Q4_K_M.
  hf        <name>.hf.json: HF's logits (FORMATS), computed twice (model reloaded, bit-identical), one
            full forward over the whole sequence (must match to 1e-4), HF generate() with its KV cache
            (tokens must equal), and the activations of this script's Reference implementation of the
            forward pass (written from the notes), checked against HF's logits and HF's own decoder
            layer outputs (forward hooks).
  llamacpp  <name>.llamacpp.json: lcdump's greedy run, a teacher-forced batch over HF's sequence, and
            the same sequence one token per decode, per GGUF; compared with the HF fixture and with HF
            run with llama.cpp's numerics emulated (fp16-table GELU, n-1 std).
  check     reads every GGUF back with llama.cpp's gguf-py and prints sha256, keys and tensors.

FORMATS (floats %.7g; one row per line):
  <name>.hf.json
    source, versions, model, gguf (the f32 file converted from the same weights), seed, notes,
    hf_config        config.json exactly as save_pretrained wrote it
    layer_types, num_kv_shared_layers, activation_sparsity_pattern,
    sparsity_std_multiplier  per layer: Normal(0,1).icdf(p) in float32 (null where p = 0: dense);
                     the GGUF key holds -inf there
    kv_sharing_modes HF's Gemma3nTextConfig.kv_sharing_modes (None | "store" | "reuse")
    kv_source_layer  per layer: the layer whose K/V it attends to under HF's rule (itself if owning)
    llamacpp_kv_source_layer  the same under llama.cpp's rule (il >= L-N reads L-N-2 if sliding else
                     L-N-1), equal here by construction
    unused_checkpoint_tensors  the shared-layer tensors added to the checkpoint (never read)
    vocab_size, prompt_ids (starts with <bos> = 2), steps,
    min_top2_margin  smallest top-1 minus top-2 logit over step_logits
    tokens           HF's greedy tokens (full recompute per step, use_cache=False)
    hf_cached_generate_equal  HF generate(do_sample=False) with its DynamicCache gives the same tokens
    reference_vs_hf  max abs diff of the Reference's logits / every decoder layer's 4 output streams vs HF
    activations      {positions, notes, rows}: rows one per line, {name, pos, n, first8, l2} = the vector's
                     length, first 8 values and L2 norm at that position of one prefill forward over
                     prompt_ids (names and their meaning in "notes"; all from the Reference, which matches
                     HF to reference_vs_hf)
    prefill_logits   [len(prompt_ids)][vocab]: logits at every prompt position (row j predicts the
                     token after prompt_ids[j])
    step_logits      [steps][vocab]: row i predicts tokens[i] (row 0 == prefill_logits[-1])
  <name>.llamacpp.json
    source, patch (what was changed, see above), system_info, llama_params (context), model, steps, top_k,
    cases: one per GGUF of that model (e2b: f32, f16, q8_0, q4_k_m), the patched libllama with HF's
    population std in the Gaussian top-k, each with
      gguf, tensor_types {tensor name: ggml type}, prompt_ids,
      tokens           llama.cpp's greedy tokens (prompt in one batch, then one token per decode)
      top              [steps][top_k] of [token, logit], best first, at step i (predicting tokens[i])
      vs_hf            greedy_agree (leading steps equal to HF's tokens), first_divergence (step or
                       null), margin_at_divergence / hf_margin_at_divergence, min_margin (llama.cpp's
                       smallest top-2 margin over its steps), forced_positions, forced_max_abs_diff /
                       forced_max_rel_diff / forced_argmax_agree: llama.cpp on HF's sequence (prompt +
                       HF tokens[:-1], one batch, every row) vs HF's prefill_logits + step_logits;
                       forced_max_abs_diff_vs_hf_emulated {fp16_gelu, n1_std, both}: the same against
                       HF run with llama.cpp's fp16-table GELU, its n-1 std in the Gaussian top-k, or
                       both; forced_max_abs_diff_vs_hf_dequantized_emulated: against HF run on this
                       file's own weights dequantized to f32 (gguf-py), with the fp16 GELU and this run's
                       std, i.e. what is left of llama.cpp vs HF besides the weights (for the quantized
                       files: llama.cpp's own activation quantization and kernel order);
                       llama_batch_vs_single_max_abs_diff: llama.cpp's one batch vs one token per
                       decode on that sequence (its own noise floor).
    cases_llamacpp_n1_std: the same runs with llama.cpp's own n - 1 std (KVSHARE_GEMMA3N_N1_STD=1).
"""
import argparse
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemma4_fixtures import (CORPUS, dump_lines, fmt_row, quantize_with_binary, top2_margin,  # noqa: E402
                             top_entry, vendored_gguf)  # (same corpus, JSON style and llama.cpp tools)

OUT = ROOT / "tests" / "fixtures" / "gemma3n"
TEXT = ROOT / "tests" / "fixtures" / "text" / "public_domain.txt"
# Where the local references live (never part of the repository): $KVSHARE_REF_DIR.
REF = Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref"))
DEFAULT_LLAMA_CPP = REF / "llama_cpp_python-0.3.36/vendor/llama.cpp"
DEFAULT_LLAMA_BIN = REF / "llama-build/bin"
DEFAULT_WORK = REF / "gemma3n_work"

STEPS = 32
TOP_K = 8
VOCAB = 512
THREADS = 2
BOS = 2

# ----------------------------------------------------------------------------------------------
# Tokenizer: SentencePiece BPE (the gemma3n converter takes tokenizer.model when present,
# conversion/gemma.py:134-139, and writes tokenizer.ggml.model "llama")
# ----------------------------------------------------------------------------------------------
SPM_USER_DEFINED = ["<mask>", "<start_of_turn>", "<end_of_turn>", "\n", "\t"]  # ids 4..8
SPM_ARGS = dict(model_type="bpe", vocab_size=VOCAB, character_coverage=0.98, byte_fallback=True,
                split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
                normalization_rule_name="identity", add_dummy_prefix=False,
                pad_id=0, eos_id=1, bos_id=2, unk_id=3,
                pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
                user_defined_symbols=SPM_USER_DEFINED, num_threads=1, input_sentence_size=0,
                shuffle_input_sentence=False, minloglevel=2)


def _train_spm(lines):
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, **SPM_ARGS)
    return buf.getvalue()


def build_tokenizer(out_dir: Path):
    import sentencepiece as spm

    text = CORPUS + "\n" + TEXT.read_text()
    lines = [l for l in text.split("\n") if l.strip()]
    a, b = _train_spm(lines), _train_spm(lines)
    assert a == b, "SentencePiece training is not deterministic"
    sp = spm.SentencePieceProcessor(model_proto=a)
    assert sp.get_piece_size() == VOCAB
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<eos>", "<bos>", "<unk>"]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokenizer.model").write_bytes(a)
    # as Gemma's tokenizer_config.json: the specials in added_tokens_decoder (the converter makes them
    # CONTROL, conversion/base.py:2150-2170; "\n" and "\t" stay NORMAL pieces)
    decoder = {str(i): {"content": sp.id_to_piece(i), "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True} for i in range(7)}
    cfg = {
        "tokenizer_class": "GemmaTokenizer",
        "added_tokens_decoder": decoder,
        "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
        "add_bos_token": True, "add_eos_token": False,
        "model_max_length": 512,
        "padding_side": "left",
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out_dir / ".gitignore").write_text("# The tiny random-weight fixture models are committed (the root .gitignore "
                                        "keeps real models out).\n!*.gguf\n")
    pieces = [sp.id_to_piece(i) for i in range(VOCAB)]
    n_bytes = sum(1 for p in pieces if re.fullmatch(r"<0x[0-9A-F]{2}>", p))
    n_multi = sum(1 for i, p in enumerate(pieces) if i >= 9 + n_bytes and len(p) > 1)
    print(f"tokenizer.model: {len(a)} bytes, {VOCAB} pieces ({n_bytes} byte pieces, {n_multi} merges), "
          f"sha256 {hashlib.sha256(a).hexdigest()[:16]}")


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------
S, F = "sliding_attention", "full_attention"

# Every config: prompt + STEPS longer than sliding_window; HF's and llama.cpp's KV-sharing rules agree
# (layer L-N-1 full, L-N-2 sliding); sparse layers first, dense after (as the real models: 10 of 30/35).
# Seeds picked by hand from a few so that HF's greedy steps have a top-2 margin >= ~0.05 and do not
# just repeat one token.
COMMON = dict(vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, max_position_embeddings=512,
              rms_norm_eps=1e-6, final_logit_softcapping=30.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
              tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh", altup_num_inputs=4,
              altup_active_idx=0, altup_coef_clip=120.0, altup_correct_scale=True,
              architectures=["Gemma3nForCausalLM"])
CONFIGS = {
    # (a) E2B-like, small: 6 layers S S S F S F, the last 2 KV-shared (4 -> 2, 5 -> 3 under both rules),
    # activation sparsity 0.95 on layers 0-1, Laurel rank 16, per-layer inputs 16 wide, GQA 2:1.
    # intermediate 256 (not smaller): with 0.95 sparsity only ~5% of the gate survives, and at 64 a token
    # often keeps 0-2 entries, where post_feedforward_layernorm turns a marginal survivor into a full-size
    # branch: the model becomes hypersensitive (f16 weights moved logits by up to 3). 256-wide rows also
    # give ffn_down real K-quants in Q4_K_M.
    "e2b": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=6, layer_types=[S, S, S, F, S, F],
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_kv_shared_layers=2,
                hidden_size_per_layer_input=16, laurel_rank=16,
                activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0, 0.0, 0.0],
                sliding_window=12, prompt_len=32, seed=60, initializer_range=0.12),
    # (b) the real models' layer pattern (HF's default layer_types: every 5th layer full) and sharing
    # shape in miniature: 10 layers, the last 5 shared (5-8 -> 3, 9 -> 4), per-layer sparsity
    # multipliers that differ (0.95, 0.95, 0.9, 0.8, then dense), non-default RoPE thetas,
    # 4 heads / 2 KV heads of 16, per-layer inputs 8 wide, Laurel rank 8.
    "pattern5": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=10, layer_types=None,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_kv_shared_layers=5,
                     hidden_size_per_layer_input=8, laurel_rank=8,
                     activation_sparsity_pattern=[0.95, 0.95, 0.9, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                     rope_parameters={S: {"rope_type": "default", "rope_theta": 20000.0},
                                      F: {"rope_type": "default", "rope_theta": 500000.0}},
                     sliding_window=8, prompt_len=24, seed=12, initializer_range=0.12),
}
E2B_VARIANTS = ["f32", "f16", "q8_0", "q4_k_m"]


def hf_config(name):
    from transformers import Gemma3nTextConfig

    c = {k: v for k, v in CONFIGS[name].items() if k not in ("prompt_len", "seed") and v is not None}
    return Gemma3nTextConfig(**dict(COMMON, **c))


def kv_sources(cfg):
    """(HF modes, HF source per layer, llama.cpp source per layer)."""
    modes = list(cfg.kv_sharing_modes)
    L, N = cfg.num_hidden_layers, cfg.num_kv_shared_layers
    first = L - N
    last = {t: max(i for i in range(first) if cfg.layer_types[i] == t) for t in set(cfg.layer_types)}
    hf = [last[cfg.layer_types[i]] if m == "reuse" else i for i, m in enumerate(modes)]
    lc = [i if i < first else first - (2 if cfg.layer_types[i] == S else 1) for i in range(L)]
    return modes, hf, lc


def sparsity_multipliers(cfg):
    import torch

    out = []
    for p in cfg.activation_sparsity_pattern:
        if p > 0.0:
            out.append(float(torch.distributions.normal.Normal(0, 1).icdf(torch.tensor(p, dtype=torch.float32))))
        else:
            out.append(None)
    return out


def randomize(model, seed):
    """Give everything that starts at 1 (norm weights) or 0 (correct_output_scale) values that matter,
    and make the AltUp router / coefficients large enough that the streams mix: the router reads
    RMSNorm(x) / hidden_size, so its weights need a scale of ~sqrt(hidden) for tanh(.) to be far from 0
    (0.3 sqrt(hidden) here; sqrt(hidden) and coefficient std 0.3 made the model ~5x more sensitive to
    weight rounding). The final norm weight (1.5-3) spreads the logits (~+-9) for clearer greedy margins."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            randomize_text_param(name, p, g, model.config.hidden_size)
    for name, p in model.named_parameters():  # everything that starts at 1 or 0 must have moved
        assert not bool((p == 1).all()) and not bool((p == 0).all()), f"{name} still constant"


def randomize_text_param(name, p, g, hidden, final_norm="model.norm.weight"):
    """randomize's rule for one text parameter (drawing from g); False where none applies
    (tests/tools/vision_gemma3n_fixture.py uses it for the multimodal model's text part)."""
    import torch

    uni = lambda t, lo, hi: t.copy_(lo + (hi - lo) * torch.rand(t.shape, generator=g, dtype=t.dtype))
    if name == final_norm:
        uni(p, 1.5, 3.0)
    elif name.endswith(("q_norm.weight", "k_norm.weight")):
        uni(p, 0.2, 0.6)  # attention scale is 1: keep q.k around unit spread
    elif name.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")):
        uni(p, 1.0, 3.0)  # branch outputs outweigh the residual: fewer self-repeats
    elif name.endswith("norm.weight"):
        uni(p, 0.5, 1.5)
    elif name.endswith("altup.correct_output_scale"):
        uni(p, 0.5, 1.5)
    elif name.endswith("altup.modality_router.weight"):
        p.copy_(torch.randn(p.shape, generator=g) * 0.3 * (hidden ** 0.5))
    elif name.endswith(("altup.prediction_coefs.weight", "altup.correction_coefs.weight")):
        p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    else:
        return False
    return True


def unused_shared_kv(model, seed):
    """Random k_proj / v_proj / k_norm weights for the KV-shared layers (absent from HF 5.23's model)."""
    import torch

    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i, m in enumerate(cfg.kv_sharing_modes):
        if m != "reuse":
            continue
        p = f"model.layers.{i}.self_attn."
        kv = cfg.num_key_value_heads * cfg.head_dim
        out[p + "k_proj.weight"] = torch.randn(kv, cfg.hidden_size, generator=g) * cfg.initializer_range
        out[p + "v_proj.weight"] = torch.randn(kv, cfg.hidden_size, generator=g) * cfg.initializer_range
        out[p + "k_norm.weight"] = 0.2 + 0.4 * torch.rand(cfg.head_dim, generator=g)
    return out


def torch_setup():
    import torch

    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    return torch


def load_hf(name, work: Path):
    import torch
    from transformers import Gemma3nForCausalLM

    m = Gemma3nForCausalLM.from_pretrained(work / name, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def build_model(name, work: Path, tok_dir: Path):
    torch = torch_setup()
    from safetensors.torch import load_file, save_file
    from transformers import Gemma3nForCausalLM

    spec = CONFIGS[name]
    cfg = hf_config(name)
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = Gemma3nForCausalLM(cfg).to(torch.float32)
    randomize(model, spec["seed"] + 1000)
    model.eval()
    d = work / name
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d)
    for f in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, d / f)
    extra = unused_shared_kv(model, spec["seed"] + 2000)
    if extra:
        st = d / "model.safetensors"
        tensors = load_file(str(st))
        assert not set(extra) & set(tensors)
        tensors.update(extra)
        save_file({k: tensors[k].contiguous() for k in sorted(tensors)}, str(st), metadata={"format": "pt"})
    ids = torch.tensor([prompt_ids(name)])
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        got = load_hf(name, work)(input_ids=ids, use_cache=False).logits
    assert torch.equal(ref, got), f"{name}: reloaded model differs"
    (d / "unused_tensors.json").write_text(json.dumps(sorted(extra)))
    n = sum(p.numel() for p in model.parameters())
    print(f"{name}: {n} parameters (+ {sum(v.numel() for v in extra.values())} unused shared-layer K/V) -> {d}")
    return d


def convert(model_dir: Path, outtype: str, out: Path, llama_cpp: Path):
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(model_dir),
           "--outtype", outtype, "--outfile", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"convert failed: {' '.join(cmd)}")
    print(f"  {out.name}: {out.stat().st_size} bytes")
    return r.stdout + r.stderr


def gguf_name(name, variant="f32"):
    return f"{name}.{variant}.gguf"


def prompt_ids(name):
    spec = CONFIGS[name]
    rng = np.random.default_rng(spec["seed"])
    # ids spread over the vocab outside the specials / user-defined pieces: bytes, characters, merges
    body = rng.choice(np.arange(9, VOCAB), size=spec["prompt_len"] - 1, replace=False)
    return [BOS] + [int(t) for t in body]


# ----------------------------------------------------------------------------------------------
# Reference implementation of Gemma3nForCausalLM.forward (fp32 torch, from the notes)
# ----------------------------------------------------------------------------------------------
class Reference:
    """Independent re-implementation of the HF forward pass over a whole sequence (no cache), written
    from the fixture notes. Records named intermediate vectors at chosen positions."""

    def __init__(self, model):
        import torch

        self.torch = torch
        self.cfg = model.config
        self.w = {k: v.detach() for k, v in model.state_dict().items()}
        c = self.cfg
        self.inv = {}
        for lt in set(c.layer_types):
            base = c.rope_parameters[lt]["rope_theta"]
            d = c.head_dim
            self.inv[lt] = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float) / d))

    def rms(self, x, w=None):
        torch = self.torch
        y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps, -0.5)
        return y * w if w is not None else y

    def lin(self, x, name):
        return self.torch.nn.functional.linear(x, self.w[name])

    def gelu(self, x):
        return self.torch.nn.functional.gelu(x, approximate="tanh")

    def forward(self, ids, record_pos=()):
        torch, c, w = self.torch, self.cfg, self.w
        rec = []
        self.layer_out = {}

        def note(name, t):  # t [T, n]
            for p in record_pos:
                v = t[p].double().numpy()
                rec.append({"name": name, "pos": int(p), "n": int(v.size),
                            "first8": [float("%.7g" % x) for x in v[:8]], "l2": float("%.7g" % np.linalg.norm(v))})

        T = len(ids)
        H, L, P, A = c.hidden_size, c.num_hidden_layers, c.hidden_size_per_layer_input, c.altup_num_inputs
        idt = torch.tensor([ids])
        # 1. embeddings
        e = w["model.embed_tokens.weight"][idt] * torch.tensor(H ** 0.5)  # [1,T,H]
        note("embed_scaled", e[0])
        ple_ids = torch.where((idt >= 0) & (idt < c.vocab_size_per_layer_input), idt, 0)
        raw = (w["model.embed_tokens_per_layer.weight"][ple_ids] * torch.tensor(P ** 0.5)).reshape(1, T, L, P)
        proj = self.lin(e, "model.per_layer_model_projection.weight") * torch.tensor(H ** -0.5)
        proj = self.rms(proj.reshape(1, T, L, P), w["model.per_layer_projection_norm.weight"])
        ple = (proj + raw) * torch.rsqrt(torch.tensor(2.0))  # [1,T,L,P]
        for l in sorted({0, L - 1}):
            note(f"ple_raw.L{l}", raw[0, :, l])
            note(f"ple_proj_normed.L{l}", proj[0, :, l])
            note(f"ple_input.L{l}", ple[0, :, l])
        # 2. AltUp streams
        mag = torch.mean(e ** 2, dim=-1, keepdim=True) ** 0.5
        xs = [e]
        for i in range(1, A):
            a = self.lin(e, f"model.altup_projections.{i - 1}.weight")
            nm = torch.sqrt(torch.mean(a ** 2, dim=-1, keepdim=True).clamp(min=1e-5))
            xs.append(a * mag / nm)
        x = torch.stack(xs, dim=0)  # [A,1,T,H]
        for k in range(A):
            note(f"altup_init.s{k}", x[k, 0])
        # masks [T,T] (True = visible)
        q_i = torch.arange(T)[:, None]
        k_i = torch.arange(T)[None, :]
        vis = {F: k_i <= q_i, S: (k_i <= q_i) & (k_i > q_i - c.sliding_window)}
        pos = torch.arange(T)[None].float()
        rope = {}
        for lt, inv in self.inv.items():
            fr = pos[..., None] * inv
            emb = torch.cat((fr, fr), dim=-1)
            rope[lt] = (emb.cos(), emb.sin())  # [1,T,d]
        modes, src, _ = kv_sources(c)
        kv = {}
        shared_first = L - c.num_kv_shared_layers
        detail = {0, shared_first if c.num_kv_shared_layers else 0, L - 1}
        for l in range(L):
            p = f"model.layers.{l}."
            lt = c.layer_types[l]
            dn = (lambda n, t: note(f"L{l}.{n}", t)) if l in detail else (lambda n, t: None)
            # predict
            mod = torch.tanh(self.lin(self.rms(x[0], w[p + "altup.router_norm.weight"]) * torch.tensor(H ** -1.0),
                                      p + "altup.modality_router.weight"))  # [1,T,A]
            dn("predict.modalities", mod[0])
            coef = self.lin(mod, p + "altup.prediction_coefs.weight")  # [1,T,A*A]; row j = coef[A*j : A*j+A]
            dn("predict.coefs", coef[0])
            # pred_j = x_j + sum_i coef[A*j + i] * x_i, as HF's matmul over the stream axis
            cm = coef.reshape(1, T, A, A).permute(0, 1, 3, 2)  # cm[..., i, j] = coef[A*j + i]
            pred = torch.matmul(x.permute(1, 2, 3, 0), cm).permute(3, 0, 1, 2) + x
            for k in range(A):
                dn(f"predict.s{k}", pred[k, 0])
            act = pred[c.altup_active_idx]
            xn = self.rms(act, w[p + "input_layernorm.weight"])
            dn("attn_norm", xn[0])
            lau = xn + self.rms(self.lin(self.lin(xn, p + "laurel.linear_left.weight"), p + "laurel.linear_right.weight"),
                                w[p + "laurel.post_laurel_norm.weight"])
            dn("laurel_out", lau[0])
            # attention
            nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
            cos, sin = rope[lt]

            def rot(t):  # t [1,T,h,d]
                h2 = t.shape[-1] // 2
                rh = torch.cat((-t[..., h2:], t[..., :h2]), dim=-1)
                return t * cos[:, :, None] + rh * sin[:, :, None]

            q = self.rms(self.lin(xn, p + "self_attn.q_proj.weight").view(1, T, nh, hd), w[p + "self_attn.q_norm.weight"])
            q = rot(q)
            dn("q_rope.h0", q[0, :, 0])
            if modes[l] == "reuse":
                K, V = kv[src[l]]
            else:
                K = rot(self.rms(self.lin(xn, p + "self_attn.k_proj.weight").view(1, T, nkv, hd),
                                 w[p + "self_attn.k_norm.weight"]))
                V = self.rms(self.lin(xn, p + "self_attn.v_proj.weight").view(1, T, nkv, hd))
                kv[l] = (K, V)
                dn("k_rope.h0", K[0, :, 0])
                dn("v_norm.h0", V[0, :, 0])
            g = nh // nkv
            Kh = K.transpose(1, 2).repeat_interleave(g, dim=1)  # [1,nh,T,hd]
            Vh = V.transpose(1, 2).repeat_interleave(g, dim=1)
            sc = torch.matmul(q.transpose(1, 2), Kh.transpose(2, 3)) * 1.0
            sc = sc.masked_fill(~vis[lt], float("-inf"))
            att = torch.softmax(sc, dim=-1, dtype=torch.float32)
            o = torch.matmul(att, Vh).transpose(1, 2).reshape(1, T, nh * hd)
            dn("attn_heads", o[0])
            o = self.lin(o, p + "self_attn.o_proj.weight")
            o = self.rms(o, w[p + "post_attention_layernorm.weight"])
            dn("attn_post_norm", o[0])
            al = (act + o + lau) / (2 ** 0.5)
            dn("attn_laurel", al[0])
            # MLP with activation sparsity
            m = self.rms(al, w[p + "pre_feedforward_layernorm.weight"])
            gate = self.lin(m, p + "mlp.gate_proj.weight")
            dn("ffn_gate", gate[0])
            s = c.activation_sparsity_pattern[l]
            if s > 0.0:
                mult = torch.distributions.normal.Normal(0, 1).icdf(torch.tensor(s, dtype=torch.float32))
                cut = gate.mean(-1, keepdim=True) + gate.std(-1, keepdim=True, unbiased=False) * mult
                gate = torch.relu(gate - cut)
                dn("ffn_gate_sparse", gate[0])
            f = self.lin(self.gelu(gate) * self.lin(m, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight")
            dn("ffn_out", f[0])
            f = self.rms(f, w[p + "post_feedforward_layernorm.weight"])
            out = al + f
            dn("attn_ffw_laurel_gated", out[0])
            # correct
            mod2 = torch.tanh(self.lin(self.rms(out, w[p + "altup.router_norm.weight"]) * torch.tensor(H ** -1.0),
                                       p + "altup.modality_router.weight"))
            dn("correct.modalities", mod2[0])
            cc = self.lin(mod2, p + "altup.correction_coefs.weight") + 1.0  # [1,T,A]
            dn("correct.coefs_plus1", cc[0])
            inn = out - pred[c.altup_active_idx]
            cor = torch.stack([pred[j] + inn * cc[..., j:j + 1] for j in range(A)])
            for k in range(A):
                dn(f"corrected.s{k}", cor[k, 0])
            # per-layer input
            fp = cor[c.altup_active_idx]
            if c.altup_correct_scale:
                fp = fp * w[p + "altup.correct_output_scale"]
            fp = self.gelu(self.lin(fp, p + "per_layer_input_gate.weight")) * ple[:, :, l]
            dn("ple_gated", fp[0])
            fp = self.rms(self.lin(fp, p + "per_layer_projection.weight"), w[p + "post_per_layer_input_norm.weight"])
            dn("ple_out", fp[0])
            x = torch.cat([cor[:1], cor[1:] + fp], dim=0)
            for k in range(A):
                note(f"L{l}.out.s{k}", x[k, 0])
            self.layer_out[l] = x.clone()
        # final: AltUp unembedding, mean, norm, tied head, softcap
        mag = torch.mean(x[0] ** 2, dim=-1, keepdim=True) ** 0.5
        ys = [x[0]]
        for i in range(1, A):
            u = self.lin(x[i], f"model.altup_unembed_projections.{i - 1}.weight")
            nm = torch.sqrt(torch.mean(u ** 2, dim=-1, keepdim=True).clamp(min=1e-5))
            ys.append(u * mag / nm)
            note(f"final.unembed.s{i}", ys[-1][0])
        h = torch.mean(torch.stack(ys), dim=0)
        note("final.merged", h[0])
        h = self.rms(h, w["model.norm.weight"])
        note("final.normed", h[0])
        logits = self.lin(h, "lm_head.weight" if "lm_head.weight" in w else "model.embed_tokens.weight")
        sc = c.final_logit_softcapping
        logits = torch.tanh(logits / sc) * sc
        note("logits", logits[0])
        return logits[0], rec


ACTIVATION_NOTES = (
    "One prefill forward over prompt_ids, rows at positions 0 and len-1. Names: embed_scaled = embed_tokens[id] * "
    "sqrt(hidden); ple_raw.Ll = embed_tokens_per_layer[id] * sqrt(ple) (layer l's slice); ple_proj_normed.Ll = "
    "RMSNorm(per_layer_model_projection(embed_scaled) * hidden^-0.5) slice; ple_input.Ll = (proj + raw) / sqrt(2); "
    "altup_init.sK = stream K before layer 0; per detailed layer l (0, the first KV-shared layer, the last): "
    "Ll.predict.modalities (tanh router, altup_num_inputs values), Ll.predict.coefs (prediction_coefs output, "
    "row j = entries 4j..4j+3), Ll.predict.sK, Ll.attn_norm (input_layernorm(active)), Ll.laurel_out (attn_norm + "
    "post_laurel_norm(...)), Ll.q_rope.h0 / k_rope.h0 / v_norm.h0 (head 0 after norm and RoPE; k/v only on KV-owning "
    "layers), Ll.attn_heads (attention output before o_proj, heads concatenated), Ll.attn_post_norm, Ll.attn_laurel "
    "((active + attn_post_norm + laurel_out) / sqrt(2)), Ll.ffn_gate (gate_proj), Ll.ffn_gate_sparse (after the "
    "Gaussian top-k, sparse layers only), Ll.ffn_out (down_proj output), Ll.attn_ffw_laurel_gated, "
    "Ll.correct.modalities, Ll.correct.coefs_plus1, Ll.corrected.sK, Ll.ple_gated (gelu(per_layer_input_gate(corrected "
    "s0 * correct_output_scale)) * ple_input), Ll.ple_out (post_per_layer_input_norm(per_layer_projection(.))); every "
    "layer: Ll.out.sK = the 4 streams the layer returns (stream 0 = corrected s0, streams 1-3 = corrected + ple_out); "
    "final.unembed.sK (K=1..3: altup_unembed_projections + magnitude rescale to stream 0), final.merged (mean of the 4), "
    "final.normed (model.norm), logits (after the softcap).")


# ----------------------------------------------------------------------------------------------
# HF logits
# ----------------------------------------------------------------------------------------------
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


def versions():
    import sentencepiece
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "sentencepiece": sentencepiece.__version__, "numpy": np.__version__}


def hf_layer_outputs(model, ids):
    """HF's own decoder-layer outputs ([A,1,T,H] each) via forward hooks."""
    import torch

    outs, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        hooks.append(layer.register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o.detach().clone())))
    try:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    finally:
        for h in hooks:
            h.remove()
    return logits, outs


def write_hf(name, work: Path):
    torch = torch_setup()
    model = load_hf(name, work)
    cfg = model.config
    ids = prompt_ids(name)
    pre, tokens, steps = hf_run(model, ids)
    pre2, tokens2, steps2 = hf_run(load_hf(name, work), ids)  # reloaded: must be bit-identical
    assert tokens == tokens2 and np.array_equal(pre, pre2) and np.array_equal(steps, steps2), \
        f"{name}: HF logits not deterministic"
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids + tokens[:-1]]), use_cache=False).logits[0].numpy()
        gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=STEPS, min_new_tokens=STEPS, pad_token_id=0)
    ref_rows = np.concatenate([pre, steps[1:]])
    full_diff = float(np.max(np.abs(full - ref_rows)))
    assert full_diff < 1e-4, (name, full_diff)
    cached_equal = gen[0, len(ids):].tolist() == tokens
    # the Reference implementation vs HF (logits and every layer's 4 streams), and its activations
    ref = Reference(model)
    r_logits, rec = ref.forward(ids, record_pos=(0, len(ids) - 1))
    h_logits, h_layers = hf_layer_outputs(model, ids)
    d_logits = float((r_logits - h_logits).abs().max())
    d_layers = max(float((ref.layer_out[l] - h_layers[l]).abs().max()) for l in range(cfg.num_hidden_layers))
    assert d_logits == 0.0 and d_layers == 0.0, (name, d_logits, d_layers)  # bit-exact
    modes, src, lc = kv_sources(cfg)
    assert src == lc, (name, src, lc)
    saved = json.loads((work / name / "config.json").read_text())
    srt = np.sort(steps, axis=1)
    head = {
        "source": "HF transformers Gemma3nForCausalLM, CPU, fp32, eager attention, use_cache=False "
                  "(full recompute per step), greedy",
        "versions": versions(),
        "model": name,
        "gguf": gguf_name(name),
        "seed": CONFIGS[name]["seed"],
        "notes": "weights: torch.manual_seed(seed) init at initializer_range, then every norm weight, "
                 "altup.correct_output_scale, modality_router (std 0.3 sqrt(hidden)), prediction/correction coefs "
                 "(std 0.1) randomized with torch.Generator(seed + 1000); unused shared-layer k_proj/v_proj/"
                 "k_norm added to the checkpoint with torch.Generator(seed + 2000); one full forward over "
                 f"prompt + tokens[:-1] matches these rows to {full_diff:.2g}; two runs were bit-identical",
        "hf_config": saved,
        "layer_types": list(cfg.layer_types),
        "num_kv_shared_layers": cfg.num_kv_shared_layers,
        "activation_sparsity_pattern": list(cfg.activation_sparsity_pattern),
        "sparsity_std_multiplier": sparsity_multipliers(cfg),
        "kv_sharing_modes": modes,
        "kv_source_layer": src,
        "llamacpp_kv_source_layer": lc,
        "unused_checkpoint_tensors": json.loads((work / name / "unused_tensors.json").read_text()),
        "vocab_size": cfg.vocab_size,
        "prompt_ids": ids,
        "steps": STEPS,
        "min_top2_margin": float(np.min(srt[:, -1] - srt[:, -2])),
        "tokens": tokens,
        "hf_cached_generate_equal": cached_equal,
        "reference_vs_hf": {"logits_max_abs_diff": float("%.3g" % d_logits),
                            "layer_streams_max_abs_diff": float("%.3g" % d_layers)},
    }
    compact = lambda v: json.dumps(v, separators=(",", ":"))
    act_head = json.dumps({"positions": [0, len(ids) - 1], "notes": ACTIVATION_NOTES})[:-1]
    act = act_head + ', "rows": [\n' + ",\n".join("   " + compact(r) for r in rec) + "\n  ]}"
    text = dump_lines(head, {"prefill_logits": [fmt_row(r) for r in pre],
                             "step_logits": [fmt_row(r) for r in steps]})
    # activations go between the head and the logits blocks
    text = text.replace(' "prefill_logits": [', f' "activations": {act},\n "prefill_logits": [', 1)
    json.loads(text)
    (OUT / f"{name}.hf.json").write_text(text)
    print(f"  {name}.hf.json: tokens {tokens[:10]}..., distinct {len(set(tokens))}, min top-2 margin "
          f"{head['min_top2_margin']:.3f}, cached generate equal {cached_equal}, reference vs HF "
          f"{d_logits:.2g} / {d_layers:.2g}, {len(text)} bytes")


def gguf_state_dict(model, path: Path, llama_cpp: Path):
    """The HF state dict with every tensor replaced by the GGUF's, dequantized to f32 (gguf-py's
    dequantizers); checks that every HF weight has a GGUF tensor of the same shape."""
    import torch

    gguf = vendored_gguf(llama_cpp)
    cfg = model.config
    r = gguf.GGUFReader(str(path))
    tensors = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        tensors[t.name] = a.reshape([int(x) for x in reversed(list(t.shape))])
    nmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3N, cfg.num_hidden_layers)
    sd = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        m = re.fullmatch(r"model\.(altup_projections|altup_unembed_projections)\.(\d+)\.weight", k)
        if m:
            a = tensors["altup_proj.weight" if m.group(1) == "altup_projections" else "altup_unembd_proj.weight"][int(m.group(2))]
        else:
            base = k[:-len(".weight")] if k.endswith(".weight") else k
            g = nmap.get_name(base)
            assert g is not None, k
            a = tensors[g + ".weight"]
        assert tuple(a.shape) == tuple(v.shape), (k, a.shape, tuple(v.shape))
        sd[k] = torch.from_numpy(a.copy())
    return sd


def hf_emulated_logits(name, work: Path, seq, gelu16: bool, n1_std: bool, weights=None):
    """HF's logits on seq with llama.cpp's CPU numerics emulated: GGML_GELU_FP16 (x rounded to fp16,
    tanh-GELU from an fp16 table; identity above 10, 0 below -10) and/or the n-1 (unbiased) std in the
    Gaussian top-k (src/models/gemma3n.cpp:392-398)."""
    import torch
    from transformers.models.gemma3n import modeling_gemma3n as mg

    class Fp16TableGelu(torch.nn.Module):
        def forward(self, x):
            y = torch.nn.functional.gelu(x.half().float(), approximate="tanh").half().float()
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    model = load_hf(name, work)
    if weights is not None:
        missing, unexpected = model.load_state_dict(weights, strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
        if model.config.tie_word_embeddings:
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if gelu16:
        for m in model.modules():
            if hasattr(m, "act_fn"):
                m.act_fn = Fp16TableGelu()
    orig = mg.Gemma3nTextMLP._gaussian_topk
    if n1_std:
        def topk_n1(self, inputs):
            mult = torch.distributions.normal.Normal(0, 1).icdf(
                torch.tensor(self.activation_sparsity, dtype=torch.float32)).type(inputs.dtype)
            cut = torch.mean(inputs, dim=-1, keepdim=True) + torch.std(inputs, dim=-1, keepdim=True, unbiased=True) * mult
            return torch.nn.functional.relu(inputs - cut)
        mg.Gemma3nTextMLP._gaussian_topk = topk_n1
    try:
        with torch.no_grad():
            return model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].double().numpy()
    finally:
        mg.Gemma3nTextMLP._gaussian_topk = orig


# ----------------------------------------------------------------------------------------------
# llama.cpp: the patched reference, run through lcdump (built outside the repo, see the docstring)
# ----------------------------------------------------------------------------------------------
def lcdump(work: Path, gguf: Path, mode: str, ids, steps=0, n1_std=False):
    d = work / "llama"
    out = work / "lcdump.f32"
    env = {k: v for k, v in os.environ.items() if k != "KVSHARE_GEMMA3N_N1_STD"}
    env["LD_LIBRARY_PATH"] = str(d / "bin")
    if n1_std:
        env["KVSHARE_GEMMA3N_N1_STD"] = "1"
    r = subprocess.run([str(d / "lcdump"), str(gguf), str(out), mode, str(steps), ",".join(map(str, ids))],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"lcdump {gguf.name} {mode} failed:\n" + r.stdout[-2000:] + r.stderr[-4000:])
    m = re.search(r"\[kvshare patch\] (.*)", r.stderr)
    assert m, "the patched libllama was not used"
    n_vocab = int(re.search(r"N_VOCAB (\d+)", r.stdout).group(1))
    sysinfo = re.search(r"SYSTEM_INFO (.*)", r.stdout).group(1).strip()
    rows = np.fromfile(out, dtype="<f4").reshape(-1, n_vocab).astype(np.float64)
    return rows, m.group(1).strip(), sysinfo


def tensor_types(path: Path, llama_cpp: Path):
    gguf = vendored_gguf(llama_cpp)
    r = gguf.GGUFReader(str(path))
    return {t.name: t.tensor_type.name for t in r.tensors}


def llama_case(name, work: Path, llama_cpp: Path, path: Path, hf: dict, emul: dict, n1_std=False):
    ids = hf["prompt_ids"]
    rows, patch_line, sysinfo = lcdump(work, path, "greedy", ids, STEPS, n1_std)
    top, tokens, margins = [], [], []
    for logits in rows:
        entry, margin, best = top_entry(logits, TOP_K)
        top.append(entry)
        margins.append(margin)
        tokens.append(best)
    seq = ids + hf["tokens"][:-1]
    got, _, _ = lcdump(work, path, "batch", seq, 0, n1_std)
    # HF on this file's own weights (dequantized), with llama.cpp's fp16 GELU and this run's std
    deq = hf_emulated_logits(name, work, seq, True, n1_std, weights=gguf_state_dict(load_hf(name, work), path, llama_cpp))
    single, _, _ = lcdump(work, path, "single", seq, 0, n1_std)
    self_diff = np.abs(single - got).max()
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
        "forced_max_abs_diff_vs_hf_emulated": {k: float("%.4g" % np.abs(got - v).max()) for k, v in emul.items()},
        "forced_max_abs_diff_vs_hf_dequantized_emulated": float("%.4g" % np.abs(got - deq).max()),
        "llama_batch_vs_single_max_abs_diff": float("%.4g" % self_diff),
        "min_margin": float("%.4g" % min(margins)),
    }
    return {"gguf": path.name, "tensor_types": tensor_types(path, llama_cpp), "prompt_ids": ids, "tokens": tokens,
            "top": top, "vs_hf": vs, "patch_line": patch_line, "system_info": sysinfo}


def write_llamacpp(name, work: Path, llama_cpp: Path):
    torch_setup()
    hf = json.loads((OUT / f"{name}.hf.json").read_text())
    seq = hf["prompt_ids"] + hf["tokens"][:-1]
    emul = {"fp16_gelu": hf_emulated_logits(name, work, seq, True, False),
            "n1_std": hf_emulated_logits(name, work, seq, False, True),
            "both": hf_emulated_logits(name, work, seq, True, True)}
    variants = E2B_VARIANTS if name == "e2b" else ["f32"]
    cases = [llama_case(name, work, llama_cpp, OUT / gguf_name(name, v), hf, emul) for v in variants]
    own = [llama_case(name, work, llama_cpp, OUT / gguf_name(name, v), hf, emul, n1_std=True) for v in variants]
    # the f32 file's tensors are HF's weights, bit for bit
    sd = gguf_state_dict(load_hf(name, work), OUT / gguf_name(name), llama_cpp)
    ref_sd = load_hf(name, work).state_dict()
    assert all(np.array_equal(v.numpy(), ref_sd[k].numpy()) for k, v in sd.items()), "f32 GGUF != HF weights"
    head = {
        "source": "llama.cpp ggml-org/llama.cpp@0c1e57098 (llama-cpp-python 0.3.36 sdist's vendor/llama.cpp), "
                  "CPU, libllama built without AMX and patched (see patch), driven through its C API by lcdump "
                  "(see tests/tools/gemma3n_fixtures.py), greedy",
        "patch": "src/models/gemma3n.cpp reads gemma3n.altup.num_inputs / altup.active_idx / "
                 "embedding_length_per_layer_input / attention.shared_kv_layers / activation_sparsity_scale and the "
                 "laurel rank (blk.0.laurel_l) from the GGUF instead of its hardcoded E2B/E4B values. \"cases\": "
                 "the Gaussian top-k's std also divides by n as HF's (llama.cpp's graph divides by n - 1, which on "
                 "these 256-wide gates moves logits by ~0.1-0.3, far more than on the real 8192/16384-wide ones); "
                 "\"cases_llamacpp_n1_std\": the same runs with llama.cpp's own n - 1 (KVSHARE_GEMMA3N_N1_STD=1). "
                 "Log lines: " + cases[0]["patch_line"] + " | " + own[0]["patch_line"],
        "system_info": cases[0]["system_info"],
        "llama_params": {"n_ctx": 128, "n_batch": 128, "n_ubatch": 128, "n_threads": 2, "n_threads_batch": 2,
                         "type_k": "f32", "type_v": "f32", "flash_attn": False, "n_gpu_layers": 0,
                         "use_extra_bufts (repack)": True},
        "model": name,
        "steps": STEPS,
        "top_k": TOP_K,
    }
    compact = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)

    def rows(cs):
        return ["{" + ", ".join(f"{json.dumps(k)}: {compact(c[k])}"
                                for k in ("gguf", "vs_hf", "tensor_types", "prompt_ids", "tokens"))
                + ', "top": [\n' + ",\n".join("   " + compact(s) for s in c["top"]) + "\n  ]}" for c in cs]

    (OUT / f"{name}.llamacpp.json").write_text(dump_lines(head, {"cases": rows(cases),
                                                               "cases_llamacpp_n1_std": rows(own)}))
    for c in cases:
        print(f"  {c['gguf']}: {c['vs_hf']}")
    for c in own:
        print(f"  {c['gguf']} (n-1 std): {c['vs_hf']}")


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------
def check_ggufs(llama_cpp: Path):
    from collections import Counter

    gguf = vendored_gguf(llama_cpp)
    for path in sorted(OUT.glob("*.gguf")):
        r = gguf.GGUFReader(str(path))
        print(f"== {path.name}: {path.stat().st_size} bytes, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:16]}")
        for f in r.fields.values():
            if f.name == "tokenizer.ggml.token_type":
                names = {int(v): v.name for v in gguf.TokenType}
                print(f"  {f.name}: {dict(Counter(names[int(t)] for t in f.contents()))}")
            elif f.name.startswith("tokenizer.ggml.") and f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
                print(f"  {f.name}: [{len(f.data)} items] {f.contents()[:10]}...")
            else:
                print(f"  {f.name}: {f.contents()}")
        types = Counter(t.tensor_type.name for t in r.tensors)
        print(f"  {len(r.tensors)} tensors: {dict(types)}")
        for t in r.tensors:
            print(f"    {t.name} {list(map(int, t.shape))} {t.tensor_type.name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, default=Path(os.environ.get("LLAMA_CPP_DIR", DEFAULT_LLAMA_CPP)))
    ap.add_argument("--llama-bin", type=Path, default=DEFAULT_LLAMA_BIN)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--stages", default="tok,models,hf,llamacpp,check")
    ap.add_argument("--models", default=",".join(CONFIGS))
    a = ap.parse_args()
    stages = a.stages.split(",")
    names = a.models.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    if "tok" in stages:
        build_tokenizer(OUT)
    if "models" in stages:
        for name in names:
            d = build_model(name, a.work, OUT)
            log = convert(d, "f32", OUT / gguf_name(name), a.llama_cpp)
            (a.work / f"{name}.converter.log").write_text(log)
            if name == "e2b":
                convert(d, "f16", OUT / gguf_name(name, "f16"), a.llama_cpp)
                quantize_with_binary(a.llama_bin, OUT / gguf_name(name), OUT / gguf_name(name, "q8_0"), "Q8_0")
                quantize_with_binary(a.llama_bin, OUT / gguf_name(name), OUT / gguf_name(name, "q4_k_m"), "Q4_K_M")
    if "hf" in stages:
        for name in names:
            write_hf(name, a.work)
    if "llamacpp" in stages:
        for name in names:
            write_llamacpp(name, a.work, a.llama_cpp)
    if "check" in stages:
        check_ggufs(a.llama_cpp)


if __name__ == "__main__":
    main()
