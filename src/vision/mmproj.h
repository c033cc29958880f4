// The mmproj GGUF as llama.cpp's converter writes it (convert_hf_to_gguf.py
// --mmproj): which encoder it holds and that encoder's geometry
// (VisionConfig), from the keys where they are real and from the tensor
// shapes where the converter writes dummies (Gemma 4's image_size, Gemma 3n's
// patch_size / block_count / head_count / feed_forward_length, the unified
// model's ff / blocks / heads; docs/vision.md). Internal to src/vision.
#pragma once

#include "kvshare/gguf/gguf.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::detail {

// The vision projector type: `clip.projector_type` (Gemma 3) or
// `clip.vision.projector_type` (Gemma 3n, Gemma 4). Throws kvshare::Error for
// a file that is not an mmproj (general.architecture != "clip" or
// general.type != "mmproj"), one without a vision encoder (an audio-only
// mmproj), and a projector type other than the four supported (naming it and
// listing those).
ProjectorType ReadProjectorType(const GgufFile& file);

// Every field of VisionConfig for the file's projector type (ReadProjectorType
// first). Throws kvshare::Error naming a missing or ill-shaped tensor (the
// expected and the actual shape) or a key whose value cannot hold (a head
// count that does not divide the width, a patch grid the pool does not
// divide).
VisionConfig ReadVisionConfig(const GgufFile& file);

// Gemma 3: whether fc1 / fc2 are stored under each other's names
// (`v.blk.N.ffn_up` / `ffn_down`), as old converters wrote them: ffn_down is
// then [n_embd, n_ff] (GGUF ne) instead of [n_ff, n_embd]. Undecidable when
// n_ff == n_embd (taken as not swapped).
bool Gemma3FfnSwapped(const GgufFile& file, int n_embd);
// Gemma 3: n_ff from ffn_down's shape, either order.
int Gemma3FfnWidth(const GgufFile& file, int n_embd);

}  // namespace kvshare::detail
