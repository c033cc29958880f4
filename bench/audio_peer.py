#!/usr/bin/env python3
"""Audio encode time of kvshare against llama.cpp's llama-mtmd-cli on the same
random-weight gemma4a mmproj at Gemma 4 E2B / E4B's audio-encoder geometry
(transformers' Gemma4AudioConfig() defaults: hidden 1024, 12 conformer
blocks, 8 heads, SSCP 128 / 32, output 1536; text width 64, so the tiny text
model of tests/fixtures/vision/ serves llama-mtmd-cli), per clip length and
thread count, the two engines alternating run by run (the order flips every
round), and the ratio llama.cpp / kvshare per pair (> 1: kvshare faster).
With --gemma3n, also kvshare alone at Gemma 3n E2B / E4B's geometry
(Gemma3nAudioConfig(): hidden 1536, 12 blocks, 8 heads; llama.cpp has no
Gemma 3n audio): its encode time and real-time factor (encode / clip).

Each run is one process on one clip (16 kHz WAV: noise and tones, so
neither side resamples), after an untimed warm-up run of each:
  kvshare    build/tests/audio_encode_dump MMPROJ CLIP OUT --floor-max --threads T --precision P
             (its "encode_ms": the tower and projection, not the features;
             "encode_cpu_ms": the process's CPU time during them)
  llama.cpp  llama-mtmd-cli -m TEXT --mmproj MMPROJ --audio CLIP -p hi -n 1 -t T
             (its log line "mtmd batch encoding done in N ms": features,
             tower and projection)
Both also give the process's CPU seconds (user + sys, loading included), and
each row the load average before it (the host may be shared).

The mmproj is written once into --work by HF (random init) and the llama.cpp
sdist's convert_hf_to_gguf.py --mmproj --outtype f16 (the default: the
blocks' matrices F16, as a default conversion of the bf16 checkpoints
writes them) or f32 (1.2 GB); needs the reference venv (torch, transformers
5.23) for that step:

  /opt/kvshare-ref/venv/bin/python bench/audio_peer.py \\
      [--llama-build /opt/kvshare-ref/llama-build] [--kvshare-build build] \\
      [--seconds 10 30] [--threads 1 2] [--rounds 2] [--outtype f16|f32] \\
      [--precision auto|f32|bf16] [--gemma3n] [--out bench/results/audio_encode.json]

llama.cpp is a local reference, never a dependency of kvshare.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf"
LLAMA_CPP = Path("/opt/kvshare-ref/llama_cpp_python-0.3.36/vendor/llama.cpp")


def write_mmproj(work: Path, outtype: str, text_width: int = 64) -> Path:
    """text_width 64: the tiny text fixture's; 1536: Gemma 4 E2B's (bench/audio_ttft.py)."""
    tag = "" if text_width == 64 else f".text{text_width}"
    out = work / f"e2b_audio{tag}.mmproj.{outtype}.gguf"
    if out.exists():
        return out
    import torch
    from transformers import Gemma4AudioConfig, Gemma4Config, Gemma4ForConditionalGeneration

    sys.path.insert(0, str(ROOT / "tests" / "tools"))
    from audio_mmproj_fixtures import tiny_text_and_vision

    text, vision = tiny_text_and_vision(vocab_size=512)
    text.hidden_size = text_width
    torch.manual_seed(0)
    model = Gemma4ForConditionalGeneration(Gemma4Config(text_config=text, vision_config=vision,
                                                        audio_config=Gemma4AudioConfig())).eval()
    d = work / f"e2b_audio{tag}_hf"
    if not (d / "config.json").exists():
        model.save_pretrained(d)
    (d / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Gemma4ImageProcessor", "image_mean": [0.0] * 3, "image_std": [1.0] * 3,
         "patch_size": 16, "pooling_kernel_size": 3, "max_soft_tokens": 280}))
    subprocess.run([sys.executable, str(LLAMA_CPP / "convert_hf_to_gguf.py"), str(d), "--mmproj", "--outtype", outtype,
                    "--outfile", str(out)], check=True, capture_output=True)
    return out


def write_gemma3n_mmproj(work: Path, outtype: str) -> Path:
    """A random gemma3na mmproj at Gemma3nAudioConfig()'s geometry, text width
    64, written as tests/tools/audio_mmproj_fixtures.py writes its tiny one."""
    out = work / f"e2b_gemma3n_audio.mmproj.{outtype}.gguf"
    if out.exists():
        return out
    import torch
    from transformers.models.gemma3n.configuration_gemma3n import Gemma3nAudioConfig, Gemma3nTextConfig
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nAudioEncoder, Gemma3nMultimodalEmbedder

    sys.path.insert(0, str(ROOT / "tests" / "tools"))
    from audio_mmproj_fixtures import write_gemma3na

    cfg, text = Gemma3nAudioConfig(), Gemma3nTextConfig(hidden_size=64)
    torch.manual_seed(0)
    tower = Gemma3nAudioEncoder(cfg).to(torch.float32).eval()
    embedder = Gemma3nMultimodalEmbedder(cfg, text).to(torch.float32).eval()
    return write_gemma3na(tower, embedder, cfg, text, out, f16_blocks=outtype == "f16")


def write_clip(path: Path, seconds: int):
    rng = np.random.default_rng(seconds)
    t = np.arange(seconds * 16000) / 16000
    x = 0.05 * rng.standard_normal(t.size) + 0.2 * np.sin(2 * np.pi * (200 + 50 * np.sin(t)) * t)
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())


def timed(cmd, env=None):
    """(stdout + stderr, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def kvshare(build, mmproj, clip, threads, work, precision):
    out, cpu = timed([str(build / "tests" / "audio_encode_dump"), str(mmproj), str(clip), str(work / "kv.bin"),
                      "--floor-max", "--threads", str(threads), "--precision", precision])
    m = re.search(r"tokens (\d+) width \d+ features_ms ([\d.]+) encode_ms ([\d.]+) encode_cpu_ms ([\d.]+) "
                  r"precision (\w+)", out)
    return {"tokens": int(m[1]), "features_ms": float(m[2]), "encode_ms": float(m[3]), "encode_cpu_ms": float(m[4]),
            "precision": m[5], "cpu_s": cpu}


def llamacpp(llama_build, mmproj, clip, threads):
    out, cpu = timed([str(llama_build / "bin" / "llama-mtmd-cli"), "-m", str(TEXT), "--mmproj", str(mmproj),
                      "--audio", str(clip), "-p", "hi", "-n", "1", "-t", str(threads), "--temp", "0", "--jinja",
                      "--no-warmup", "-c", "2048"], env={"PATH": "/usr/bin:/bin"})
    m = re.search(r"encoding done in (\d+) ms", out) or re.search(r"slice encoded in (\d+) ms", out)
    return {"encode_ms": float(m[1]), "cpu_s": cpu}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-build", type=Path, default=Path("/opt/kvshare-ref/llama-build"))
    ap.add_argument("--kvshare-build", type=Path, default=ROOT / "build")
    ap.add_argument("--work", type=Path, default=Path("/tmp/kvshare_audio_bench"))
    ap.add_argument("--seconds", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--outtype", choices=["f16", "f32"], default="f16")
    ap.add_argument("--precision", choices=["auto", "f32", "bf16"], default="auto")
    ap.add_argument("--gemma3n", action="store_true", help="also Gemma 3n E2B's geometry, kvshare alone")
    ap.add_argument("--no-peer", action="store_true", help="skip the Gemma 4 runs (with --gemma3n)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "audio_encode.json")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    results, gemma3n = [], []
    for seconds in a.seconds:
        clip = a.work / f"clip_{seconds}s.wav"
        write_clip(clip, seconds)
    if not a.no_peer:
        mmproj = write_mmproj(a.work, a.outtype)
        for seconds in a.seconds:
            clip = a.work / f"clip_{seconds}s.wav"
            kvshare(a.kvshare_build, mmproj, clip, 1, a.work, a.precision)  # warm-up: pages the weights in
            llamacpp(a.llama_build, mmproj, clip, 1)
            for threads in a.threads:
                for r in range(a.rounds):
                    order = ["kvshare", "llamacpp"] if r % 2 == 0 else ["llamacpp", "kvshare"]
                    row = {"seconds": seconds, "threads": threads, "round": r, "order": order,
                           "load_average": os.getloadavg()[0]}
                    for who in order:
                        row[who] = (kvshare(a.kvshare_build, mmproj, clip, threads, a.work, a.precision)
                                    if who == "kvshare" else llamacpp(a.llama_build, mmproj, clip, threads))
                    row["ratio"] = row["llamacpp"]["encode_ms"] / row["kvshare"]["encode_ms"]
                    print(json.dumps(row), flush=True)
                    results.append(row)
    if a.gemma3n:
        mmproj = write_gemma3n_mmproj(a.work, a.outtype)
        for seconds in a.seconds:
            clip = a.work / f"clip_{seconds}s.wav"
            kvshare(a.kvshare_build, mmproj, clip, 1, a.work, a.precision)  # warm-up
            for threads in a.threads:
                for r in range(a.rounds):
                    row = {"seconds": seconds, "threads": threads, "round": r, "load_average": os.getloadavg()[0],
                           "kvshare": kvshare(a.kvshare_build, mmproj, clip, threads, a.work, a.precision)}
                    row["real_time_factor"] = row["kvshare"]["encode_ms"] / 1000 / seconds
                    print(json.dumps(row), flush=True)
                    gemma3n.append(row)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"geometry": f"Gemma4AudioConfig() (E2B / E4B), {a.outtype.upper()}, text width 64",
                                 "gemma3n_geometry": f"Gemma3nAudioConfig() (E2B / E4B), {a.outtype.upper()}, "
                                                     "text width 64",
                                 "precision": a.precision, "host": os.uname().nodename,
                                 "cpu": cpu_name(), "load_average": os.getloadavg(),
                                 "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": results,
                                 "gemma3n_runs": gemma3n}, indent=1) + "\n")


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


if __name__ == "__main__":
    main()
