// Audio from Python (audio.h).
#include "audio.h"

#include <pybind11/numpy.h>


#include "kvshare/common/error.h"
#include "kvshare/runtime/audio_prompt.h"

namespace kvshare::python {
namespace {

std::string TypeName(const py::handle& obj) { return py::str(py::type::of(obj).attr("__name__")); }

Audio FromArray(const py::handle& samples, const py::handle& rate, const std::string& name, double max_seconds) {
  if (!py::isinstance<py::array>(samples)) {
    throw py::type_error(name + ": the samples must be a numpy.ndarray, got " + TypeName(samples));
  }
  const py::array in = py::reinterpret_borrow<py::array>(samples);
  if (in.dtype().kind() != 'f' || in.dtype().itemsize() != 4) {
    throw Error(name + ": audio samples must have dtype float32, got " + std::string(py::str(in.dtype().attr("name"))));
  }
  if (in.ndim() != 1) throw Error(name + ": audio samples must be 1-D (mono), got " + std::to_string(in.ndim()) + "-D");
  Audio a;
  a.sample_rate = py::cast<int>(rate);
  if (a.sample_rate <= 0) throw Error(name + ": sample rate " + std::to_string(a.sample_rate) + " (must be > 0 Hz)");
  const py::array c = py::module_::import("numpy").attr("ascontiguousarray")(in).cast<py::array>();
  const float* p = static_cast<const float*>(c.data());
  a.samples.assign(p, p + c.size());
  if (a.seconds() > max_seconds) {
    throw Error(name + ": the clip is " + std::to_string(a.seconds()) + " s long, over the limit of " +
                std::to_string(max_seconds) + " s");
  }
  return a;
}

}  // namespace

AudioArg ReadAudioArg(const py::handle& obj, const std::string& name, double max_seconds) {
  AudioArg out;
  if (py::isinstance<py::tuple>(obj) && py::len(obj) == 2) {
    const py::tuple t = py::reinterpret_borrow<py::tuple>(obj);
    out.audio = FromArray(t[0], t[1], name, max_seconds);
  } else if (py::isinstance<py::dict>(obj)) {
    const py::dict d = py::reinterpret_borrow<py::dict>(obj);
    if (!d.contains("array") || !d.contains("sampling_rate")) {
      throw py::type_error(name + ": a dict clip needs \"array\" and \"sampling_rate\"");
    }
    out.audio = FromArray(d["array"], d["sampling_rate"], name, max_seconds);
  } else if (py::isinstance<py::array>(obj)) {
    throw py::type_error(name + ": a numpy clip needs its sample rate: pass (array, rate)");
  } else {
    std::vector<std::uint8_t> bytes;
    if (py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__")) {
      const py::object path = py::module_::import("os").attr("fspath")(obj);
      if (!py::isinstance<py::str>(path)) throw py::type_error(name + ": a path must be a str (got bytes)");
      const std::string p = path.cast<std::string>();
      py::gil_scoped_release release;
      try {
        out.audio = LoadAudioFile(p, {.max_seconds = max_seconds});
        out.path = p;
      } catch (const Error& e) {
        throw Error(name + ": " + e.what());
      }
    } else if (py::isinstance<py::bytes>(obj) || py::isinstance<py::bytearray>(obj) ||
               py::isinstance<py::memoryview>(obj)) {
      const std::string b = py::module_::import("builtins").attr("bytes")(obj).cast<std::string>();
      bytes.assign(b.begin(), b.end());
      py::gil_scoped_release release;
      try {
        out.audio = DecodeAudio(bytes, {.max_seconds = max_seconds});
      } catch (const Error& e) {
        throw Error(name + ": " + e.what());
      }
    } else {
      throw py::type_error(name +
                           " must be a file path (str or os.PathLike), the file's bytes, or (float32 numpy array, "
                           "sample rate); got " +
                           TypeName(obj));
    }
  }
  out.key = AudioKey(out.audio);
  return out;
}

std::vector<AudioArg> ReadAudioArgs(const py::object& audio, double max_seconds) {
  std::vector<AudioArg> out;
  if (audio.is_none()) return out;
  if (!py::isinstance<py::list>(audio)) {
    throw py::type_error("audio must be a list of clips (paths, bytes, or (float32 array, rate) pairs), got " +
                         TypeName(audio));
  }
  const py::list seq = py::reinterpret_borrow<py::list>(audio);
  for (std::size_t i = 0; i < seq.size(); ++i) {
    out.push_back(ReadAudioArg(seq[i], "audio[" + std::to_string(i) + "]", max_seconds));
  }
  return out;
}

}  // namespace kvshare::python
