"""kvshare's image preprocessing against transformers' image processors on real
photos (by hand, not CI; the table goes in docs/vision.md "Preprocessing").

    cmake --build build --target vision_preprocess_dump
    /opt/kvshare-ref/venv/bin/python tests/tools/vision_preprocess_check.py [build/tests/vision_preprocess_dump]

Photos: scikit-image's skimage/data (astronaut, chelsea, coffee, camera (grey), logo (RGBA),
rocket and hubble_deep_field (JPEG)), plus a small downscaled chelsea and very wide / tall crops of
coffee written as PNG. HF's side gets what its load_image gives for a file:
PIL's exif_transpose(Image.open(...)).convert("RGB"). Families, with the released configs'
settings:
  gemma3      Gemma3ImageProcessor 896x896 bilinear, mean = std = 0.5
  gemma3-pas  the same with pan-and-scan (min crop 256, 4 crops, ratio 1.2)
  gemma3n     SiglipImageProcessor 768x768 bilinear, rescale only
  gemma4@B    Gemma4ImageProcessor, max_soft_tokens B, bicubic, rescale only
  gemma4u@280 Gemma4UnifiedImageProcessor (the same arithmetic, 48-px patches)
Prints, per family and image, the shapes (and Gemma 4's soft tokens) and the
largest difference in 8-bit levels (|a - b| * 255 * std). Exit status 1 when
a shape differs or a difference exceeds one level.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import skimage
from PIL import Image, ImageOps
from transformers.models.gemma3.image_processing_gemma3 import Gemma3ImageProcessor
from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor
from transformers.models.gemma4_unified.image_processing_gemma4_unified import Gemma4UnifiedImageProcessor
from transformers.models.siglip.image_processing_siglip import SiglipImageProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DUMP = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "tests", "vision_preprocess_dump")
DATA = os.path.join(os.path.dirname(skimage.__file__), "data")


def photos(tmp):
    out = {name: os.path.join(DATA, name) for name in
           ("astronaut.png", "chelsea.png", "coffee.png", "camera.png", "logo.png", "rocket.jpg",
            "hubble_deep_field.jpg")}
    chelsea = Image.open(out["chelsea.png"]).convert("RGB")
    coffee = Image.open(out["coffee.png"]).convert("RGB")
    extra = {
        "chelsea_61x43.png": chelsea.resize((61, 43), Image.BICUBIC),
        "coffee_wide_600x40.png": coffee.crop((0, 180, 600, 220)),
        "coffee_tall_35x400.png": coffee.crop((300, 0, 335, 400)),
    }
    for name, image in extra.items():
        out[name] = os.path.join(tmp, name)
        image.save(out[name])
    return out


def kvshare(path, tmp, args):
    prefix = os.path.join(tmp, "out")
    lines = subprocess.run([DUMP, path, prefix, *args], check=True, capture_output=True, text=True).stdout.split("\n")
    tensors = []
    for line in filter(None, lines):
        _, i, h, w = line.split()
        data = np.fromfile(f"{prefix}.{i}.f32", dtype=np.float32).reshape(3, int(h), int(w))
        tensors.append(data)
    return tensors


def to_patches(chw, patch=16):
    c, h, w = chw.shape
    return chw.reshape(c, h // patch, patch, w // patch, patch).transpose(1, 3, 2, 4, 0).reshape(-1, patch * patch * c)


def main():
    rows, worst, ok = [], {}, True
    g3 = dict(size={"height": 896, "width": 896}, resample=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    g3_pas = Gemma3ImageProcessor(**g3, do_pan_and_scan=True, pan_and_scan_min_crop_size=256,
                                  pan_and_scan_max_num_crops=4, pan_and_scan_min_ratio_to_activate=1.2)
    processors = {
        "gemma3": (Gemma3ImageProcessor(**g3), ["gemma3", "896"], 0.5),
        "gemma3-pas": (g3_pas, ["gemma3", "896", "--pan-and-scan"], 0.5),
        "gemma3n": (SiglipImageProcessor(size={"height": 768, "width": 768}, resample=2, do_normalize=False),
                    ["gemma3n", "768"], 1.0),
    }
    for budget in (70, 140, 280, 560, 1120):
        processors[f"gemma4@{budget}"] = (Gemma4ImageProcessor(max_soft_tokens=budget), ["gemma4", str(budget)], 1.0)
    processors["gemma4u@280"] = (Gemma4UnifiedImageProcessor(max_soft_tokens=280), ["gemma4", "280"], 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in photos(tmp).items():
            pil = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
            for family, (processor, args, std) in processors.items():
                ours = kvshare(path, tmp, args)
                hf = processor(images=pil, return_tensors="np")
                if family.startswith("gemma4"):
                    n = int(hf["num_soft_tokens_per_image"][0])
                    unified = family.startswith("gemma4u")  # one 48-px patch per token
                    patches = hf["pixel_values"][0][: n if unified else n * 9]
                    theirs = [patches]
                    mine = [to_patches(ours[0], 48 if unified else 16)]
                    shape = f"{ours[0].shape[1]}x{ours[0].shape[2]}, {n} tokens"
                    same = mine[0].shape == patches.shape and (ours[0].shape[1] // 48) * (ours[0].shape[2] // 48) == n
                else:
                    theirs = list(hf["pixel_values"])
                    mine = ours
                    shape = f"{len(mine)} x {mine[0].shape[1]}x{mine[0].shape[2]}"
                    same = len(mine) == len(theirs) and all(a.shape == b.shape for a, b in zip(mine, theirs))
                if not same:
                    ok = False
                    rows.append((family, name, pil.size, shape + f" (HF: {[t.shape for t in theirs]})", float("nan")))
                    continue
                diff = max(float(np.abs(a.astype(np.float64) - b).max()) for a, b in zip(mine, theirs)) * 255 * std
                ok &= diff <= 1.0
                worst[family] = max(worst.get(family, 0.0), diff)
                rows.append((family, name, pil.size, shape, diff))
    print("| family | image (WxH) | kvshare tensors | max diff (8-bit levels) |")
    print("|---|---|---|---|")
    for family, name, size, shape, diff in rows:
        print(f"| {family} | {name} ({size[0]}x{size[1]}) | {shape} | {diff:.3g} |")
    print("\nworst per family:", {k: round(v, 4) for k, v in worst.items()})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
