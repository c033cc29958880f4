// GGUF header parsing and validation (docs/architecture.md §4).
#include "kvshare/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kvshare/common/error.h"

namespace kvshare {

namespace {

constexpr std::uint32_t kMagic = 0x46554747u;  // "GGUF" little-endian
constexpr std::uint64_t kMaxNameLen = 63;      // ggml: GGML_MAX_NAME = 64 incl. NUL
constexpr std::uint64_t kMaxKeyLen = 65535;
constexpr int kMaxArrayDepth = 8;

struct Mapping {
  void* addr = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (addr != nullptr && size > 0) munmap(addr, size);
  }
};

// Minimum encoded size of one element of a metadata type (for count bounds).
std::uint64_t MinEncodedSize(std::uint32_t t) {
  switch (static_cast<GgufType>(t)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 0;  // unknown
}

}  // namespace

// Cursor over the bytes with bounds-checked reads; every error names the
// field being read and the byte offset where it starts.
class GgufParser {
 public:
  GgufParser(const std::uint8_t* data, std::size_t size, const std::string& name)
      : p_(data), size_(size), name_(name) {}

  void Run(GgufFile& f);

 private:
  [[noreturn]] void Fail(const std::string& field, std::uint64_t at, const std::string& what) const {
    throw Error("GGUF " + name_ + ": " + field + " at byte " + std::to_string(at) + ": " + what);
  }
  void Need(const std::string& field, std::uint64_t n) const {
    if (n > size_ - pos_) {
      Fail(field, pos_,
           "needs " + std::to_string(n) + " bytes but only " + std::to_string(size_ - pos_) +
               " remain (file truncated?)");
    }
  }
  template <typename T>
  T Read(const std::string& field) {
    Need(field, sizeof(T));
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // u64 in v2/v3.
  std::uint64_t ReadCount(const std::string& field) { return Read<std::uint64_t>(field); }
  std::string_view ReadString(const std::string& field, std::uint64_t max_len) {
    const std::uint64_t at = pos_;
    const std::uint64_t len = ReadCount(field + " length");
    if (len > max_len) {
      Fail(field + " length", at, std::to_string(len) + " exceeds the maximum of " + std::to_string(max_len));
    }
    if (len > size_ - pos_) {
      Fail(field + " length", at,
           std::to_string(len) + " exceeds the " + std::to_string(size_ - pos_) + " bytes left in the file");
    }
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), static_cast<std::size_t>(len));
    pos_ += len;
    return s;
  }
  void ReadValue(GgufValue& v, std::uint32_t type, const std::string& field, int depth);

  const std::uint8_t* p_;
  std::uint64_t pos_ = 0;
  std::uint64_t size_;
  const std::string& name_;
};

void GgufParser::ReadValue(GgufValue& v, std::uint32_t type, const std::string& field, int depth) {
  v.type = static_cast<GgufType>(type);
  v.file_offset = pos_;
  switch (v.type) {
    case GgufType::kUint8:
      v.u = Read<std::uint8_t>(field);
      v.i = static_cast<std::int64_t>(v.u);
      return;
    case GgufType::kInt8:
      v.i = Read<std::int8_t>(field);
      v.u = static_cast<std::uint64_t>(v.i);
      return;
    case GgufType::kUint16:
      v.u = Read<std::uint16_t>(field);
      v.i = static_cast<std::int64_t>(v.u);
      return;
    case GgufType::kInt16:
      v.i = Read<std::int16_t>(field);
      v.u = static_cast<std::uint64_t>(v.i);
      return;
    case GgufType::kUint32:
      v.u = Read<std::uint32_t>(field);
      v.i = static_cast<std::int64_t>(v.u);
      return;
    case GgufType::kInt32:
      v.i = Read<std::int32_t>(field);
      v.u = static_cast<std::uint64_t>(v.i);
      return;
    case GgufType::kUint64:
      v.u = Read<std::uint64_t>(field);
      v.i = static_cast<std::int64_t>(v.u);
      return;
    case GgufType::kInt64:
      v.i = Read<std::int64_t>(field);
      v.u = static_cast<std::uint64_t>(v.i);
      return;
    case GgufType::kFloat32: v.f = Read<float>(field); return;
    case GgufType::kFloat64: v.f = Read<double>(field); return;
    case GgufType::kBool: {
      const std::uint64_t at = pos_;
      const std::uint8_t b = Read<std::uint8_t>(field);
      if (b > 1) Fail(field, at, "bool value " + std::to_string(b) + " is not 0 or 1");
      v.u = b;
      v.i = b;
      return;
    }
    case GgufType::kString: v.str = ReadString(field, std::numeric_limits<std::uint64_t>::max()); return;
    case GgufType::kArray: {
      const std::uint64_t at = pos_;
      if (depth >= kMaxArrayDepth) {
        Fail(field + " array", at, "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
      }
      const std::uint32_t et = Read<std::uint32_t>(field + " array element type");
      const std::uint64_t min = MinEncodedSize(et);
      if (min == 0) Fail(field + " array element type", at, "unknown metadata value type " + std::to_string(et));
      const std::uint64_t count_at = pos_;
      const std::uint64_t count = ReadCount(field + " array count");
      if (count > (size_ - pos_) / min) {
        Fail(field + " array count", count_at,
             std::to_string(count) + " elements of " + GgufTypeName(static_cast<GgufType>(et)) + " cannot fit in the " +
                 std::to_string(size_ - pos_) + " bytes left in the file");
      }
      v.elem_type = static_cast<GgufType>(et);
      v.count = count;
      v.raw = p_ + pos_;
      if (v.elem_type == GgufType::kString) {
        v.strings.reserve(static_cast<std::size_t>(count));
        for (std::uint64_t k = 0; k < count; ++k) {
          v.strings.push_back(
              ReadString(field + "[" + std::to_string(k) + "]", std::numeric_limits<std::uint64_t>::max()));
        }
      } else if (v.elem_type == GgufType::kArray) {
        v.items.resize(static_cast<std::size_t>(count));
        for (std::uint64_t k = 0; k < count; ++k) {
          ReadValue(v.items[k], et, field + "[" + std::to_string(k) + "]", depth + 1);
        }
      } else if (v.elem_type == GgufType::kBool) {
        for (std::uint64_t k = 0; k < count; ++k) {
          if (p_[pos_ + k] > 1) Fail(field + "[" + std::to_string(k) + "]", pos_ + k, "bool value is not 0 or 1");
        }
        pos_ += count;
      } else {
        pos_ += count * min;  // bounded above
      }
      return;
    }
  }
  Fail(field + " type", v.file_offset - 4, "unknown metadata value type " + std::to_string(type));
}

void GgufParser::Run(GgufFile& f) {
  const std::uint32_t magic = Read<std::uint32_t>("magic");
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%08x is not \"GGUF\" (0x%08x); not a GGUF file", magic, kMagic);
    Fail("magic", 0, buf);
  }
  f.version_ = Read<std::uint32_t>("version");
  if (f.version_ != 2 && f.version_ != 3) {
    Fail("version", 4, std::to_string(f.version_) + " is not supported (expected 2 or 3)");
  }
  const std::uint64_t n_tensors = ReadCount("tensor_count");
  const std::uint64_t n_kv = ReadCount("metadata_kv_count");
  // Each tensor info takes >= 24 bytes, each kv >= 13: reject counts the file cannot hold.
  if (n_tensors > (size_ - pos_) / 24) {
    Fail("tensor_count", 8,
         std::to_string(n_tensors) + " tensors cannot fit in a " + std::to_string(size_) + "-byte file");
  }
  if (n_kv > (size_ - pos_) / 13) {
    Fail("metadata_kv_count", 16,
         std::to_string(n_kv) + " entries cannot fit in a " + std::to_string(size_) + "-byte file");
  }

  f.keys_.reserve(static_cast<std::size_t>(n_kv));
  f.values_.reserve(static_cast<std::size_t>(n_kv));
  for (std::uint64_t k = 0; k < n_kv; ++k) {
    const std::string kf = "metadata[" + std::to_string(k) + "]";
    const std::uint64_t key_at = pos_;
    std::string key(ReadString(kf + " key", kMaxKeyLen));
    if (key.empty()) Fail(kf + " key", key_at, "empty key");
    if (f.key_index_.count(key) != 0) Fail(kf + " key '" + key + "'", key_at, "duplicate key");
    const std::string field = "metadata '" + key + "'";
    const std::uint64_t type_at = pos_;
    const std::uint32_t type = Read<std::uint32_t>(field + " type");
    if (MinEncodedSize(type) == 0)
      Fail(field + " type", type_at, "unknown metadata value type " + std::to_string(type));
    GgufValue v;
    ReadValue(v, type, field, 0);
    if (key == "general.alignment") {
      if (v.type != GgufType::kUint32) {
        Fail(field, v.file_offset, "must be uint32, got " + GgufTypeName(v.type));
      }
      if (v.u == 0 || (v.u & (v.u - 1)) != 0) {
        Fail(field, v.file_offset, std::to_string(v.u) + " is not a power of two");
      }
      f.alignment_ = static_cast<std::uint32_t>(v.u);
    }
    // keys_ was reserved: push_back never reallocates, so the view stays valid.
    f.keys_.push_back(std::move(key));
    f.values_.push_back(std::move(v));
    f.key_index_.emplace(f.keys_.back(), f.keys_.size() - 1);
  }

  struct Pending {
    std::uint64_t info_at;
  };
  std::vector<Pending> pending;
  f.tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t t = 0; t < n_tensors; ++t) {
    std::string tf = "tensor[" + std::to_string(t) + "]";
    const std::uint64_t info_at = pos_;
    GgufTensor ti;
    ti.name = std::string(ReadString(tf + " name", kMaxNameLen));
    if (ti.name.empty()) Fail(tf + " name", info_at, "empty tensor name");
    tf += " '" + ti.name + "'";
    const std::uint64_t nd_at = pos_;
    const std::uint32_t n_dims = Read<std::uint32_t>(tf + " n_dims");
    if (n_dims > 4) Fail(tf + " n_dims", nd_at, std::to_string(n_dims) + " exceeds the maximum of 4");
    ti.n_dims = static_cast<int>(n_dims);
    std::uint64_t elems = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t dim_at = pos_;
      const std::string df = tf + " ne[" + std::to_string(d) + "]";
      const std::uint64_t ne = Read<std::uint64_t>(df);
      if (ne == 0) Fail(df, dim_at, "dimension is 0 (must be positive)");
      if (ne > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          elems > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / ne) {
        Fail(df, dim_at, "dimension " + std::to_string(ne) + " overflows the element count");
      }
      elems *= ne;
      ti.ne[d] = static_cast<std::int64_t>(ne);
    }
    const std::uint64_t type_at = pos_;
    const std::uint32_t type = Read<std::uint32_t>(tf + " type");
    if (!IsKnownGgmlType(type)) Fail(tf + " type", type_at, "unknown ggml type " + std::to_string(type));
    ti.type = static_cast<GgmlType>(type);
    const std::uint64_t bs = static_cast<std::uint64_t>(GgmlBlockSize(ti.type));
    if (static_cast<std::uint64_t>(ti.ne[0]) % bs != 0) {
      Fail(tf + " ne[0]", nd_at + 4,
           std::to_string(ti.ne[0]) + " is not a multiple of the " + GgmlTypeName(ti.type) + " block size " +
               std::to_string(bs));
    }
    const std::uint64_t blocks = elems / bs;
    const std::uint64_t bb = static_cast<std::uint64_t>(GgmlBlockBytes(ti.type));
    if (blocks > std::numeric_limits<std::uint64_t>::max() / bb) Fail(tf + " ne", nd_at + 4, "byte size overflows");
    const std::uint64_t nbytes = blocks * bb;
    const std::uint64_t off_at = pos_;
    ti.offset = Read<std::uint64_t>(tf + " offset");
    if (ti.offset % f.alignment_ != 0) {
      Fail(tf + " offset", off_at,
           std::to_string(ti.offset) + " is not a multiple of the alignment " + std::to_string(f.alignment_));
    }
    if (nbytes > size_)
      Fail(tf + " ne", nd_at + 4,
           std::to_string(nbytes) + " bytes of data exceed the file size " + std::to_string(size_));
    ti.nbytes = static_cast<std::size_t>(nbytes);
    if (f.tensor_index_.count(ti.name) != 0) Fail(tf + " name", info_at, "duplicate tensor name");
    f.tensors_.push_back(std::move(ti));  // reserved: no reallocation
    f.tensor_index_.emplace(f.tensors_.back().name, f.tensors_.size() - 1);
    pending.push_back({off_at});
  }

  // Data section: aligned start, every tensor inside the file.
  const std::uint64_t a = f.alignment_;
  const std::uint64_t pad = (a - pos_ % a) % a;
  if (pad > size_ - pos_ && n_tensors > 0)
    Fail("data section padding", pos_, "file ends before the aligned data section");
  f.data_offset_ = pos_ + (pad <= size_ - pos_ ? pad : size_ - pos_);
  const std::uint64_t data_size = size_ - f.data_offset_;
  for (std::size_t t = 0; t < f.tensors_.size(); ++t) {
    GgufTensor& ti = f.tensors_[t];
    if (ti.offset > data_size || ti.nbytes > data_size - ti.offset) {
      Fail("tensor[" + std::to_string(t) + "] '" + ti.name + "' offset", pending[t].info_at,
           "data [" + std::to_string(ti.offset) + ", +" + std::to_string(ti.nbytes) +
               ") extends beyond the end of the file (data section is " + std::to_string(data_size) + " bytes)");
    }
    ti.data = p_ + f.data_offset_ + ti.offset;
  }
  // No two tensors share bytes: llama.cpp's reader takes each offset only as
  // the running aligned sum of the sizes before it, so an overlap is a
  // damaged file, not a layout another writer chose.
  std::vector<std::size_t> order(f.tensors_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return f.tensors_[x].offset < f.tensors_[y].offset; });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& prev = f.tensors_[order[k - 1]];
    const GgufTensor& cur = f.tensors_[order[k]];
    if (prev.offset + prev.nbytes > cur.offset) {
      const auto span = [](const GgufTensor& t) {
        return "[" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) + ")";
      };
      Fail("tensor[" + std::to_string(order[k]) + "] '" + cur.name + "' offset", pending[order[k]].info_at,
           "data " + span(cur) + " overlaps tensor[" + std::to_string(order[k - 1]) + "] '" + prev.name + "' " +
               span(prev));
    }
  }
}

GgufFile GgufFile::Parse(const std::uint8_t* data, std::size_t size, std::string name) {
  GgufFile f;
  f.name_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  static const std::uint8_t kEmpty = 0;
  GgufParser parser(data != nullptr ? data : &kEmpty, data != nullptr ? size : 0, f.name_);
  parser.Run(f);
  return f;
}

GgufFile GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("GGUF " + path + ": cannot open: " + std::strerror(errno) + " (check the model path)");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error("GGUF " + path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("GGUF " + path + ": not a regular file");
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<std::size_t>(st.st_size);
  if (m->size > 0) {
    void* addr = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error("GGUF " + path + ": mmap failed: " + std::strerror(e));
    }
    m->addr = addr;
  }
  ::close(fd);
  GgufFile f = Parse(static_cast<const std::uint8_t*>(m->addr), m->size, path);
  f.mapping_ = std::move(m);
  return f;
}

void GgufFile::ReleasePages(const void* data, std::size_t size) const {
  if (mapping_ == nullptr || size_ == 0) return;
  const auto lo = reinterpret_cast<std::uintptr_t>(data), base = reinterpret_cast<std::uintptr_t>(base_);
  if (lo < base || size > size_ || lo - base > size_ - size) return;
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t first = (lo + page - 1) / page * page, last = (lo + size) / page * page;
  // A read-only private mapping never written: its pages are the file's.
  if (first < last) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile ParseGguf(const std::uint8_t* data, std::size_t size) { return GgufFile::Parse(data, size); }

}  // namespace kvshare
