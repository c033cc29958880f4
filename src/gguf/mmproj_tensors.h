// Checks shared by the two readers of an mmproj GGUF, the vision part
// (src/vision/mmproj.cc) and the audio part (src/audio/audio_mmproj.cc): that
// the file is an mmproj at all, tensors of an expected shape, and encoder
// blocks counted by a probe tensor (block_count keys may be dummies). Every
// error is a kvshare::Error that names the file and the tensor, with the
// expected and the actual shape. Internal to src/.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "kvshare/gguf/gguf.h"

namespace kvshare::detail {

// Throws unless general.architecture is "clip" and general.type, when
// present, is "mmproj" (the projector GGUF llama.cpp's converter writes with
// --mmproj; a text model passed instead is named as such).
void CheckMmprojFile(const GgufFile& f);

// Throws "mmproj F: tensor 'name' is [actual], expected <want>".
[[noreturn]] void ThrowTensorShape(const GgufFile& f, std::string_view name, const GgufTensor& t,
                                   std::string_view want);

// The tensor `name` with exactly want.size() dimensions, each positive and
// equal to want[i] where want[i] >= 0 (-1: any size). Throws when it is
// missing ("tensor 'x' not found in F") or has another shape.
const GgufTensor& MmprojTensor(const GgufFile& f, const std::string& name, std::initializer_list<std::int64_t> want);

// The tensor `name` with at most n_dims_max dimensions (its caller checks the
// sizes). Throws when it is missing or has more.
const GgufTensor& MmprojTensorUpTo(const GgufFile& f, const std::string& name, int n_dims_max);

// Dimension i (GGUF ne order) as an int.
inline int TensorDim(const GgufTensor& t, int i) { return static_cast<int>(t.ne[static_cast<std::size_t>(i)]); }

// The blocks <prefix>0., <prefix>1., ... counted while <prefix>N.<probe>
// exists, e.g. ("v.blk.", "ln1.weight"). Throws "mmproj F: no <what> blocks
// (tensor '<prefix>0.<probe>' not found)" when there is none.
int CountMmprojBlocks(const GgufFile& f, std::string_view prefix, std::string_view probe, std::string_view what);

}  // namespace kvshare::detail
