// The JSON Schema compiler's numeric keywords: minimum / maximum and
// exclusiveMinimum / exclusiveMaximum in draft 4's form (booleans next to
// minimum / maximum) and draft 6's (numbers), multipleOf
// (json_schema_compiler.h). Bounds are enforced exactly by digit-range
// grammars: integers take any bound (a fractional one rounds inward);
// numbers take integer bounds (a fractional one is refused, not loosened),
// and a bounded number is written without an exponent. multipleOf: 10^-p on
// numbers (at most p fraction digits), 1 / n on integers (every integer), an
// integer k on integers within a range of at most 1024 multiples (listed);
// anything else is refused.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

constexpr long long kMaxMagnitude = 9999999999999999LL;  // JsonGrammar::kIntDigits digits
constexpr int kMaxListed = 1024;                         // multipleOf values listed one by one

using Ranges = std::vector<std::pair<char, char>>;  // one digit set per place

// Digit strings of [a, b] (same length, a <= b), as sequences of digit ranges.
void SameLength(const std::string& a, const std::string& b, Ranges prefix, std::vector<Ranges>& out) {
  if (a.empty()) {
    out.push_back(prefix);
    return;
  }
  if (a[0] == b[0]) {
    prefix.emplace_back(a[0], a[0]);
    SameLength(a.substr(1), b.substr(1), prefix, out);
    return;
  }
  const std::string zeros(a.size() - 1, '0'), nines(a.size() - 1, '9');
  if (a.substr(1) == zeros && b.substr(1) == nines) {
    Ranges p = prefix;
    p.emplace_back(a[0], b[0]);
    for (std::size_t i = 1; i < a.size(); ++i) p.emplace_back('0', '9');
    out.push_back(p);
    return;
  }
  Ranges lo = prefix;
  lo.emplace_back(a[0], a[0]);
  SameLength(a.substr(1), nines, lo, out);
  if (b[0] - a[0] > 1) {
    Ranges mid = prefix;
    mid.emplace_back(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1));
    for (std::size_t i = 1; i < a.size(); ++i) mid.emplace_back('0', '9');
    out.push_back(mid);
  }
  Ranges hi = prefix;
  hi.emplace_back(b[0], b[0]);
  SameLength(zeros, b.substr(1), hi, out);
}

// Decimal forms (no leading zeros) of the integers [a, b], 0 <= a <= b.
std::vector<Ranges> DigitRanges(long long a, long long b) {
  std::vector<Ranges> out;
  long long lo = a;
  while (lo <= b) {
    const std::string s = std::to_string(lo);
    long long top = 9;  // the largest number of s's length
    for (std::size_t i = 1; i < s.size(); ++i) top = top * 10 + 9;
    const long long hi = std::min(b, top);
    SameLength(s, std::to_string(hi), {}, out);
    if (hi == b) break;
    lo = hi + 1;
  }
  return out;
}

}  // namespace

std::uint32_t SchemaCompiler::Digits(long long a, long long b) {
  const std::uint32_t r = b_.NewRule();
  for (const Ranges& rs : DigitRanges(a, b)) {
    Seq s;
    for (auto [x, y] : rs) s.push_back(b_.Range(static_cast<unsigned char>(x), static_cast<unsigned char>(y)));
    b_.Alt(r, s);
  }
  return r;
}

std::uint32_t SchemaCompiler::NumberSchema(const Json& s, bool integer, const std::string& path) {
  const bool any = !s.contains("minimum") && !s.contains("maximum") && !s.contains("exclusiveMinimum") &&
                   !s.contains("exclusiveMaximum") && !s.contains("multipleOf");
  if (any) return j_.Number(integer);
  auto number = [&](const char* key) {
    const Json& v = s.at(key);
    if (!v.is_number()) Fail(path, std::string("'") + key + "' must be a number, got " + v.dump());
    return v.get<double>();
  };
  // Bounds as integers, inclusive for integers (fractional ones round inward).
  NumBound lo, hi;
  auto set = [&](NumBound& b, const char* key, double x, bool excl, bool lower) {
    if (!std::isfinite(x)) Fail(path, std::string("'") + key + "' must be finite");
    if (integer) {
      double r = lower ? std::ceil(x) : std::floor(x);
      if (excl && r == x) r += lower ? 1 : -1;
      excl = false;
      x = r;
    } else if (x != std::floor(x)) {
      throw Error("unsupported JSON Schema keyword '" + std::string(key) + "' at " + path + "/" + key +
                  ": a fractional bound on a number cannot be enforced exactly (only integer bounds)");
    }
    if (x < -static_cast<double>(kMaxMagnitude) || x > static_cast<double>(kMaxMagnitude)) {
      if ((lower && x < 0) || (!lower && x > 0)) return;  // beyond what the grammar writes anyway
      Fail(path, std::string("'") + key + "' is beyond the 16 digits numbers are written with");
    }
    const long long v = static_cast<long long>(x);
    // Two bounds on one side: the tighter one.
    if (!b.set || (lower ? (v > b.v || (v == b.v && excl)) : (v < b.v || (v == b.v && excl)))) b = {true, v, excl};
  };
  for (const char* key : {"minimum", "exclusiveMinimum"}) {
    if (!s.contains(key)) continue;
    const Json& v = s.at(key);
    if (v.is_boolean()) continue;  // draft 4: a flag on minimum
    const bool excl = std::string(key) == "exclusiveMinimum" ||
                      (s.contains("exclusiveMinimum") && s.at("exclusiveMinimum").is_boolean() &&
                       s.at("exclusiveMinimum").get<bool>());
    set(lo, key, number(key), excl, true);
  }
  for (const char* key : {"maximum", "exclusiveMaximum"}) {
    if (!s.contains(key)) continue;
    const Json& v = s.at(key);
    if (v.is_boolean()) continue;
    const bool excl = std::string(key) == "exclusiveMaximum" ||
                      (s.contains("exclusiveMaximum") && s.at("exclusiveMaximum").is_boolean() &&
                       s.at("exclusiveMaximum").get<bool>());
    set(hi, key, number(key), excl, false);
  }
  int frac_digits = integer ? 0 : JsonGrammar::kFracDigits;
  long long step = 1;
  if (s.contains("multipleOf")) {
    const double m = number("multipleOf");
    if (!(m > 0)) Fail(path, "'multipleOf' must be greater than 0");
    const auto refuse = [&](const std::string& why) {
      throw Error("unsupported JSON Schema keyword 'multipleOf' at " + path + "/multipleOf: " + why);
    };
    double p10 = 1;
    int p = 0;
    while (p <= JsonGrammar::kFracDigits && std::fabs(m * p10 - 1) > 1e-9) p10 *= 10, ++p;
    if (m == std::floor(m) && m <= static_cast<double>(kMaxMagnitude)) {
      step = static_cast<long long>(m);
      frac_digits = 0;
    } else if (p <= JsonGrammar::kFracDigits) {
      if (!integer) frac_digits = p;
    } else if (!integer || std::fabs(1 / m - std::round(1 / m)) > 1e-9) {
      refuse("only 10^-p on numbers and integers k or 1/n on integers can be enforced exactly");
    }
    if (step > 1 && (!lo.set || !hi.set)) refuse("a multiple of an integer other than 1 needs both bounds");
  }
  if (frac_digits == 0) {
    // Integers: inclusive bounds (a number's exclusive ones move inward).
    if (lo.excl) ++lo.v, lo.excl = false;
    if (hi.excl) --hi.v, hi.excl = false;
  }
  const long long a = lo.set ? lo.v : -kMaxMagnitude, z = hi.set ? hi.v : kMaxMagnitude;
  if (a > z || (a == z && (lo.excl || hi.excl))) Fail(path, "the numeric bounds leave no value");
  const std::uint32_t r = b_.NewRule();
  if (step > 1) {
    long long first = a >= 0 ? (a + step - 1) / step * step : -((-a) / step * step);
    if ((z - first) / step >= kMaxListed) {
      throw Error("unsupported JSON Schema keyword 'multipleOf' at " + path +
                  "/multipleOf: more than 1024 multiples in the range");
    }
    int n = 0;
    for (long long v = first; v <= z; v += step, ++n) b_.Alt(r, b_.Lit(std::to_string(v)));
    if (n == 0) Fail(path, "no multiple of 'multipleOf' lies within the bounds");
    return r;
  }
  if (frac_digits == 0) {
    if (a < 0) b_.Alt(r, Seq{b_.Byte('-'), GrammarBuilder::Ref(Digits(z < 0 ? -z : 1, -a))});
    if (z >= 0) b_.Alt(r, {GrammarBuilder::Ref(Digits(std::max(a, 0LL), z))});
    return r;
  }
  // Numbers: the non-negative values, then the negative ones by magnitude.
  if (!hi.set || hi.v > 0 || (hi.v == 0 && !hi.excl)) {
    NumBound mlo = lo.set && lo.v >= 0 ? lo : NumBound{true, 0, false};
    Magnitude(r, {}, mlo, hi, frac_digits);
  }
  if (!lo.set || lo.v < 0) {
    const NumBound mlo = hi.set && hi.v < 0 ? NumBound{true, -hi.v, hi.excl} : NumBound{true, 0, true};
    const NumBound mhi = lo.set ? NumBound{true, -lo.v, lo.excl} : NumBound{};
    Magnitude(r, Seq{b_.Byte('-')}, mlo, mhi, frac_digits);
  }
  return r;
}

// Adds to r the alternatives `sign` + magnitudes m with lo <= m <= hi (each
// bound maybe exclusive; hi unset: 16 integer digits), fractions of at most
// `fd` digits and no exponent.
void SchemaCompiler::Magnitude(std::uint32_t r, const Seq& sign, NumBound lo, NumBound hi, int fd) {
  const auto digit = b_.Range('0', '9');
  const long long top = hi.set ? hi.v : kMaxMagnitude;
  auto frac_any = [&] {
    const std::uint32_t f = b_.NewRule();
    b_.Alt(f, {});
    b_.Alt(f, Seq{b_.Byte('.'), digit, GrammarBuilder::Ref(j_.UpTo({digit}, fd - 1))});
    return f;
  };
  auto frac_zero = [&] {
    const std::uint32_t f = b_.NewRule();
    b_.Alt(f, {});
    b_.Alt(f, Seq{b_.Byte('.'), b_.Byte('0'), GrammarBuilder::Ref(j_.UpTo({b_.Byte('0')}, fd - 1))});
    return f;
  };
  auto frac_nonzero = [&] {  // at least one digit other than 0: above the integer part
    const std::uint32_t f = b_.NewRule();
    for (int k = 0; k < fd; ++k) {  // k zeros, a non-zero digit, then up to fd - k - 1 digits
      Seq s{b_.Byte('.')};
      for (int i = 0; i < k; ++i) s.push_back(b_.Byte('0'));
      s.push_back(b_.Range('1', '9'));
      s.push_back(GrammarBuilder::Ref(j_.UpTo({digit}, fd - k - 1)));
      b_.Alt(f, s);
    }
    return f;
  };
  auto add = [&](long long a, long long z, std::uint32_t frac) {
    if (a > z) return;
    b_.Alt(r, sign + Seq{GrammarBuilder::Ref(Digits(a, z)), GrammarBuilder::Ref(frac)});
  };
  if (lo.v == top && hi.set) {
    if (!lo.excl && !hi.excl) add(lo.v, lo.v, frac_zero());
    return;
  }
  if (lo.v > top) return;
  add(lo.v, lo.v, lo.excl ? frac_nonzero() : frac_any());
  add(lo.v + 1, hi.set ? top - 1 : top, frac_any());
  if (hi.set && !hi.excl) add(top, top, frac_zero());
}

}  // namespace kvshare::detail
