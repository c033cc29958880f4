// input_audio parts of chat requests (request_audio.h). Parsing only, no
// model: the request fuzzer links it.
#include <optional>
#include <string>
#include <utility>

#include "api_error.h"
#include "request_audio.h"
#include "request_fields.h"
#include "request_images.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

const json& Field(const json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    throw BadRequest("Missing required parameter: '" + where + "'.", where, "missing_required_parameter");
  }
  return *it;
}

}  // namespace

RequestAudio ReadInputAudioPart(const json& part, const std::string& name) {
  const std::string where = name + ".input_audio";
  const json& ia = Field(part, "input_audio", where);
  if (!ia.is_object()) WrongType(where, "an object", ia);
  const json& data = Field(ia, "data", where + ".data");
  if (!data.is_string()) WrongType(where + ".data", "a string", data);
  const json& format = Field(ia, "format", where + ".format");
  if (!format.is_string()) WrongType(where + ".format", "a string", format);
  RequestAudio out;
  out.format = format.get<std::string>();
  out.param = where;
  if (out.format != "wav" && out.format != "mp3" && out.format != "flac" && out.format != "ogg") {
    throw BadRequest("Invalid '" + where + ".format': expected \"wav\", \"mp3\", \"flac\" or \"ogg\", got \"" +
                         out.format + "\".",
                     where + ".format", "invalid_audio_format");
  }
  std::optional<std::vector<std::uint8_t>> bytes = DecodeBase64(data.get_ref<const std::string&>());
  if (!bytes) throw BadRequest("Invalid '" + where + ".data': the base64 is malformed.", where + ".data", "invalid_base64");
  out.bytes = std::move(*bytes);
  return out;
}

}  // namespace kvshare::server
