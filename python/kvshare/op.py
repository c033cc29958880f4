"""kvshare.group_query_attention: the GroupQueryAttention op on NumPy arrays.

The op follows ONNX Runtime's ``com.microsoft.GroupQueryAttention`` plus
kvshare's extensions; ``include/kvshare/attention/gqa.h`` is the full spec.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from . import _core

__all__ = ["GqaResult", "group_query_attention", "detect_kv_mode"]


class GqaResult(NamedTuple):
    """Outputs of :func:`group_query_attention` (absent outputs are ``None``)."""

    output: np.ndarray
    present_key: Optional[np.ndarray]
    present_value: Optional[np.ndarray]
    output_qk: Optional[np.ndarray]


_INT32_INPUTS = ("seqlens_k", "total_sequence_length")
_INT64_INPUTS = ("position_ids", "write_indices", "nonpad_kv_seqlen")


def _as_index_array(x, dtype):
    """Python ints / lists become arrays; ndarrays pass through unchanged (the
    op checks their dtype)."""
    if x is None or isinstance(x, np.ndarray):
        return x
    return np.asarray(x, dtype=dtype)


def _as_spans(x):
    """bidirectional_spans: an ndarray passes through unchanged (the op checks
    it); one list per row of (start, end) pairs becomes int64 (B, K, 2), each
    row padded with (0, 0) up to the longest."""
    if x is None or isinstance(x, np.ndarray):
        return x
    rows = [list(r) for r in x]
    k = max((len(r) for r in rows), default=0)
    out = np.zeros((len(rows), k, 2), dtype=np.int64)
    for b, r in enumerate(rows):
        if r:
            out[b, :len(r)] = np.asarray(r, dtype=np.int64).reshape(len(r), 2)
    return out


def _head_size(query, key, past_key, present_key, write_indices, n, n_kv):
    d = query.shape[-1]
    packed = d // (n + 2 * n_kv)
    if write_indices is not None:
        if key is not None:
            return d // n
        hc = 0
        if present_key is not None and present_key.ndim == 4:
            hc = present_key.shape[3]
        elif present_key is not None and present_key.ndim == 3 and present_key.shape[2] % n_kv == 0:
            hc = present_key.shape[2] // n_kv
        return hc if hc > 0 and d == n * hc else packed
    if key is not None:
        return d // n
    if past_key is not None and past_key.ndim == 4:
        hp = past_key.shape[3]
        return hp if hp > 0 and d == n * hp else packed
    return packed


def _present_shape(query, key, past_key, total_sequence_length, n, n_kv, h):
    """BNSH shape of the present outputs for the mode the inputs select, or None
    when the op takes no freshly allocated present (static scatter mode)."""
    b, s = query.shape[0], query.shape[1]
    past_len = past_key.shape[2] if past_key is not None and past_key.ndim == 4 else 0
    if key is not None and key.ndim == 3:
        if key.shape[1] == 0:  # borrowed, empty K/V
            return tuple(past_key.shape) if past_key is not None else None
        if past_key is None and key.shape[1] != s:  # external K/V
            return (b, n_kv, key.shape[1], h)
    elif key is None and past_key is not None and past_key.ndim == 4 and query.shape[-1] == n * past_key.shape[3]:
        return tuple(past_key.shape)  # borrowed, omitted K/V
    tsl = np.asarray(total_sequence_length).reshape(-1)
    tsl = int(tsl[0]) if tsl.size >= 1 else 0
    return (b, n_kv, max(tsl, past_len), h)


def _prepare(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, cos_cache, sin_cache,
             position_ids, attention_bias, head_sink, write_indices, nonpad_kv_seqlen, bidirectional_spans, attrs,
             present_key, present_value, present, output_qk):
    inputs = dict(query=query, key=key, value=value, past_key=past_key, past_value=past_value,
                  seqlens_k=seqlens_k, total_sequence_length=total_sequence_length, cos_cache=cos_cache,
                  sin_cache=sin_cache, position_ids=position_ids, attention_bias=attention_bias,
                  head_sink=head_sink, write_indices=write_indices, nonpad_kv_seqlen=nonpad_kv_seqlen,
                  bidirectional_spans=_as_spans(bidirectional_spans))
    for name in _INT32_INPUTS:
        inputs[name] = _as_index_array(inputs[name], np.int32)
    for name in _INT64_INPUTS:
        inputs[name] = _as_index_array(inputs[name], np.int64)
    n, n_kv = attrs["num_heads"], attrs["kv_num_heads"]
    outputs = {"present_key": present_key, "present_value": present_value, "output_qk": output_qk}
    # Output buffers. Shapes follow the spec for valid inputs; for invalid ones
    # a placeholder is allocated and the op reports what is wrong with the inputs.
    try:
        ok = isinstance(query, np.ndarray) and query.ndim == 3 and n > 0 and n_kv > 0
        h = _head_size(query, key, past_key, present_key, write_indices, n, n_kv) if ok else 0
        ok = ok and h > 0
    except (TypeError, AttributeError, IndexError, ValueError, ZeroDivisionError):
        ok, h = False, 0
    qdtype = query.dtype if isinstance(query, np.ndarray) else np.float32
    outputs["output"] = _zeros((query.shape[0], query.shape[1], n * h) if ok else (0,), qdtype, "output", inputs)
    if present and present_key is None and present_value is None and write_indices is None and ok:
        try:
            shape = _present_shape(query, key, past_key, inputs["total_sequence_length"], n, n_kv, h)
        except (TypeError, AttributeError, IndexError, ValueError, ZeroDivisionError, OverflowError):
            shape = None
        if shape is not None:
            cdtype = past_key.dtype if isinstance(past_key, np.ndarray) else qdtype
            outputs["present_key"] = _zeros(shape, cdtype, "present_key", inputs)
            outputs["present_value"] = _zeros(shape, cdtype, "present_value", inputs)
    if attrs.get("qk_output", 0) and output_qk is None and ok:
        # An absent or malformed total_sequence_length leaves the buffer out: the
        # op then reports the input itself (not a TypeError from here).
        try:
            if write_indices is not None and present_key is not None and present_key.ndim in (3, 4):
                cols = present_key.shape[1] if present_key.ndim == 3 else present_key.shape[2]
            else:
                tsl = np.asarray(inputs["total_sequence_length"]).reshape(-1)
                cols = int(tsl[0]) if tsl.size >= 1 else 0
        except (TypeError, AttributeError, IndexError, ValueError, OverflowError):
            cols = None
        if cols is not None:
            outputs["output_qk"] = _zeros((query.shape[0], n, query.shape[1], max(cols, 0)), qdtype, "output_qk",
                                          inputs)
    return inputs, outputs


def _zeros(shape, dtype, what, inputs):
    """An output buffer; one too large to allocate (a huge total_sequence_length,
    say) raises kvshare.Error naming the output and the inputs that size it,
    not NumPy's MemoryError."""
    try:
        return np.zeros(shape, dtype=dtype)
    except (MemoryError, ValueError) as e:
        tsl = inputs.get("total_sequence_length")
        raise _core.Error(f"GroupQueryAttention: cannot allocate output '{what}' of shape {tuple(shape)} "
                          f"({np.dtype(dtype).name}): {e}. Its shape follows from query, past_key and "
                          f"total_sequence_length (= {None if tsl is None else np.asarray(tsl).tolist()}, the batch's "
                          f"total KV length: max(seqlens_k) + 1 or the past + new length)") from None


def group_query_attention(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, write_indices=None, nonpad_kv_seqlen=None,
                          bidirectional_spans=None, *, num_heads, kv_num_heads, causal=1, scale=0.0, softcap=0.0,
                          local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1, qk_output=0,
                          kv_block_size=0, num_kv_blocks=0, scatter_mode="linear", present_key=None,
                          present_value=None, present=True, output_qk=None, bfloat16=False, kernel="auto",
                          num_threads=1):
    """GroupQueryAttention (ONNX Runtime ``com.microsoft.GroupQueryAttention`` semantics
    plus kvshare's KV modes). The C++ header ``include/kvshare/attention/gqa.h`` is the spec.

    Terms: B batch, S new tokens, N = num_heads, N_kv = kv_num_heads, H head size,
    T total KV length. T is the float dtype of ``query`` (float32, float16, or
    bfloat16: an ``ml_dtypes.bfloat16`` array, or a ``uint16`` array holding bf16
    bits with ``bfloat16=True``; outputs then come back the same way).

    Inputs (``None`` = absent):
      query:  (B, S, N*H) T, or packed QKV (B, S, (N + 2*N_kv)*H) when key/value are absent.
      key, value: (B, S, N_kv*H) T. (B, 0, N_kv*H) = borrowed empty K/V (past holds the
          whole KV); (B, T_kv, N_kv*H) with T_kv != S and no past = external K/V.
      past_key, past_value: BNSH (B, N_kv, P, H), float dtype of the cache.
      seqlens_k: int32 (B,) = valid total length - 1 per row (lists are converted).
      total_sequence_length: int32 scalar or (1,) = max total length (ints are converted).
      cos_cache, sin_cache: (max_pos, R/2) float, with do_rotary=1.
      position_ids: int64 (B, S).
      attention_bias: (B|1, N|1, S, total_sequence_length) float, added to visible scores.
      head_sink: (N,) float, per-head sink logit in the softmax denominator.
      write_indices, nonpad_kv_seqlen: int64 (B,) = static scatter mode; the cache is then
          passed as present_key/present_value, 3-D (B, C, N_kv*H) or BNSH (B, N_kv, C, H),
          and written in place.
      bidirectional_spans: int64 (B, K, 2), per row K pairs [start, end) of absolute positions,
          sorted and disjoint, each end <= the row's key count, then (0, 0) padding; or one list
          of (start, end) pairs per row (padded here). A query inside a span also sees the later
          keys of its span (image soft tokens, Gemma 3 / 4); needs causal=1; CPU only.

    Attributes: as the ONNX op (num_heads, kv_num_heads, causal, scale, softcap,
    local_window_size, do_rotary, rotary_interleaved, smooth_softmax, qk_output) plus
    kv_block_size / num_kv_blocks (blocked online softmax) and scatter_mode
    ("linear" or "circular").

    Outputs:
      present_key, present_value: pass writable C-contiguous arrays to choose the buffers
          (pass the past arrays themselves for ORT's share-buffer mode: written in place).
          Otherwise, with present=True they are allocated: BNSH (B, N_kv, max(TSL, P), H)
          when appending, the past's shape in the borrowed modes, (B, N_kv, T_kv, H) for
          external K/V; present=False omits them (the op then writes no cache).
      output_qk: with qk_output = 1 (scores) or 2 (probabilities), (B, N, S, TSL) in T
          (cache capacity C columns in scatter mode); pass a float32 array to get float32.

    Execution: kernel "auto" | "optimized" | "reference" (plain loops, double
    accumulation); num_threads >= 1. The GIL is released while the op runs.

    Returns:
      GqaResult(output (B, S, N*H) T, present_key, present_value, output_qk).

    Raises:
      kvshare.Error (a ValueError) with the C++ message on any invalid input; nothing is
      written then.
    """
    attrs = dict(num_heads=num_heads, kv_num_heads=kv_num_heads, causal=causal, scale=scale, softcap=softcap,
                 local_window_size=local_window_size, do_rotary=do_rotary, rotary_interleaved=rotary_interleaved,
                 smooth_softmax=smooth_softmax, qk_output=qk_output, kv_block_size=kv_block_size,
                 num_kv_blocks=num_kv_blocks, scatter_mode=scatter_mode)
    inputs, outputs = _prepare(query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
                               cos_cache, sin_cache, position_ids, attention_bias, head_sink, write_indices,
                               nonpad_kv_seqlen, bidirectional_spans, attrs, present_key, present_value, present,
                               output_qk)
    _core.gqa(inputs, outputs, attrs, bfloat16=bfloat16, kernel=kernel, num_threads=num_threads)
    return GqaResult(outputs["output"], outputs["present_key"], outputs["present_value"], outputs["output_qk"])


def detect_kv_mode(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                   total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                   attention_bias=None, head_sink=None, write_indices=None, nonpad_kv_seqlen=None,
                   bidirectional_spans=None, *, num_heads, kv_num_heads, present_key=None, present_value=None,
                   present=True, output_qk=None, bfloat16=False, **attributes):
    """The KV-source mode these arguments select in :func:`group_query_attention`:
    "append", "share_buffer", "borrowed_empty_kv", "borrowed_omitted_kv",
    "external_kv" or "static_scatter". Validates like the op (raises kvshare.Error)
    and writes nothing."""
    attrs = dict(num_heads=num_heads, kv_num_heads=kv_num_heads, **attributes)
    inputs, outputs = _prepare(query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
                               cos_cache, sin_cache, position_ids, attention_bias, head_sink, write_indices,
                               nonpad_kv_seqlen, bidirectional_spans, attrs, present_key, present_value, present,
                               output_qk)
    return _core.gqa(inputs, outputs, attrs, bfloat16=bfloat16, detect_only=True)
