// common/utf8.h — UTF-8 well-formedness helpers shared by the tokenizer and the
// streaming decoder.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvshare::runtime {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends `bytes` to *out with every maximal ill-formed subsequence (Unicode §3.9,
// "U+FFFD substitution of maximal subparts") replaced by U+FFFD. Returns the number
// of bytes consumed. With final == false, a trailing prefix of a well-formed
// character that `bytes` cuts off is left unconsumed, so a later call with more
// bytes can complete it; the result of consuming a stream piecewise this way then
// equals one call on the whole stream with final == true.
size_t AppendWellFormedUtf8(std::string_view bytes, bool final, std::string* out);

}  // namespace kvshare::runtime
