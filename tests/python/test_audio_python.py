"""kvshare.Model with audio from Python, on the committed tiny fixtures: the
Gemma 4 E-style text model of tests/fixtures/vision/ (its vocabulary has
<|audio> <|audio|> <audio|>) with the gemma4a mmproj of tests/fixtures/audio/
(both 64 wide). Model(path, mmproj=...) loads the audio tower; generate(audio=...) gives the same tokens whether a clip is a
path, its bytes or its samples as (numpy array, rate); the clip takes its
soft tokens in the prompt; the errors say what is wrong. Runs in .ci/run's pytest after
`pip install .` (not in ctest).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from audio_clips import tone, wav16
from peers import need

kvshare = need("kvshare")

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "fixtures" / "vision" / "gemma4.f32.gguf"
MMPROJ = ROOT / "tests" / "fixtures" / "audio" / "gemma4a.mmproj.f32.gguf"


@pytest.fixture(scope="module")
def model():
    return kvshare.Model(str(TEXT), mmproj=str(MMPROJ), max_context=256, num_threads=2)


def run(model, **kw):
    return "".join(model.generate("Transcribe.", max_new_tokens=4, chat="gemma4", **kw))


def test_mmproj_loads_the_audio_tower(model):
    assert model.takes_audio  # and its (tiny) vision tower: the converter writes both


def test_clip_kinds_agree_and_reach_the_model(model, tmp_path):
    data = wav16(tone(440), 16000)
    path = tmp_path / "a.wav"
    path.write_bytes(data)
    by_path = run(model, audio=[str(path)])
    prompt = model.last_stats["prompt_tokens"]
    assert run(model, audio=[path]) == by_path
    assert run(model, audio=[data]) == by_path
    # libsndfile scales 16-bit PCM by 1 / 32768: the same samples as an array.
    pcm = np.frombuffer(data[44:], dtype="<i2").astype(np.float32) / 32768
    assert run(model, audio=[(pcm, 16000)]) == by_path
    assert run(model, audio=[{"array": pcm, "sampling_rate": 16000}]) == by_path
    # 0.5 s: 13 soft tokens between <|audio> and <audio|>.
    run(model)
    assert prompt - model.last_stats["prompt_tokens"] == 13 + 2


def test_errors_name_the_clip(model, tmp_path):
    with pytest.raises(TypeError, match="needs its sample rate"):
        run(model, audio=[tone(440)])
    with pytest.raises(kvshare.Error, match=r"audio\[0\].*sample rate 0"):
        run(model, audio=[(tone(440), 0)])
    with pytest.raises(kvshare.Error, match=r"audio\[0\].*float32"):
        run(model, audio=[(tone(440).astype(np.float64), 16000)])
    with pytest.raises(kvshare.Error, match=r"audio\[1\].*over the limit of 600"):
        run(model, audio=[(tone(440), 16000), (np.zeros(1000 * 601, np.float32), 1000)])
    with pytest.raises(kvshare.Error, match=r"audio\[0\].*(unsupported|not a|unknown)"):
        run(model, audio=[b"not audio at all, just some bytes"])
    nan = tone(440)
    nan[7] = np.nan
    with pytest.raises(kvshare.Error, match=r"audio\[0\].*sample 7 of 8000 .* is NaN"):
        run(model, audio=[(nan, 16000)])
    with pytest.raises(kvshare.Error, match=r"audio\[0\].*too short for one soft token.*at least 10.0625 ms"):
        run(model, audio=[(tone(440)[:3], 16000)])
    short = tmp_path / "short.wav"
    short.write_bytes(wav16(tone(440)[:3]))
    with pytest.raises(kvshare.Error, match=rf"audio\[0\]: audio file '{short}': audio: the clip is 3 sample"):
        run(model, audio=[str(short)])
    with pytest.raises(kvshare.Error, match="not token ids"):
        list(model.generate([2, 3], audio=[(tone(440), 16000)]))


def test_model_without_audio_encoder_refuses_audio():
    m = kvshare.Model(str(TEXT), max_context=64, num_threads=1)
    assert not m.takes_audio
    with pytest.raises(kvshare.Error, match="takes no audio"):
        run(m, audio=[(tone(440), 16000)])
