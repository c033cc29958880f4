"""llama.cpp as a second peer on the image fixtures of tests/fixtures/vision/ (run by hand, not in
CI; results go to docs/vision.md, "llama.cpp as a peer").

For each fixture model it loads the text GGUF and the mmproj into llama.cpp (libllama + libmtmd of
the vendored llama.cpp @0c1e57098, through llama-cpp-python 0.3.36's own ctypes bindings, imported
from the unpacked sdist: the package itself is not installed) and reports:
  encoder   llama.cpp's soft tokens for the fixture's pixel levels, handed over as an RGB bitmap
            of the same size (llama.cpp then runs its own preprocessing: a letterbox resize to the
            same size, its normalization), against HF's features (max |a - b| / max |b|);
  teacher   HF's exact prompt ids with llama.cpp's soft tokens spliced in, decoded as llama.cpp's
            mtmd helper does (the image in one batch, causal attention switched off for it where
            mtmd_decode_use_non_causal says so), then 16 greedy steps: prefill and step logits
            against HF's, tokens equal or not. The unified model is compared with its
            generate_rule references where the fixture has them.
  own       llama.cpp's own prompt: HF's text with each image block replaced by mtmd's media
            marker, so llama.cpp writes its own markers (Gemma 3: no "\\n\\n" around the image) and
            preprocesses the image itself; 16 greedy tokens against HF's.
  cli       (if llama-mtmd-cli exists) its greedy text for the one-image prompt, for the record.

Usage (reference environment, see tests/tools/vision_fixtures.py):
  /opt/kvshare-ref/venv/bin/python tests/tools/vision_llamacpp_peer.py [--build DIR] [--json OUT]
--build is a llama.cpp build of the vendored sources with shared libraries (default
/opt/kvshare-ref/llama-build: bin/libllama.so, bin/libmtmd.so, bin/llama-mtmd-cli).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "vision"
REF = Path(os.environ.get("KVSHARE_REF_DIR", "/opt/kvshare-ref"))
SDIST = REF / "llama_cpp_python-0.3.36"
MODELS = ["gemma3", "gemma4", "gemma4_large", "gemma4_unified"]
THREADS = 2
L = M = None  # llama_cpp.llama_cpp, llama_cpp.mtmd_cpp (bound in main)


def bind(build: Path):
    global L, M
    lib = build / "bin"
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib)
    os.environ["MTMD_CPP_LIB"] = str(lib)
    # the bindings only: the package's __init__ also imports the high-level API and its
    # dependencies (diskcache, ...), which the reference venv does not have
    pkg = types.ModuleType("llama_cpp")
    pkg.__path__ = [str(SDIST / "llama_cpp")]
    sys.modules["llama_cpp"] = pkg
    import llama_cpp.llama_cpp as llama
    import llama_cpp.mtmd_cpp as mtmd

    L, M = llama, mtmd
    L.llama_backend_init()


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def read(ref):
    return np.fromfile(FIX / ref["file"], dtype="<f4" if ref["dtype"] == "float32" else "u1").reshape(ref["shape"])


class Peer:
    """One text model + mmproj in llama.cpp."""

    def __init__(self, name, hf, min_tokens):
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(FIX / hf["gguf"]).encode(), mp)
        assert self.model, hf["gguf"]
        cp = L.llama_context_default_params()
        cp.n_ctx = cp.n_batch = cp.n_ubatch = 256
        cp.n_threads = cp.n_threads_batch = THREADS
        cp.type_k = cp.type_v = 0  # GGML_TYPE_F32: an F16 cache (the default) would add its rounding
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.n_embd = L.llama_model_n_embd_inp(self.model) if hasattr(L, "llama_model_n_embd_inp") else \
            L.llama_model_n_embd(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        p = M.mtmd_context_params_default()
        p.use_gpu = False
        p.n_threads = THREADS
        p.warmup = False
        p.print_timings = False
        if min_tokens is not None:
            p.image_min_tokens = min_tokens
        self.mtmd = M.mtmd_init_from_file(str(FIX / hf["mmproj"]).encode(), self.model, p)
        assert self.mtmd, hf["mmproj"]
        self.marker = M.mtmd_default_marker()

    def tokenize(self, text: bytes, images, encode=True):
        """mtmd_tokenize of text holding one marker per image (HWC uint8 arrays); encode=False
        gives only each image's token count."""
        bitmaps = [M.mtmd_bitmap_init(im.shape[1], im.shape[0],
                                      np.ascontiguousarray(im).ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)))
                   for im in images]
        arr = (M.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
        chunks = M.mtmd_input_chunks_init()
        inp = M.mtmd_input_text(text=text, text_len=len(text), add_special=False, parse_special=True)
        rc = M.mtmd_tokenize(self.mtmd, chunks, ctypes.byref(inp), arr, len(bitmaps))
        assert rc == 0, f"mtmd_tokenize: {rc}"
        out = []  # ("text", [ids]) or ("image", rows [n, n_embd], non_causal)
        for i in range(M.mtmd_input_chunks_size(chunks)):
            c = M.mtmd_input_chunks_get(chunks, i)
            if M.mtmd_input_chunk_get_type(c) == 0:  # MTMD_INPUT_CHUNK_TYPE_TEXT
                n = ctypes.c_size_t()
                ids = M.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(n))
                out.append(("text", [ids[k] for k in range(n.value)]))
            else:
                n = M.mtmd_input_chunk_get_n_tokens(c)
                if not encode:
                    out.append(n)
                    continue
                assert M.mtmd_encode_chunk(self.mtmd, c) == 0
                e = np.ctypeslib.as_array(M.mtmd_get_output_embd(self.mtmd), shape=(n * self.n_embd,))
                out.append(("image", e.reshape(n, self.n_embd).copy(), bool(M.mtmd_decode_use_non_causal(self.mtmd, c))))
        M.mtmd_input_chunks_free(chunks)
        for b in bitmaps:
            M.mtmd_bitmap_free(b)
        return out

    def encode(self, image):
        parts = self.tokenize(self.marker, [image])
        return next(p for p in parts if p[0] == "image")

    def _decode(self, pos, ids=None, rows=None):
        n = len(ids) if ids is not None else rows.shape[0]
        b = L.llama_batch_init(n, 0 if rows is None else self.n_embd, 1)
        for k in range(n):
            if ids is not None:
                b.token[k] = ids[k]
            b.pos[k] = pos + k
            b.n_seq_id[k] = 1
            b.seq_id[k][0] = 0
            b.logits[k] = 1
        if rows is not None:
            ctypes.memmove(b.embd, np.ascontiguousarray(rows, np.float32).ctypes.data, rows.size * 4)
        b.n_tokens = n
        assert L.llama_decode(self.ctx, b) == 0
        out = np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, k), shape=(self.n_vocab,)).copy()
                        for k in range(n)])
        L.llama_batch_free(b)
        return out

    def run(self, parts, steps):
        """Prefill parts (as tokenize returns them) from position 0, then `steps` greedy tokens:
        (prefill rows, tokens, step rows)."""
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        rows, pos = [], 0
        for p in parts:
            if p[0] == "text":
                if p[1]:
                    rows.append(self._decode(pos, ids=p[1]))
                    pos += len(p[1])
            else:
                L.llama_set_causal_attn(self.ctx, not p[2])
                rows.append(self._decode(pos, rows=p[1]))
                L.llama_set_causal_attn(self.ctx, True)
                pos += p[1].shape[0]
        pre = np.concatenate(rows)
        row, tokens, srows = pre[-1], [], []
        for _ in range(steps):
            t = int(np.argmax(row))
            tokens.append(t)
            srows.append(row)
            row = self._decode(pos, ids=[t])[0]
            pos += 1
        return pre, tokens, np.stack(srows)

    def text(self, tokens):
        """The tokens' pieces joined, as llama-mtmd-cli prints them."""
        vocab, out = L.llama_model_get_vocab(self.model), b""
        for t in tokens:
            buf = ctypes.create_string_buffer(256)
            n = L.llama_token_to_piece(vocab, t, buf, 256, 0, False)
            out += buf.raw[:max(n, 0)]
        return out.decode("utf-8", "replace")

    def close(self):
        M.mtmd_free(self.mtmd)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


def hwc(hf, i):
    return np.ascontiguousarray(read(hf["encoder"][i]["pixels"]).transpose(1, 2, 0))


def hf_parts(hf, pname, feats):
    """HF's prompt ids as parts, the soft tokens replaced by the given rows."""
    p = hf["prompts"][pname]
    ids, parts, at = p["prompt_ids"], [], 0
    for (start, n), img in zip(p["image_spans"], p["images"]):
        parts.append(("text", ids[at:start]))
        parts.append(("image",) + feats[img])
        at = start + n
    parts.append(("text", ids[at:]))
    return parts


def own_text(hf, pname, marker: bytes):
    """HF's prompt string with each expanded image block replaced by mtmd's marker, and <bos>."""
    s = hf["prompts"][pname]["text"]
    gemma3 = hf["model"] == "gemma3"
    begin, end = ("\n\n<start_of_image>", "<end_of_image>\n\n") if gemma3 else ("<|image>", "<image|>")
    out = ""
    while begin in s:
        a = s.index(begin)
        b = s.index(end, a) + len(end)
        out += s[:a] + marker.decode()
        s = s[b:]
    out += s
    return (out if out.startswith("<bos>") else "<bos>" + out).encode()


def compare(tag, got, ref):
    pre, tokens, steps = got
    r = {"prefill_rel": float("%.3g" % rel(pre, read(ref["prefill_logits"]))),
         "steps_rel": float("%.3g" % rel(steps, read(ref["step_logits"]))),
         "tokens": tokens, "tokens_equal": tokens == ref["tokens"],
         "first_token_diff": next((k for k, (a, b) in enumerate(zip(tokens, ref["tokens"])) if a != b), None)}
    print(f"    {tag}: prefill {r['prefill_rel']:.3g}, steps {r['steps_rel']:.3g}, tokens equal {r['tokens_equal']}")
    return r


def cli(build: Path, name, hf, text, min_tokens):
    exe = build / "bin" / "llama-mtmd-cli"
    if not exe.exists():
        return None
    from PIL import Image

    with tempfile.TemporaryDirectory() as d:
        png = Path(d) / "image.png"
        Image.fromarray(hwc(hf, 0), "RGB").save(png)
        cmd = [str(exe), "-m", str(FIX / hf["gguf"]), "--mmproj", str(FIX / hf["mmproj"]), "--image", str(png),
               "-p", text, "-n", "16", "--temp", "0", "-t", str(THREADS), "--no-warmup", "-c", "256"]
        if name == "gemma3":  # the tiny tokenizer has no chat template; llama.cpp's built-in Gemma one
            cmd += ["--chat-template", "gemma"]
        else:  # the chat template in the GGUF (llama.cpp's Gemma 4 one) needs the jinja engine
            cmd += ["--jinja"]
        if min_tokens is not None:
            cmd += ["--image-min-tokens", str(min_tokens)]
        r = subprocess.run(cmd, capture_output=True, timeout=300,
                           env=dict(os.environ, LD_LIBRARY_PATH=str(build / "bin")))
    out, err = (x.decode("utf-8", "replace") for x in (r.stdout, r.stderr))  # byte tokens may split characters
    return {"cmd": " ".join(Path(c).name if c.startswith(str(FIX)) else c for c in cmd[1:]),
            "rc": r.returncode, "stdout": out[-600:], "stderr_tail": err[-600:]}


def peer_model(build: Path, name):
    hf = json.loads((FIX / f"{name}.hf.json").read_text())
    gemma3 = name == "gemma3"
    hf_non_causal = not hf["bidirectional_images"].startswith("none")
    print(name)
    res = {}
    # image_min_tokens 1: llama.cpp's default minimum (70 tokens) would upscale the fixtures' small
    # Gemma 4 images (6 and 9 tokens) beyond their tiny position tables (24 patches a side)
    min_tokens = None if gemma3 else 1
    peer = Peer(name, hf, min_tokens)
    feats, hf_feats = {}, {}
    for i, e in enumerate(hf["encoder"]):
        _, rows, non_causal = peer.encode(hwc(hf, i))
        want = read(e["features"])
        res[f"encoder_{i}"] = {"tokens": rows.shape[0], "hf_tokens": want.shape[0], "non_causal_decode": non_causal,
                               "rel": float("%.3g" % rel(rows, want)) if rows.shape == want.shape else None}
        print(f"  encoder {i}: {rows.shape[0]} tokens (HF {want.shape[0]}), rel {res[f'encoder_{i}']['rel']}, "
              f"non-causal decode {non_causal} (HF rule: {hf_non_causal})")
        feats[i], hf_feats[i] = (rows, non_causal), (want, non_causal)
    runs = {"llamacpp_features": feats, "hf_features": hf_feats}
    if any(f[1] != hf_non_causal for f in feats.values()):  # llama.cpp's mask choice differs from HF's
        runs["hf_features_hf_mask"] = {i: (f[0], hf_non_causal) for i, f in hf_feats.items()}
    for pname, p in hf["prompts"].items():
        for tag, fs in runs.items():
            got = peer.run(hf_parts(hf, pname, fs), len(p["tokens"]))
            res[f"{pname}.{tag}"] = compare(f"{pname} HF ids, {tag}", got, p)
            if "generate_rule" in p:
                res[f"{pname}.{tag}.generate_rule"] = compare(f"{pname} HF ids, {tag} vs generate_rule", got,
                                                              p["generate_rule"])
    # llama.cpp's own prompt (its markers) and preprocessing
    for pname, p in hf["prompts"].items():
        parts = peer.tokenize(own_text(hf, pname, peer.marker), [hwc(hf, i) for i in p["images"]])
        _, tokens, _ = peer.run(parts, len(p["tokens"]))
        n_ids = sum(len(q[1]) if q[0] == "text" else q[1].shape[0] for q in parts)
        r = res[f"{pname}.own"] = {"n_prompt": n_ids, "hf_n_prompt": p["n_prompt"], "tokens": tokens,
                                   "tokens_equal": tokens == p["tokens"], "text": peer.text(tokens),
                                   "image_tokens": [q[1].shape[0] for q in parts if q[0] == "image"]}
        print(f"  {pname} own prompt: {n_ids} positions (HF {p['n_prompt']}), images {r['image_tokens']}, "
              f"tokens {tokens[:8]} vs HF {p['tokens'][:8]}")
    peer.close()
    if not gemma3:  # what llama.cpp's default limits would make of the fixture images (not encoded)
        peer = Peer(name, hf, None)
        res["default_limits_image_tokens"] = [
            next(n for n in peer.tokenize(peer.marker, [hwc(hf, i)], encode=False) if isinstance(n, int))
            for i in range(len(hf["encoder"]))]
        print(f"  default token limits: images of {res['default_limits_image_tokens']} tokens")
        peer.close()
    res["cli"] = cli(build, name, hf, "Describe the picture in one line.", min_tokens)
    if res["cli"]:  # the one-image prompt as the CLI builds it: the own-prompt run's, for Gemma 3 too
        res["cli"]["own_prompt_text"] = res["one_image.own"]["text"]
        res["cli"]["same_as_own_prompt_run"] = res["cli"]["stdout"].strip() == res["one_image.own"]["text"].strip()
        print(f"  llama-mtmd-cli rc {res['cli']['rc']}: {res['cli']['stdout'][-200:]!r}, same text as the own "
              f"prompt run: {res['cli']['same_as_own_prompt_run']}")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=REF / "llama-build")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    bind(a.build)
    report = {name: peer_model(a.build, name) for name in a.models.split(",")}
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
