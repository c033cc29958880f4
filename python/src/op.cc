// kvshare._core.gqa: the GroupQueryAttention op on NumPy arrays. The public,
// documented entry point is kvshare.group_query_attention (python/kvshare/op.py),
// which allocates the outputs and calls this.
#include <set>
#include <string>

#include "arrays.h"
#include "bind.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::python {
namespace {

const std::set<std::string> kInputs = {"query",
                                       "key",
                                       "value",
                                       "past_key",
                                       "past_value",
                                       "seqlens_k",
                                       "total_sequence_length",
                                       "cos_cache",
                                       "sin_cache",
                                       "position_ids",
                                       "attention_bias",
                                       "head_sink",
                                       "write_indices",
                                       "nonpad_kv_seqlen",
                                       "bidirectional_spans"};
const std::set<std::string> kOutputs = {"output", "present_key", "present_value", "output_qk"};

template <typename T>
T Get(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) ? d[key].cast<T>() : fallback;
}

GqaAttributes ParseAttributes(const py::dict& d) {
  static const std::set<std::string> known = {
      "num_heads",   "kv_num_heads",       "causal",         "scale",     "softcap",       "local_window_size",
      "do_rotary",   "rotary_interleaved", "smooth_softmax", "qk_output", "kv_block_size", "num_kv_blocks",
      "scatter_mode"};
  for (const auto& kv : d) {
    const std::string k = py::str(kv.first);
    if (!known.count(k)) throw Error("unknown GroupQueryAttention attribute '" + k + "'");
  }
  GqaAttributes a;
  a.num_heads = Get<int>(d, "num_heads", 0);
  a.kv_num_heads = Get<int>(d, "kv_num_heads", 0);
  a.causal = Get<int>(d, "causal", a.causal);
  a.scale = Get<float>(d, "scale", a.scale);
  a.softcap = Get<float>(d, "softcap", a.softcap);
  a.local_window_size = Get<int>(d, "local_window_size", a.local_window_size);
  a.do_rotary = Get<int>(d, "do_rotary", a.do_rotary);
  a.rotary_interleaved = Get<int>(d, "rotary_interleaved", a.rotary_interleaved);
  a.smooth_softmax = Get<int>(d, "smooth_softmax", a.smooth_softmax);
  a.qk_output = Get<int>(d, "qk_output", a.qk_output);
  a.kv_block_size = Get<int>(d, "kv_block_size", a.kv_block_size);
  a.num_kv_blocks = Get<int>(d, "num_kv_blocks", a.num_kv_blocks);
  const std::string mode = Get<std::string>(d, "scatter_mode", "linear");
  if (mode == "linear") {
    a.scatter_mode = GqaAttributes::ScatterMode::kLinear;
  } else if (mode == "circular") {
    a.scatter_mode = GqaAttributes::ScatterMode::kCircular;
  } else {
    throw Error("scatter_mode must be 'linear' or 'circular', got '" + mode + "'");
  }
  return a;
}

GqaKernel ParseKernel(const std::string& k) {
  if (k == "auto") return GqaKernel::kAuto;
  if (k == "reference") return GqaKernel::kReference;
  if (k == "optimized") return GqaKernel::kOptimized;
  throw Error("kernel must be 'auto', 'reference' or 'optimized', got '" + k + "'");
}

// Runs (or, with detect_only, only validates and classifies) one op call.
std::string Gqa(const py::dict& inputs, const py::dict& outputs, const py::dict& attributes, bool bfloat16,
                const std::string& kernel, int num_threads, bool detect_only) {
  for (const auto& kv : inputs) {
    if (!kInputs.count(py::str(kv.first)))
      throw Error("unknown GroupQueryAttention input '" + std::string(py::str(kv.first)) + "'");
  }
  for (const auto& kv : outputs) {
    if (!kOutputs.count(py::str(kv.first)))
      throw Error("unknown GroupQueryAttention output '" + std::string(py::str(kv.first)) + "'");
  }
  const GqaAttributes attrs = ParseAttributes(attributes);
  ArrayKeeper keep;
  auto in = [&](const char* name) -> std::optional<ConstTensorView> {
    if (!inputs.contains(name) || inputs[name].is_none()) return std::nullopt;
    return keep.Const(inputs[name], name, bfloat16);
  };
  auto out = [&](const char* name) -> std::optional<TensorView> {
    if (!outputs.contains(name) || outputs[name].is_none()) return std::nullopt;
    return Mutable(outputs[name], name, bfloat16);
  };
  GqaInputs gi;
  const auto query = in("query");
  if (!query) throw Error("GroupQueryAttention: Input 'query' is required");
  gi.query = *query;
  gi.key = in("key");
  gi.value = in("value");
  gi.past_key = in("past_key");
  gi.past_value = in("past_value");
  gi.seqlens_k = in("seqlens_k");
  gi.total_sequence_length = in("total_sequence_length");
  gi.cos_cache = in("cos_cache");
  gi.sin_cache = in("sin_cache");
  gi.position_ids = in("position_ids");
  gi.attention_bias = in("attention_bias");
  gi.head_sink = in("head_sink");
  gi.write_indices = in("write_indices");
  gi.nonpad_kv_seqlen = in("nonpad_kv_seqlen");
  gi.bidirectional_spans = in("bidirectional_spans");
  GqaOutputs go;
  const auto output = out("output");
  if (!output) throw Error("GroupQueryAttention: Output 'output' is required");
  go.output = *output;
  go.present_key = out("present_key");
  go.present_value = out("present_value");
  go.output_qk = out("output_qk");
  const GqaKernel k = ParseKernel(kernel);
  ThreadPool* pool = CallPool(num_threads);

  py::gil_scoped_release release;
  if (detect_only) return KvModeName(DetectKvMode(attrs, gi, go));
  GroupQueryAttention(attrs, gi, go, GqaRunOptions{.kernel = k, .pool = pool});
  return "";
}

}  // namespace

void BindOp(py::module_& m) {
  m.def("gqa", &Gqa, py::arg("inputs"), py::arg("outputs"), py::arg("attributes"), py::arg("bfloat16") = false,
        py::arg("kernel") = "auto", py::arg("num_threads") = 1, py::arg("detect_only") = false,
        "Low-level GroupQueryAttention: dicts of input arrays, output arrays (written in place) and attributes. "
        "Returns the KV mode name with detect_only, else an empty string. Use kvshare.group_query_attention instead.");
}

}  // namespace kvshare::python
