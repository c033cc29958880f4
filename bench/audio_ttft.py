#!/usr/bin/env python3
"""Time to first token for a one-clip audio prompt, kvshare against llama.cpp's
llama-mtmd-cli, and the real-time factor of kvshare serve's
POST /v1/audio/transcriptions, at Gemma 4 E2B's audio-encoder geometry
(bench/audio_peer.py's random F16 gemma4a mmproj, projected to E2B's text
width 1536) before a one-layer random text model of width 1536
(bench/vision_geometry.py's, with the audio and turn markers in its vocabulary).

Time to first token (prompt: the clip, then "Transcribe the audio."; one
token generated), the engines alternating run by run (bench/vision_peer.py's
pairs: the order flips every round), after an untimed warm-up of each:
  kvshare    build/bin/kvshare generate --model TEXT --mmproj M --audio CLIP
             --prompt ... -n 1 --threads T --chat-template none: its "audio
             clip(s) encoded in" (features, tower, projection; not the file
             decode) plus its prefill seconds
  llama.cpp  llama-mtmd-cli ... --perf -lv 4 --chat-template gemma: llama_perf's
             "prompt eval time", which spans the encode (bench/vision_peer.py's
             llamacpp_times); less the encode, its prefill
Both give the whole process's CPU seconds; each round the load average before it.

Real-time factor: kvshare serve --threads T --slots 1 --chat-template gemma
--no-prompt-cache (every request prefilled in full, as a new clip would be)
with --max-context set to the clip's prompt tokens + --decode-tokens (the
endpoint takes no max_tokens: a chat request may fill the context, so the
context fixes the decode length unless the model stops earlier: the server's
log line gives each request's tokens, kept per run), then --requests
requests of the clip (curl, multipart, response_format json, temperature 0)
after one warm-up: the request's wall time / the clip's seconds, and the
server process's CPU seconds during it. The text is random-weight gibberish.

  /opt/kvshare-ref/venv/bin/python bench/audio_ttft.py [--work /tmp/kvshare_audio_bench] \\
      [--seconds 10 30] [--threads 1 2] [--rounds 2] [--requests 3] [--decode-tokens 32] \\
      [--out bench/results/audio_ttft.json]

llama.cpp is a local reference, never a dependency of kvshare.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from audio_peer import ROOT, cpu_name, write_clip, write_mmproj
from vision_geometry import MARKERS, write_text
from vision_peer import llamacpp_times, pairs, run, summarize

PROMPT = "Transcribe the audio."
# kvshare needs the audio markers in the vocabulary, and serve's gemma chat template the turn ones.
EXTRA_MARKERS = ("<|audio>", "<audio|>", "<|audio|>", "<start_of_turn>", "<end_of_turn>")


def kvshare_ttft(a, threads, clip):
    out, cpu = run([a.kvshare, "generate", "--model", a.text, "--mmproj", a.mmproj, "--audio", clip, "--prompt",
                    PROMPT, "-n", "1", "--threads", str(threads), "--chat-template", "none"])
    m = re.search(r"audio clip\(s\) encoded in ([\d.]+) s", out)
    p = re.search(r"prompt (\d+) tokens, prefill [\d.]+ tok/s \(([\d.]+) s\)", out)
    if not m or not p:
        sys.exit("no encode / prefill time in kvshare generate's output:\n" + out[-3000:])
    enc_s, pre, n = float(m.group(1)), float(p.group(2)), int(p.group(1))
    return {"encode_s": enc_s, "prefill_s": pre, "ttft_s": enc_s + pre, "prompt_tokens": n,
            "prefill_s_per_token": pre / n, "cpu_s": cpu}


def llamacpp_ttft(a, threads, clip):
    out, cpu = run([a.llama_mtmd_cli, "-m", a.text, "--mmproj", a.mmproj, "--audio", clip, "-p", PROMPT, "-n", "1",
                    "-t", str(threads), "--temp", "0", "-c", "4096", "--perf", "-lv", "4", "--chat-template", "gemma"])
    m = re.search(r"(?:mtmd batch encoding done|audio slice encoded|image slice encoded) in (\d+) ms", out)
    p = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", out)
    if not m or not p:
        sys.exit("no encode / prompt eval time in llama-mtmd-cli's output:\n" + out[-3000:])
    return llamacpp_times(int(m.group(1)) / 1000, float(p.group(1)) / 1000, int(p.group(2)), cpu)


class Server:
    """One kvshare serve process; its log goes to a file read for the port and token counts."""

    def __init__(self, a, threads, max_context):
        self.log = a.work / f"serve_t{threads}_c{max_context}.log"
        self.f = open(self.log, "w")
        self.p = subprocess.Popen([a.kvshare, "serve", "--model", a.text, "--mmproj", a.mmproj, "--port", "0",
                                   "--threads", str(threads), "--slots", "1", "--chat-template", "gemma",
                                   "--no-prompt-cache", "--max-context", str(max_context)],
                                  stdout=self.f, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            m = re.search(r"https?://[\w.]+:(\d+)", self.log.read_text())
            if m:
                self.port = int(m.group(1))
                break
            if self.p.poll() is not None:
                self.fail("kvshare serve exited")
            time.sleep(0.2)
        else:
            self.fail("kvshare serve printed no port")
        while self.post(None)[0] is None:  # until it answers
            if self.p.poll() is not None:
                self.fail("kvshare serve exited")
            time.sleep(0.5)

    def fail(self, why):
        """Exits with the log's tail, the server killed (one hung once while loading and ignored SIGTERM)."""
        self.p.kill()
        self.p.wait()
        self.f.close()
        sys.exit(why + ":\n" + self.log.read_text()[-3000:])

    def post(self, clip):
        """(response body or None when not answering, wall seconds) of one request."""
        cmd = ["curl", "-s", "--max-time", "600", f"http://127.0.0.1:{self.port}/v1/audio/transcriptions",
               "-F", "model=m", "-F", "temperature=0", "-F", "response_format=json"]
        if clip is None:  # readiness probe
            cmd = ["curl", "-s", f"http://127.0.0.1:{self.port}/v1/models"]
        else:
            cmd += ["-F", f"file=@{clip}"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        return (r.stdout if r.returncode == 0 and r.stdout else None), time.perf_counter() - t0

    def cpu_s(self):
        f = Path(f"/proc/{self.p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def tokens(self):
        return [int(t) for t in re.findall(r"transcription: [\d.]+ s of audio, (\d+) tokens", self.log.read_text())]

    def close(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.f.close()


def prompt_tokens(a, clip):
    """The clip's transcription prompt length, from the context-length error of a 64-token server."""
    s = Server(a, 1, 64)
    try:
        body, _ = s.post(clip)
    finally:
        s.close()
    m = re.search(r"resulted in (\d+) tokens", body or "")
    if not m:
        sys.exit(f"no prompt length in the server's answer: {body}")
    return int(m.group(1))


def rtf(a, seconds, clip, threads, n_prompt):
    s = Server(a, threads, n_prompt + a.decode_tokens)
    try:
        s.post(clip)  # warm-up: pages the weights in
        runs = []
        for i in range(a.requests):
            la, c0 = os.getloadavg()[0], s.cpu_s()
            body, wall = s.post(clip)
            if body is None or "text" not in json.loads(body):
                sys.exit(f"transcription failed: {body}")
            runs.append({"wall_s": wall, "real_time_factor": wall / seconds, "server_cpu_s": s.cpu_s() - c0,
                         "load": la})
            print(f"rtf {seconds} s t{threads} #{i}: {runs[-1]}", flush=True)
        toks = s.tokens()
    finally:
        s.close()
    for r, t in zip(runs, toks[1:]):
        r["completion_tokens"] = t
    rs = sorted(r["real_time_factor"] for r in runs)
    return {"seconds": seconds, "threads": threads, "prompt_tokens": n_prompt,
            "max_context": n_prompt + a.decode_tokens, "runs": runs,
            "real_time_factor_median": rs[len(rs) // 2], "real_time_factor_min": rs[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-mtmd-cli", type=Path, default=Path("/opt/kvshare-ref/llama-build/bin/llama-mtmd-cli"))
    ap.add_argument("--kvshare", type=Path, default=ROOT / "build" / "bin" / "kvshare")
    ap.add_argument("--work", type=Path, default=Path("/tmp/kvshare_audio_bench"))
    ap.add_argument("--seconds", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--skip-ttft", action="store_true")
    ap.add_argument("--skip-rtf", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "audio_ttft.json")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    a.mmproj = write_mmproj(a.work, "f16", 1536)
    a.text = a.work / "text1536_audio.gguf"
    if not a.text.exists():
        write_text(a.text, 1536, np.random.default_rng(0), MARKERS + EXTRA_MARKERS)
    doc = {"geometry": "Gemma4AudioConfig() (E2B), F16 mmproj, text width 1536; one-layer gemma3 text model",
           "prompt": PROMPT, "host": os.uname().nodename, "cpu": cpu_name(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv),
           "ttft": [], "transcriptions": []}
    for seconds in a.seconds:
        clip = a.work / f"clip_{seconds}s.wav"
        write_clip(clip, seconds)
        if not a.skip_ttft:
            kvshare_ttft(a, 1, clip), llamacpp_ttft(a, 1, clip)  # warm-up
            for t in a.threads:
                runs = pairs(a, lambda: kvshare_ttft(a, t, clip), lambda: llamacpp_ttft(a, t, clip),
                             f"{seconds} s t{t} ttft")
                doc["ttft"].append({"seconds": seconds, "threads": t, "runs": runs,
                                    "summary": summarize(runs, ("ttft_s", "encode_s", "prefill_s_per_token",
                                                                "cpu_s"))})
        if not a.skip_rtf:
            n = prompt_tokens(a, clip)
            for t in a.threads:
                doc["transcriptions"].append(rtf(a, seconds, clip, t, n))
    doc["load_average_end"] = os.getloadavg()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    for row in doc["ttft"]:
        s = row["summary"]
        print(f"| {row['seconds']} s | {row['threads']} | {s['ttft_s']['kvshare_median']:.1f} / "
              f"{s['ttft_s']['llamacpp_median']:.1f} | {s['ttft_s']['ratio_median']:.2f} "
              f"({s['ttft_s']['ratio_min']:.2f}-{s['ttft_s']['ratio_max']:.2f}) | {s['cpu_s']['kvshare_median']:.1f} / "
              f"{s['cpu_s']['llamacpp_median']:.1f} |")
    for row in doc["transcriptions"]:
        print(f"| {row['seconds']} s | {row['threads']} | {row['real_time_factor_median']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
