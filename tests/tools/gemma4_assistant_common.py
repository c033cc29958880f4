"""Shared by the gemma4_assistant_fixtures.py stages: paths, model / training configuration,
prompts, the transformers 5.23.0 work-around (patch_hf), tokenizer, model loading and saving, the
target's features, the drafter's visibility masks and the independent reference drafter (Reference).
See gemma4_assistant_fixtures.py's docstring for what they mean."""
import math
import os
import shutil
from pathlib import Path

import numpy as np

from gemma4_fixtures import CORPUS  # (same corpus as tests/fixtures/gemma4)

ROOT = Path(__file__).resolve().parents[2]
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
