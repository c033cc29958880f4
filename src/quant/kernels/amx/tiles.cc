// UseTiles (tiles.h): the thread's loaded tile configuration, kept in one
// place for every AMX kernel file.
#include "quant/kernels/amx/tiles.h"

#include <immintrin.h>

#include <cstring>

namespace kvshare::detail {

void UseTiles(const TileConfig& cfg) {
  thread_local TileConfig loaded{.palette = 0};
  if (std::memcmp(&loaded, &cfg, sizeof cfg) == 0) return;
  _tile_loadconfig(&cfg);
  loaded = cfg;
}

}  // namespace kvshare::detail
