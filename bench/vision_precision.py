#!/usr/bin/env python3
"""Encoder-output error of the bf16 precision against the f32 one (docs/vision.md
"Precision"), on the real-geometry random-weight files of bench/vision_geometry.py:
one kvshare bench-image run per precision with --dump, then per encoder

  max_abs_rel   max |bf16 - f32| / max |f32| over all soft-token values
  rms_rel       ||bf16 - f32|| / ||f32|| (Frobenius, all tokens)
  cos_min       the smallest cosine similarity of a token's bf16 and f32 rows

With --llama-build (a shared-library build of the vendored llama.cpp, as
tests/tools/vision_llamacpp_peer.py uses; run with the reference venv's
python) the same three figures for llama.cpp's soft tokens of the same image
(its own preprocessing, an identity resize at these sizes) against kvshare's
f32 ones. --keep DIR keeps the dumps (and llama.cpp's) there and reuses them.

Encoders: gemma3 (SigLIP, 896 px), gemma4v (Gemma 4 E2B, 768 x 768; its
random q / k norms make attention an argmax, see docs/vision.md), gemma4v_scaled
(the same with q / k norms that give trained-like score spreads) and gemma3nv
(MobileNet-V5, which runs f32 at every precision: its bf16 figures are 0, its
llama.cpp ones are the measure).

  python3 bench/vision_precision.py [--dir /opt/kvshare-ref/bench] [--encoders gemma3,gemma4v,gemma4v_scaled,gemma3nv]
      [--threads 2] [--keep DIR] [--llama-build /opt/kvshare-ref/llama-build]
      [--json bench/results/vision_precision.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
IMAGE = {"gemma3": "astronaut_896.png", "gemma4v": "astronaut_768.png", "gemma4v_scaled": "astronaut_768.png",
         "gemma3nv": "astronaut_768.png"}
TOKENS = 256  # every image gives 256 soft tokens (bench/vision_peer.py)


def encode(a, enc, precision, out):
    if out.exists():
        return np.fromfile(out, dtype=np.float32).astype(np.float64)
    cmd = [a.kvshare, "bench-image", "--mmproj", a.dir / f"{enc}.mmproj.gguf", "--image", a.dir / IMAGE[enc],
           "--threads", str(a.threads), "--warmup", "0", "--repetitions", "1", "--vision-precision", precision,
           "--dump", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return np.fromfile(out, dtype=np.float32).astype(np.float64)


def compare(ref, got):
    diff = got - ref
    x, y = ref.reshape(TOKENS, -1), got.reshape(TOKENS, -1)
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    return {"max_abs_rel": float(np.abs(diff).max() / np.abs(ref).max()),
            "rms_rel": float(np.linalg.norm(diff) / np.linalg.norm(ref)), "cos_min": float(cos.min())}


def llamacpp(a, enc):
    """llama.cpp's soft tokens of the image (tests/tools/vision_llamacpp_peer.py's bindings)."""
    import importlib.util

    from PIL import Image

    spec = importlib.util.spec_from_file_location("peer", ROOT / "tests" / "tools" / "vision_llamacpp_peer.py")
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    if peer.L is None:
        peer.bind(a.llama_build)
    peer.THREADS = a.threads
    p = peer.Peer(enc, {"gguf": str(a.dir / f"{enc}.text.gguf"), "mmproj": str(a.dir / f"{enc}.mmproj.gguf")}, None)
    rows = p.encode(np.asarray(Image.open(a.dir / IMAGE[enc]).convert("RGB")))[1]
    p.close()
    return rows.astype(np.float64).ravel()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvshare", type=Path, default=ROOT / "build" / "bin" / "kvshare")
    ap.add_argument("--dir", type=Path, default=Path("/opt/kvshare-ref/bench"))
    ap.add_argument("--encoders", default="gemma3,gemma4v,gemma4v_scaled,gemma3nv")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--llama-build", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    doc = {"date": time.strftime("%Y-%m-%d"), "kvshare_revision": rev.strip(), "command": " ".join(sys.argv),
           "results": []}
    with tempfile.TemporaryDirectory() as tmp:
        d = a.keep or Path(tmp)
        for enc in a.encoders.split(","):
            f32 = encode(a, enc, "f32", d / f"{enc}.f32.bin")
            r = {"encoder": enc, "values": int(f32.size), **compare(f32, encode(a, enc, "bf16", d / f"{enc}.bf16.bin"))}
            if a.llama_build:
                cached = d / f"{enc}.llamacpp.bin"
                if not cached.exists():
                    llamacpp(a, enc).astype(np.float32).tofile(cached)
                r["llamacpp_vs_f32"] = compare(f32, np.fromfile(cached, dtype=np.float32).astype(np.float64))
            print(r, flush=True)
            doc["results"].append(r)
    if a.json:
        a.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
