"""llama.cpp as a second peer for Gemma 4's audio tower (docs/audio.md
"llama.cpp as a peer"). Run by hand, after building kvshare's
build/tests/audio_encode_dump:

    /opt/kvshare-ref/venv/bin/python tests/tools/audio_llamacpp_peer.py \
        [--llama-build /opt/kvshare-ref/llama-build] [--kvshare-build build]

llama-mtmd-cli runs the tiny gemma4a mmproj (tests/fixtures/audio/) beside
the tiny Gemma 4 text model of tests/fixtures/vision/ (text width 64) on the
hello clip's 16 kHz waveform (written as a float WAV, so neither side
resamples), and dumps its audio soft tokens (MTMD_DEBUG_EMBEDDINGS=<path>:
int32 tokens, int32 width, float32 data). audio_encode_dump computes
kvshare's from the same file, once with HF's log floor ln(mel + 1e-3) and
once with llama.cpp's ln(max(mel, 1e-3)). Prints the token counts and the
largest difference relative to llama.cpp's largest value.
"""
import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
AUDIO = ROOT / "tests" / "fixtures" / "audio"


def read_dump(path):
    raw = Path(path).read_bytes()
    n, d = np.frombuffer(raw[:8], dtype=np.int32)
    return np.frombuffer(raw[8:], dtype=np.float32).reshape(n, d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-build", type=Path, default=Path("/opt/kvshare-ref/llama-build"))
    ap.add_argument("--kvshare-build", type=Path, default=ROOT / "build")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wav = tmp / "hello16k.wav"
        sf.write(wav, np.fromfile(AUDIO / "hello_22050.wave.f32", dtype=np.float32), 16000, subtype="FLOAT")
        mmproj = AUDIO / "gemma4a.mmproj.f32.gguf"
        cli = [str(args.llama_build / "bin" / "llama-mtmd-cli"), "-m",
               str(ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf"), "--mmproj", str(mmproj),
               "--audio", str(wav), "-p", "hi", "-n", "1", "-t", "2", "--temp", "0", "--jinja", "--no-warmup",
               "-c", "256"]
        env = {"MTMD_DEBUG_EMBEDDINGS": str(tmp / "llamacpp.bin"), "PATH": "/usr/bin:/bin"}
        subprocess.run(cli, env=env, capture_output=True, check=True)
        peer = read_dump(tmp / "llamacpp.bin")
        result = {"llamacpp_tokens": int(peer.shape[0])}
        for label, extra in (("hf_floor", []), ("llamacpp_floor", ["--floor-max"])):
            out = tmp / f"kvshare_{label}.bin"
            subprocess.run([str(args.kvshare_build / "tests" / "audio_encode_dump"), str(mmproj), str(wav), str(out)]
                           + extra, check=True, capture_output=True)
            own = read_dump(out)
            result[label] = {"tokens": int(own.shape[0]),
                             "max_rel_diff": float(np.abs(own - peer).max() / np.abs(peer).max())
                             if own.shape == peer.shape else None}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
