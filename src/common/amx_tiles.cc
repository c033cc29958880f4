// UseTiles (tiles.h).
#include "common/amx_tiles.h"

#include <immintrin.h>

#include <cstring>

namespace kvshare::detail {

// The configuration is read back from the thread's tile state (sttilecfg)
// rather than remembered: other code on the thread changes it too (oneDNN's
// AMX kernels, for the bf16 attention and encoder products, load their own
// and release the tiles after), and a remembered one went stale there
// (Gemma3Test.CachedDecodeEqualsRecomputation, logits off by 100).
void UseTiles(const TileConfig& cfg) {
  TileConfig current;
  _tile_storeconfig(&current);
  if (std::memcmp(&current, &cfg, sizeof cfg) == 0) return;
  _tile_loadconfig(&cfg);
}

TileScope::~TileScope() { _tile_release(); }

const TileConfig& FullTiles() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.rows[t] = kTileRows, c.colsb[t] = 64;
    return c;
  }();
  return cfg;
}

}  // namespace kvshare::detail
