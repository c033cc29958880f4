// Image parts of chat requests: the image_url part and its base64 data: URL
// (request_images.h). Parsing only, no model: the request fuzzer links it.
#include "request_images.h"

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "api_error.h"
#include "kvshare/common/error.h"
#include "request_fields.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// The 6-bit value of a base64 character; -1 outside the alphabets.
int Sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != prefix[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<std::uint8_t>> DecodeBase64(std::string_view text) {
  std::vector<std::uint8_t> out;
  out.reserve(text.size() / 4 * 3 + 3);
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0, sextets = 0;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    const int v = Sextet(c);
    if (v < 0 || pad > 0) return std::nullopt;  // outside the alphabet, or data after padding
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    ++sextets;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xFF));
    }
  }
  // A group of 4 characters holds 3 bytes; 1 left-over character is 6 bits,
  // not a byte. Padding completes the last group only.
  if (sextets % 4 == 1 || pad > 2 || (pad > 0 && (sextets + pad) % 4 != 0)) return std::nullopt;
  return out;
}

RequestImage ReadImageUrlPart(const json& part, const std::string& name, const RequestParsing& o) {
  auto iu = part.find("image_url");
  std::string where = name + ".image_url";
  if (iu == part.end() || iu->is_null()) {
    throw BadRequest("Missing required parameter: '" + where + "'.", where, "missing_required_parameter");
  }
  const json* url = &*iu;
  if (iu->is_object()) {
    where += ".url";
    auto u = iu->find("url");
    if (u == iu->end() || u->is_null()) {
      throw BadRequest("Missing required parameter: '" + where + "'.", where, "missing_required_parameter");
    }
    url = &*u;
  }
  if (!url->is_string()) WrongType(where, "a string", *url);
  const std::string& s = url->get_ref<const std::string&>();
  if (StartsWithNoCase(s, "http://") || StartsWithNoCase(s, "https://")) {
    throw BadRequest(o.allow_image_urls
                         ? "Invalid '" + where +
                               "': fetching images from http(s) URLs is not built into this server; send the image "
                               "as a data: URL (data:image/png;base64,...)."
                         : "Invalid '" + where +
                               "': this server does not fetch http(s) image URLs; send the image as a data: URL "
                               "(data:image/png;base64,...).",
                     where, "invalid_image_url");
  }
  const std::size_t comma = s.find(',');
  if (!StartsWithNoCase(s, "data:") || comma == std::string::npos || s.substr(0, comma).size() < 7 ||
      !StartsWithNoCase(std::string_view(s).substr(comma - 7, 7), ";base64")) {
    throw BadRequest("Invalid '" + where + "': expected a base64 data: URL (data:image/png;base64,...), got '" +
                         s.substr(0, 40) + (s.size() > 40 ? "...'" : "'") + ".",
                     where, "invalid_image_url");
  }
  std::optional<std::vector<std::uint8_t>> bytes = DecodeBase64(std::string_view(s).substr(comma + 1));
  if (!bytes) {
    throw BadRequest("Invalid '" + where + "': the data: URL's base64 is malformed.", where, "invalid_base64");
  }
  return {std::move(*bytes), where};
}

}  // namespace kvshare::server
