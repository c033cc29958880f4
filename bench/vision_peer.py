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

With --ttft, each thread count also gets rounds of time to first token for a
one-image prompt ("Describe the image." after the image, one token
generated, plain completion: the one-layer text files have no chat tokens):
  kvshare    build/bin/kvshare generate --model TEXT --mmproj M --image I
             --prompt ... -n 1 --threads T --chat-template none: its "encoded
             in" (decode, preprocess, encode) plus its prefill seconds
  llama.cpp  llama-mtmd-cli ... --perf -lv 4 (gemma chat template, which it
             needs): llama_perf's "prompt eval time", which runs from the first
             prompt decode (the text before the image) to the end of the last
             and so includes the encode; less the encode, its prefill
and the same prompt without the image (--text-words words of text instead;
llama-mtmd-cli reads it in its chat mode), whose prefill ratio is the language
side's baseline. The token counts differ a little (the chat template), so the
prefill ratios are of seconds per prompt token.

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
      [--rounds 3] [--warmup 1] [--vision-precision auto|f32|bf16] [--ttft [--ttft-only]]
      [--json bench/results/vision_encode.json]
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


def run(cmd, stdin=None):
    """(stdout + stderr, CPU seconds of the child) of one process."""
    before = os.times()
    p = subprocess.run(cmd, capture_output=True, text=True, input=stdin if stdin is not None else "")
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
                      "--warmup", "0", "--repetitions", "1", "--vision-precision", a.vision_precision, "--json", js])
        doc = json.loads(js.read_text())
    res = {r["step"]: r["seconds_median"] for r in doc["results"]}
    return {"encode_s": res["encode"], "preprocess_s": res["preprocess"], "encode_cpu_s": res["encode_cpu"],
            "cpu_s": cpu, "precision": doc.get("precision")}


PROMPT = "Describe the image."


def text_prompt(a):
    return " ".join(["the"] * a.text_words) + " " + PROMPT


def kvshare_ttft(a, enc, threads, image=True):
    cmd = [a.kvshare, "generate", "--model", a.dir / f"{enc}.text.gguf", "-n", "1", "--threads", str(threads),
           "--chat-template", "none"]
    if image:
        cmd += ["--mmproj", a.dir / f"{enc}.mmproj.gguf", "--image", a.dir / IMAGE[enc], "--prompt", PROMPT,
                "--vision-precision", a.vision_precision]
    else:
        cmd += ["--prompt", text_prompt(a)]
    out, cpu = run(cmd)
    m = re.search(r"encoded in ([\d.]+) s", out)
    p = re.search(r"prompt (\d+) tokens, prefill [\d.]+ tok/s \(([\d.]+) s\)", out)
    if not p or (image and not m):
        sys.exit("no encode / prefill time in kvshare generate's output:\n" + out[-3000:])
    enc_s = float(m.group(1)) if m else 0.0
    pre, n = float(p.group(2)), int(p.group(1))
    return {"encode_s": enc_s, "prefill_s": pre, "ttft_s": enc_s + pre, "prompt_tokens": n,
            "prefill_s_per_token": pre / n, "cpu_s": cpu}


def llamacpp_ttft(a, enc, threads, image=True):
    cmd = [a.llama_mtmd_cli, "-m", a.dir / f"{enc}.text.gguf", "-n", "1", "-t", str(threads), "--temp", "0",
           "-c", "4096", "--perf", "-lv", "4", "--chat-template", "gemma"]
    if image:
        cmd += ["--mmproj", a.dir / f"{enc}.mmproj.gguf", "--image", a.dir / IMAGE[enc], "-p", PROMPT]
        out, cpu = run(cmd)
    else:  # without --image it runs its chat mode: the prompt on stdin
        out, cpu = run(cmd + ["--mmproj", a.dir / f"{enc}.mmproj.gguf"], text_prompt(a) + "\n/quit\n")
    m = re.search(r"(?:mtmd batch encoding done|image slice encoded) in (\d+) ms", out)
    p = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", out)
    if not p or (image and not m):
        sys.exit("no encode / prompt eval time in llama-mtmd-cli's output:\n" + out[-3000:])
    return llamacpp_times(int(m.group(1)) / 1000 if m else 0.0, float(p.group(1)) / 1000, int(p.group(2)), cpu)


def llamacpp_times(enc_s, eval_s, n, cpu):
    """llama.cpp's prompt eval time runs from its first prompt decode to the
    last one's end, so it spans the image encode between them: it is the
    time to first token, and less the encode the language side's prefill."""
    pre = eval_s - enc_s
    return {"encode_s": enc_s, "prompt_eval_s": eval_s, "prefill_s": pre, "ttft_s": eval_s, "prompt_tokens": n,
            "prefill_s_per_token": pre / n, "cpu_s": cpu}


def pairs(a, f_k, f_l, label):
    """a.rounds alternating (kvshare, llama.cpp) runs of f_k / f_l."""
    runs = []
    for r in range(a.rounds):
        la = os.getloadavg()[0]
        first, second = (f_k, f_l) if r % 2 == 0 else (f_l, f_k)
        x, y = first(), second()
        k, l = (x, y) if first is f_k else (y, x)
        runs.append({"kvshare": k, "llamacpp": l, "load": la})
        print(f"{label} round {r}: kvshare {k}, llama.cpp {l} (load {la:.1f})", flush=True)
    return runs


def summarize(runs, keys):
    row = {}
    for key in keys:
        if all(key in r["kvshare"] and key in r["llamacpp"] for r in runs):
            ks = [r["kvshare"][key] for r in runs]
            ls = [r["llamacpp"][key] for r in runs]
            ratios = [l / k for k, l in zip(ks, ls) if k > 0]
            row[key] = {"kvshare_median": statistics.median(ks), "kvshare_min": min(ks),
                        "llamacpp_median": statistics.median(ls), "llamacpp_min": min(ls)}
            if ratios:
                row[key].update({"ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                                 "ratio_max": max(ratios)})
    return row


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
    ap.add_argument("--warmup", type=int, default=1, help="0: no untimed first run of each (files already cached)")
    ap.add_argument("--vision-precision", default="auto", choices=["auto", "f32", "bf16"])
    ap.add_argument("--ttft", action="store_true", help="also time to first token, with and without the image")
    ap.add_argument("--text-words", type=int, default=260, help="words of the text-only prompt")
    ap.add_argument("--ttft-only", action="store_true", help="with --ttft: no encode-only rounds")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    doc = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "cpus": os.cpu_count(), "kvshare_revision": rev.strip(),
           "platform": platform.platform(), "rounds": a.rounds, "vision_precision": a.vision_precision,
           "command": " ".join(sys.argv), "results": [], "ttft": []}
    for enc in a.encoders.split(","):
        if a.warmup:
            kvshare(a, enc, max(threads))  # warm-up: page the files in
            llamacpp(a, enc, max(threads))
        for t in threads:
            if not (a.ttft and a.ttft_only):
                runs = pairs(a, lambda: kvshare(a, enc, t), lambda: llamacpp(a, enc, t), f"{enc} t{t} encode")
                doc["results"].append({"encoder": enc, "threads": t, "runs": runs,
                                       **summarize(runs, ("encode_s", "cpu_s"))})
            if a.ttft:
                img = pairs(a, lambda: kvshare_ttft(a, enc, t), lambda: llamacpp_ttft(a, enc, t), f"{enc} t{t} ttft")
                txt = pairs(a, lambda: kvshare_ttft(a, enc, t, False), lambda: llamacpp_ttft(a, enc, t, False),
                            f"{enc} t{t} text")
                doc["ttft"].append({"encoder": enc, "threads": t, "image_runs": img, "text_runs": txt,
                                    "image": summarize(img, ("ttft_s", "encode_s", "prefill_s_per_token", "cpu_s")),
                                    "text": summarize(txt, ("prefill_s_per_token", "cpu_s"))})
    print("\n| encoder | threads | kvshare encode s (median / min) | llama.cpp encode s (median / min) "
          "| llama.cpp / kvshare (median, range) | process CPU s kvshare / llama.cpp |")
    print("|---|---|---|---|---|---|")
    for row in doc["results"]:
        e, c = row["encode_s"], row["cpu_s"]
        print(f"| {row['encoder']} | {row['threads']} | {e['kvshare_median']:.2f} / {e['kvshare_min']:.2f} "
              f"| {e['llamacpp_median']:.2f} / {e['llamacpp_min']:.2f} | {e['ratio_median']:.2f} "
              f"({e['ratio_min']:.2f}-{e['ratio_max']:.2f}) | {c['kvshare_median']:.1f} / {c['llamacpp_median']:.1f} |")
    if doc["ttft"]:
        print("\n| encoder | threads | TTFT s kvshare / llama.cpp (median) | ratio (median, range) "
              "| image-prompt prefill ratio per token | text-prompt prefill ratio per token |")
        print("|---|---|---|---|---|---|")
        for row in doc["ttft"]:
            f, ip, tp = (row["image"]["ttft_s"], row["image"]["prefill_s_per_token"],
                         row["text"]["prefill_s_per_token"])
            print(f"| {row['encoder']} | {row['threads']} | {f['kvshare_median']:.2f} / {f['llamacpp_median']:.2f} "
                  f"| {f['ratio_median']:.2f} ({f['ratio_min']:.2f}-{f['ratio_max']:.2f}) "
                  f"| {ip['ratio_median']:.2f} | {tp['ratio_median']:.2f} |")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
