// Shape checks of an mmproj GGUF's tensors (mmproj_tensors.h).
#include "gguf/mmproj_tensors.h"

#include <optional>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

void CheckMmprojFile(const GgufFile& f) {
  const std::string_view arch = f.GetStringOpt("general.architecture").value_or("");
  if (arch != "clip") {
    throw Error(Str("'", f.name(), "' is not an mmproj file: general.architecture is '", arch,
                    "', expected 'clip' (pass the projector GGUF that llama.cpp's converter writes with --mmproj, "
                    "not the text model)"));
  }
  if (const auto type = f.GetStringOpt("general.type"); type && *type != "mmproj") {
    throw Error(Str("'", f.name(), "' is not an mmproj file: general.type is '", *type, "', expected 'mmproj'"));
  }
}

void ThrowTensorShape(const GgufFile& f, std::string_view name, const GgufTensor& t, std::string_view want) {
  throw Error(Str("mmproj ", f.name(), ": tensor '", name, "' is ", t.DimsString(), ", expected ", want));
}

const GgufTensor& MmprojTensor(const GgufFile& f, const std::string& name, std::initializer_list<std::int64_t> want) {
  const GgufTensor& t = f.Tensor(name);  // "tensor 'x' not found in <file>"
  bool ok = t.n_dims == static_cast<int>(want.size());
  int i = 0;
  for (std::int64_t w : want) {
    ok = ok && t.ne[static_cast<std::size_t>(i)] > 0 && (w < 0 || t.ne[static_cast<std::size_t>(i)] == w);
    ++i;
  }
  if (!ok) {
    std::string shape = "[";
    i = 0;
    for (std::int64_t w : want) shape += Str(i++ ? ", " : "", w < 0 ? std::string("n") : std::to_string(w));
    ThrowTensorShape(f, name, t, shape + "]");
  }
  return t;
}

const GgufTensor& MmprojTensorUpTo(const GgufFile& f, const std::string& name, int n_dims_max) {
  const GgufTensor& t = f.Tensor(name);
  if (t.n_dims > n_dims_max) ThrowTensorShape(f, name, t, Str("at most ", n_dims_max, " dimensions"));
  return t;
}

int CountMmprojBlocks(const GgufFile& f, std::string_view prefix, std::string_view probe, std::string_view what) {
  int n = 0;
  while (f.FindTensor(Str(prefix, n, ".", probe)) != nullptr) ++n;
  if (n == 0) {
    throw Error(Str("mmproj ", f.name(), ": no ", what, " blocks (tensor '", prefix, "0.", probe, "' not found)"));
  }
  return n;
}

}  // namespace kvshare::detail
