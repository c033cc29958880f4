"""kvshare: GroupQueryAttention, KV caches and a small LLM runtime (C++20), from Python.

Areas:
  kvshare.group_query_attention / detect_kv_mode  -- the op on NumPy arrays (op.py)
  kvshare.Error                                   -- raised on bad input (a ValueError)

dtypes: float32, float16, and bfloat16 as ml_dtypes.bfloat16 arrays or as uint16 arrays
holding bf16 bits together with bfloat16=True; index inputs are int32 / int64.
"""
from ._core import Error
from .op import GqaResult, detect_kv_mode, group_query_attention

__all__ = ["Error", "GqaResult", "detect_kv_mode", "group_query_attention"]
