#!/usr/bin/env python3
"""Copies a GGUF with every 2-D F32 tensor rounded to bf16 (nearest even),
stored as F32: the GPU model's weight upload's rounding, emulated for a CPU
run (norms and other 1-D tensors stay as they are; centroid tensors too, as
the GPU keeps them fp32). Run by hand with the reference environment's
`gguf` package, e.g. to size a device test's bf16 tolerance on the CPU:

    /opt/kvshare-ref/venv/bin/python tests/tools/round_gguf_bf16.py IN.gguf OUT.gguf

tests/cuda_assistant_test.cc's bf16 tolerance came from DraftRounds with the
rounded copies of tests/fixtures/gemma4_assistant's three files on the
`dev` side (a temporary test; numbers in the comment there).
"""
import sys

import gguf
import numpy as np


def round_bf16(a: np.ndarray) -> np.ndarray:
    b = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).reshape(a.shape)


def main(src: str, dst: str) -> None:
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents(), endianess=r.endianess)
    for f in r.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        vt = f.types[0]
        w.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None)
    data = []
    for t in r.tensors:
        d = np.array(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.F32 and d.ndim == 2 and "centroids" not in t.name:
            d = round_bf16(d)
        data.append(d)
        w.add_tensor_info(t.name, d.shape, d.dtype, d.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for d in data:
        w.write_tensor_data(d)
    w.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
