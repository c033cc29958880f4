#!/usr/bin/env python3
"""By-hand check that a refactor changed no number: runs tests/logits_dump on
every model fixture (tests/fixtures/**/*.gguf, drafters and mmprojs excluded) and on the
default model, at every kernel level this CPU has, and records the SHA-256 of
each logits file in a JSON manifest; --compare checks two manifests.

  python3 tests/tools/logits_identity.py --dump build/tests/logits_dump --out before.json
  ... change the code, rebuild ...
  python3 tests/tools/logits_identity.py --dump build/tests/logits_dump --out after.json --compare before.json

Each run is a 70-token prefill with every position's logits (--all: more than
one 64-row activation group, so the multi-pass kernels run) and three decode
steps, through KVSHARE_KERNEL=<level>. Levels the CPU lacks are skipped and
named (the engine would silently fall back to another level).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ("scalar", "avx2", "avx512vnni", "amx", "float")
# Ids below 500: the tiny fixtures' vocabulary has 512 entries.
PROMPT = ",".join(str(2 + (i * 37) % 497) for i in range(70))
DECODE = ("7", "311", "42")


def cpu_flags() -> set:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def available_levels() -> list:
    flags = cpu_flags()
    have = ["scalar", "float"]
    if {"avx2", "fma", "f16c"} <= flags:
        have.append("avx2")
        if {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
            have.append("avx512vnni")
            if {"amx_tile", "amx_int8", "amx_bf16"} <= flags:
                have.append("amx")
    return [lv for lv in LEVELS if lv in have]


def models() -> list:
    found = sorted(p for p in (ROOT / "tests" / "fixtures").rglob("*.gguf")
                   if "assistant" not in p.name and "mmproj" not in p.name)
    default = Path(os.environ.get("KVSHARE_MODEL_DIR", Path.home() / ".cache" / "kvshare")) / "gemma-3-270m-q4_k_m.gguf"
    if default.exists():
        found.append(default)
    return found


def run(dump: Path, model: Path, level: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.f32"
        env = dict(os.environ, KVSHARE_KERNEL=level)
        proc = subprocess.run([str(dump), "--all", str(model), str(out), PROMPT, *DECODE], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return "error: " + proc.stderr.strip()
        return hashlib.sha256(out.read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", type=Path, default=ROOT / "build" / "tests" / "logits_dump")
    ap.add_argument("--out", type=Path, required=True, help="manifest to write")
    ap.add_argument("--compare", type=Path, help="manifest to compare with")
    args = ap.parse_args()
    levels = available_levels()
    skipped = [lv for lv in LEVELS if lv not in levels]
    manifest = {}
    for model in models():
        name = str(model.relative_to(ROOT)) if model.is_relative_to(ROOT) else model.name
        for level in levels:
            manifest[f"{name} {level}"] = run(args.dump, model, level)
            print(f"{manifest[name + ' ' + level][:16]}  {name} {level}", flush=True)
    args.out.write_text(json.dumps({"skipped_levels": skipped, "runs": manifest}, indent=1, sort_keys=True) + "\n")
    print(f"{len(manifest)} runs; levels skipped on this CPU: {skipped or 'none'}")
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())["runs"]
    differ = sorted(k for k in set(before) | set(manifest) if before.get(k) != manifest.get(k))
    for k in differ:
        print(f"DIFFERS: {k}: {before.get(k)} -> {manifest.get(k)}")
    print(f"{len(manifest) - len(differ)} of {len(manifest)} runs byte-identical to {args.compare}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
