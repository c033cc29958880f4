"""kvshare.Model.embed on the EmbeddingGemma-style fixture (tests/fixtures/embedding_gemma): the texts
give sentence-transformers' embeddings (cosine > 0.99999, every value within 1e-5), with and without
`dimensions`; named errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from peers import need

kvshare = need("kvshare")

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "embedding_gemma"


def check(got, want):
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape and got.dtype == np.float32
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 1 - 1e-5
    assert np.abs(got - want).max() <= 1e-5


def test_embed_matches_sentence_transformers():
    ref = json.loads((FIXTURE / "tiny.st.json").read_text())
    m = kvshare.Model(str(FIXTURE / "tiny.f32.gguf"), max_context=512)
    assert m.config["architecture"] == "gemma-embedding"
    check(m.embed(ref["texts"]), ref["embeddings"])
    check(m.embed(ref["texts"], dimensions=16), ref["truncated"]["16"])
    with pytest.raises(kvshare.Error, match="dimensions 65 is out of range"):
        m.embed(["a"], dimensions=65)
    with pytest.raises(kvshare.Error, match="unknown pooling 'cls'"):
        m.embed(["a"], pooling="cls")
