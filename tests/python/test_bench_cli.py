"""`kvshare bench --kernels`: matmul kernel levels alternated within each
repetition of one process (SetMatMulKernel, kvshare/quant/kernel_level.h), on
the tiny quantized Gemma 4 fixture: one row per test and entry, the level and
attention precision in the JSON, the paired ratios to the first entry, and
clear errors for a name that is no level or no precision."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("KVSHARE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
CLI = Path(os.environ.get("KVSHARE_CLI", ROOT / os.environ.get("KVSHARE_BUILD_DIR", "build") / "bin" / "kvshare"))
MODEL = ROOT / "tests" / "fixtures" / "gemma4" / "e2b.q4_k_m.gguf"


def bench(*args):
    if not CLI.is_file():
        pytest.skip(f"{CLI} absent; build the project first")
    return subprocess.run([str(CLI), "bench", "--model", str(MODEL), "--prompt-tokens", "16", "--gen-tokens", "2",
                           "--threads", "1", *args], capture_output=True, text=True)


def test_kernels_alternate_and_pair(tmp_path):
    out = tmp_path / "bench.json"
    # scalar and float run on every CPU; float differs from scalar on purpose.
    r = bench("--repetitions", "3", "--batch", "2", "--kernels", "scalar,float", "--json", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["matmul_kernel"] == "scalar, float (alternating within each repetition)"
    rows = {(x["test"], x["kernel"]): x for x in doc["results"]}
    assert set(rows) == {("pp16 [scalar]", "scalar"), ("tg2 [scalar]", "scalar"), ("tg2 b2 [scalar]", "scalar"),
                         ("pp16 [float]", "float"), ("tg2 [float]", "float"), ("tg2 b2 [float]", "float")}
    for (test, kernel), x in rows.items():
        assert len(x["tok_s"]) == 3 and all(v > 0 for v in x["tok_s"])
        if kernel == "scalar":
            assert "ratios" not in x
            continue
        base = rows[(test.replace("[float]", "[scalar]"), "scalar")]
        assert x["ratio_to_kernel"] == "scalar"
        assert x["ratios"] == pytest.approx([a / b for a, b in zip(x["tok_s"], base["tok_s"])], rel=1e-12)
    assert "x scalar (paired median)" in r.stdout


def test_kernel_entries_set_the_attention_precision(tmp_path):
    out = tmp_path / "bench.json"
    r = bench("--repetitions", "2", "--attention-precision", "f32", "--kernels", "scalar:f32,float",
              "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = [(x["test"], x["kernel"], x["attention_precision"]) for x in json.loads(out.read_text())["results"]]
    assert rows == [("pp16 [scalar:f32]", "scalar", "f32"), ("tg2 [scalar:f32]", "scalar", "f32"),
                    ("pp16 [float]", "float", "f32"), ("tg2 [float]", "float", "f32")]
    r = bench("--kernels", "scalar:fp8")
    assert r.returncode != 0
    assert "--kernels entry 'scalar:fp8': the attention precision after ':' must be f32 or bf16" in r.stderr


def test_kernels_rejects_unknown_level():
    r = bench("--kernels", "scalar,avx1024")
    assert r.returncode != 0
    assert "matmul kernel 'avx1024' is not a kernel level; this process can run: scalar" in r.stderr


def test_kernels_rejects_speculation():
    r = bench("--kernels", "scalar,float", "--spec", "ngram")
    assert r.returncode != 0
    assert "--kernels cannot be combined with --spec or --draft-model" in r.stderr
