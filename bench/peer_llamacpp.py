#!/usr/bin/env python3
"""kvshare bench against llama.cpp's llama-bench on the same GGUF, threads and KV
cache dtype, alternating the two engines round by round, and prints pp / tg
tok/s at every depth with the kvshare / llama.cpp ratio per cell (median over
rounds, and the range of the per-round ratios).

llama.cpp is a local reference, never a dependency of kvshare: build llama-bench
by hand from the llama.cpp vendored in the llama-cpp-python sdist (PyPI) and
pass its path. Both engines run with the KV cache in --kv-dtype; llama.cpp with
flash attention on (its fastest CPU path for long contexts).

  python3 bench/peer_llamacpp.py --model models/X.gguf --llama-bench PATH \\
      [--threads 1,2] [--depths 0,4096,16384] [--prompt 512] [--gen 128] \\
      [--repetitions 2] [--rounds 2] [--kv-dtype f16] [--json out.json]

Each round runs kvshare's `bench` (build/bin/kvshare, --kvshare to change) and
then llama-bench with the same settings, each as one process over all thread
counts and depths. A test at depth d runs after d tokens of context.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_kvshare(a, threads, depths, extra=()):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "kvshare.json"
        cmd = [str(a.kvshare), "bench", "--model", str(a.model), "--threads", ",".join(map(str, threads)),
               "--depth", ",".join(map(str, depths)), "--prompt-tokens", str(a.prompt), "--gen-tokens", str(a.gen),
               "--repetitions", str(a.repetitions), "--kv-dtype", a.kv_dtype, "--json", str(out), *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        doc = json.loads(out.read_text())
    res = {}
    for r in doc["results"]:
        kind = "pp" if r["test"].startswith("pp") else "tg"
        res[(r["threads"], r["depth"], kind)] = r["tok_s_median"]
    return res, doc


def run_llamacpp(a, threads, depths):
    cmd = [str(a.llama_bench), "-m", str(a.model), "-t", ",".join(map(str, threads)),
           "-d", ",".join(map(str, depths)), "-p", str(a.prompt), "-n", str(a.gen), "-r", str(a.repetitions),
           "-ctk", a.kv_dtype, "-ctv", a.kv_dtype, "-fa", "on", "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = {}
    for r in json.loads(out):
        kind = "pp" if r["n_prompt"] > 0 else "tg"
        res[(r["n_threads"], r["n_depth"], kind)] = r["avg_ts"]
    return res, out


def parse_bench_args(doc, llama_bench_required, rounds):
    """The command line this script and amx_levels.py share: (args, threads,
    depths)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--llama-bench", type=Path, required=llama_bench_required)
    ap.add_argument("--kvshare", type=Path, default=ROOT / "build" / "bin" / "kvshare")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--depths", default="0")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--repetitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--kv-dtype", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    return a, [int(t) for t in a.threads.split(",")], [int(d) for d in a.depths.split(",")]


def main() -> int:
    a, threads, depths = parse_bench_args(__doc__, llama_bench_required=True, rounds=2)

    rounds = []
    for i in range(a.rounds):
        t0 = time.time()
        k, kdoc = run_kvshare(a, threads, depths)
        t1 = time.time()
        l, _ = run_llamacpp(a, threads, depths)
        t2 = time.time()
        print(f"round {i + 1}/{a.rounds}: kvshare {t1 - t0:.0f} s, llama.cpp {t2 - t1:.0f} s", file=sys.stderr)
        rounds.append((k, l))

    print(f"model {a.model}  KV cache {a.kv_dtype}  kvshare {kdoc['kvshare_revision']}  cpu {kdoc['cpu_model']} "
          f"(matmul kernel {kdoc['matmul_kernel']})")
    print(f"KV bytes (kvshare, at the deepest context): {kdoc['kv_bytes']} with sharing, "
          f"{kdoc['kv_bytes_without_sharing']} without")
    print(f"{a.rounds} rounds x {a.repetitions} repetitions, engines alternating; tok/s medians over rounds\n")
    print(f"{'threads':>7}  {'test':<18} {'kvshare':>9} {'llama.cpp':>10} {'ratio':>7}  {'ratio range':>13}")
    table = []
    for t in threads:
        for d in depths:
            for kind, n in (("pp", a.prompt), ("tg", a.gen)):
                key = (t, d, kind)
                ks = [r[0][key] for r in rounds]
                ls = [r[1][key] for r in rounds]
                ratios = [x / y for x, y in zip(ks, ls)]
                test = f"{kind}{n}" + (f" @ d{d}" if d else "")
                row = {"threads": t, "depth": d, "test": test, "kvshare": statistics.median(ks),
                       "llamacpp": statistics.median(ls), "ratio": statistics.median(ratios),
                       "ratio_min": min(ratios), "ratio_max": max(ratios), "kvshare_runs": ks, "llamacpp_runs": ls}
                table.append(row)
                print(f"{t:>7}  {test:<18} {row['kvshare']:>9.1f} {row['llamacpp']:>10.1f} {row['ratio']:>7.2f}  "
                      f"{row['ratio_min']:>5.2f}-{row['ratio_max']:.2f}")
    if a.json:
        a.json.write_text(json.dumps({"model": str(a.model), "kv_dtype": a.kv_dtype, "rounds": a.rounds,
                                      "repetitions": a.repetitions, "kvshare_bench": kdoc, "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
