#!/usr/bin/env python3
"""Serving benchmark: `kvshare serve` against `llama-server` in one run.

For each concurrency C (default 1, 4, 8, 16) and each server, a fresh server
with C slots (kvshare --slots C; llama-server -np C, -c C x the per-slot
context) gets the same N requests from C closed-loop clients on 127.0.0.1:
streaming /v1/completions with token-id prompts and output lengths drawn from
a fixed distribution (seeded), ignore_eos so both make exactly max_tokens.
Printed per server and C: aggregate output tok/s (all output tokens / wall
time of the run), TTFT and inter-token latency p50 / p99, and mean per-request
decode tok/s; then kvshare / llama-server per C and the targets: kvshare's
aggregate at C = 8 at least 4x its C = 1, and at least llama-server's at every C.

--rounds R repeats the whole sweep R times (C = 1, 4, ... each round, the
servers alternating within each C), because a shared host's speed drifts by
10-20% over minutes and C = 1 and C = 8 are minutes apart: the table then
shows each figure's median over the rounds, and the targets use the ratios
taken within each round (C = 8 over C = 1 of the same round, kvshare over
llama-server at the same C and round), whose median and range are printed.

llama-server is a local reference built by hand (never committed), e.g. from
the llama.cpp vendored in the llama-cpp-python sdist:
  cmake -S <sdist>/vendor/llama.cpp -B <build> -DLLAMA_BUILD_SERVER=ON
  cmake --build <build> --target llama-server -j2
Without it (--llama-server absent or missing) only kvshare runs.

Speculative decoding: --spec-args "--spec ngram" (any `kvshare serve` speculation flags) adds
a third server, kvshare with those flags, run next to the plain one, and prints its aggregate
over kvshare's per C. --workload repetitive replaces the random-token chat workload by the 20
repetitive prompts of bench/spec_prompts.py (text prompts, 128 output tokens each, cycled to
--requests), where prompt lookup finds its drafts.

Run it on an otherwise idle machine: both servers use every core."""
import argparse
import http.client
import json
import os
import random
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Chat-like: prompts mostly shorter than the replies (ShareGPT-style), so the
# numbers are about decoding many sequences at once; one in eleven prompts is long.
PROMPT_LENS = ([16, 32, 64, 128, 512], [2, 3, 3, 2, 1])
OUTPUT_LENS = ([64, 128, 256], [3, 4, 2])


def workload(n, seed, kind="chat"):
    if kind == "repetitive":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from spec_prompts import PROMPTS
        return [(PROMPTS[i % len(PROMPTS)], 128) for i in range(n)]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.choices(*PROMPT_LENS)[0]
        o = rng.choices(*OUTPUT_LENS)[0]
        prompt = [2] + [rng.randrange(1000, 30000) for _ in range(p - 1)]  # <bos>, then ordinary tokens
        out.append((prompt, o))
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def healthy(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/health")
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except OSError:
        return False


class Proc:
    def __init__(self, cmd, port=None, timeout=120):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        end = time.time() + timeout
        self.port = port
        while time.time() < end:
            if self.port is None:
                self.log.seek(0)
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
                if m:
                    self.port = int(m.group(1))
            if self.port is not None and healthy(self.port):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.log.seek(0)
        self.stop()
        raise RuntimeError(f"{cmd[0]} did not become healthy:\n{self.log.read()[-3000:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def one_request(port, model, prompt, max_tokens):
    """(ttft s, [inter-token gaps s], output tokens, end time)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    arrivals = []
    while True:
        line = r.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        j = json.loads(data)
        if j.get("choices") and j["choices"][0].get("text"):
            arrivals.append(time.monotonic())
        if j.get("choices") and j["choices"][0].get("finish_reason"):
            break
    conn.close()
    if not arrivals:
        raise RuntimeError("no tokens streamed")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return arrivals[0] - t0, gaps, max_tokens, arrivals[-1]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def run(port, model, reqs, c):
    t0 = time.monotonic()
    with ThreadPoolExecutor(c) as pool:
        res = list(pool.map(lambda r: one_request(port, model, *r), reqs))
    wall = max(r[3] for r in res) - t0
    ttft = [r[0] for r in res]
    gaps = [g for r in res for g in r[1]]
    tokens = sum(r[2] for r in res)
    per_req = [(len(r[1])) / sum(r[1]) for r in res if r[1] and sum(r[1]) > 0]
    return {"C": c, "requests": len(reqs), "wall_s": wall, "output_tokens": tokens, "tok_s": tokens / wall,
            "ttft_p50_ms": pct(ttft, 50) * 1e3, "ttft_p99_ms": pct(ttft, 99) * 1e3,
            "itl_p50_ms": pct(gaps, 50) * 1e3, "itl_p99_ms": pct(gaps, 99) * 1e3,
            "decode_tok_s_per_request": statistics.mean(per_req)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default: the default model (scripts/fetch_model.py)")
    ap.add_argument("--kvshare", default=str(ROOT / "build" / "bin" / "kvshare"))
    ap.add_argument("--kv-dtype", default="f16", choices=["f32", "f16", "q8_0"],
                    help="KV cache type of both servers (llama-server's default is f16)")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER", "llama-server"))
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--requests", type=int, default=32, help="requests per server and concurrency")
    ap.add_argument("--context", type=int, default=1024, help="tokens per slot (prompt + output)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1, help="repetitions of the whole sweep (medians and per-round ratios)")
    ap.add_argument("--spec-args", default="",
                    help="kvshare serve speculation flags, e.g. \"--spec ngram\": also run kvshare with them")
    ap.add_argument("--workload", default="chat", choices=["chat", "repetitive"])
    ap.add_argument("--llama-args", default="", help="extra llama-server arguments (e.g. --no-repack)")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    if a.model is None:
        sys.path.insert(0, str(ROOT / "tests" / "python"))
        from default_model import DEFAULT_MODEL
        a.model = str(DEFAULT_MODEL)
    if a.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {a.rounds}")
    cs = [int(x) for x in a.concurrency.split(",")]
    reqs = workload(min(a.requests, 256), a.seed, a.workload)
    model_id = Path(a.model).stem
    servers = ["kvshare"] + (["kvshare+spec"] if a.spec_args else [])
    if Path(a.llama_server).exists():
        servers.append("llama-server")
    else:
        print(f"(no llama-server at {a.llama_server}: kvshare only)")
    if a.workload == "chat":
        what = (f"prompts {sum(len(p) for p, _ in reqs)} tokens ({PROMPT_LENS[0]} weights {PROMPT_LENS[1]}), outputs "
                f"{sum(o for _, o in reqs)} tokens ({OUTPUT_LENS[0]} weights {OUTPUT_LENS[1]})")
    else:
        what = f"the repetitive prompts of bench/spec_prompts.py, outputs {sum(o for _, o in reqs)} tokens"
    print(f"{len(reqs)} requests per run: {what}; {a.threads} threads; KV cache {a.kv_dtype}; model {a.model}"
          + (f"; kvshare+spec: {a.spec_args}" if a.spec_args else ""))
    rounds = [{s: {} for s in servers} for _ in range(a.rounds)]
    for rnd, results in enumerate(rounds):
        if a.rounds > 1:
            print(f"round {rnd + 1} of {a.rounds}", flush=True)
        for c in cs:
            for name in servers:
                r = bench_server(a, name, model_id, reqs, c)
                results[name][c] = r
                print(f"{name:13s} C={c:2d}: {r['tok_s']:7.1f} tok/s aggregate, TTFT p50 {r['ttft_p50_ms']:7.1f} ms "
                      f"p99 {r['ttft_p99_ms']:7.1f} ms, ITL p50 {r['itl_p50_ms']:6.1f} ms p99 {r['itl_p99_ms']:6.1f} ms, "
                      f"{r['decode_tok_s_per_request']:6.1f} tok/s per request ({r['wall_s']:.1f} s)", flush=True)
    results = {name: {c: median_result([r[name][c] for r in rounds]) for c in cs} for name in servers}
    print("\n| C | kvshare tok/s | llama-server tok/s | ratio | kvshare TTFT p50/p99 ms | llama TTFT p50/p99 ms "
          "| kvshare ITL p50/p99 ms | llama ITL p50/p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for c in cs:
        k = results["kvshare"][c]
        l = results.get("llama-server", {}).get(c)
        lt = f"{l['tok_s']:.1f}" if l else "-"
        ratio = f"{statistics.median(r['kvshare'][c]['tok_s'] / r['llama-server'][c]['tok_s'] for r in rounds):.2f}" if l else "-"
        lttft = f"{l['ttft_p50_ms']:.0f} / {l['ttft_p99_ms']:.0f}" if l else "-"
        litl = f"{l['itl_p50_ms']:.1f} / {l['itl_p99_ms']:.1f}" if l else "-"
        print(f"| {c} | {k['tok_s']:.1f} | {lt} | {ratio} | {k['ttft_p50_ms']:.0f} / {k['ttft_p99_ms']:.0f} | {lttft} "
              f"| {k['itl_p50_ms']:.1f} / {k['itl_p99_ms']:.1f} | {litl} |")
    if a.rounds > 1:
        print(f"(medians over {a.rounds} rounds; the ratio column: the median of the rounds' ratios)")
    if 1 in cs and 8 in cs:
        scales = [r["kvshare"][8]["tok_s"] / r["kvshare"][1]["tok_s"] for r in rounds]
        scale = statistics.median(scales)
        spread = f" (rounds: {', '.join(f'{x:.2f}' for x in scales)})" if a.rounds > 1 else ""
        print(f"\ntarget: kvshare C=8 / C=1 aggregate = {scale:.2f}{spread} (want >= 4): {'met' if scale >= 4 else 'MISSED'}")
    if a.spec_args:
        print(f"\nspeculation ({a.spec_args}):\n")
        print("| C | kvshare tok/s | kvshare+spec tok/s | ratio (rounds) | +spec TTFT p50/p99 ms | +spec ITL p50/p99 ms |")
        print("|---|---|---|---|---|---|")
        for c in cs:
            k, sp = results["kvshare"][c], results["kvshare+spec"][c]
            ratios = [r["kvshare+spec"][c]["tok_s"] / r["kvshare"][c]["tok_s"] for r in rounds]
            print(f"| {c} | {k['tok_s']:.1f} | {sp['tok_s']:.1f} | {statistics.median(ratios):.2f} "
                  f"({', '.join(f'{x:.2f}' for x in ratios)}) | {sp['ttft_p50_ms']:.0f} / {sp['ttft_p99_ms']:.0f} "
                  f"| {sp['itl_p50_ms']:.1f} / {sp['itl_p99_ms']:.1f} |")
    if "llama-server" in servers:
        worst = min(r["kvshare"][c]["tok_s"] / r["llama-server"][c]["tok_s"] for r in rounds for c in cs)
        print(f"target: kvshare / llama-server at every C >= 1: lowest {worst:.2f}: {'met' if worst >= 1 else 'MISSED'}")
    if a.json:
        # "results": the medians (with one round, that round's figures); "rounds": every round's.
        Path(a.json).write_text(json.dumps({"requests": len(reqs), "threads": a.threads, "results": results,
                                            "rounds": rounds}, indent=1))


def bench_server(a, name, model_id, reqs, c):
    """Starts a fresh server of `name` with C slots, warms it up, runs reqs from C clients, stops it."""
    if name.startswith("kvshare"):
        cmd = [a.kvshare, "serve", "--model", a.model, "--host", "127.0.0.1", "--port", "0", "--slots", str(c),
               "--max-context", str(a.context), "--threads", str(a.threads), "--max-queue", "256",
               "--kv-dtype", a.kv_dtype, "-q"]
        if name == "kvshare+spec":
            cmd += shlex.split(a.spec_args)
        p = Proc(cmd)
    else:
        port = free_port()
        cmd = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-np", str(c),
               "-c", str(c * a.context), "-t", str(a.threads), "-tb", str(a.threads), "--no-webui",
               "-ctk", a.kv_dtype, "-ctv", a.kv_dtype] + shlex.split(a.llama_args)
        p = Proc(cmd, port=port)
    try:
        run(p.port, model_id, workload(2, 99 + c, a.workload), min(c, 2))  # warm-up
        return run(p.port, model_id, reqs, c)
    finally:
        p.stop()


def median_result(rs):
    """Each figure's median over the rounds' results of one server and C."""
    return {key: statistics.median(r[key] for r in rs) for key in rs[0]}


if __name__ == "__main__":
    main()
