// The multipart form of OpenAI's audio endpoints, POST /v1/audio/transcriptions
// and /v1/audio/translations (docs/audio.md "Transcriptions and
// translations"): read and checked the same way for both, and the answer in
// OpenAI's five response formats.
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

#include "openai_request.h"

namespace kvshare::server {

// What one endpoint takes besides `file`.
struct AudioFormFields {
  std::string endpoint;              // "/v1/audio/translations", for messages
  std::vector<std::string> read;     // the fields it reads, of "model", "language", "prompt",
                                     // "response_format", "temperature", "stream"
  std::vector<std::string> without;  // OpenAI's other fields of the endpoint: accepted, no effect
};

// A form as read; fields the endpoint does not read keep their defaults.
struct AudioForm {
  std::string model;
  std::string language;
  std::string prompt;
  std::string response_format = "json";  // json | text | srt | verbose_json | vtt
  float temperature = 0;                 // [0, 1], OpenAI's range and default
  bool stream = false;
  RequestAudio audio;                // `file` as sent, its format sniffed, param "file"
  double seconds = 0;                // the clip's length
  std::vector<std::string> ignored;  // unknown fields (not in read or without)
};

// The clips the audio endpoints take: at most this long (the prompt path
// encodes them in 30 s chunks, docs/audio.md "Long clips").
inline constexpr double kMaxAudioFormSeconds = 600;

// Reads the form. Throws ApiError 400 for: a body that is not
// multipart/form-data (invalid_request_error); no or an empty `file`
// (missing_required_parameter); a `response_format` other than the five
// (invalid_value); a `temperature` that is not a number in [0, 1]
// (invalid_value); a file that is no audio or over kMaxAudioFormSeconds
// (BadAudio: invalid_audio, audio_too_long); `stream=true` where the
// endpoint has no stream (unsupported_parameter); with o.strict, an unknown
// field (unknown_parameter) or no `model` (missing_required_parameter).
AudioForm ReadAudioForm(const httplib::Request& req, const AudioFormFields& fields, const RequestParsing& o);

// What an answer reports: verbose_json's task ("transcribe" | "translate")
// and language, the text, the clip's length.
struct AudioAnswer {
  std::string task;
  std::string language;
  std::string text;
  double seconds = 0;
};

// Sets res to `a` in `format`: json {"text", "usage": {"type": "duration",
// "seconds"}}; text (the text and a newline); verbose_json {"task",
// "language", "duration", "text", "segments"}; srt and vtt. The model gives
// no timestamps, so verbose_json, srt and vtt hold one segment over the
// whole clip.
void SetAudioAnswer(httplib::Response& res, const std::string& format, const AudioAnswer& a);

// A subtitle file of one cue from 0 to `seconds` ("srt" or "vtt"): blank
// lines of `text` are dropped, as a blank line ends a cue in both.
std::string SubtitleFile(const std::string& format, const std::string& text, double seconds);

}  // namespace kvshare::server
