"""The AMX kernel level's forward passes equal the AVX-512 VNNI level's, byte
for byte (issue 48: one arithmetic per output, whichever level computes a
product): tests/tools/logits_dump on the quantized model fixtures and the
default model, a 70-token prefill with every position's logits (the packed
matrices' 70 rows on the tiles in one call; the IQ1-IQ3 row kernels' 64-row
group on the tiles, then 6 rows below their tile threshold on the VNNI
kernels; the LM head over all 70 rows) and three cached decode steps,
once with KVSHARE_KERNEL=amx and once with KVSHARE_KERNEL=avx512vnni.
Skipped where the CPU lacks AMX (the engine would run VNNI for both).
"""
import hashlib
import os
from pathlib import Path

import pytest

pytest.importorskip("numpy")

from logits_dump import MODEL, ROOT, _run, skip_if_no_dump  # noqa: E402

skip_if_no_dump()


def cpu_flags():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


if not {"amx_tile", "amx_int8", "amx_bf16", "avx512_vnni"} <= cpu_flags():
    pytest.skip("this CPU has no AMX (amx_tile, amx_int8, amx_bf16 in /proc/cpuinfo)", allow_module_level=True)

PROMPT = ",".join(str(2 + (i * 37) % 497) for i in range(70))  # ids below the fixtures' 512
DECODE = ("7", "311", "42")
FIXTURES = sorted(p for p in (ROOT / "tests" / "fixtures").rglob("*.gguf")
                  if "assistant" not in p.name and "mmproj" not in p.name and not p.name.endswith(".f32.gguf")
                  and "features" not in p.name and "embedding" not in str(p))


def digest(model, kernel, tmp_path):
    out = tmp_path / f"{kernel}.f32"
    _run([str(out), PROMPT, *DECODE], model=model, flags=["--all"], env={**os.environ, "KVSHARE_KERNEL": kernel})
    data = out.read_bytes()
    assert len(data) > 0
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("model", FIXTURES + [MODEL],
                         ids=lambda p: str(p.relative_to(ROOT / "tests" / "fixtures")) if p in FIXTURES else p.name)
def test_amx_logits_equal_vnni(model, tmp_path):
    if not model.is_file():
        pytest.skip(f"{model} absent")
    assert digest(model, "amx", tmp_path) == digest(model, "avx512vnni", tmp_path)
