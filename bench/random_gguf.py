"""Helpers for the *_geometry.py scripts: full-size GGUFs with random weights
for speed measurements (speed depends only on shapes and types).

A tensor spec is (name, ggml shape ne0-first, kind): kind "w" is a matrix
written as F16 with N(0, 0.02) entries, "n" a norm or scale written as F32
around 1, "c" small F32 coefficients N(0, 0.1), "r" a rope_freqs vector whose
first `rope_pairs` entries are 1 and the rest 1e30 (pairs that do not turn), and
a float kind an F32 tensor with every entry that value (clamp bounds).

Needs numpy and gguf (PyPI; written against gguf 0.19).
"""
from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import gguf


def add_vocabulary(w: gguf.GGUFWriter, vocab: int, markers: tuple[str, ...] = ()) -> None:
    """A synthetic SentencePiece-style vocabulary (tokenizer.ggml.model "llama":
    specials, 256 byte tokens, distinct filler pieces) that both engines load;
    `markers` (e.g. image markers) become control tokens in the last ids."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.UNKNOWN]
    types += [gguf.TokenType.BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(tokens) < vocab - len(markers):  # "▁a", "▁b", ..., then longer pieces
        n = len(tokens) - 260
        piece = ""
        while True:
            piece = letters[n % 26] + piece
            n //= 26
            if n == 0:
                break
        tokens.append("\u2581" + piece)
        types.append(gguf.TokenType.NORMAL)
    tokens += list(markers)
    types += [gguf.TokenType.CONTROL] * len(markers)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 260 + [-float(i) for i in range(vocab - 260)])
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)


def write_tensors(w: gguf.GGUFWriter, specs, rng: np.random.Generator, rope_pairs: int = 0) -> None:
    """Writes header, metadata and `specs` (see the module docstring) in chunks,
    so a 10 GB file needs little memory; closes the writer."""
    for name, shape, kind in specs:
        dtype = np.dtype(np.float16 if kind == "w" else np.float32)
        n = int(np.prod(shape))
        w.add_tensor_info(name, tuple(reversed(shape)), dtype, n * dtype.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    for name, shape, kind in specs:
        ti = w.tensors[0].pop(name)  # as GGUFWriter.write_tensor_data does, but written in chunks
        w.write_padding(fout, fout.tell())
        n = int(np.prod(shape))
        if isinstance(kind, float):
            np.full(n, kind, dtype=np.float32).tofile(fout)
        elif kind == "w":
            chunk = 1 << 26
            for lo in range(0, n, chunk):
                m = min(chunk, n - lo)
                (rng.standard_normal(m, dtype=np.float32) * 0.02).astype(np.float16).tofile(fout)
        elif kind == "r":
            np.array([1.0] * rope_pairs + [1e30] * (n - rope_pairs), dtype=np.float32).tofile(fout)
        elif kind == "c":
            (0.1 * rng.standard_normal(n, dtype=np.float32)).tofile(fout)
        else:
            (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32).tofile(fout)
        w.write_padding(fout, ti.nbytes)
    w.close()


def quantize_q4_k_m(f16: Path, llama_quantize: Path, show: tuple[str, ...]) -> Path:
    """Runs llama-quantize (a reference tool built locally, never a dependency of
    kvshare) to llama.cpp's Q4_K_M mix and prints the tensor types it chose."""
    q = f16.with_name(f16.name.replace("-f16", "-q4_k_m"))
    t0 = time.time()
    subprocess.run([str(llama_quantize), str(f16), str(q), "Q4_K_M", "2"], check=True, stdout=subprocess.DEVNULL)
    r = gguf.GGUFReader(str(q))
    mix = Counter(t.tensor_type.name for t in r.tensors)
    print(f"wrote {q} ({q.stat().st_size / 1e9:.2f} GB) in {time.time() - t0:.0f} s; tensor types: "
          + ", ".join(f"{k} x{v}" for k, v in mix.most_common()))
    big = {t.name: t.tensor_type.name for t in r.tensors if t.name in show}
    print("  " + ", ".join(f"{k}: {v}" for k, v in big.items()))
    return q
