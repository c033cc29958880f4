#!/usr/bin/env python3
"""Image encode time of kvshare against llama.cpp's llama-mtmd-cli on the same
random-weight mmproj files at the real encoder geometry (bench/vision_geometry.py),
per thread count, the two engines alternating run by run (the order flips every
round), and the ratio llama.cpp / kvshare per pair (> 1: kvshare faster).

Each run is one process on one image after an untimed warm-up run of each (it
pages the weights in):
  kvshare    build/bin/kvshare bench-image --mmproj M --image I --threads T
             --warmup 0 --repetitions 1 --json ...   (its Encode wall time)
  llama.cpp  llama-mtmd-cli -m TEXT --mmproj M --image I -p ... -n 1 -t T
             (its log line "mtmd batch encoding done in N ms", or in other
             versions "image slice encoded in N ms"), with the gemma chat
             template (the one-layer text files carry none)
Both also give the whole process's CPU seconds (user + sys, from the OS):
on a machine shared with other work the wall times of both grow with the
load, their CPU seconds much less.

Images: OUT/astronaut_896.png for Gemma 3 (fixed 896 px), OUT/astronaut_768.png
for the others (Gemma 4: 768 px gives 256 tokens in both engines: HF's budget
rule at 280 and llama.cpp's native-size rule agree there; Gemma 3n is fixed 768).

llama.cpp is a local reference, never a dependency of kvshare. Built from the
llama.cpp vendored in the llama-cpp-python 0.3.36 sdist (CPU only):
  cmake -S $REF/llama_cpp_python-0.3.36/vendor/llama.cpp -B $REF/llama-build \\
      -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \\
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
  nice -n 10 cmake --build $REF/llama-build -j2 --target llama-mtmd-cli

  python3 bench/vision_peer.py --llama-mtmd-cli $REF/llama-build/bin/llama-mtmd-cli \\
      [--dir /opt/kvshare-ref/bench] [--encoders gemma3,gemma4v,gemma3nv] [--threads 1,2] \\
      [--rounds 3] [--json bench/results/vision_encode.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = {"gemma3": "astronaut_896.png", "gemma4v": "astronaut_768.png", "gemma3nv": "astronaut_768.png"}


def run(cmd):
    """(stdout + stderr, CPU seconds of the child) of one process."""
    before = os.times()
    p = subprocess.run(cmd, capture_output=True, text=True)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout + p.stderr, cpu


def kvshare(a, enc, threads):
    mm, img = a.dir / f"{enc}.mmproj.gguf", a.dir / IMAGE[enc]
    with tempfile.TemporaryDirectory() as d:
        js = Path(d) / "r.json"
        _, cpu = run([a.kvshare, "bench-image", "--mmproj", mm, "--image", img, "--threads", str(threads),
                      "--warmup", "0", "--repetitions", "1", "--json", js])
        doc = json.loads(js.read_text())
    res = {r["step"]: r["seconds_median"] for r in doc["results"]}
    return {"encode_s": res["encode"], "preprocess_s": res["preprocess"], "encode_cpu_s": res["encode_cpu"],
            "cpu_s": cpu}


def llamacpp(a, enc, threads):
    out, cpu = run([a.llama_mtmd_cli, "-m", a.dir / f"{enc}.text.gguf", "--mmproj", a.dir / f"{enc}.mmproj.gguf",
                    "--image", a.dir / IMAGE[enc], "-p", "Describe the image.", "-n", "1", "-t", str(threads),
                    "--temp", "0", "-c", "4096", "--chat-template", "gemma"])
    m = re.search(r"(?:mtmd batch encoding done|image slice encoded) in (\d+) ms", out)
    if not m:
        sys.exit("no encode time in llama-mtmd-cli's output:\n" + out[-3000:])
    return {"encode_s": int(m.group(1)) / 1000, "cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-mtmd-cli", type=Path, required=True)
    ap.add_argument("--kvshare", type=Path, default=ROOT / "build" / "bin" / "kvshare")
    ap.add_argument("--dir", type=Path, default=Path("/opt/kvshare-ref/bench"))
    ap.add_argument("--encoders", default="gemma3,gemma4v,gemma3nv")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    doc = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "cpus": os.cpu_count(), "kvshare_revision": rev.strip(),
           "platform": platform.platform(), "rounds": a.rounds, "results": []}
    for enc in a.encoders.split(","):
        kvshare(a, enc, max(threads))  # warm-up: page the files in
        llamacpp(a, enc, max(threads))
        for t in threads:
            runs = []
            for r in range(a.rounds):
                la = os.getloadavg()[0]
                first, second = (kvshare, llamacpp) if r % 2 == 0 else (llamacpp, kvshare)
                x, y = first(a, enc, t), second(a, enc, t)
                k, l = (x, y) if first is kvshare else (y, x)
                runs.append({"kvshare": k, "llamacpp": l, "load": la})
                print(f"{enc} t{t} round {r}: kvshare {k['encode_s']:.2f} s, llama.cpp {l['encode_s']:.2f} s, "
                      f"ratio {l['encode_s'] / k['encode_s']:.2f} (load {la:.1f})", flush=True)
            row = {"encoder": enc, "threads": t, "runs": runs}
            for key in ("encode_s", "cpu_s"):
                if all(key in r["kvshare"] and key in r["llamacpp"] for r in runs):
                    ks = [r["kvshare"][key] for r in runs]
                    ls = [r["llamacpp"][key] for r in runs]
                    ratios = [l / k for k, l in zip(ks, ls)]
                    row[key] = {"kvshare_median": statistics.median(ks), "kvshare_min": min(ks),
                                "llamacpp_median": statistics.median(ls), "llamacpp_min": min(ls),
                                "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                                "ratio_max": max(ratios)}
            doc["results"].append(row)
    print("\n| encoder | threads | kvshare encode s (median / min) | llama.cpp encode s (median / min) "
          "| llama.cpp / kvshare (median, range) | process CPU s kvshare / llama.cpp |")
    print("|---|---|---|---|---|---|")
    for row in doc["results"]:
        e, c = row["encode_s"], row["cpu_s"]
        print(f"| {row['encoder']} | {row['threads']} | {e['kvshare_median']:.2f} / {e['kvshare_min']:.2f} "
              f"| {e['llamacpp_median']:.2f} / {e['llamacpp_min']:.2f} | {e['ratio_median']:.2f} "
              f"({e['ratio_min']:.2f}-{e['ratio_max']:.2f}) | {c['kvshare_median']:.1f} / {c['llamacpp_median']:.1f} |")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
