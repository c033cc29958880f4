"""`kvshare perplexity` against a NumPy computation of the same definition
(llama.cpp's llama-perplexity): on a tiny Gemma 4 fixture model and the shipped
public-domain text, chunks of N tokens whose first token is replaced by <bos>,
the second half of each scored with a log-softmax in float64, PPL = exp(mean
NLL) and its standard error. The logits come from kvshare's Forward
(tests/tools/logits_dump.cc, every position of each chunk), so this checks the
chunking, the positions scored and the statistics, not the model."""
import os
import re
import subprocess
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from logits_dump import DUMP, ROOT, _run, logits, skip_if_no_dump  # noqa: E402

skip_if_no_dump()

CLI = Path(os.environ.get("KVSHARE_CLI", ROOT / os.environ.get("KVSHARE_BUILD_DIR", "build") / "bin" / "kvshare"))
MODEL = ROOT / "tests" / "fixtures" / "gemma4" / "e2b.f32.gguf"
TEXT = ROOT / "tests" / "fixtures" / "text" / "public_domain.txt"
N_CTX, CHUNKS = 64, 3


def numpy_perplexity(ids, bos):
    nll = []
    for c in range(min(len(ids) // N_CTX, CHUNKS)):
        chunk = list(ids[c * N_CTX:(c + 1) * N_CTX])
        chunk[0] = bos
        lg = logits(chunk, [], model=MODEL, all_positions=True)  # [N_CTX, V]
        for j in range(N_CTX // 2, N_CTX - 1):
            row = lg[j] - lg[j].max()
            nll.append(np.log(np.exp(row).sum()) - row[ids[c * N_CTX + j + 1]])
    nll = np.array(nll)
    ppl = np.exp(nll.mean())
    return ppl, ppl * np.sqrt((np.mean(nll ** 2) - nll.mean() ** 2) / (len(nll) - 1)), len(nll)


def test_perplexity_equals_numpy():
    if not CLI.is_file():
        pytest.skip(f"{CLI} absent; build the project first")
    ids = [int(t) for t in _run(["--tokenize", TEXT.read_text()], model=MODEL, text=True).stdout.split()]
    assert ids[0] == 2 and len(ids) >= 2 * N_CTX
    out = subprocess.run([str(CLI), "perplexity", "--model", str(MODEL), "-f", str(TEXT), "-c", str(N_CTX),
                          "--chunks", str(CHUNKS), "--threads", "2"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"PPL = ([0-9.]+) \+/- ([0-9.]+)  \((\d+) chunks of (\d+) tokens, (\d+) tokens scored\)", out)
    assert m, out
    ppl, err, scored = numpy_perplexity(ids, bos=2)
    assert int(m.group(3)) == CHUNKS and int(m.group(5)) == scored == CHUNKS * (N_CTX // 2 - 1)
    assert abs(float(m.group(1)) - ppl) <= 1e-4 * ppl + 5e-5, (m.group(1), ppl)
    assert abs(float(m.group(2)) - err) <= 1e-3 * err + 5e-6, (m.group(2), err)
