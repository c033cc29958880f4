// kvshare._core cache bindings: layer specs and plans, KvCache (reserve /
// commit / rewind / reset per row), memory reports, zero-copy NumPy views of a
// layer's buffers, and AttendLayer (the op in static scatter mode on the cache).
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "arrays.h"
#include "bind.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::python {
namespace {

AttentionType ParseType(const std::string& s) {
  if (s == "full") return AttentionType::kFull;
  if (s == "sliding") return AttentionType::kSliding;
  throw Error("attention type must be 'full' or 'sliding', got '" + s + "'");
}

KvLayout ParseLayout(const std::string& s) {
  if (s == "bnsh") return KvLayout::kBnsh;
  if (s == "token_major") return KvLayout::kTokenMajor;
  throw Error("layout must be 'bnsh' or 'token_major', got '" + s + "'");
}

KvCacheOptions MakeOptions(int max_batch, std::int64_t max_seq, int max_step, const std::string& dtype,
                           bool exact_rewind, const std::string& layout) {
  return KvCacheOptions{.max_batch = max_batch,
                        .max_seq = max_seq,
                        .max_step = max_step,
                        .dtype = KvCacheDTypeFromName(dtype, "dtype"),
                        .exact_rewind = exact_rewind,
                        .layout = ParseLayout(layout)};
}

// A NumPy array over cache memory, keeping the cache alive through `owner`.
// q8_0 buffers are their raw blocks: uint8 with a last dim of H / 32 * 34 bytes.
py::array ViewOf(const TensorView& t, py::handle owner) {
  std::vector<py::ssize_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.rank);
  if (t.dtype == DType::kQ8_0) shape.back() = static_cast<py::ssize_t>(DTypeBytes(t.dtype, shape.back()));
  return py::array(NumpyDType(t.dtype), shape, t.data, owner);
}

py::array IndexVector(const ConstTensorView& t) {
  const auto* p = t.As<std::int64_t>();
  return py::array_t<std::int64_t>(t.shape[0], p);  // a copy
}

const char* kSpecDoc = R"(One attention layer's KV shape.

type: "full" or "sliding"; window: W keys including the current one (> 0 for
sliding, ignored for full); kv_heads: N_kv > 0; head_size: H > 0, a multiple of 8
(16 with RoPE); rope_base: must match the source's for a KV-shared layer.)";

const char* kCacheDoc = R"(Static KV cache of one set of sequences (up to max_batch rows).

KvCache(spec, *, max_batch=1, max_seq, max_step=1, dtype="float32",
        exact_rewind=False, layout="bnsh")

spec: ModelKvSpec (layers + num_kv_shared_layers; the last n layers borrow the KV of
the last earlier layer of the same type, HF Gemma 3n / Gemma 4 rule). Full layers get
max_seq positions per row; sliding layers a ring of W + max_step - 1 positions unless
exact_rewind. Buffers are zero-filled, allocated only for owning layers, laid out
BNSH (max_batch, N_kv, C, H) or token-major (max_batch, C, N_kv*H). dtype: "float32",
"float16", "bfloat16" (or "f32", "f16", "bf16") or "q8_0" (32 int8 values along H
per fp16 scale; every head_size a multiple of 32).

One step: w = reserve(row, n_new) for each row taking part; attend(layer, ...) for
every layer in order; commit_all(). Errors raise kvshare.Error (a ValueError) and leave
the cache unchanged.)";

}  // namespace

void BindCache(py::module_& m) {
  py::class_<LayerSpec>(m, "LayerSpec", kSpecDoc)
      .def(py::init([](const std::string& type, int window, int kv_heads, int head_size, float rope_base) {
             return LayerSpec{ParseType(type), window, kv_heads, head_size, rope_base};
           }),
           py::kw_only(), py::arg("type") = "full", py::arg("window") = 0, py::arg("kv_heads"), py::arg("head_size"),
           py::arg("rope_base") = 10000.f)
      .def_property_readonly("type", [](const LayerSpec& s) { return std::string(AttentionTypeName(s.type)); })
      .def_readonly("window", &LayerSpec::window)
      .def_readonly("kv_heads", &LayerSpec::kv_heads)
      .def_readonly("head_size", &LayerSpec::head_size)
      .def_readonly("rope_base", &LayerSpec::rope_base)
      .def("__repr__", [](const LayerSpec& s) {
        return "LayerSpec(type='" + std::string(AttentionTypeName(s.type)) + "', window=" + std::to_string(s.window) +
               ", kv_heads=" + std::to_string(s.kv_heads) + ", head_size=" + std::to_string(s.head_size) + ")";
      });

  py::class_<ModelKvSpec>(m, "ModelKvSpec",
                          "The attention layers of a model and how many trailing layers are KV-shared.")
      .def(py::init([](std::vector<LayerSpec> layers, int shared) {
             return ModelKvSpec{std::move(layers), shared};
           }),
           py::arg("layers"), py::arg("num_kv_shared_layers") = 0)
      .def_readonly("layers", &ModelKvSpec::layers)
      .def_readonly("num_kv_shared_layers", &ModelKvSpec::num_kv_shared_layers);

  py::class_<LayerPlanEntry>(m, "LayerPlanEntry", "Whether a layer owns a cache, and whose KV it reads.")
      .def_readonly("owns_cache", &LayerPlanEntry::owns_cache)
      .def_readonly("source_layer", &LayerPlanEntry::source_layer)
      .def_readonly("cache_slot", &LayerPlanEntry::cache_slot);
  py::class_<LayerPlan>(m, "LayerPlan", "Per-layer plan built from a ModelKvSpec.")
      .def_readonly("layers", &LayerPlan::layers)
      .def_readonly("num_slots", &LayerPlan::num_slots)
      .def_readonly("first_shared", &LayerPlan::first_shared)
      .def("__str__", &LayerPlan::ToString);
  m.def("build_layer_plan", &BuildLayerPlan, py::arg("spec"),
        "The layer plan of a spec (raises kvshare.Error on an invalid spec).");

  py::class_<LayerMemory>(m, "LayerMemory", "Bytes of one layer's K+V storage.")
      .def_readonly("layer", &LayerMemory::layer)
      .def_property_readonly("type", [](const LayerMemory& l) { return std::string(AttentionTypeName(l.type)); })
      .def_readonly("owns_cache", &LayerMemory::owns_cache)
      .def_readonly("source_layer", &LayerMemory::source_layer)
      .def_readonly("capacity", &LayerMemory::capacity)
      .def_readonly("ring", &LayerMemory::ring)
      .def_readonly("bytes", &LayerMemory::bytes)
      .def_readonly("bytes_if_owned", &LayerMemory::bytes_if_owned)
      .def_readonly("bytes_full_length", &LayerMemory::bytes_full_length);
  py::class_<KvMemoryReport>(m, "KvMemoryReport", "K+V bytes per layer and the savings of sharing and rings.")
      .def_readonly("layers", &KvMemoryReport::layers)
      .def_readonly("total_bytes", &KvMemoryReport::total_bytes)
      .def_readonly("bytes_without_sharing", &KvMemoryReport::bytes_without_sharing)
      .def_readonly("saved_by_sharing", &KvMemoryReport::saved_by_sharing)
      .def_readonly("saved_by_rings", &KvMemoryReport::saved_by_rings)
      .def("__str__", &KvMemoryReport::ToString);
  m.def(
      "estimate_kv_memory",
      [](const ModelKvSpec& spec, int max_batch, std::int64_t max_seq, int max_step, const std::string& dtype,
         bool exact_rewind, const std::string& layout) {
        return EstimateKvMemory(spec, MakeOptions(max_batch, max_seq, max_step, dtype, exact_rewind, layout));
      },
      py::arg("spec"), py::kw_only(), py::arg("max_batch") = 1, py::arg("max_seq"), py::arg("max_step") = 1,
      py::arg("dtype") = "float32", py::arg("exact_rewind") = false, py::arg("layout") = "bnsh",
      "Memory report of a KvCache with these options, without allocating it.");

  py::class_<KvCache>(m, "KvCache", kCacheDoc)
      .def(py::init([](const ModelKvSpec& spec, int max_batch, std::int64_t max_seq, int max_step,
                       const std::string& dtype, bool exact_rewind, const std::string& layout) {
             return std::make_unique<KvCache>(spec,
                                              MakeOptions(max_batch, max_seq, max_step, dtype, exact_rewind, layout));
           }),
           py::arg("spec"), py::kw_only(), py::arg("max_batch") = 1, py::arg("max_seq"), py::arg("max_step") = 1,
           py::arg("dtype") = "float32", py::arg("exact_rewind") = false, py::arg("layout") = "bnsh")
      .def("reserve", &KvCache::Reserve, py::arg("row"), py::arg("n_new"),
           "Reserves n_new positions of row; returns the write index (= length(row)).")
      .def("commit", &KvCache::Commit, py::arg("row"), "length(row) += the reserved count.")
      .def("commit_all", &KvCache::CommitAll, "commit() every row.")
      .def("rewind", &KvCache::Rewind, py::arg("row"), py::arg("length"),
           "Drops positions >= length of row (raises when a ring already overwrote positions it needs).")
      .def("reset", &KvCache::Reset, py::arg("row"), "Empties row; other rows are untouched.")
      .def("length", &KvCache::Length, py::arg("row"), "Tokens cached for row.")
      .def("reserved", &KvCache::Reserved, py::arg("row"), "Uncommitted reserved positions of row.")
      .def("oldest_rewind_length", &KvCache::OldestRewindLength, py::arg("row"),
           "Smallest length > 0 that rewind(row, ...) accepts now.")
      .def_property_readonly(
          "write_indices", [](const KvCache& c) { return IndexVector(c.WriteIndices()); },
          "int64 (max_batch,): length per row (a copy).")
      .def_property_readonly(
          "nonpad_kv_seqlen", [](const KvCache& c) { return IndexVector(c.NonpadKvSeqlen()); },
          "int64 (max_batch,): length + reserved per row (a copy).")
      .def_property_readonly("plan", &KvCache::Plan)
      .def("memory", &KvCache::Memory, "KvMemoryReport of the allocated buffers.")
      .def(
          "layer_buffers",
          [](py::object self, int layer, int batch) {
            KvCache& c = self.cast<KvCache&>();
            const LayerKvView v = c.Layer(layer, batch);
            py::dict d;
            d["key"] = ViewOf(v.key, self);
            d["value"] = ViewOf(v.value, self);
            d["source_layer"] = v.source_layer;
            d["shared"] = v.shared;
            d["capacity"] = v.capacity;
            d["window"] = v.window;
            d["circular"] = v.scatter_mode == GqaAttributes::ScatterMode::kCircular;
            return d;
          },
          py::arg("layer"), py::arg("batch") = 0,
          "Zero-copy NumPy views of layer's K and V buffers (its source's for a shared layer) for the first batch "
          "rows (0 = max_batch): BNSH (B, N_kv, C, H) or token-major (B, C, N_kv*H); bfloat16 as uint16 bits, "
          "q8_0 as its raw blocks (uint8, last dim H / 32 * 34: per 32 values fp16 scale bits then 32 int8). "
          "Plus source_layer, shared, capacity, window, circular.")
      .def(
          "attend",
          [](KvCache& c, int layer, const py::object& query, const py::object& key, const py::object& value,
             const py::object& cos_cache, const py::object& sin_cache, const py::object& head_sink, int num_heads,
             float scale, float softcap, int do_rotary, int rotary_interleaved, int smooth_softmax, bool bfloat16,
             int num_threads) {
            ArrayKeeper keep;
            auto opt = [&](const py::object& o, const char* name) -> std::optional<ConstTensorView> {
              if (o.is_none()) return std::nullopt;
              return keep.Const(o, name, bfloat16);
            };
            LayerAttendArgs a;
            a.query = keep.Const(query, "query", bfloat16);
            a.key = opt(key, "key");
            a.value = opt(value, "value");
            a.cos_cache = opt(cos_cache, "cos_cache");
            a.sin_cache = opt(sin_cache, "sin_cache");
            a.head_sink = opt(head_sink, "head_sink");
            a.attrs.num_heads = num_heads;
            a.attrs.scale = scale;
            a.attrs.softcap = softcap;
            a.attrs.do_rotary = do_rotary;
            a.attrs.rotary_interleaved = rotary_interleaved;
            a.attrs.smooth_softmax = smooth_softmax;
            const py::array q = py::reinterpret_borrow<py::array>(query);
            if (q.ndim() != 3) throw Error("query must be (B, S, num_heads * head_size)");
            py::array out(q.dtype(), std::vector<py::ssize_t>{q.shape(0), q.shape(1), q.shape(2)});
            a.output = Mutable(out, "output", bfloat16);
            a.run.pool = CallPool(num_threads);
            {
              py::gil_scoped_release release;
              AttendLayer(c, layer, a);
            }
            return out;
          },
          py::arg("layer"), py::arg("query"), py::arg("key") = py::none(), py::arg("value") = py::none(), py::kw_only(),
          py::arg("cos_cache") = py::none(), py::arg("sin_cache") = py::none(), py::arg("head_sink") = py::none(),
          py::arg("num_heads"), py::arg("scale") = 0.0f, py::arg("softcap") = 0.0f, py::arg("do_rotary") = 0,
          py::arg("rotary_interleaved") = 0, py::arg("smooth_softmax") = -1, py::arg("bfloat16") = false,
          py::arg("num_threads") = 1,
          R"(Runs GroupQueryAttention for `layer` in static scatter mode on the cache buffers.

query (B, S, num_heads*H) with B <= max_batch, S <= max_step; key/value (B, S, N_kv*H)
for owning layers, None for KV-shared layers (read-only, Q-only RoPE). RoPE positions
are the reserved write indices + s. Returns output (B, S, num_heads*H) in the query's
dtype. The GIL is released while it runs.)");
}

}  // namespace kvshare::python
