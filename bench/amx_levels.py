#!/usr/bin/env python3
"""kvshare bench at the AMX kernel level against the AVX-512 VNNI level
(KVSHARE_KERNEL=amx / avx512vnni) and, with --llama-bench, against llama.cpp's
llama-bench, on the same GGUF, threads and KV cache dtype (issue 48). Each
round runs every engine once, in an order that rotates from round to round so
that a shared host's drift falls on each alike; prints pp / tg tok/s medians
over rounds and the per-round ratios.

  python3 bench/amx_levels.py --model models/X.gguf [--llama-bench PATH] \\
      [--threads 1,2] [--depths 0] [--prompt 512] [--gen 128] \\
      [--repetitions 2] [--rounds 3] [--kv-dtype f16] [--json out.json]

The kvshare and llama-bench runs are peer_llamacpp.py's (same flags).
For the AMX / VNNI ratio alone, `kvshare bench --kernels avx512vnni,amx`
pairs the levels within one process (each repetition runs both, seconds
apart), which this host's drift between processes does not blur.
KVSHARE_AMX_LEVELS_BF16_ATTENTION=1 adds a third kvshare engine, amx_bf16attn:
the AMX level with --attention-precision bf16 (the attention products on
AMX-BF16 tiles; needs --kv-dtype f16, bf16 or f32).
KVSHARE_AMX_LEVELS_BF16_WEIGHTS=1 adds amx_bf16w: the AMX level with
--weight-precision bf16 (the F32 / F16 / BF16 weight matrices on AMX-BF16
tiles; for F16 / BF16 GGUFs, e.g. from bench/f16_gguf.py).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_llamacpp import parse_bench_args, run_kvshare, run_llamacpp  # noqa: E402

LEVELS = ("amx", "avx512vnni")


BF16_ATTENTION = "amx_bf16attn"
BF16_WEIGHTS = "amx_bf16w"


def run_level(a, level, threads, depths):
    extra = ()
    if level == BF16_ATTENTION:
        level, extra = "amx", ("--attention-precision", "bf16")
    elif level == BF16_WEIGHTS:
        level, extra = "amx", ("--weight-precision", "bf16")
    old = os.environ.get("KVSHARE_KERNEL")
    os.environ["KVSHARE_KERNEL"] = level
    try:
        res, doc = run_kvshare(a, threads, depths, extra)
    finally:
        if old is None:
            del os.environ["KVSHARE_KERNEL"]
        else:
            os.environ["KVSHARE_KERNEL"] = old
    if doc["matmul_kernel"] != level:
        sys.exit(f"kvshare ran matmul kernel {doc['matmul_kernel']!r}, not {level!r}: is AMX usable here?")
    return res, doc


def main() -> int:
    a, threads, depths = parse_bench_args(__doc__, llama_bench_required=False, rounds=3)

    bf16 = os.environ.get("KVSHARE_AMX_LEVELS_BF16_ATTENTION") == "1"
    bf16w = os.environ.get("KVSHARE_AMX_LEVELS_BF16_WEIGHTS") == "1"
    extras = ([BF16_ATTENTION] if bf16 else []) + ([BF16_WEIGHTS] if bf16w else [])
    engines = list(LEVELS) + extras + (["llama.cpp"] if a.llama_bench else [])
    rounds, docs = [], {}
    for i in range(a.rounds):
        order = engines[i % len(engines):] + engines[:i % len(engines)]
        got, times = {}, []
        for e in order:
            t0 = time.time()
            if e == "llama.cpp":
                got[e], _ = run_llamacpp(a, threads, depths)
            else:
                got[e], docs[e] = run_level(a, e, threads, depths)
            times.append(f"{e} {time.time() - t0:.0f} s")
        print(f"round {i + 1}/{a.rounds}: " + ", ".join(times), file=sys.stderr)
        rounds.append(got)

    doc = docs["amx"]
    print(f"model {a.model}  KV cache {a.kv_dtype}  kvshare {doc['kvshare_revision']}  cpu {doc['cpu_model']}")
    print(f"{a.rounds} rounds x {a.repetitions} repetitions, engines alternating; tok/s medians over rounds, "
          "ratio: median of the per-round ratios (range)\n")
    pairs = [("amx", "avx512vnni")] + ([("amx", "llama.cpp"), ("avx512vnni", "llama.cpp")] if a.llama_bench else [])
    for x in extras:
        pairs += [(x, "amx"), (x, "avx512vnni")]
        pairs += [(x, "llama.cpp")] if a.llama_bench else []
    table = []
    for t in threads:
        for d in depths:
            for kind, n in (("pp", a.prompt), ("tg", a.gen)):
                key = (t, d, kind)
                test = f"{kind}{n}" + (f" @ d{d}" if d else "")
                row = {"threads": t, "depth": d, "test": test}
                for e in engines:
                    runs = [r[e][key] for r in rounds]
                    row[e] = statistics.median(runs)
                    row[e + "_runs"] = runs
                line = f"{t:>2} thr {test:<14}" + "".join(f" {e} {row[e]:8.1f}" for e in engines)
                for x, y in pairs:
                    ratios = [r[x][key] / r[y][key] for r in rounds]
                    row[f"{x}/{y}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                                       "runs": ratios}
                    line += f"  {x}/{y} {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                table.append(row)
                print(line)
    if a.json:
        a.json.write_text(json.dumps({"model": str(a.model), "kv_dtype": a.kv_dtype, "rounds": a.rounds,
                                      "repetitions": a.repetitions, "kvshare_bench": docs, "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
