// Images from Python for Model's vision encoder (kvshare/vision/*.h,
// kvshare/runtime/image_prompt.h): the image kinds generate(images=...)
// takes, pixel tensors as NumPy arrays, and the encoding of a prompt's images.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "audio.h"
#include "kvshare/audio/audio_encoder.h"
#include "kvshare/runtime/audio_prompt.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/vision/image.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::python {

namespace py = pybind11;

// One image argument, decoded; `name` ("images[0]", "image") starts errors.
//   str / os.PathLike   a file: JPEG, PNG, GIF, BMP or WebP (LoadImageFile)
//   bytes / bytearray / memoryview   the file's bytes (DecodeImage)
//   numpy.ndarray       uint8 pixels, HWC with 1, 3 or 4 channels, or 2-D grey
// Throws kvshare::Error for a bad file or array (dtype, shape) and
// py::type_error for any other kind. Needs the GIL.
struct ImageArg {
  Image image;
  std::uint64_t key = 0;  // ImageKey of the file's bytes, or of the pixels and their shape
};
// limits: the file size and pixel limits (ImageLimits), for arrays too.
ImageArg ReadImageArg(const py::handle& obj, const std::string& name, const PreprocessOptions& options,
                      const ImageLimits& limits = {});

// A float32 [3, H, W] array as a PixelTensor (copied). Throws kvshare::Error
// for another dtype or rank, or a first dimension other than 3.
PixelTensor PixelsFromArray(const py::handle& obj, const std::string& name);
py::array_t<float> PixelsToArray(const PixelTensor& pixels);

// `rows` as a float32 [rows.size() / width, width] array.
py::array_t<float> RowsToArray(const std::vector<float>& rows, int width);

py::dict VisionConfigDict(const VisionConfig& config);

// A prompt's images and audio clips, encoded and spliced; the spans point
// into `images` and `clips`, so this must outlive the generation that reads
// them.
struct EncodedPrompt {
  std::vector<PromptImage> images;
  std::vector<PromptAudio> clips;
  MediaPrompt prompt;
  int max_span = 0;  // most soft tokens of one pixel tensor (the model's max_step must hold it)
};

// Where the spliced prompt must fit: it and max_new_tokens after `cached`
// tokens within max_context.
struct PromptRoom {
  std::int64_t max_context = 0;
  std::int64_t cached = 0;
  std::int64_t max_new_tokens = 0;
};

// What a prompt's images and clips need: their encoders and splicers (null
// where there are none of that kind) and the chat template's slots.
struct PromptMedia {
  const VisionEncoder* vision = nullptr;
  const ImageSplicer* image_splicer = nullptr;
  std::span<const ImageArg> images;
  PreprocessOptions options;
  std::span<const std::size_t> image_slots;
  const AudioEncoder* audio = nullptr;
  const AudioSplicer* audio_splicer = nullptr;
  std::span<const AudioArg> clips;
  std::span<const std::size_t> audio_slots;
};

// Preprocesses every image and prepares every clip, checks that the spliced
// prompt fits `room` before encoding any, encodes them on `pool` and splices
// them into `ids`. Throws kvshare::Error naming images[i] / audio[i] for an
// item the encoder refuses (e.g. a budget outside the allowed set, a clip too
// long), or the token counts when the prompt does not fit.
std::shared_ptr<EncodedPrompt> EncodePromptMedia(const PromptMedia& media, const PromptRoom& room,
                                                 std::span<const std::int32_t> ids, ThreadPool* pool);

}  // namespace kvshare::python
