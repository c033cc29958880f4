// Images from Python (images.h).
#include "images.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>

#include "kvshare/common/error.h"

namespace kvshare::python {
namespace {

std::string TypeName(const py::handle& obj) { return py::str(py::type::of(obj).attr("__name__")); }

// A NumPy array's uint8 pixels as an Image; the key covers the shape too.
ImageArg FromArray(const py::array& in, const std::string& name, const PreprocessOptions& options,
                   const ImageLimits& limits) {
  const py::dtype dt = in.dtype();
  if (dt.kind() != 'u' || dt.itemsize() != 1) {
    throw Error(name + ": a numpy image must have dtype uint8 (8-bit levels), got " +
                std::string(py::str(dt.attr("name"))));
  }
  const int rank = static_cast<int>(in.ndim());
  const py::ssize_t channels = rank == 3 ? in.shape(2) : 1;
  if ((rank != 2 && rank != 3) || (channels != 1 && channels != 3 && channels != 4)) {
    const std::string shape = py::str(in.attr("shape"));
    throw Error(name + ": a numpy image must be HWC with 1, 3 or 4 channels, or 2-D grey (H, W); got shape " + shape);
  }
  const py::array a = py::module_::import("numpy").attr("ascontiguousarray")(in).cast<py::array>();
  const std::span<const std::uint8_t> px(static_cast<const std::uint8_t*>(a.data()),
                                         static_cast<std::size_t>(a.size()));
  ImageArg out;
  try {
    out.image = ImageFromPixels(px, static_cast<int>(a.shape(0)), static_cast<int>(a.shape(1)),
                                static_cast<int>(channels), limits);
  } catch (const Error& e) {
    throw Error(name + ": " + e.what());
  }
  const std::uint64_t dims[3] = {static_cast<std::uint64_t>(a.shape(0)), static_cast<std::uint64_t>(a.shape(1)),
                                 static_cast<std::uint64_t>(channels)};
  std::vector<std::uint8_t> keyed(px.begin(), px.end());
  keyed.resize(keyed.size() + sizeof dims);
  std::memcpy(keyed.data() + px.size(), dims, sizeof dims);
  out.key = ImageKey(keyed, options);
  return out;
}

}  // namespace

ImageArg ReadImageArg(const py::handle& obj, const std::string& name, const PreprocessOptions& options,
                      const ImageLimits& limits) {
  if (py::isinstance<py::array>(obj)) return FromArray(py::reinterpret_borrow<py::array>(obj), name, options, limits);
  std::vector<std::uint8_t> bytes;
  if (py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__")) {
    const py::object path = py::module_::import("os").attr("fspath")(obj);
    if (!py::isinstance<py::str>(path)) throw py::type_error(name + ": a path must be a str (got bytes)");
    try {
      bytes = ReadImageFile(path.cast<std::string>(), limits);
    } catch (const Error& e) {
      throw Error(name + ": " + e.what());
    }
  } else if (py::isinstance<py::bytes>(obj) || py::isinstance<py::bytearray>(obj) ||
             py::isinstance<py::memoryview>(obj)) {
    const std::string b = py::module_::import("builtins").attr("bytes")(obj).cast<std::string>();
    bytes.assign(b.begin(), b.end());
  } else {
    // A PIL image (what HF processors take) is a common thing to pass: say how.
    const bool pil = py::hasattr(obj, "getexif") && py::hasattr(obj, "mode");
    throw py::type_error(name +
                         " must be a file path (str or os.PathLike), the file's bytes, or a uint8 numpy array "
                         "(HWC or 2-D grey); got " +
                         TypeName(obj) + (pil ? " (for a PIL image pass numpy.asarray(image))" : ""));
  }
  ImageArg out;
  {
    py::gil_scoped_release release;
    try {
      out.image = DecodeImage(bytes, limits);
    } catch (const Error& e) {
      throw Error(name + ": " + e.what());
    }
  }
  out.key = ImageKey(bytes, options);
  return out;
}

PixelTensor PixelsFromArray(const py::handle& obj, const std::string& name) {
  if (!py::isinstance<py::array>(obj)) throw py::type_error(name + " must be a numpy.ndarray, got " + TypeName(obj));
  const py::array in = py::reinterpret_borrow<py::array>(obj);
  if (in.dtype().kind() != 'f' || in.dtype().itemsize() != 4) {
    throw Error(name + ": pixels must have dtype float32, got " + std::string(py::str(in.dtype().attr("name"))));
  }
  if (in.ndim() != 3 || in.shape(0) != 3) throw Error(name + ": pixels must have shape (3, H, W) (CHW)");
  const py::array a = py::module_::import("numpy").attr("ascontiguousarray")(in).cast<py::array>();
  const float* p = static_cast<const float*>(a.data());
  return PixelTensor{static_cast<int>(a.shape(1)), static_cast<int>(a.shape(2)), std::vector<float>(p, p + a.size())};
}

py::array_t<float> PixelsToArray(const PixelTensor& pixels) {
  return py::array_t<float>({py::ssize_t{3}, py::ssize_t{pixels.height}, py::ssize_t{pixels.width}}, pixels.chw.data());
}

py::array_t<float> RowsToArray(const std::vector<float>& rows, int width) {
  const py::ssize_t n = width > 0 ? static_cast<py::ssize_t>(rows.size()) / width : 0;
  return py::array_t<float>({n, py::ssize_t{width}}, rows.data());
}

py::dict VisionConfigDict(const VisionConfig& c) {
  py::dict d;
  d["projector"] = ProjectorTypeName(c.projector);
  d["image_size"] = c.image_size;
  d["patch_size"] = c.patch_size;
  d["n_embd"] = c.n_embd;
  d["n_ff"] = c.n_ff;
  d["n_layer"] = c.n_layer;
  d["n_head"] = c.n_head;
  d["head_dim"] = c.head_dim;
  d["pool"] = c.pool;
  d["n_embd_text"] = c.n_embd_text;
  d["eps"] = c.eps;
  d["image_mean"] = std::vector<float>(c.image_mean, c.image_mean + 3);
  d["image_std"] = std::vector<float>(c.image_std, c.image_std + 3);
  return d;
}

std::shared_ptr<EncodedPrompt> EncodePromptMedia(const PromptMedia& m, const PromptRoom& room,
                                                 std::span<const std::int32_t> ids, ThreadPool* pool) {
  auto out = std::make_shared<EncodedPrompt>();
  const auto named = [](const char* kind, std::size_t i, const Error& e) {
    return Error(std::string(kind) + "[" + std::to_string(i) + "]: " + e.what());
  };
  std::vector<std::vector<PixelTensor>> pixels;
  for (std::size_t i = 0; i < m.images.size(); ++i) {
    PromptImage& pi = out->images.emplace_back();
    pi.key = m.images[i].key;
    try {
      pixels.push_back(m.vision->Preprocess(m.images[i].image, m.options));
    } catch (const Error& e) {
      throw named("images", i, e);
    }
    for (const PixelTensor& p : pixels.back()) pi.tokens.push_back(m.vision->TokensFor(p));
    for (int n : pi.tokens) out->max_span = std::max(out->max_span, n);
  }
  std::vector<PreparedAudio> prepared;
  for (std::size_t i = 0; i < m.clips.size(); ++i) {
    try {
      prepared.push_back(PrepareAudio(*m.audio, m.clips[i].audio, m.clips[i].key));
    } catch (const Error& e) {
      // A clip from a file: name it (a NaN sample, too short), as the decoder's errors do.
      const std::string& path = m.clips[i].path;
      throw named("audio", i, path.empty() ? e : Error("audio file '" + path + "': " + e.what()));
    }
    out->clips.push_back(prepared.back().Pending());
  }
  const auto splice = [&] {
    std::vector<MediaInsert> audio;
    if (!m.clips.empty()) audio = m.audio_splicer->Inserts(m.audio_slots, out->clips);
    return m.image_splicer != nullptr ? m.image_splicer->SpliceWith(ids, m.image_slots, out->images, std::move(audio))
                                      : SpliceMedia(ids, audio);
  };
  // The spliced length from the token counts (no rows read), before any encoding.
  const auto n = static_cast<std::int64_t>(splice().tokens.size());
  if (room.cached + n + room.max_new_tokens > room.max_context) {
    const std::string clips = m.clips.empty() ? "" : " and " + std::to_string(m.clips.size()) + " audio clip(s)";
    throw Error((room.cached > 0 ? std::to_string(room.cached) + " tokens of earlier turns + " : std::string()) +
                "prompt of " + std::to_string(n) + " tokens with its " + std::to_string(m.images.size()) +
                " image(s)" + clips + " + " + std::to_string(room.max_new_tokens) + " new tokens exceeds max_context " +
                std::to_string(room.max_context) + "; send fewer or smaller images (max_soft_tokens) or shorter "
                "clips, or load the Model with a larger max_context (nothing was encoded)");
  }
  for (std::size_t i = 0; i < m.images.size(); ++i) {
    for (const PixelTensor& p : pixels[i]) {
      try {
        const std::vector<float> rows = m.vision->Encode(p, pool);
        out->images[i].rows.insert(out->images[i].rows.end(), rows.begin(), rows.end());
      } catch (const Error& e) {
        throw named("images", i, e);
      }
    }
  }
  for (std::size_t i = 0; i < m.clips.size(); ++i) {
    try {
      out->clips[i] = EncodePromptAudio(*m.audio, prepared[i], pool);
    } catch (const Error& e) {
      throw named("audio", i, e);
    }
  }
  out->prompt = splice();
  return out;
}

}  // namespace kvshare::python
