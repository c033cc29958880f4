"""Shared helpers of the Python peer suite: optional imports, ONNX graphs run in
onnxruntime (com.microsoft.GroupQueryAttention, ONNX Attention / TensorScatter),
RoPE caches, a plain NumPy attention reference, and the tolerance table.

KVSHARE_REQUIRE_PEERS=1 (set by .ci/run) turns a missing kvshare / onnxruntime /
onnx into an import error instead of a skip, so CI cannot pass by skipping.
"""
from __future__ import annotations

import importlib
import os

import numpy as np

REQUIRE = os.environ.get("KVSHARE_REQUIRE_PEERS") == "1"


def need(module: str):
    """Imports `module`, or skips the calling test module when it is absent
    (fails instead under KVSHARE_REQUIRE_PEERS=1)."""
    if REQUIRE:
        return importlib.import_module(module)
    import pytest  # here, so that bench/peer_gqa_ort.py can import this module without pytest
    return pytest.importorskip(module)


# Tolerances (rtol = atol) per dtype, as in onnxruntime's test_gqa_cpu.py.
TOL = {"float32": 1e-5, "float16": 1e-2}
NP_DTYPE = {"float32": np.float32, "float16": np.float16}


def assert_close(ours, theirs, dtype: str, what: str):
    tol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(theirs, np.float64), rtol=tol, atol=tol,
                               err_msg=what)


# ---------------------------------------------------------------------------
# onnxruntime graphs.

GQA_INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
              "sin_cache", "position_ids", "attention_bias", "head_sink"]
GQA_OUTPUTS = ["output", "present_key", "present_value", "output_qk"]

_sessions: dict = {}


def _tensor_type(dtype):
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def make_session(nodes, inputs: dict, outputs: dict, opset: int = 24, threads: int = 1):
    """An onnxruntime CPU session of a one-graph model. inputs / outputs map names
    to NumPy dtypes; shapes are left dynamic. threads: intra-op threads (inter-op: 1)."""
    import onnxruntime as ort
    from onnx import helper
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, _tensor_type(t), None) for n, t in inputs.items()],
        [helper.make_tensor_value_info(n, _tensor_type(t), None) for n, t in outputs.items()])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_gqa(feeds: dict, attrs: dict, outputs=("output", "present_key", "present_value"), share_buffer=False):
    """Runs com.microsoft.GroupQueryAttention in onnxruntime. `feeds` maps GQA input
    names to arrays (None or missing = absent); `attrs` are the node attributes.
    share_buffer=True binds past_key/past_value and present_key/present_value to
    the same OrtValues (ORT's past-present share-buffer mode, detected by pointer
    equality) and returns the updated buffers as present. Returns a dict."""
    import onnxruntime as ort
    from onnx import helper
    names = [n for n in GQA_INPUTS if feeds.get(n) is not None]
    key = ("gqa", tuple(names), tuple(str(feeds[n].dtype) for n in names), tuple(sorted(attrs.items())),
           tuple(outputs))
    sess = _sessions.get(key)
    if sess is None:
        last_in = max(GQA_INPUTS.index(n) for n in names)
        node_in = [n if n in names else "" for n in GQA_INPUTS[:last_in + 1]]
        last_out = max(GQA_OUTPUTS.index(n) for n in outputs)
        node_out = [n if n in outputs else "" for n in GQA_OUTPUTS[:last_out + 1]]
        node = helper.make_node("GroupQueryAttention", node_in, node_out, domain="com.microsoft", **attrs)
        qdtype = feeds["query"].dtype
        out_types = {n: (feeds["past_key"].dtype if n.startswith("present") and feeds.get("past_key") is not None
                         else qdtype) for n in outputs}
        sess = make_session([node], {n: feeds[n].dtype for n in names}, out_types)
        _sessions[key] = sess
    if not share_buffer:
        res = sess.run(list(outputs), {n: feeds[n] for n in names})
        return dict(zip(outputs, res))
    io = sess.io_binding()
    pk = ort.OrtValue.ortvalue_from_numpy(feeds["past_key"])
    pv = ort.OrtValue.ortvalue_from_numpy(feeds["past_value"])
    for n in names:
        if n == "past_key":
            io.bind_ortvalue_input(n, pk)
        elif n == "past_value":
            io.bind_ortvalue_input(n, pv)
        else:
            io.bind_cpu_input(n, feeds[n])
    for n in outputs:
        if n == "present_key":
            io.bind_ortvalue_output(n, pk)
        elif n == "present_value":
            io.bind_ortvalue_output(n, pv)
        else:
            io.bind_output(n)
    sess.run_with_iobinding(io)
    # Copies: present views the caller's past arrays, which OrtValue does not keep alive.
    return {n: np.array(v.numpy(), copy=True) for n, v in zip(outputs, io.get_outputs())}


# ---------------------------------------------------------------------------
# RoPE and the NumPy reference.

def rope_cache(max_pos: int, rotary_dim: int, dtype, base: float = 10000.0):
    """cos_cache, sin_cache (max_pos, rotary_dim / 2) for angles pos * base^(-2i/R)."""
    inv = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    ang = np.arange(max_pos, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


def apply_rope(x, pos, cos, sin, interleaved: bool):
    """Rotates x (..., H) at integer positions pos (broadcast to x[..., 0]) in
    float64: half split (GPT-NeoX) or interleaved pairs (GPT-J); dims >= R pass."""
    x = np.array(x, dtype=np.float64)
    half = cos.shape[1]
    c = np.asarray(cos, np.float64)[pos]
    s = np.asarray(sin, np.float64)[pos]
    if interleaved:
        i0, i1 = np.arange(0, 2 * half, 2), np.arange(1, 2 * half, 2)
    else:
        i0, i1 = np.arange(half), np.arange(half, 2 * half)
    x0, x1 = x[..., i0].copy(), x[..., i1].copy()
    x[..., i0] = x0 * c - x1 * s
    x[..., i1] = x1 * c + x0 * s
    return x


def reference_attention(q, k, v, kv_len, q_offset, *, causal=True, window=-1, scale=None, softcap=0.0, bias=None,
                        sink=None, valid_q=None):
    """Plain float64 attention. q (B, S, N, H) already rotated; k, v (B, N_kv, T, H)
    with keys at absolute positions 0..T-1; row b sees keys j < kv_len[b], j <= p
    (causal) and p - j < window (window > 0; with causal off also j - p < window, the
    symmetric window of gqa.h), p = q_offset[b] + s. bias (B|1, N|1, S,
    >= T) is added to visible scores; sink (N,) joins the softmax denominator. Queries
    s >= valid_q[b] and queries with no visible key give zeros. Returns (B, S, N, H)."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    v = np.asarray(v, np.float64)
    B, S, N, H = q.shape
    G = N // k.shape[1]
    scale = 1.0 / np.sqrt(H) if not scale else scale
    out = np.zeros((B, S, N, H))
    for b in range(B):
        T = int(kv_len[b])
        kb = np.repeat(k[b, :, :T], G, axis=0)  # (N, T, H)
        vb = np.repeat(v[b, :, :T], G, axis=0)
        x = np.einsum("snh,nth->nst", q[b], kb) * scale
        if softcap > 0:
            x = softcap * np.tanh(x / softcap)
        p = int(q_offset[b]) + np.arange(S)[:, None]
        j = np.arange(T)[None, :]
        vis = np.ones((S, T), bool)
        if causal:
            vis &= j <= p
        if window is not None and window > 0:
            vis &= p - j < window
            if not causal:
                vis &= j - p < window
        if valid_q is not None:
            vis &= np.arange(S)[:, None] < valid_q[b]
        if bias is not None:
            bb = np.asarray(bias, np.float64)[b if bias.shape[0] > 1 else 0]
            x = x + (bb if bias.shape[1] > 1 else np.repeat(bb, N, axis=0))[:, :, :T]
        x = np.where(vis[None], x, -np.inf)
        m = x.max(axis=-1, keepdims=True)
        if sink is not None:
            m = np.maximum(m, np.asarray(sink, np.float64)[:, None, None])
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(x - m)
        den = e.sum(axis=-1, keepdims=True)
        if sink is not None:
            den = den + np.exp(np.asarray(sink, np.float64)[:, None, None] - m)
        pr = np.where(den > 0, e / np.where(den > 0, den, 1), 0.0)
        pr = np.where(vis.any(axis=-1)[None, :, None], pr, 0.0)
        out[b] = np.einsum("nst,nth->snh", pr, vb)
    return out
