"""Small synthetic clips for the audio tests (no fixture files needed)."""
import io
import struct
import wave

import numpy as np


def wav16(samples, rate=16000) -> bytes:
    """A 16-bit PCM mono WAV of float samples in [-1, 1]."""
    pcm = np.clip(np.round(np.asarray(samples) * 32767), -32768, 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def tone(hz, seconds=0.5, rate=16000):
    """A float32 sine of amplitude 0.3."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def wav_float(samples, rate=16000) -> bytes:
    """A 32-bit float mono WAV (WAVE_FORMAT_IEEE_FLOAT) of the samples as they are,
    NaN and infinities included (the wave module writes PCM only)."""
    data = np.asarray(samples, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body
