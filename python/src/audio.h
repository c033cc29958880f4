// Audio from Python for Model's audio encoder (kvshare/audio/*.h,
// kvshare/runtime/audio_prompt.h): the clip kinds generate(audio=...) takes.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvshare/audio/audio.h"

namespace kvshare::python {

namespace py = pybind11;

// One audio argument, decoded; `name` ("audio[0]") starts errors.
//   str / os.PathLike                  a file: WAV, FLAC, MP3, OGG (LoadAudioFile)
//   bytes / bytearray / memoryview     the file's bytes (DecodeAudio)
//   (numpy.ndarray, rate)              float32 mono samples, 1-D, and their rate in Hz
//   {"array": ..., "sampling_rate": ...}   the same, as HF datasets give it
// Throws kvshare::Error for a bad file, a clip over `max_seconds`, a sample
// rate that is not positive, or a bad array (dtype, rank), and py::type_error
// for any other kind (a bare array: its rate is missing). Needs the GIL.
struct AudioArg {
  Audio audio;
  std::uint64_t key = 0;  // AudioKey of the decoded samples
  std::string path;       // the file it came from; empty for bytes and arrays
};
AudioArg ReadAudioArg(const py::handle& obj, const std::string& name, double max_seconds);

// generate()'s audio (None or a list) read with ReadAudioArg ("audio[i]").
std::vector<AudioArg> ReadAudioArgs(const py::object& audio, double max_seconds);

}  // namespace kvshare::python
