#!/usr/bin/env python3
"""Speculative decoding with prompt lookup on the 20 repetitive prompts of
bench/spec_prompts.py: kvshare's decode tok/s without and with `--spec ngram`
(outputs must be identical), next to llama.cpp's llama-server without and
with its n-gram speculative types on the same model, threads, prompts and
KV cache dtype. Engines and modes alternate prompt by prompt (kvshare) and
config by config (llama.cpp) within each round.

llama.cpp is a local reference, never a dependency of kvshare: build
llama-server by hand from the llama.cpp vendored in the llama-cpp-python sdist
(PyPI) and pass its path.

  python3 bench/spec_bench.py [--model PATH] [--threads 1,2] [--rounds 2]
      [--tokens 128] [--kv-dtype f16] [--draft-max 16] [--llama-server PATH]
      [--llama-spec "ngram-simple" --llama-spec "ngram-mod" ...] [--json out.json]

Other drafters and prompts: --spec-args "--draft-model A.gguf" replaces kvshare's
`--spec ngram`; --prompts FILE takes the prompts' text from a JSON file (a list of
strings, or an object whose "prompts" entries have a "text"), e.g. the Gemma 4 assistant
fixture: --model tests/fixtures/gemma4_assistant/target.f32.gguf --prompts
tests/fixtures/gemma4_assistant/target.hf.json --spec-args "--draft-model
tests/fixtures/gemma4_assistant/assistant_plain.f32.gguf" --llama-spec "draft-mtp -md
tests/fixtures/gemma4_assistant/assistant_plain.f32.gguf".

Decode tok/s per configuration = all prompts' generated tokens after the
first / their decode seconds (kvshare: the generate command's stats line;
llama-server: timings.predicted_n / predicted_ms). Every run is greedy.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_prompts import PROMPTS  # noqa: E402

STATS = re.compile(r"decode ([0-9.]+) tok/s \(([0-9]+) steps\), generated ([0-9]+) tokens")
SPEC = re.compile(r"accepted ([0-9]+) / drafted ([0-9]+)")


def kvshare_run(a, prompt, threads, spec):
    cmd = [str(a.kvshare), "generate", "--model", str(a.model), "--raw", "--prompt", prompt, "-n", str(a.tokens),
           "--threads", str(threads), "--kv-dtype", a.kv_dtype, "--max-context", "2048"]
    if spec:
        cmd += shlex.split(a.spec_args) + ["--draft-max", str(a.draft_max)]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    m = STATS.search(r.stderr)
    rate, steps, generated = float(m.group(1)), int(m.group(2)), int(m.group(3))
    s = SPEC.search(r.stderr)
    return {"text": r.stdout, "tokens": generated - 1, "seconds": (generated - 1) / rate if rate > 0 else 0.0,
            "steps": steps, "accepted": int(s.group(1)) if s else 0, "drafted": int(s.group(2)) if s else 0}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def llama_runs(a, threads, spec_args):
    """Every prompt through one llama-server started with spec_args."""
    port = free_port()
    cmd = [str(a.llama_server), "-m", str(a.model), "-t", str(threads), "-tb", str(threads), "-c", "2048", "-np", "1",
           "--port", str(port), "--host", "127.0.0.1", "-ctk", a.kv_dtype, "-ctv", a.kv_dtype, "--no-warmup"] + shlex.split(a.llama_args)
    cmd += spec_args
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        else:
            raise RuntimeError("llama-server did not start: " + " ".join(map(shlex.quote, cmd)))
        out = []
        for p in a.prompts:
            r = post(url + "/completion", {"prompt": p, "n_predict": a.tokens, "temperature": 0, "top_k": 1,
                                           "cache_prompt": False, "seed": 1})
            t = r["timings"]
            out.append({"text": r["content"], "tokens": t["predicted_n"] - 1, "seconds": t["predicted_ms"] / 1000.0,
                        "accepted": t.get("draft_n_accepted", 0), "drafted": t.get("draft_n", 0)})
        return out
    finally:
        proc.terminate()
        proc.wait(30)


def load_prompts(path):
    doc = json.loads(path.read_text())
    return doc if isinstance(doc, list) else [p["text"] for p in doc["prompts"]]


def total_rate(runs):
    return sum(r["tokens"] for r in runs) / sum(r["seconds"] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="default: the default model (scripts/fetch_model.py)")
    ap.add_argument("--kvshare", type=Path, default=ROOT / "build" / "bin" / "kvshare")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--kv-dtype", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--llama-server", type=Path)
    ap.add_argument("--llama-spec", action="append", default=[],
                    help="llama-server speculative arguments after --spec-type, e.g. \"ngram-simple "
                         "--spec-ngram-simple-size-n 3\" (repeatable; default: the n-gram types with their defaults "
                         "and two short-n-gram ngram-simple settings)")
    ap.add_argument("--llama-args", default="",
                    help="extra llama-server arguments for every llama.cpp run, e.g. \"--no-repack\" (llama.cpp's "
                         "AMX matmul dies with SIGILL on hosts whose VM does not enable AMX tiles)")
    ap.add_argument("--spec-args", default="--spec ngram", help="kvshare generate's speculation flags")
    ap.add_argument("--prompts", type=Path, help="JSON prompts (default: bench/spec_prompts.py)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.model is None:
        sys.path.insert(0, str(ROOT / "tests" / "python"))
        from default_model import DEFAULT_MODEL
        a.model = DEFAULT_MODEL
    a.prompts = PROMPTS if a.prompts is None else load_prompts(a.prompts)
    threads = [int(t) for t in a.threads.split(",")]
    # Each n-gram type with its defaults, and ngram-simple with short n-grams (the best of several
    # settings tried on these prompts; its default looks up 12-grams).
    llama_specs = a.llama_spec or ["ngram-simple", "ngram-map-k", "ngram-mod",
                                   "ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 8",
                                   "ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 16"]

    results = {}  # (config, threads) -> [runs per round]
    mismatches = []
    for rnd in range(a.rounds):
        for t in threads:
            plain, spec = [], []
            for i, p in enumerate(a.prompts):
                x = kvshare_run(a, p, t, False)
                y = kvshare_run(a, p, t, True)
                if x["text"] != y["text"]:
                    mismatches.append((t, i))
                plain.append(x)
                spec.append(y)
            results.setdefault(("kvshare", t), []).append(plain)
            results.setdefault(("kvshare " + a.spec_args, t), []).append(spec)
            print(f"round {rnd + 1} threads {t}: kvshare {total_rate(plain):.1f} -> {total_rate(spec):.1f} tok/s",
                  file=sys.stderr)
            if a.llama_server:
                runs = llama_runs(a, t, [])
                results.setdefault(("llama.cpp", t), []).append(runs)
                print(f"round {rnd + 1} threads {t}: llama.cpp {total_rate(runs):.1f} tok/s", file=sys.stderr)
                for s in llama_specs:
                    runs = llama_runs(a, t, ["--spec-type"] + shlex.split(s))
                    results.setdefault((f"llama.cpp {s}", t), []).append(runs)
                    print(f"round {rnd + 1} threads {t}: llama.cpp {s} {total_rate(runs):.1f} tok/s", file=sys.stderr)

    print(f"model {a.model}, {len(a.prompts)} prompts x {a.tokens} tokens, greedy, KV {a.kv_dtype}, {a.rounds} rounds; "
          f"decode tok/s over all prompts (median of rounds)\n")
    print(f"{'threads':>7}  {'engine':<58} {'tok/s':>7} {'vs plain':>9} {'accepted':>9}")
    table = []
    for t in threads:
        base = {"kvshare": statistics.median(total_rate(r) for r in results[("kvshare", t)])}
        if ("llama.cpp", t) in results:
            base["llama.cpp"] = statistics.median(total_rate(r) for r in results[("llama.cpp", t)])
        for (name, tt), rounds in results.items():
            if tt != t:
                continue
            rate = statistics.median(total_rate(r) for r in rounds)
            engine = name.split(" ")[0]
            acc = sum(x["accepted"] for r in rounds for x in r)
            dr = sum(x["drafted"] for r in rounds for x in r)
            row = {"threads": t, "engine": name, "tok_s": rate, "vs_plain": rate / base[engine],
                   "tok_s_rounds": [total_rate(r) for r in rounds], "accepted": acc, "drafted": dr}
            table.append(row)
            print(f"{t:>7}  {name:<58} {rate:>7.1f} {row['vs_plain']:>8.2f}x "
                  f"{(100.0 * acc / dr if dr else 0):>8.1f}%")
        spec_k = statistics.median(total_rate(r) for r in results[("kvshare " + a.spec_args, t)])
        best = max((r for r in table if r["threads"] == t and r["engine"].startswith("llama.cpp ")),
                   key=lambda r: r["tok_s"], default=None)
        if best:
            print(f"{t:>7}  kvshare speculative / best llama.cpp speculative ({best['engine']}): "
                  f"{spec_k / best['tok_s']:.2f}x")
    print(f"\noutputs with and without speculation identical: {'yes' if not mismatches else 'NO ' + str(mismatches)}")
    if a.json:
        a.json.write_text(json.dumps({"model": str(a.model), "tokens": a.tokens, "kv_dtype": a.kv_dtype,
                                      "rounds": a.rounds, "table": table, "mismatches": mismatches,
                                      "runs": {f"{k[0]} t{k[1]}": v for k, v in results.items()}}, indent=1))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
