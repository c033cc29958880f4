"""Writes the tiny encoded images of tests/vision_image_test.cc.

Run by hand with Pillow (the reference venv of docs/vision.md):
    /opt/kvshare-ref/venv/bin/python tests/tools/vision_image_fixtures.py

Each <name>.<ext> is a 7x5 image (odd sizes, so row padding shows) and
<name>_<ext>.rgb holds what `exif_transpose(Image.open(f)).convert("RGB")`
gives: the pixels transformers' load_image hands a processor (upright, alpha
dropped, palettes and grey expanded). exif<N>.* carry EXIF orientation N.
unsupported.* are formats kvshare names and refuses.
"""
import io
import os

import numpy as np
from PIL import Image, ImageOps

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vision", "images")
W, H = 7, 5


def pixels(seed, channels):
    rng = np.random.default_rng(seed)
    # Smooth gradients plus noise: JPEG keeps them close, so its test can be tight.
    y, x = np.mgrid[0:H, 0:W]
    base = np.stack([x * 30 + 20, y * 40 + 30, (x + y) * 15 + 60, 128 + 0 * x], axis=-1)[..., :channels]
    return np.clip(base + rng.integers(-10, 11, base.shape), 0, 255).astype(np.uint8)


def save(name, image, fmt, **kw):
    buf = io.BytesIO()
    image.save(buf, fmt, **kw)
    data = buf.getvalue()
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    decoded = Image.open(io.BytesIO(data))
    decoded.seek(0)
    rgb = np.asarray(ImageOps.exif_transpose(decoded).convert("RGB"))
    with open(os.path.join(OUT, os.path.splitext(name)[0] + "_" + name.split(".")[-1] + ".rgb"), "wb") as f:
        f.write(rgb.tobytes())
    print(f"{name}: {len(data)} bytes, {decoded.mode} {decoded.size}")


def main():
    os.makedirs(OUT, exist_ok=True)
    rgb = Image.fromarray(pixels(1, 3), "RGB")
    rgba_px = pixels(2, 4)
    rgba_px[..., 3] = np.arange(W * H, dtype=np.uint8).reshape(H, W) * 7  # alpha 0 .. 238
    rgba = Image.fromarray(rgba_px, "RGBA")
    grey = Image.fromarray(pixels(3, 1)[..., 0], "L")
    grey_alpha = Image.fromarray(pixels(4, 2), "LA")
    palette = rgb.quantize(6)
    palette.info["transparency"] = 2
    bilevel = grey.point(lambda v: 255 if v > 120 else 0).convert("1")

    save("rgb.png", rgb, "PNG")
    save("rgba.png", rgba, "PNG")
    save("grey.png", grey, "PNG")
    save("grey_alpha.png", grey_alpha, "PNG")
    save("palette.png", palette, "PNG", transparency=2)
    save("bilevel.png", bilevel, "PNG")
    save("rgb.jpg", rgb, "JPEG", quality=95)
    save("progressive.jpg", rgb, "JPEG", quality=95, progressive=True)
    save("grey.jpg", grey, "JPEG", quality=95)
    second = Image.fromarray(255 - pixels(5, 3), "RGB").quantize(8)
    save("anim.gif", rgb.quantize(8), "GIF", save_all=True, append_images=[second], duration=100, loop=0)
    save("rgb.bmp", rgb, "BMP")
    save("palette.bmp", palette.convert("RGB").quantize(6), "BMP")
    save("lossless.webp", rgb, "WEBP", lossless=True)
    save("lossy.webp", rgb, "WEBP", quality=95)
    save("alpha.webp", rgba, "WEBP", lossless=True, exact=True)
    save("anim.webp", rgb, "WEBP", lossless=True, save_all=True, append_images=[Image.fromarray(255 - pixels(5, 3))])
    for orientation, fmt, ext in ((6, "JPEG", "jpg"), (3, "PNG", "png"), (8, "WEBP", "webp"), (5, "JPEG", "jpg")):
        exif = Image.Exif()
        exif[0x0112] = orientation
        extra = {"quality": 95} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
        save(f"exif{orientation}.{ext}", rgb, fmt, exif=exif.tobytes(), **extra)
    cmyk = Image.fromarray(pixels(6, 4), "CMYK")
    save("cmyk.jpg", cmyk, "JPEG", quality=95)
    rgb.save(os.path.join(OUT, "unsupported.tiff"), "TIFF")


if __name__ == "__main__":
    main()
