"""Writes the speech clips of tests/audio_*_test.cc and HF's view of them.

Run by hand (espeak-ng from Debian; soundfile and soxr in the reference venv
of docs/audio.md):
    /opt/kvshare-ref/venv/bin/python tests/tools/audio_fixtures.py

espeak-ng speaks a few short phrases (22050 Hz, 16-bit WAV); each clip is
re-encoded at another rate, channel count and format (WAV PCM16 / float,
FLAC, Ogg Vorbis, MP3) with soundfile, and decoded back the way transformers
5.23 loads audio (audio_utils.load_audio, backend "soundfile": libsndfile,
channel mean, soxr "HQ" to 16 kHz, padded or cut to ceil(n * 16000 / rate)).
For each clip, tests/fixtures/audio/ gets:
  <clip>.<ext>            the encoded file
  <clip>.wave.f32         the 16 kHz float32 waveform load_audio gives
  <clip>.gemma3n.f32      Gemma3nAudioFeatureExtractor()([wave]) features,
                          float32 [frames, 128]
  <clip>.gemma4.f32       Gemma4AudioFeatureExtractor()([wave]) features
  <clip>.gemma4.f64.f32   the same extractor's steps on the waveform as
                          float64 (HF's code path without its float32 FFT;
                          Gemma 4's window is float64 rounded, so this is the
                          exact math kvshare computes)
and audio.json lists per clip the source rate and channels, the sample
count, each extractor's frame count and mask (the unified model's raw
frames are the waveform zero-padded to a multiple of 640: no file).
"""
import json
import math
import os
import subprocess
import tempfile

import numpy as np
import soundfile as sf
import soxr
from transformers.audio_utils import load_audio
from transformers.models.gemma3n.feature_extraction_gemma3n import Gemma3nAudioFeatureExtractor
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "audio")

# name, phrase, voice, seconds kept (at most; the files stay small), rate,
# channels, container, subtype. Lengths are not multiples of 128 samples, so
# the extractors' padding and masks show; the blip is 20 ms: a handful of
# Gemma 4 frames, under one Gemma 3n window.
CLIPS = [
    ("hello_22050", "Hello world.", "en", 0.9, 22050, 1, "WAV", "PCM_16"),
    ("fox_16000", "The quick brown fox.", "en-us", 0.7131, 16000, 1, "FLAC", "PCM_16"),
    ("stereo_44100", "Audio in stereo.", "en", 0.537, 44100, 2, "OGG", "VORBIS"),
    ("mp3_24000", "Twenty four kilohertz.", "en-us", 0.8333, 24000, 1, "MP3", "MPEG_LAYER_III"),
    ("float_8000", "Eight.", "en", 0.9, 8000, 1, "WAV", "FLOAT"),
    ("blip_48000", "A", "en", 0.02, 48000, 1, "WAV", "PCM_24"),
]
EXT = {"WAV": "wav", "FLAC": "flac", "OGG": "ogg", "MP3": "mp3"}


def speak(phrase, voice):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-s", "190", "-w", path, phrase], check=True)
        wave, rate = sf.read(path, dtype="float32")
    return wave, rate


def make_clip(name, phrase, voice, seconds, rate, channels, container, subtype):
    wave, src_rate = speak(phrase, voice)
    wave = wave[: int(src_rate * seconds)]
    if rate != src_rate:
        wave = soxr.resample(wave, src_rate, rate, quality="VHQ").astype(np.float32)
    if channels == 2:
        # A second channel that differs (delayed, quieter): the downmix is a mean, not a copy.
        other = 0.5 * np.concatenate([np.zeros(37, np.float32), wave[:-37]])
        wave = np.stack([wave, other], axis=1)
    path = os.path.join(OUT, f"{name}.{EXT[container]}")
    sf.write(path, np.clip(wave, -0.99, 0.99), rate, format=container, subtype=subtype)
    return path


def float64_path(fe, wave):
    """HF's _extract_spectrogram on the padded clip as float64 (numpy then
    runs the FFT in float64), masked as __call__ does."""
    n = len(wave)
    padded = np.zeros((n + 127) // 128 * 128)
    padded[:n] = wave
    mask = np.zeros(len(padded), dtype=np.int32)
    mask[:n] = 1
    feats, frame_mask = fe._extract_spectrogram(padded[None, :], mask)
    return feats.astype(np.float32) * frame_mask[:, None]


def main():
    os.makedirs(OUT, exist_ok=True)
    g3n, g4 = Gemma3nAudioFeatureExtractor(), Gemma4AudioFeatureExtractor()
    manifest = []
    for clip in CLIPS:
        name, rate, channels = clip[0], clip[4], clip[5]
        path = make_clip(*clip)
        info = sf.info(path)
        wave = load_audio(path, sampling_rate=16000, backend="soundfile")
        assert wave.dtype == np.float32 and len(wave) == (
            info.frames if rate == 16000 else math.ceil(info.frames * 16000 / rate))
        wave.tofile(os.path.join(OUT, f"{name}.wave.f32"))
        entry = {"name": name, "file": os.path.basename(path), "rate": rate, "channels": channels,
                 "source_frames": info.frames, "samples": len(wave)}
        for key, fe in (("gemma3n", g3n), ("gemma4", g4)):
            out = fe([wave], return_tensors="np")
            feats = np.asarray(out["input_features"][0], dtype=np.float32)
            mask = np.asarray(out["input_features_mask"][0], dtype=bool)
            feats.tofile(os.path.join(OUT, f"{name}.{key}.f32"))
            entry[key] = {"frames": int(feats.shape[0]), "mask": "".join("1" if m else "0" for m in mask)}
            if key == "gemma4":
                exact = float64_path(fe, wave)
                exact.tofile(os.path.join(OUT, f"{name}.{key}.f64.f32"))
                entry[key]["float32_vs_float64"] = float(np.abs(exact - feats).max())
        manifest.append(entry)
        print(name, rate, channels, info.frames, "->", len(wave), "samples;",
              entry["gemma3n"]["frames"], "/", entry["gemma4"]["frames"], "frames")
    with open(os.path.join(OUT, "audio.json"), "w") as f:
        json.dump({"clips": manifest}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
