"""kvshare: GroupQueryAttention, KV caches and a small LLM runtime (C++20), from Python.

Areas:
  group_query_attention, detect_kv_mode      the op on NumPy arrays (op.py)
  KvCache, LayerSpec, ModelKvSpec, ...       static KV caches, rings, KV-shared layers
  Model                                      GGUF models and streaming text generation
  Assistant                                  Gemma 4's assistant drafter (Model.generate(draft=...))
  Error                                      raised on bad input (a ValueError subclass)

dtypes: float32, float16, and bfloat16 as ml_dtypes.bfloat16 arrays or as uint16 arrays
holding bf16 bits together with bfloat16=True; index inputs are int32 / int64.
"""
from importlib import metadata as _metadata

from ._core import (Assistant, Error, GenerationStream, KvCache, KvMemoryReport, LayerMemory, LayerPlan, LayerPlanEntry,
                    LayerSpec, Model, ModelKvSpec, build_layer_plan, estimate_kv_memory)
from .op import GqaResult, detect_kv_mode, group_query_attention

try:
    __version__ = _metadata.version("kvshare")
except _metadata.PackageNotFoundError:  # a build tree on PYTHONPATH
    __version__ = "0+build"

__all__ = [
    "Assistant", "Error", "GenerationStream", "GqaResult", "KvCache", "KvMemoryReport", "LayerMemory", "LayerPlan",
    "LayerPlanEntry", "LayerSpec", "Model", "ModelKvSpec", "build_layer_plan", "detect_kv_mode",
    "estimate_kv_memory", "group_query_attention",
]
