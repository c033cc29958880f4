"""kvshare.Model with images from Python, on the committed tiny vision fixtures
(tests/fixtures/vision/, README.md there): Model(path, mmproj=...) loads the
encoder; encode_pixels on HF's own pixel tensors gives HF's features within
1e-5 relative; generate(images=...) gives the same tokens whether an image is a
path, a pathlib.Path, its bytes or its pixels as a numpy array; the errors say
what is wrong. Runs in .ci/run's pytest after `pip install .` (not in ctest).
"""
from __future__ import annotations

import importlib.util
import json
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

from peers import need

kvshare = need("kvshare")

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vision"
TOL = 1e-5


def load(name, mmproj=True, **kw):
    kw.setdefault("max_context", 256)
    kw.setdefault("num_threads", 2)
    if mmproj:
        kw["mmproj"] = str(FIXTURES / f"{name}.mmproj.f32.gguf")
    with warnings.catch_warnings():  # the tiny Gemma 3n is not llama.cpp's hard-coded E2B/E4B (the Model says so)
        warnings.filterwarnings("ignore", "llama.cpp ignores this file's Gemma 3n")
        return kvshare.Model(str(FIXTURES / f"{name}.f32.gguf"), **kw)


@pytest.fixture(scope="module")
def gemma3():
    return load("gemma3")


@pytest.fixture(scope="module")
def gemma3n():
    return load("gemma3n")


@pytest.fixture(scope="module")
def gemma4():
    return load("gemma4")


def png(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of `rgb` (H, W, 3), unfiltered: enough for a test image."""
    h, w, _ = rgb.shape

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\0" + rgb[y].tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def picture(seed=0, side=40):
    """A square image: the tiny Gemma 4 position table (24 patches a side)
    holds a square image at the 70-token budget (8 x 8 tokens), not a long one."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side]
    base = np.stack([x * 5, y * 6, (x + y) * 3], axis=-1) + rng.integers(0, 40, (side, side, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def rel_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / max(1.0, float(np.max(np.abs(b)))))


@pytest.mark.parametrize("name", ["gemma3", "gemma3n", "gemma4", "gemma4_large", "gemma4_unified"])
def test_features_match_hf(name):
    m = load(name)
    hf = json.loads((FIXTURES / f"{name}.hf.json").read_text())
    cfg = m.vision_config
    assert m.takes_images and cfg["n_embd_text"] == m.config["n_embd"]
    for e in hf["encoder"]:
        px, ft = e["pixels"], e["features"]
        u = np.fromfile(FIXTURES / px["file"], np.uint8).reshape(px["shape"])
        x = u.astype(np.float32) / np.float32(255)  # README: each step one float32 operation
        if name == "gemma3":
            x = (x - np.float32(0.5)) / np.float32(0.5)
        ours = m.encode_pixels(x)
        theirs = np.fromfile(FIXTURES / ft["file"], "<f4").reshape(ft["shape"])
        assert ours.dtype == np.float32 and ours.shape == theirs.shape
        assert rel_diff(ours, theirs) < TOL, (name, px["file"])


@pytest.mark.parametrize("name", ["gemma3", "gemma3n", "gemma4"])
def test_image_kinds_give_the_same_tokens(name, tmp_path, request):
    m = request.getfixturevalue(name)
    rgb = picture()
    path = tmp_path / "picture.png"
    path.write_bytes(png(rgb))
    kinds = {"str": str(path), "Path": path, "bytes": path.read_bytes(), "bytearray": bytearray(path.read_bytes()),
             "numpy": rgb, "numpy_rgba": np.dstack([rgb, np.full(rgb.shape[:2], 7, np.uint8)]),
             "numpy_strided": np.ascontiguousarray(rgb[:, ::-1])[:, ::-1]}
    runs = {}
    for kind, image in kinds.items():
        s = m.generate("What is it?", images=[image, picture(1)], max_new_tokens=6, max_soft_tokens=70)
        runs[kind] = ("".join(s), s.stats["prompt_tokens"])
    assert len(set(runs.values())) == 1, runs
    # The soft tokens are in the prompt: two images more than the text alone.
    per_image = m.encode_image(rgb, max_soft_tokens=70).shape[0]
    text = m.generate("What is it?", max_new_tokens=1)
    "".join(text)
    assert runs["str"][1] >= text.stats["prompt_tokens"] + 2 * per_image


def test_gemma3n_mmproj_embeds_vision_vocabulary_ids(gemma3n):
    """With its mmproj the Model embeds an id of Gemma 3n's vision vocabulary given as a token id (<end_of_image>,
    512 here) by the mmproj's hard-token row, as HF does (docs/vision.md "Gemma 3n's hard tokens"; the values
    against HF: tests/runtime_hard_tokens_test.cc); text ids as without the mmproj."""
    plain = load("gemma3n", mmproj=False)
    text = [2, 412, 268, 283]
    assert np.array_equal(gemma3n.logits(text), plain.logits(text))
    assert np.max(np.abs(gemma3n.logits(text + [512]) - plain.logits(text + [512]))) > 1e-2


def test_encode_image_is_deterministic_and_finite(gemma4):
    rgb = picture(2)
    a = gemma4.encode_image(rgb, max_soft_tokens=70)
    assert a.shape == (64, gemma4.config["n_embd"]) and np.all(np.isfinite(a))
    np.testing.assert_array_equal(a, gemma4.encode_image(png(rgb), max_soft_tokens=70))
    (pixels,) = gemma4.preprocess_image(rgb, max_soft_tokens=70)
    assert pixels.dtype == np.float32 and pixels.shape == (3, 384, 384)
    np.testing.assert_array_equal(a, gemma4.encode_pixels(pixels))
    # Grey images are expanded to RGB, alpha is dropped.
    grey = rgb[..., 0]
    np.testing.assert_array_equal(gemma4.encode_image(grey, max_soft_tokens=70),
                                  gemma4.encode_image(np.dstack([grey] * 3), max_soft_tokens=70))
    np.testing.assert_array_equal(gemma4.encode_image(grey[..., None], max_soft_tokens=70),
                                  gemma4.encode_image(grey, max_soft_tokens=70))


def test_step_grows_for_an_image():
    # max_step 16 holds none of the 64-token image: a new sequence gets a step
    # that does (the same tokens as the default), a continued one is refused.
    small = load("gemma4_large", max_step=16)
    default = load("gemma4_large")
    args = dict(images=[picture()], max_new_tokens=4, max_soft_tokens=70)
    "".join(small.generate("Hi", max_new_tokens=2))
    with pytest.raises(kvshare.Error, match=r"64 soft tokens needs a step of that many tokens.*reset=True"):
        small.generate("Look.", reset=False, **args)
    assert "".join(small.generate("Look.", **args)) == "".join(default.generate("Look.", **args))


def test_errors(gemma4, tmp_path):
    plain = kvshare.Model(str(FIXTURES / "gemma4.f32.gguf"), max_context=256, num_threads=1)
    assert not plain.takes_images and plain.vision_config is None
    with pytest.raises(kvshare.Error, match=r"takes no images.*mmproj=PATH"):
        plain.generate("Hi", images=[picture()])
    with pytest.raises(kvshare.Error, match="takes no images"):
        plain.encode_image(picture())
    # An mmproj of another family (its markers are not in the vocabulary) or a
    # file that is not an mmproj.
    with pytest.raises(kvshare.Error, match=r"mmproj .*gemma3\.mmproj\.f32\.gguf: .*<start_of_image>"):
        kvshare.Model(str(FIXTURES / "gemma4.f32.gguf"), mmproj=str(FIXTURES / "gemma3.mmproj.f32.gguf"))
    with pytest.raises(kvshare.Error, match=r"mmproj .*gemma4\.f32\.gguf"):
        kvshare.Model(str(FIXTURES / "gemma4.f32.gguf"), mmproj=str(FIXTURES / "gemma4.f32.gguf"))

    def fails(image, match, error=kvshare.Error):
        with pytest.raises(error, match=match):
            gemma4.generate("Hi", images=[picture(), image], max_soft_tokens=70)

    fails(b"not an image at all", r"images\[1\]: ")
    fails(png(picture())[:60], r"images\[1\]: truncated PNG")
    fails((FIXTURES / "images" / "unsupported.tiff").read_bytes(), r"images\[1\]: .*TIFF")
    fails(str(tmp_path / "missing.png"), r"images\[1\]: cannot open the file .*missing\.png")
    fails(picture().astype(np.float32), r"images\[1\]: a numpy image must have dtype uint8.*float32")
    fails(np.zeros((4, 4, 2), np.uint8), r"images\[1\]: a numpy image must be HWC .*\(4, 4, 2\)")
    fails(np.zeros((2, 4, 4, 3), np.uint8), r"images\[1\]: a numpy image must be HWC")
    fails(12, r"images\[1\] must be a file path .*got int", TypeError)
    if importlib.util.find_spec("PIL") is not None:  # optional here: the rest runs without Pillow
        from PIL import Image

        fails(Image.fromarray(picture()), r"got Image \(for a PIL image pass numpy.asarray\(image\)\)", TypeError)
    # image_max_pixels (kvshare generate --image-max-pixels): a file's header and an array's shape.
    h, w = picture().shape[:2]
    for image, kind in ((png(picture()), "PNG"), (picture(), "raw")):
        with pytest.raises(kvshare.Error, match=rf"images\[0\]: {kind} image of {w}x{h} = {w * h} pixels is over the "
                                                rf"limit of {w * h - 1} pixels; raise it with image_max_pixels="):
            gemma4.generate("Hi", images=[image], max_soft_tokens=70, image_max_pixels=w * h - 1)
    assert "".join(gemma4.generate("Hi", images=[picture()], max_new_tokens=2, max_soft_tokens=70,
                                   image_max_pixels=w * h))
    with pytest.raises(TypeError, match="images must be a list"):
        gemma4.generate("Hi", images=picture())
    with pytest.raises(kvshare.Error, match="images go with a str prompt"):
        gemma4.generate([2, 3, 4], images=[picture()], max_soft_tokens=70)
    # More images than max_context (256) holds: refused before any is encoded.
    with pytest.raises(kvshare.Error, match=r"prompt of \d+ tokens with its 4 image\(s\) \+ 2 new tokens exceeds "
                                            r"max_context 256.*nothing was encoded"):
        gemma4.generate("Hi", images=[picture()] * 4, max_new_tokens=2, max_soft_tokens=70)
    with pytest.raises(kvshare.Error, match=r"images\[0\]: .*100"):
        gemma4.generate("Hi", images=[picture()], max_soft_tokens=100)
    with pytest.raises(kvshare.Error, match=r"dtype float32"):
        gemma4.encode_pixels(np.zeros((3, 48, 48), np.float64))
    with pytest.raises(kvshare.Error, match=r"\(3, H, W\)"):
        gemma4.encode_pixels(np.zeros((48, 48, 3), np.float32))
    with pytest.raises(kvshare.Error, match="48"):
        gemma4.encode_pixels(np.zeros((3, 50, 48), np.float32))
    # A failed call leaves the Model usable.
    assert "".join(gemma4.generate("Hi", images=[picture()], max_new_tokens=2, max_soft_tokens=70))
