// AMX detection and the Linux permission request (cpu_amx.h). Plain C++:
// no tile instruction runs here, so the file needs no AMX compile flags.
#include "common/cpu_amx.h"

#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cstdint>

namespace kvshare::detail {
namespace {

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__) && defined(__linux__)
constexpr int kArchGetXcompPerm = 0x1022;  // arch_prctl codes (asm/prctl.h)
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

std::uint64_t Xcr0() {
  std::uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

const char* Check() {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 7) return "CPUID has no leaf 7";
  __cpuid_count(1, 0, a, b, c, d);
  if ((c & (1u << 27)) == 0) return "the OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE = 0)";
  __cpuid_count(7, 0, a, b, c, d);
  const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1, bf16 = (d >> 22) & 1;
  if (!tile || !int8 || !bf16) return "the CPU lacks AMX-TILE, AMX-INT8 or AMX-BF16 (CPUID.7.0:EDX bits 24, 25, 22)";
  const std::uint64_t tiles = (std::uint64_t{1} << 17) | (std::uint64_t{1} << 18);
  if ((Xcr0() & tiles) != tiles) return "the OS does not enable the tile state (XCR0 bits 17 and 18)";
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) == 0 && (perm >> kXfeatureXtiledata) & 1) return "";
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return "Linux refused the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM)";
  perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0 || ((perm >> kXfeatureXtiledata) & 1) == 0)
    return "Linux did not grant the tile data permission (arch_prctl ARCH_GET_XCOMP_PERM)";
  return "";
}
#else
const char* Check() { return "AMX needs Linux on x86-64"; }
#endif

const char* Reason() {
  static const char* const reason = Check();  // once per process, thread-safe
  return reason;
}

}  // namespace

bool AmxUsable() { return Reason()[0] == '\0'; }

const char* AmxUnusableReason() { return Reason(); }

bool AmxAllowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("KVSHARE_KERNEL");
    return AmxUsable() && (env == nullptr || *env == '\0' || std::strcmp(env, "amx") == 0);
  }();
  return allowed;
}

bool AmxBf16Allowed() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool allowed = AmxAllowed() && __builtin_cpu_supports("avx512bf16");
  return allowed;
#else
  return false;
#endif
}

const char* AmxBf16UnusableReason() {
  return !AmxUsable()        ? AmxUnusableReason()
         : !AmxAllowed()     ? "KVSHARE_KERNEL holds the kernels below amx"
         : !AmxBf16Allowed() ? "no AVX512-BF16"
                             : "";
}

}  // namespace kvshare::detail
