#include "common/utf8.h"

#include <cstdint>

namespace kvshare::runtime {
namespace {

// Length of the character a lead byte starts (0: not a lead byte) and the allowed
// range of its second byte (Unicode Table 3-7).
struct LeadInfo {
  int length;
  uint8_t lo, hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t AppendWellFormedUtf8(std::string_view bytes, bool final, std::string* out) {
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const auto b0 = static_cast<uint8_t>(bytes[i]);
    const LeadInfo lead = Lead(b0);
    if (lead.length == 1) {
      out->push_back(bytes[i]);
      ++i;
      continue;
    }
    if (lead.length == 0) {
      out->append(kReplacementChar);
      ++i;
      continue;
    }
    // Walk the continuation bytes; k counts the bytes of a valid prefix.
    int k = 1;
    bool broken = false;
    while (k < lead.length) {
      if (i + k >= n) break;  // cut off by the end of the input
      const auto b = static_cast<uint8_t>(bytes[i + k]);
      const uint8_t lo = (k == 1) ? lead.lo : 0x80;
      const uint8_t hi = (k == 1) ? lead.hi : 0xBF;
      if (b < lo || b > hi) {
        broken = true;
        break;
      }
      ++k;
    }
    if (k == lead.length) {
      out->append(bytes.substr(i, k));
      i += k;
    } else if (broken) {
      out->append(kReplacementChar);
      i += k;
    } else {  // truncated at the end
      if (!final) return i;
      out->append(kReplacementChar);
      i = n;
    }
  }
  return n;
}

}  // namespace kvshare::runtime
