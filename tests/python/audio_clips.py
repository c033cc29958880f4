"""Small synthetic clips for the audio tests (no fixture files needed)."""
import io
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
