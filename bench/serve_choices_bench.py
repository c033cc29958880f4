#!/usr/bin/env python3
"""n = 4 choices in one request against four separate concurrent requests.

One `kvshare serve` (--slots 4) on the default model. Each round runs both
modes, alternating which goes first, on fresh prompts of the same length
(random token ids, seeded; a different prompt per mode and round so that
neither is served from the other's prompt cache):
  n4:   one /v1/completions request with n = 4 (the choices share one
        prefill: the first prefills, the others copy its row, docs/serving.md);
  sep4: four /v1/completions requests with n = 1 sent at once (each prefills
        the prompt itself).
Both sample (temperature 0.8, seeds s .. s+3) with ignore_eos, so every
choice makes exactly --max-tokens tokens. Printed and written as JSON: per
mode the median over rounds of the wall time and aggregate output tok/s
(all output tokens / wall time), and the median and range of the per-round
ratio n4 / sep4, and the host's 1-minute load average at each run's start
(the range over runs; the bench itself adds up to --threads).

Usage: python3 bench/serve_choices_bench.py [--rounds 5] [--prompt-tokens 512]
       [--max-tokens 128] [--threads N] [--json out.json]"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import ROOT, Proc  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "python"))
from default_model import DEFAULT_MODEL  # noqa: E402


def post(port, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {text[:300]!r}")
    return json.loads(text)


def body(prompt, a, n, seed):
    return {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0.8, "seed": seed, "n": n,
            "ignore_eos": True}


def run_mode(port, mode, prompt, a):
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    if mode == "n4":
        outs = [post(port, body(prompt, a, 4, 1000))]
    else:
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda i: post(port, body(prompt, a, 1, 1000 + i)), range(4)))
    wall = time.monotonic() - t0
    tokens = sum(o["usage"]["completion_tokens"] for o in outs)
    choices = sum(len(o["choices"]) for o in outs)
    assert choices == 4 and tokens == 4 * a.max_tokens, (choices, tokens)
    return {"mode": mode, "wall_s": wall, "output_tokens": tokens, "tok_s": tokens / wall, "load_1min": load}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--kvshare", default=str(ROOT / "build" / "bin" / "kvshare"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="kvshare serve --threads (0: all cores)")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    cmd = [a.kvshare, "serve", "--host", "127.0.0.1", "--port", "0", "--model", a.model, "--slots", "4",
           "--max-context", str(a.prompt_tokens + a.max_tokens + 16)]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    rng = random.Random(0)
    srv = Proc(cmd)
    rows = []
    try:
        post(srv.port, {"prompt": [2, 100, 200], "max_tokens": 4})  # warm up
        for r in range(a.rounds):
            for mode in (("n4", "sep4") if r % 2 == 0 else ("sep4", "n4")):
                prompt = [2] + [rng.randrange(1000, 200000) for _ in range(a.prompt_tokens - 1)]
                res = run_mode(srv.port, mode, prompt, a)
                res["round"] = r
                rows.append(res)
                print(f"round {r} {mode:4}: {res['wall_s']:.2f} s, {res['tok_s']:.1f} tok/s, load {res['load_1min']:.1f}",
                      flush=True)
    finally:
        srv.stop()
    summary = {}
    for mode in ("n4", "sep4"):
        rs = [x for x in rows if x["mode"] == mode]
        summary[mode] = {"wall_s_median": statistics.median(x["wall_s"] for x in rs),
                         "tok_s_median": statistics.median(x["tok_s"] for x in rs)}
    ratios = [n["tok_s"] / s["tok_s"] for n, s in
              zip([x for x in rows if x["mode"] == "n4"], [x for x in rows if x["mode"] == "sep4"])]
    summary["ratio_n4_over_sep4"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    summary["load_1min"] = {"min": min(x["load_1min"] for x in rows), "max": max(x["load_1min"] for x in rows)}
    out = {"model": a.model, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens, "rounds": a.rounds,
           "threads": a.threads, "runs": rows, "summary": summary}
    print(json.dumps(summary, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
