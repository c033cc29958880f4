"""Writes tests/fixtures/embedding_gemma/: a tiny random-weight EmbeddingGemma-style model (HF
Gemma3TextModel with use_bidirectional_attention, in a sentence-transformers pipeline: Transformer,
mean Pooling, two bias-free Dense layers, Normalize) converted by llama.cpp's convert_hf_to_gguf.py
(--sentence-transformers-dense-modules: GGUF arch "gemma-embedding"), and sentence-transformers'
embeddings of a few texts. Run by hand, never in CI; only its outputs (a small GGUF and JSON) are kept.

Set-up (outside the repo; see tests/tools/gemma3n_fixtures.py for the reference environment):
  $REF/venv: torch, transformers==5.23.0, sentence-transformers (6.2.0 for the committed files),
             sentencepiece, gguf
  $REF/llama_cpp_python-0.3.36/vendor/llama.cpp: convert_hf_to_gguf.py and gguf-py
  $REF/venv/bin/python tests/tools/embedding_gemma_fixture.py [--llama-cpp DIR] [--work DIR]

The tokenizer is tests/fixtures/gemma3n/tokenizer.model (512 SentencePiece pieces) with BOS and EOS
added, as EmbeddingGemma's tokenizer does. The config's sliding_window is 8 (what the GGUF stores,
as the converter writes the original value); HF's Gemma3TextConfig turns it into 8 // 2 + 1 = 5 and
lets a query see the keys with |p - j| < 5 on sliding layers (every key on the full layer 5), so the
longer texts (> 5 tokens) exercise the symmetric window.

Outputs in tests/fixtures/embedding_gemma/:
  tiny.f32.gguf   every tensor F32, equal to the safetensors (norm weights + 1, as the converter does)
  tiny.st.json    {"texts": [...], "ids": [[...], ...] (BOS ... EOS), "dim": 64,
                   "embeddings": [[...], ...] (sentence-transformers encode, one text per batch),
                   "truncated": {"16": [[...]], "40": [[...]]} (encode(truncate_dim=d,
                   normalize_embeddings=True): the first d values renormalized),
                   "batched_max_abs_diff": float (encode of all texts in one padded batch vs one
                   by one)}; floats %.9g
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "embedding_gemma"
TEXTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings turn text into vectors; similar texts get similar vectors, "
    "and a search engine ranks documents by the cosine of their vectors.",
    "a",
]
TRUNCATE = [16, 40]
SEED = 20261128


def build(work: Path) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer
    from transformers import AutoTokenizer, Gemma3TextConfig, Gemma3TextModel

    torch.manual_seed(SEED)
    hf = work / "hf"
    if work.exists():
        shutil.rmtree(work)
    hf.mkdir(parents=True)
    shutil.copy(REPO / "tests/fixtures/gemma3n/tokenizer.model", hf / "tokenizer.model")
    tc = json.loads((REPO / "tests/fixtures/gemma3n/tokenizer_config.json").read_text())
    tc["add_bos_token"] = True
    tc["add_eos_token"] = True
    (hf / "tokenizer_config.json").write_text(json.dumps(tc, indent=2))
    tok = AutoTokenizer.from_pretrained(hf)

    cfg = Gemma3TextConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        query_pre_attn_scalar=32,
        max_position_embeddings=512,
        sliding_window=8,
        use_bidirectional_attention=True,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        tie_word_embeddings=True,
    )
    cfg.architectures = ["Gemma3TextModel"]
    model = Gemma3TextModel(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.5 if "embed_tokens" in name else 0.2 if name.endswith("norm.weight") else 0.15
            p.copy_(torch.randn(p.shape) * scale)
    model.save_pretrained(hf)
    tok.save_pretrained(hf)

    st = SentenceTransformer(
        modules=[
            Transformer(str(hf)),
            Pooling(64, pooling_mode="mean"),
            Dense(64, 128, bias=False, activation_function=torch.nn.Identity()),
            Dense(128, 64, bias=False, activation_function=torch.nn.Identity()),
            Normalize(),
        ],
        device="cpu",
    )
    with torch.no_grad():
        for m in (st[2], st[3]):
            m.linear.weight.copy_(torch.randn(m.linear.weight.shape) * 0.15)
    st_dir = work / "st"
    st.save(str(st_dir))
    # transformers 5 saves tokenizer.json only; the converter reads the SentencePiece model.
    shutil.copy(hf / "tokenizer.model", st_dir / "tokenizer.model")
    return st_dir


def convert(st_dir: Path, llama_cpp: Path, out: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(llama_cpp / "gguf-py"))
    subprocess.run(
        [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(st_dir), "--outtype", "f32", "--outfile",
         str(out), "--sentence-transformers-dense-modules"],
        check=True, env=env)


def reference(st_dir: Path) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.use_deterministic_algorithms(True)
    st = SentenceTransformer(str(st_dir), device="cpu")
    ids = [st.tokenizer(t)["input_ids"] for t in TEXTS]
    for i in ids:
        assert i[0] == 2 and i[-1] == 1, f"expected BOS ... EOS, got {i}"
    one = np.stack([st.encode([t], batch_size=1, convert_to_numpy=True)[0] for t in TEXTS])
    batched = st.encode(TEXTS, batch_size=len(TEXTS), convert_to_numpy=True)
    again = np.stack([st.encode([t], batch_size=1, convert_to_numpy=True)[0] for t in TEXTS])
    assert np.array_equal(one, again), "sentence-transformers is not deterministic here"
    trunc = {}
    for d in TRUNCATE:
        st.truncate_dim = d
        trunc[str(d)] = np.stack(
            [st.encode([t], batch_size=1, convert_to_numpy=True, normalize_embeddings=True)[0] for t in TEXTS])
        want = one[:, :d] / np.linalg.norm(one[:, :d], axis=1, keepdims=True)
        assert np.allclose(trunc[str(d)], want, rtol=1e-6, atol=1e-7), "truncate_dim is not truncate + renormalize"
    st.truncate_dim = None
    fmt = lambda a: [[float(f"{x:.9g}") for x in row] for row in a]  # noqa: E731
    return {
        "texts": TEXTS,
        "ids": ids,
        "dim": int(one.shape[1]),
        "embeddings": fmt(one),
        "truncated": {k: fmt(v) for k, v in trunc.items()},
        "batched_max_abs_diff": float(np.abs(batched - one).max()),
    }


def main() -> None:
    ref = Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=Path, default=ref / "llama_cpp_python-0.3.36/vendor/llama.cpp")
    ap.add_argument("--work", type=Path, default=ref / "embedding_gemma_work")
    a = ap.parse_args()
    st_dir = build(a.work)
    OUT.mkdir(parents=True, exist_ok=True)
    convert(st_dir, a.llama_cpp, OUT / "tiny.f32.gguf")
    data = reference(st_dir)
    (OUT / "tiny.st.json").write_text(json.dumps(data, indent=1) + "\n")
    sys.path.insert(0, str(a.llama_cpp / "gguf-py"))
    import gguf

    r = gguf.GGUFReader(str(OUT / "tiny.f32.gguf"))
    for k, f in r.fields.items():
        if k.startswith("gemma-embedding.") or "add_" in k:
            print(k, f.contents())
    for t in r.tensors:
        if not t.name.startswith("blk."):
            print(t.name, t.shape.tolist(), t.tensor_type.name)
    print("batched vs one by one:", data["batched_max_abs_diff"])


if __name__ == "__main__":
    main()
