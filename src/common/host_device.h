// KVSHARE_HOST_DEVICE marks an inline function that CUDA sources (src/cuda/)
// also call from device code, so both backends share one definition; in C++
// sources it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define KVSHARE_HOST_DEVICE __host__ __device__
#else
#define KVSHARE_HOST_DEVICE
#endif
