// Reads a file whole, or a pipe or device (a shell's <(ffmpeg ...),
// /dev/stdin) to its end, within a byte limit: the image and audio loaders'
// shared path from a file name to its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvshare/common/error.h"

namespace kvshare::detail {

struct ReadFileErrors {
  // The error for more than the limit; `size` is the file's size in bytes,
  // or "more than N" for a stream (read up to one byte past the limit).
  std::function<Error(const std::string& size)> over;
  // The error for a path that cannot be read; `reason` is "a directory",
  // the open call's errno text, or "a read error".
  std::function<Error(const std::string& reason)> unreadable;
};

// A regular file's size is checked before a byte is read. Throws what
// `errors` builds.
std::vector<std::uint8_t> ReadFileLimited(const std::string& path, std::size_t max_bytes, const ReadFileErrors& errors);

}  // namespace kvshare::detail
