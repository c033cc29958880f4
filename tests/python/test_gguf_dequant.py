"""Compares kvshare's reference dequantizer with the PyPI `gguf` package on the
real model file: bit-exact float32 equality for at least one tensor of every
ggml type in the file (several per type, and the first rows of token_embd).

Needs: pip install gguf numpy pytest; the model (scripts/fetch_model.py); the
gguf_dequant_dump binary (KVSHARE_DEQUANT_DUMP, or build/tests/gguf_dequant_dump).
Skips cleanly when any of these is missing.
"""
import os
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")

ROOT = Path(os.environ.get("KVSHARE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
MODEL = Path(os.environ.get("KVSHARE_MODEL", ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
DUMP = Path(os.environ.get("KVSHARE_DEQUANT_DUMP", ROOT / "build" / "tests" / "gguf_dequant_dump"))
PER_TYPE = 3          # tensors compared per type
MAX_ROWS = 4096       # rows compared per tensor (token_embd has 262144)

if not MODEL.is_file():
    pytest.skip(f"{MODEL} absent; run scripts/fetch_model.py", allow_module_level=True)
if not DUMP.is_file():
    pytest.skip(f"{DUMP} absent; build the project first", allow_module_level=True)


def _selected():
    reader = gguf.GGUFReader(str(MODEL))
    by_type = defaultdict(list)
    for t in reader.tensors:
        by_type[t.tensor_type.name].append(t)
    picks = []
    for name, ts in sorted(by_type.items()):
        picks += ts[:PER_TYPE]
    return reader, picks, sorted(by_type)


READER, PICKS, TYPES = _selected()


def test_types_present():
    assert {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"} <= set(TYPES), TYPES


@pytest.mark.parametrize("tensor", PICKS, ids=[f"{t.tensor_type.name}:{t.name}" for t in PICKS])
def test_dequant_matches_gguf(tensor):
    ne0 = int(tensor.shape[0])
    data = np.asarray(tensor.data)
    rows = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
    rows = rows[:MAX_ROWS]
    ref = gguf.quants.dequantize(rows, tensor.tensor_type).astype(np.float32).reshape(-1, ne0)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "t.f32"
        subprocess.run([str(DUMP), str(MODEL), tensor.name, str(out), str(MAX_ROWS)], check=True)
        ours = np.fromfile(out, dtype="<f4").reshape(-1, ne0)
    assert ours.shape == ref.shape
    diff = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert diff.size == 0, (
        f"{diff.size} of {ours.size} elements differ; first at {diff[0]}: "
        f"ours {ours.ravel()[diff[0]]!r} gguf {ref.ravel()[diff[0]]!r}")
