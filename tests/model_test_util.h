// Test helpers of the model tests: logits of a Forward call as a vector, the
// message of a kvshare::Error, and edits of a GGUF file description (a
// tensor dropped, a metadata key replaced) for the bad-file tests.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "kvshare/common/error.h"
#include "kvshare/model/model.h"

namespace kvshare::testing {

inline std::vector<float> Logits(const Model& m, ModelState& st, const std::vector<std::int32_t>& t,
                                 std::int64_t num_logits, ThreadPool* pool = nullptr) {
  std::span<const float> l = m.Forward(st, t, pool, {.num_logits = num_logits});
  return {l.begin(), l.end()};
}

// The message of the kvshare::Error f throws ("(no error)" when none).
inline std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Removes tensor `name` from the file description.
inline std::function<void(GgufSpec&)> Drop(const std::string& name) {
  return [name](GgufSpec& g) { std::erase_if(g.tensors, [&](const GgufTensorSpec& t) { return t.name == name; }); };
}

// Replaces metadata key `kv.key`.
inline std::function<void(GgufSpec&)> Replace(GgufKv kv) {
  return [kv](GgufSpec& g) {
    for (auto& e : g.kvs) {
      if (e.key == kv.key) e = kv;
    }
  };
}

}  // namespace kvshare::testing
