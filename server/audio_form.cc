// The multipart form of the audio endpoints and their answers (audio_form.h).
#include "audio_form.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"
#include "request_audio.h"
#include "request_fields.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

constexpr char kFormats[] = R"("json", "text", "srt", "verbose_json" or "vtt")";

bool IsTrue(const std::string& v) { return v == "true" || v == "True" || v == "1"; }

float Temperature(const std::string& v) {
  char* end = nullptr;
  const double t = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(t) || t < 0 || t > 1) {
    throw BadRequest("Invalid 'temperature': expected a number between 0 and 1, got \"" + v + "\".", "temperature",
                     "invalid_value");
  }
  return static_cast<float>(t);
}

// "HH:MM:SS,mmm" (SRT) or "HH:MM:SS.mmm" (WebVTT).
std::string Timestamp(double seconds, char separator) {
  const long long ms = std::llround(seconds * 1000);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60,
                separator, ms % 1000);
  return buf;
}

}  // namespace

AudioForm ReadAudioForm(const httplib::Request& req, const AudioFormFields& fields, const RequestParsing& o) {
  if (!req.is_multipart_form_data()) {
    throw BadRequest("Invalid body: " + fields.endpoint + " takes multipart/form-data with a 'file' field.", "file",
                     "invalid_request_error");
  }
  if (!req.has_file("file") || req.get_file_value("file").content.empty()) {
    throw BadRequest("Missing required parameter: 'file'.", "file", "missing_required_parameter");
  }
  AudioForm f;
  for (const auto& [name, part] : req.files) {
    const std::string& v = part.content;
    if (name == "file" || Has(fields.without, name)) continue;
    if (!Has(fields.read, name)) {
      // A stream the endpoint cannot send is refused rather than answered
      // in another shape (OpenAI's API has no stream for translations).
      if (name == "stream" && IsTrue(v)) {
        throw BadRequest("'stream' is not supported by " + fields.endpoint +
                             ": OpenAI's API does not stream it; send the request without 'stream'.",
                         "stream", "unsupported_parameter");
      }
      if (!Has(f.ignored, name)) Unknown(name, o, f.ignored);
    } else if (name == "model") {
      f.model = v;
    } else if (name == "language") {
      f.language = v;
    } else if (name == "prompt") {
      f.prompt = v;
    } else if (name == "response_format") {
      if (v.empty()) continue;
      f.response_format = v;
      if (v != "json" && v != "text" && v != "srt" && v != "verbose_json" && v != "vtt") {
        throw BadRequest(std::string("Invalid 'response_format': expected ") + kFormats + ", got \"" + v + "\".",
                         "response_format", "invalid_value");
      }
    } else if (name == "temperature") {
      f.temperature = Temperature(v);
    } else if (name == "stream") {
      f.stream = IsTrue(v);
    }
  }
  if (o.strict && f.model.empty()) {
    throw BadRequest("Missing required parameter: 'model'.", "model", "missing_required_parameter");
  }
  const std::string& bytes = req.get_file_value("file").content;
  f.audio.bytes.assign(bytes.begin(), bytes.end());
  f.audio.param = "file";
  try {
    f.audio.format = AudioFormatName(SniffAudioFormat(f.audio.bytes));
    for (char& c : f.audio.format) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    f.seconds = DecodeAudio(f.audio.bytes, {.max_seconds = kMaxAudioFormSeconds}).seconds();
  } catch (const Error& e) {
    throw BadAudio(f.audio.param, e);
  }
  return f;
}

std::string SubtitleFile(const std::string& format, const std::string& text, double seconds) {
  std::string cue;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string::npos) cue += (cue.empty() ? "" : "\n") + line;
    start = end + 1;
  }
  const bool vtt = format == "vtt";
  const char sep = vtt ? '.' : ',';
  return std::string(vtt ? "WEBVTT\n\n" : "1\n") + Timestamp(0, sep) + " --> " + Timestamp(seconds, sep) + "\n" + cue +
         "\n\n";
}

void SetAudioAnswer(httplib::Response& res, const std::string& format, const AudioAnswer& a) {
  if (format == "text") {
    res.set_content(a.text + "\n", "text/plain; charset=utf-8");
  } else if (format == "srt") {
    res.set_content(SubtitleFile(format, a.text, a.seconds), "text/plain; charset=utf-8");
  } else if (format == "vtt") {
    res.set_content(SubtitleFile(format, a.text, a.seconds), "text/vtt; charset=utf-8");
  } else if (format == "verbose_json") {
    const json body = {{"task", a.task},
                       {"language", a.language},
                       {"duration", a.seconds},
                       {"text", a.text},
                       {"segments", json::array({{{"id", 0}, {"start", 0.0}, {"end", a.seconds}, {"text", a.text}}})}};
    res.set_content(body.dump(), "application/json");
  } else {
    res.set_content(json{{"text", a.text}, {"usage", {{"type", "duration"}, {"seconds", a.seconds}}}}.dump(),
                    "application/json");
  }
}

}  // namespace kvshare::server
