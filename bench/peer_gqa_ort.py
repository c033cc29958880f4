#!/usr/bin/env python3
"""Decode attention against a peer: kvshare vs onnxruntime's
com.microsoft.GroupQueryAttention (CPU execution provider), same inputs, same
run, same thread count.

Both run ORT's past-present share-buffer decode step: one new token (S = 1) at
position T - 1 of a BNSH cache of capacity T (past_key / present_key bound to
the same buffer, so neither op copies the cache). seqlens_k = T - 1, causal.
Each timed call uses the next of `copies` cache pairs spanning --footprint-mib,
so the cache comes from DRAM as in kvshare_bench, not from a last-level cache.

Prints one JSON object per case: median seconds per call of each engine, KV
bytes read per second (T * H * N_kv * 2 * sizeof(dtype) per call) and
speedup = ort_s / kvshare_s. A benchmark, not a test: nothing is asserted
beyond both engines agreeing on the output (rtol = atol = 1e-2 for fp16,
1e-4 for fp32).

Usage: python3 bench/peer_gqa_ort.py [--threads 1 2] [--T 4096 32768]
       [--shapes gemma_n4 gemma_n8 llama] [--dtypes float16 float32]
Needs: pip install . onnx onnxruntime
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
import peers  # noqa: E402  (the ONNX graph builder shared with the peer tests)

SHAPES = {"gemma_n4": (4, 1, 256), "gemma_n8": (8, 1, 256), "llama": (32, 8, 128)}  # N, N_kv, H
_GQA_IN = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]


def ort_session(n, n_kv, dtype, threads):
    from onnx import helper
    node = helper.make_node("GroupQueryAttention", _GQA_IN, ["output", "present_key", "present_value"],
                            domain="com.microsoft", num_heads=n, kv_num_heads=n_kv)
    inputs = {nm: (np.int32 if nm in ("seqlens_k", "total_sequence_length") else dtype) for nm in _GQA_IN}
    return peers.make_session([node], inputs, {nm: dtype for nm in ("output", "present_key", "present_value")},
                              threads=threads)


def run_case(name, t_len, dtype, threads, footprint_mib, seconds):
    import onnxruntime as ort
    import kvshare
    n, n_kv, h = SHAPES[name]
    rng = np.random.default_rng(1234)
    cache_shape = (1, n_kv, t_len, h)
    pair_bytes = 2 * math.prod(cache_shape) * np.dtype(dtype).itemsize
    copies = max(1, math.ceil(footprint_mib * 2**20 / pair_bytes))
    base_k = rng.uniform(-1, 1, cache_shape).astype(dtype)
    base_v = rng.uniform(-1, 1, cache_shape).astype(dtype)
    caches = [(base_k.copy(), base_v.copy()) for _ in range(copies)]
    q = rng.uniform(-1, 1, (1, 1, n * h)).astype(dtype)
    k = rng.uniform(-1, 1, (1, 1, n_kv * h)).astype(dtype)
    v = rng.uniform(-1, 1, (1, 1, n_kv * h)).astype(dtype)
    seqlens_k = np.array([t_len - 1], np.int32)
    total = np.array(t_len, np.int32)

    sess = ort_session(n, n_kv, dtype, threads)
    bindings = []
    for pk, pv in caches:
        io = sess.io_binding()
        ok, ov = ort.OrtValue.ortvalue_from_numpy(pk), ort.OrtValue.ortvalue_from_numpy(pv)
        for nm, arr in (("query", q), ("key", k), ("value", v), ("seqlens_k", seqlens_k),
                        ("total_sequence_length", total)):
            io.bind_cpu_input(nm, arr)
        io.bind_ortvalue_input("past_key", ok)
        io.bind_ortvalue_input("past_value", ov)
        io.bind_output("output")  # first: get_outputs() follows binding order
        io.bind_ortvalue_output("present_key", ok)
        io.bind_ortvalue_output("present_value", ov)
        bindings.append((io, ok, ov))

    def ort_call(i):
        sess.run_with_iobinding(bindings[i][0])

    def kvs_call(i):
        pk, pv = caches[i]
        return kvshare.group_query_attention(q, k, v, pk, pv, seqlens_k, total, num_heads=n, kv_num_heads=n_kv,
                                             present_key=pk, present_value=pv, num_threads=threads).output

    # Both engines agree on the output (same cache state: the new token is written
    # at T - 1 in place by each, identically).
    ort_call(0)
    ours = kvs_call(0)
    theirs = bindings[0][0].get_outputs()[0].numpy()
    tol = 1e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(ours.astype(np.float64), theirs.astype(np.float64), rtol=tol, atol=tol)

    def timed(call):
        times, i = [], 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 5:
            t0 = time.perf_counter()
            call(i)
            times.append(time.perf_counter() - t0)
            i = (i + 1) % copies
        return statistics.median(times)

    # Interleaved halves so that drift on a shared machine hits both alike.
    ort_s, kvs_s = [], []
    for _ in range(2):
        ort_s.append(timed(ort_call))
        kvs_s.append(timed(kvs_call))
    ort_t, kvs_t = statistics.mean(ort_s), statistics.mean(kvs_s)
    return {"case": f"decode/{name}/T:{t_len}/{np.dtype(dtype).name}/threads:{threads}",
            "kvshare_s": kvs_t, "ort_s": ort_t, "speedup": ort_t / kvs_t,
            "kvshare_kv_bytes_per_s": pair_bytes / kvs_t, "ort_kv_bytes_per_s": pair_bytes / ort_t,
            "onnxruntime": ort.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 32768])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--dtypes", nargs="+", default=["float16", "float32"], choices=["float16", "float32"])
    ap.add_argument("--footprint-mib", type=float, default=256.0,
                    help="bytes of cache copies cycled through (0: one copy)")
    ap.add_argument("--seconds", type=float, default=1.0, help="time per engine per half")
    args = ap.parse_args()
    for name in args.shapes:
        for t_len in args.T:
            for dt in args.dtypes:
                for th in args.threads:
                    res = run_case(name, t_len, np.dtype(dt).type, th, args.footprint_mib, args.seconds)
                    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
