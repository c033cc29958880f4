"""Writes tests/fixtures/vision/gemma3.pan_and_scan.json: the token ids HF transformers 5.23's
Gemma3Processor gives for chat messages with images, pan-and-scan on and off, with the tiny Gemma 3
tokenizer of tests/fixtures/vision/gemma3.f32.gguf (tests/tools/vision_fixtures.py's tok stage,
WORK/tok_gemma3) and the gemma3 fixture's geometry (112 px, 16 tokens per image or crop). The
message text is what the released Gemma 3 chat template writes (an image part as <start_of_image>,
text parts trimmed, no separator), which the processor then expands. Run by hand:

  /opt/kvshare-ref/venv/bin/python tests/tools/vision_pan_and_scan_prompt.py [--tok DIR]
"""
import argparse
import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vision" / "gemma3.pan_and_scan.json"
# Each case: the user message's parts (a str is a text part, a [height, width] list an image).
CASES = [
    ["<image>", "Describe the picture in one line."],
    [[400, 400], [400, 600], "What differs between these two pictures?"],
    ["Look at this:", [600, 400], "Describe the picture in one line."],
]
WIDE = [400, 600]  # the first case's image: 2 crops under pan-and-scan


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tok", type=Path, default=Path("/opt/kvshare-ref/vision_work/tok_gemma3"))
    a = ap.parse_args()
    from transformers import AutoTokenizer, Gemma3ImageProcessor, Gemma3Processor

    tok = AutoTokenizer.from_pretrained(a.tok)
    ip = Gemma3ImageProcessor(size={"height": 112, "width": 112}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                              pan_and_scan_min_crop_size=256, pan_and_scan_max_num_crops=4,
                              pan_and_scan_min_ratio_to_activate=1.2)
    proc = Gemma3Processor(image_processor=ip, tokenizer=tok, image_seq_length=16)
    rng = np.random.default_rng(3)
    cases = []
    for parts in CASES:
        parts = [WIDE if p == "<image>" else p for p in parts]
        images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in (p for p in parts if isinstance(p, list))]
        text = "".join("<start_of_image>" if isinstance(p, list) else p.strip() for p in parts)
        s = "<start_of_turn>user\n" + text + "<end_of_turn>\n<start_of_turn>model\n"
        case = {"parts": parts}
        for pas in (False, True):
            out = proc(text=s, images=images, do_pan_and_scan=pas)
            key = "pan_and_scan" if pas else "plain"
            crops = ip(images, do_pan_and_scan=pas)["num_crops"]
            case[key] = {"ids": [int(i) for i in out["input_ids"][0]],
                         "crops": [int(n) for n in np.asarray(crops).reshape(-1)]}
        cases.append(case)
        print(parts, {k: (len(case[k]["ids"]), case[k]["crops"]) for k in ("plain", "pan_and_scan")})
    import transformers

    OUT.write_text(json.dumps({"source": f"HF transformers {transformers.__version__} Gemma3Processor, tokenizer "
                                         "of gemma3.f32.gguf, image_seq_length 16; text parts trimmed",
                               "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
