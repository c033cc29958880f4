#!/usr/bin/env python3
"""Writes an F16 (or BF16) copy of a GGUF: every quantized or F32 matrix (2-D and
larger tensors) dequantized with the gguf package and stored as F16 / BF16; 1-D
tensors (norms) and the metadata copied as they are. For timing the float-weight
products (--weight-precision, docs/benchmarks.md) on the default model's shapes
and trained weights, as an F16 GGUF of it would hold them (up to the quantization
already in the source).

  python3 bench/f16_gguf.py SRC.gguf OUT.gguf [--type f16|bf16]

Needs numpy and gguf (PyPI; written against gguf 0.19).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import gguf


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--type", choices=("f16", "bf16"), default="f16")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(a.out, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), vtype)
    want = gguf.GGMLQuantizationType.F16 if a.type == "f16" else gguf.GGMLQuantizationType.BF16
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # numpy order, ne[0] last
        if len(shape) < 2:
            w.add_tensor(t.name, np.asarray(t.data).reshape(shape), raw_dtype=t.tensor_type)
            continue
        x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        if want == gguf.GGMLQuantizationType.F16:
            w.add_tensor(t.name, x.astype(np.float16))
        else:
            w.add_tensor(t.name, gguf.quants.quantize(x, want), raw_shape=x.shape, raw_dtype=want)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
