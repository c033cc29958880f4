// Whether this process may run Intel AMX tile instructions (the AMX matmul
// level of src/quant/ and its tile kernels, src/quant/kernels/amx/).
//
// Three things must hold, checked once per process:
//  - CPUID.(EAX=7, ECX=0):EDX reports AMX-TILE (bit 24), AMX-INT8 (bit 25)
//    and AMX-BF16 (bit 22);
//  - the OS enables the tile state in XCR0 (bits 17 XTILECFG, 18 XTILEDATA;
//    OSXSAVE first);
//  - Linux grants this process the tile data state: tiles are off until a
//    process asks with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
//    and an AMX instruction before that dies with SIGILL (the kernel's
//    Documentation/arch/x86/xstate.rst). The request is made here, once.
// Anything missing (another CPU, an older kernel, a hypervisor that hides the
// state) gives false, and the AVX-512 VNNI level runs instead.
#pragma once

namespace kvshare::detail {

// The three checks above, with the permission requested on the first call.
// Thread-safe; never throws.
bool AmxUsable();

// AmxUsable() and KVSHARE_KERNEL unset or "amx": the variable names the
// matmul kernel level, and any other level (avx512vnni, avx2, scalar, float)
// also keeps the bf16 attention products (src/attention/amx_attend.cc) off
// the tiles, so one variable holds every AMX use of the process.
bool AmxAllowed();

// Which of the checks failed, for `kvshare info` ("" when AmxUsable()).
const char* AmxUnusableReason();

// AmxAllowed() and AVX512-BF16 (for rounding f32 to bf16 into the tiles):
// what the bf16 tile products need (the attention's, src/attention/
// amx_attend.h, and the float weights', src/quant/bf16_tiles.h).
bool AmxBf16Allowed();
// Why AmxBf16Allowed() is false, for error messages ("" when it is true).
const char* AmxBf16UnusableReason();

}  // namespace kvshare::detail
