"""kvshare's side of the model checks against peers (test_gemma3_logits.py,
test_gemma3_llamacpp.py, test_gemma4_fixtures.py): tests/tools/logits_dump.cc,
which tokenizes text and runs a prefill plus cached decode steps on a GGUF
file, writing the logits of each call.

MODEL: KVSHARE_MODEL, default models/gemma-3-270m-q4_k_m.gguf
(scripts/fetch_model.py). DUMP: KVSHARE_LOGITS_DUMP, default
$KVSHARE_BUILD_DIR/tests/logits_dump (KVSHARE_BUILD_DIR default build).
skip_if_missing() skips the calling test module when either is absent.
"""
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(os.environ.get("KVSHARE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
MODEL = Path(os.environ.get("KVSHARE_MODEL", ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
DUMP = Path(os.environ.get("KVSHARE_LOGITS_DUMP",
                           ROOT / os.environ.get("KVSHARE_BUILD_DIR", "build") / "tests" / "logits_dump"))


def skip_if_missing():
    if not MODEL.is_file():
        pytest.skip(f"{MODEL} absent; run scripts/fetch_model.py", allow_module_level=True)
    if not DUMP.is_file():
        pytest.skip(f"{DUMP} absent; build the project first", allow_module_level=True)


def skip_if_no_dump():
    if not DUMP.is_file():
        pytest.skip(f"{DUMP} absent; build the project first", allow_module_level=True)


def _run(args, model=MODEL, flags=(), **kw):
    r = subprocess.run([str(DUMP), *flags, str(model), *args], capture_output=True, **kw)
    assert r.returncode == 0, f"{DUMP.name} {' '.join(args)[:200]} failed: {r.stderr}"
    return r


def tokenize(text):
    """kvshare's token ids of text (with <bos>, no special-token parsing)."""
    return [int(t) for t in _run(["--tokenize", text], text=True).stdout.split()]


def logits(ids, decode, kernel=None, model=MODEL, all_positions=False):
    """kvshare's logits [1 + len(decode), n_vocab] (float64): the prompt's last
    position (all_positions: every prompt position, [len(ids) + len(decode),
    n_vocab]), then each cached decode step. kernel: KVSHARE_KERNEL (None: the
    default level)."""
    env = dict(os.environ)
    env.pop("KVSHARE_KERNEL", None)
    if kernel:
        env["KVSHARE_KERNEL"] = kernel
    rows = (len(ids) if all_positions else 1) + len(decode)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "logits.f32"
        _run([str(out), ",".join(map(str, ids)), *map(str, decode)], model=model,
             flags=["--all"] if all_positions else [], env=env)
        return np.fromfile(out, dtype="<f4").reshape(rows, -1).astype(np.float64)
