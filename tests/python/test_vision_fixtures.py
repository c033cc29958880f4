"""The committed vision fixtures are complete and self-consistent.

tests/fixtures/vision/ (written by tests/tools/vision_fixtures.py, run by hand;
formats in its README.md) holds tiny multimodal Gemma models as a text GGUF
plus an mmproj GGUF each, HF's outputs on them, and HF's preprocessing of real
photos. This checks, without running any model: every referenced file is there
with the size and sha256 its JSON states; shapes agree with each other and with
the GGUF keys (projector type, widths, marker tokens in the text vocabulary);
the greedy tokens are the argmax of their logits rows; the folder stays within
its size budget. Cheap: no kvshare build needed.
"""
import hashlib
import json
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vision"
MODELS = ["gemma3", "gemma3n", "gemma4", "gemma4_large", "gemma4_unified"]
PROJECTOR = {"gemma3": "gemma3", "gemma3n": "gemma3nv", "gemma4": "gemma4v", "gemma4_large": "gemma4v",
             "gemma4_unified": "gemma4uv"}
STEPS = 16
BUDGET = 10 * 1024 * 1024


def load(name):
    return json.loads((FIXTURES / name).read_text())


def read_array(ref):
    """A binary described by {file, dtype, shape[, sha256]}, checked and loaded."""
    path = FIXTURES / ref["file"]
    data = path.read_bytes()
    dtype = np.dtype("<f4" if ref["dtype"] == "float32" else "u1")
    assert len(data) == int(np.prod(ref["shape"])) * dtype.itemsize, ref["file"]
    if "sha256" in ref:
        assert hashlib.sha256(data).hexdigest() == ref["sha256"], ref["file"]
    return np.frombuffer(data, dtype=dtype).reshape(ref["shape"])


def test_size_budget():
    total = sum(p.stat().st_size for p in FIXTURES.iterdir())
    assert total < BUDGET, total


@pytest.mark.parametrize("name", MODELS)
def test_hf_outputs_consistent(name):
    hf = load(f"{name}.hf.json")
    cfg = hf["hf_config"]
    n_text, vocab = cfg["text_config"]["hidden_size"], cfg["text_config"]["vocab_size"]
    soft = hf["image_soft_token_id"]
    tokens_of = []
    for e in hf["encoder"]:
        u = read_array(e["pixels"])
        assert u.shape[0] == 3
        f = read_array(e["features"])
        assert f.shape == (e["tokens"], n_text) and np.all(np.isfinite(f))
        if name == "gemma3":
            assert e["tokens"] == cfg["mm_tokens_per_image"]
        elif name == "gemma3n":
            assert e["tokens"] == cfg["vision_soft_tokens_per_image"]
        else:  # one token per 48 px block
            assert e["tokens"] == (u.shape[1] // 48) * (u.shape[2] // 48)
        tokens_of.append(e["tokens"])
    for p in hf["prompts"].values():
        ids = p["prompt_ids"]
        assert len(ids) == p["n_prompt"] and ids[0] == 2
        assert [n for _, n in p["image_spans"]] == [tokens_of[i] for i in p["images"]]
        assert sum(n for _, n in p["image_spans"]) == ids.count(soft)
        for start, n in p["image_spans"]:
            assert all(t == soft for t in ids[start:start + n])
            if name in ("gemma3", "gemma3n"):
                begin, end = hf["marker_ids"]["<start_of_image>"], hf["marker_ids"]["<end_of_image>"]
            else:
                begin, end = hf["marker_ids"]["<|image>"], hf["marker_ids"]["<image|>"]
            assert ids[start - 1] == begin and ids[start + n] == end
        for ref in [p] + ([p["generate_rule"]] if "generate_rule" in p else []):
            pre = read_array(ref["prefill_logits"])
            steps = read_array(ref["step_logits"])
            assert pre.shape == (len(ids), vocab) and steps.shape == (STEPS, vocab)
            assert np.array_equal(steps[0], pre[-1])
            assert list(np.argmax(steps, axis=1)) == ref["tokens"]
    # the unified model also has references under HF's generate-time mask rule (the one kvshare keeps)
    assert any("generate_rule" in p for p in hf["prompts"].values()) == (name == "gemma4_unified")


def gguf_fields(path):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(path))
    keys = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("tokenizer.ggml.")}
    tokens = r.fields["tokenizer.ggml.tokens"].contents() if "tokenizer.ggml.tokens" in r.fields else None
    tensors = {t.name: (t.tensor_type.name, [int(x) for x in t.shape]) for t in r.tensors}
    return keys, tokens, tensors


@pytest.mark.parametrize("name", MODELS)
def test_gguf_keys(name):
    hf = load(f"{name}.hf.json")
    text_keys, vocab, _ = gguf_fields(FIXTURES / hf["gguf"])
    keys, _, tensors = gguf_fields(FIXTURES / hf["mmproj"])
    arch = text_keys["general.architecture"]
    n_text = text_keys[f"{arch}.embedding_length"]
    assert n_text == hf["hf_config"]["text_config"]["hidden_size"]
    if name == "gemma3":  # the GGUF has no layer pattern: HF's layers must be llama.cpp's (every 6th full)
        assert f"{arch}.attention.sliding_window_pattern" not in text_keys
        types = hf["hf_config"]["text_config"]["layer_types"]
        assert types == ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(len(types))]
        assert "full_attention" in types
    # the runtime finds the markers by their text in the vocabulary
    for text, tid in hf["marker_ids"].items():
        assert vocab[tid] == text
    assert keys["general.type"] == "mmproj" and keys["general.architecture"] == "clip"
    ptype = keys.get("clip.projector_type", keys.get("clip.vision.projector_type"))
    assert ptype == PROJECTOR[name]
    assert keys["clip.vision.projection_dim"] == n_text
    out = tensors["mm.input_projection.weight"][1]
    assert n_text in out
    odd = sorted(n for n, (t, _) in tensors.items() if t != "F32")
    vcfg = hf["hf_config"]["vision_config"]
    if name == "gemma3":
        assert odd == ["mm.input_projection.weight"]  # the converter forces F16 there
        assert keys["clip.vision.image_size"] == vcfg["image_size"]
        assert keys["clip.vision.patch_size"] == vcfg["patch_size"]
        side = vcfg["image_size"] // vcfg["patch_size"]
        pool = side // int(round(hf["hf_config"]["mm_tokens_per_image"] ** 0.5))
        assert keys["clip.vision.projector.scale_factor"] == pool != 4
        assert tensors["v.position_embd.weight"][1] == [vcfg["hidden_size"], side * side]
    elif name == "gemma3n":  # written by tests/tools/gemma3n_vision_fixtures.py's writer (converter's names)
        assert odd == []
        lo, hi = hf["vision_vocabulary"]
        assert lo == vcfg["vocab_offset"] and hi - lo == vcfg["vocab_size"] == tensors["mm.embedding.weight"][1][1]
        assert lo <= hf["marker_ids"]["<end_of_image>"] < hi
        assert keys["clip.vision.embedding_length"] == vcfg["hidden_size"]
    elif name == "gemma4_unified":
        assert odd == []
        p = vcfg["patch_size"] * vcfg["pooling_kernel_size"]
        assert tensors["v.patch_embd.weight"][1] == [p * p * 3, vcfg["mm_embed_dim"]]
        assert tensors["v.position_embd.weight"][1] == [vcfg["mm_embed_dim"], vcfg["mm_posemb_size"], 2]
    else:
        assert odd == []
        assert keys["clip.vision.embedding_length"] == vcfg["hidden_size"]
        assert keys["clip.vision.block_count"] == vcfg["num_hidden_layers"]
        assert tensors["v.position_embd.weight"][1] == [vcfg["hidden_size"], vcfg["position_embedding_size"], 2]
        assert ("v.std_bias" in tensors) == (name == "gemma4_large")
        assert ("v.blk.0.attn_q.input_min" in tensors) == (name == "gemma4")


def test_preprocessing_consistent():
    pre = load("preprocess.json")
    assert pre["backend"].startswith("torchvision")
    seen = set()
    for case in pre["cases"]:
        proc = case["processor"]
        assert case["outputs"]
        for o in case["outputs"]:
            c, h, w = o["shape"]
            assert c == 3 and (FIXTURES / o["png"]).is_file()
            s = o["stride"]
            assert o["png_shape"] == [-(-h // s), -(-w // s), 3]
            if proc.startswith("gemma3"):
                assert (h, w, o["tokens"]) == (896, 896, 256)
            elif proc.startswith("siglip"):
                assert (h, w, o["tokens"]) == (768, 768, 256)
            else:
                budget = int(proc.split("_")[1])
                assert h % 48 == 0 and w % 48 == 0 and o["tokens"] == (h // 48) * (w // 48) <= budget
            seen.add(o["png"])
        if proc == "gemma3_896_pas":
            assert len(case["outputs"]) in (1, 3, 4, 5)
    on_disk = {p.name for p in FIXTURES.glob("pre.*.png")}
    assert on_disk == seen


def test_png_shapes():
    Image = pytest.importorskip("PIL.Image")
    for case in load("preprocess.json")["cases"]:
        for o in case["outputs"]:
            with Image.open(FIXTURES / o["png"]) as im:
                assert im.mode == "RGB" and [im.height, im.width, 3] == o["png_shape"]
