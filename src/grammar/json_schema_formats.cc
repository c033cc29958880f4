// The JSON Schema compiler's `format` values as ECMA-262 expressions, compiled
// like `pattern` (json_regex.h). Each is exact or narrower than its RFC
// (never wider), so that no invalid value can be written:
//   - date, date-time: RFC 3339 with the days of each month and leap years,
//     years 0001 to 9999 (Python's date, which jsonschema's checker uses,
//     has no year 0);
//     a leap second only as 23:59:60 in UTC (Z or +00:00 / -00:00);
//   - time: RFC 3339 full-time (an offset is required);
//   - duration: RFC 3339 Appendix A (ISO 8601 durations);
//   - hostname: RFC 1123 labels of at most 63 characters, at most 4 labels
//     of which the first is at most 60 characters (so at most 252 in all,
//     under the 253 limit);
//   - email: RFC 5321 dot-atom local part @ hostname (no quoted local parts,
//     no address literals);
//   - ipv4: dotted quad without leading zeros; ipv6: RFC 4291 hex groups
//     with at most one "::" (no embedded IPv4);
//   - uuid: RFC 4122 8-4-4-4-12 hex;
//   - uri: RFC 3986 absolute URI (scheme ":" hier-part, optional query and
//     fragment) with reg-name hosts (no IP literals in brackets).
//   - iri, iri-reference, uri-reference, idn-email, idn-hostname,
//     json-pointer, relative-json-pointer, regex, uri-template: narrower
//     stand-ins (below).
// An unknown format is an annotation (ignored), as the spec says.
#include <map>
#include <string>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

const std::string kDate =
    R"((?:\d{3}[1-9]|\d\d[1-9]\d|\d[1-9]\d\d|[1-9]\d{3})-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8])))"
    R"(|(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
const std::string kFrac = R"((?:\.\d+)?)";
const std::string kTime = R"((?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d)" + kFrac +
                          R"((?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)|23:59:60)" + kFrac + R"((?:[Zz]|[+-]00:00)))";
const std::string kDurTime = R"(T(?:\d+H(?:\d+M)?(?:\d+S)?|\d+M(?:\d+S)?|\d+S))";
const std::string kDuration =
    R"(P(?:(?:\d+Y(?:\d+M)?(?:\d+D)?|\d+M(?:\d+D)?|\d+D)(?:)" + kDurTime + R"()?|)" + kDurTime + R"(|\d+W))";
// A label of 1..max letters, digits and inner '-'.
std::string Label(int max) { return "(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0," + std::to_string(max - 2) + "}[A-Za-z0-9])?)"; }
const std::string kHostname = Label(60) + "(?:\\." + Label(63) + "){0,3}";
const std::string kAtom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
const std::string kIpv4Part = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
const std::string kH = "[0-9a-fA-F]{1,4}";
const std::string kIpv6 = "(?:(?:" + kH + ":){7}" + kH + "|(?:" + kH + ":){1,7}:|(?:" + kH + ":){1,6}:" + kH +
                          "|(?:" + kH + ":){1,5}(?::" + kH + "){1,2}|(?:" + kH + ":){1,4}(?::" + kH +
                          "){1,3}|(?:" + kH + ":){1,3}(?::" + kH + "){1,4}|(?:" + kH + ":){1,2}(?::" + kH + "){1,5}|" +
                          kH + ":(?::" + kH + "){1,6}|:(?:(?::" + kH + "){1,7}|:))";
const std::string kUnreserved = R"([A-Za-z0-9\-._~])";
const std::string kPct = "%[0-9A-Fa-f]{2}";
const std::string kSubDelims = "[!$&'()*+,;=]";
const std::string kPchar = "(?:" + kUnreserved + "|" + kPct + "|" + kSubDelims + "|[:@])";
const std::string kUri = "[A-Za-z][A-Za-z0-9+.\\-]*:(?://(?:(?:" + kUnreserved + "|" + kPct + "|" + kSubDelims +
                         "|:)*@)?(?:" + kUnreserved + "|" + kPct + "|" + kSubDelims + ")*(?::\\d*)?(?:/" + kPchar +
                         "*)*|/(?:" + kPchar + "+(?:/" + kPchar + "*)*)?|" + kPchar + "+(?:/" + kPchar +
                         "*)*)?(?:\\?(?:" + kPchar + "|[/?])*)?(?:#(?:" + kPchar + "|[/?])*)?";

const std::string kRelPath = "[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]*)*";
const std::string kPointer = "(?:/(?:[^/~]|~[01])*)*";
// IDNA 2008 refuses "--" in places 3-4 of a label: none at all, 62 at most.
const std::string kIdnLabel = "(?:[a-z0-9]{1,20}(?:-[a-z0-9]{1,20}){0,2})";

}  // namespace

const std::string* FormatPattern(const std::string& name) {
  static const std::map<std::string, std::string> formats = {
      {"date", "^(?:" + kDate + ")$"},
      {"time", "^" + kTime + "$"},
      {"date-time", "^(?:" + kDate + ")[Tt]" + kTime + "$"},
      {"duration", "^" + kDuration + "$"},
      {"hostname", "^" + kHostname + "$"},
      {"email", "^" + kAtom + "(?:\\." + kAtom + ")*@" + kHostname + "$"},
      {"ipv4", "^" + kIpv4Part + "(?:\\." + kIpv4Part + "){3}$"},
      {"ipv6", "^" + kIpv6 + "$"},
      {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
      {"uri", "^" + kUri + "$"},
      // Narrower stand-ins for the formats the jsonschema package checks
      // (some only with optional packages installed): ASCII forms of the
      // IRI and IDN ones, uri-reference as a URI or a relative path of
      // unreserved characters, regex as literal characters only.
      {"iri", "^" + kUri + "$"},
      {"uri-reference", "^(?:" + kUri + "|" + kRelPath + ")$"},
      {"iri-reference", "^(?:" + kUri + "|" + kRelPath + ")$"},
      {"idn-email", "^" + kAtom + "(?:\\." + kAtom + ")*@" + kHostname + "$"},
      {"idn-hostname", "^" + kIdnLabel + "(?:\\." + kIdnLabel + "){0,3}$"},
      {"json-pointer", "^" + kPointer + "$"},
      {"relative-json-pointer", "^(?:0|[1-9][0-9]{0,8})(?:#|" + kPointer + ")$"},
      {"regex", "^[A-Za-z0-9 _-]*$"},
      {"uri-template", "^[A-Za-z0-9/._~-]*$"},
  };
  auto it = formats.find(name);
  return it == formats.end() ? nullptr : &it->second;
}

}  // namespace kvshare::detail
