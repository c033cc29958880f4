"""kvshare's side of the model checks against peers (test_gemma3_logits.py,
test_gemma3_llamacpp.py, test_gemma4_fixtures.py): tests/tools/logits_dump.cc,
which tokenizes text and runs a prefill plus cached decode steps on a GGUF
file, writing the logits of each call.

MODEL: the default model (default_model.py: KVSHARE_MODEL, else where
scripts/fetch_model.py puts it). DUMP: KVSHARE_LOGITS_DUMP, default
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
from default_model import DEFAULT_MODEL as MODEL  # noqa: E402
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


def check_llamacpp_case(case, model, margin, max_abs, min_compared=8):
    """kvshare teacher-forced on one of llama.cpp's greedy runs (a fixture case:
    gguf, prompt_ids, tokens, top = llama.cpp's top logits per step): kvshare's
    argmax is llama.cpp's token wherever llama.cpp's top-2 margin is at least
    `margin` (on at least `min_compared` steps), and its logits stay within
    `max_abs` of llama.cpp's top ones at every step."""
    prompt, tokens, top = case["prompt_ids"], case["tokens"], case["top"]
    got = logits(prompt, tokens[:-1], model=model)
    assert got.shape[0] == len(tokens) == len(top)
    worst, compared = 0.0, 0
    for step, (row, best) in enumerate(zip(got, top)):
        worst = max(worst, max(abs(row[t] - v) for t, v in best))
        if best[0][1] - best[1][1] >= margin:
            compared += 1
            assert int(row.argmax()) == best[0][0], (case["gguf"], step)
    print(f"{case['gguf']}: max |kvshare - llama.cpp| over llama.cpp's top {len(top[0])}: {worst:.3g}; "
          f"greedy compared on {compared}/{len(top)} steps")
    assert compared >= min_compared, "too few confident steps to compare"
    assert worst < max_abs, (case["gguf"], worst)
