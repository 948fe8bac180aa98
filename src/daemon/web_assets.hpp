// daemon/web_assets: the web console's files (web/), embedded into the binary at build time by
// src/daemon/embed_web.cmake (a generated web_assets.cpp of byte arrays; nothing is downloaded).
#pragma once

#include <cstddef>

namespace tessera::daemon::console {

struct WebAsset {
  const char* name;  // file name under web/, e.g. "app.js"
  const unsigned char* data;
  size_t size;
};
extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

}  // namespace tessera::daemon::console
