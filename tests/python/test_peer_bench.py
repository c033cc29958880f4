"""Smoke test of bench/peer_gqa_ort.py (the decode benchmark against onnxruntime's
GroupQueryAttention): at small T every shape runs in both engines in ORT's
share-buffer decode mode, their outputs agree (the script asserts it) and the
timings it reports are positive. The timings themselves are not checked."""
import importlib.util
import pathlib

import pytest

from peers import need

need("kvshare")
need("onnxruntime")
need("onnx")

_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peer_gqa_ort.py"
_spec = importlib.util.spec_from_file_location("peer_gqa_ort", _SCRIPT)
peer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer)


@pytest.mark.parametrize("shape", sorted(peer.SHAPES))
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_peer_bench_case_runs_and_agrees(shape, dtype):
    import numpy as np
    res = peer.run_case(shape, 300, np.dtype(dtype).type, threads=2, footprint_mib=0.0, seconds=0.01)
    assert res["case"] == f"decode/{shape}/T:300/{dtype}/threads:2"
    for key in ("kvshare_s", "ort_s", "speedup", "kvshare_kv_bytes_per_s", "ort_kv_bytes_per_s"):
        assert res[key] > 0, key
