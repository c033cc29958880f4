#include "common/read_file.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace kvshare::detail {

std::vector<std::uint8_t> ReadFileLimited(const std::string& path, std::size_t max_bytes,
                                          const ReadFileErrors& errors) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw errors.unreadable("a directory");
  std::uintmax_t size = 0;
  if (std::filesystem::is_regular_file(path, ec)) {
    size = std::filesystem::file_size(path, ec);
    if (!ec && size > max_bytes) throw errors.over(std::to_string(size));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw errors.unreadable(std::error_code(errno, std::generic_category()).message());
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<std::uint8_t> bytes;
  bytes.reserve(static_cast<std::size_t>(size) + kChunk);  // the last read's room: no copy
  while (in) {
    const std::size_t have = bytes.size();
    const std::size_t room = max_bytes - have;  // bytes.size() <= max_bytes here
    const std::size_t want = room >= kChunk ? kChunk : room + 1;
    bytes.resize(have + want);
    in.read(reinterpret_cast<char*>(bytes.data() + have), static_cast<std::streamsize>(want));
    bytes.resize(have + static_cast<std::size_t>(in.gcount()));
    if (bytes.size() > max_bytes) throw errors.over("more than " + std::to_string(max_bytes));
  }
  if (in.bad()) throw errors.unreadable("a read error");
  return bytes;
}

}  // namespace kvshare::detail
