"""Writes tests/fixtures/vision/resize_torch.txt: torchvision's antialiased
uint8 resize (what transformers 5.23's image processors run) of two small
images to several sizes, for tests/vision_preprocess_test.cc to match bit for
bit. Run by hand in the reference venv (docs/vision.md):
    /opt/kvshare-ref/venv/bin/python tests/tools/vision_resize_fixture.py

Format, one record per line, numbers in decimal, pixels in hex (HWC):
    image <name> <height> <width> <hex>
    resize <name> <bilinear|bicubic> <out_height> <out_width> <hex>
"""
import os

import numpy as np
import torch
from torchvision.transforms.v2 import functional as F

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vision", "resize_torch.txt")
# A 1x1 output trips an internal assert of torch 2.15's uint8 kernel; 1-pixel sides are covered.
SIZES = [(7, 5), (1, 5), (5, 1), (30, 25), (23, 9), (11, 40), (23, 3), (2, 17), (45, 7)]


def images():
    rng = np.random.default_rng(46)
    noise = rng.integers(0, 256, (23, 17, 3), dtype=np.uint8)
    # Hard edges between 0 and 255: bicubic overshoots and the passes clamp.
    y, x = np.mgrid[0:19, 0:29]
    edges = np.stack([((x // 3 + y // 4) % 2) * 255, (x * 9) % 256, ((y > 9) * 255)], axis=-1).astype(np.uint8)
    return {"noise": noise, "edges": edges}


def main():
    assert torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"), "native uint8 resize needs AVX2"
    lines = []
    for name, img in images().items():
        lines.append(f"image {name} {img.shape[0]} {img.shape[1]} {img.tobytes().hex()}")
        chw = torch.from_numpy(img).permute(2, 0, 1).contiguous()
        for mode in ("bilinear", "bicubic"):
            interp = F.InterpolationMode.BILINEAR if mode == "bilinear" else F.InterpolationMode.BICUBIC
            for h, w in SIZES:
                out = F.resize(chw, [h, w], interpolation=interp, antialias=True)
                assert out.dtype == torch.uint8
                lines.append(f"resize {name} {mode} {h} {w} {out.permute(1, 2, 0).numpy().tobytes().hex()}")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
