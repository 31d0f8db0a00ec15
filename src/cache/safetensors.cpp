#include "cache/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "cache/cache_state_util.hpp"
#include "core/check.hpp"
#include "turbokv/checksum.hpp"

namespace turbokv::safetensors {
namespace {

using detail::fail;

constexpr size_t kMaxRank = 8;

class FileSource final : public Source {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    TURBOKV_CHECK(fd_ >= 0, "cannot open '{}': {}", path_, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail("'{}' is not a regular file", path_);
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, size_t n, void* out) const override {
    auto* dst = static_cast<uint8_t*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      TURBOKV_CHECK(got > 0, "'{}': read failed at offset {}: {}", path_, offset,
                    got == 0 ? "unexpected end of file" : std::strerror(errno));
      dst += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  }
  const std::string& name() const override { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource final : public Source {
 public:
  MemorySource(std::span<const uint8_t> bytes, std::string name)
      : bytes_(bytes), name_(std::move(name)) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(uint64_t offset, size_t n, void* out) const override {
    std::memcpy(out, bytes_.data() + offset, n);
  }
  const std::string& name() const override { return name_; }

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
};

// Deepest nesting of objects/arrays, so a hostile header cannot drive the JSON parser deep.
int json_depth(const std::string& text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

uint64_t json_u64(const nlohmann::json& v, const std::string& what) {
  TURBOKV_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                "{} must be a non-negative integer", what);
  return v.get<uint64_t>();
}

std::string build_header(const std::map<std::string, std::string>& metadata,
                         const std::vector<const TensorBlob*>& tensors, uint64_t* data_size) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) {
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const TensorBlob* t : tensors) {
    TURBOKV_CHECK(!t->name.empty() && t->name != "__metadata__",
                  "safetensors: invalid tensor name '{}'", t->name);
    TURBOKV_CHECK(!header.contains(t->name), "safetensors: duplicate tensor name '{}'", t->name);
    const size_t elem = detail::dtype_size(t->dtype);
    TURBOKV_CHECK(elem != 0, "safetensors: tensor '{}' has unknown dtype '{}'", t->name, t->dtype);
    TURBOKV_CHECK(t->shape.size() <= kMaxRank, "safetensors: tensor '{}' has rank {} > {}",
                  t->name, t->shape.size(), kMaxRank);
    const size_t bytes = detail::checked_elements(t->shape, "tensor '" + t->name + "'") * elem;
    TURBOKV_CHECK(bytes == t->data.size(),
                  "safetensors: tensor '{}' holds {} bytes but its shape needs {}", t->name,
                  t->data.size(), bytes);
    header[t->name] = {{"dtype", t->dtype},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  *data_size = offset;
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors: cannot encode the header (metadata must be valid UTF-8): {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  TURBOKV_CHECK(text.size() <= kMaxHeaderBytes, "safetensors: header of {} bytes exceeds {}",
                text.size(), kMaxHeaderBytes);
  return text;
}

void put_u64_le(uint64_t v, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    TURBOKV_CHECK(w > 0, "cannot write '{}': {}", path, std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::unique_ptr<Source> open_file_source(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

std::unique_ptr<Source> memory_source(std::span<const uint8_t> bytes, std::string name) {
  return std::make_unique<MemorySource>(bytes, std::move(name));
}

Reader::Reader(std::unique_ptr<Source> source) : source_(std::move(source)) {
  const std::string& file = source_->name();
  const uint64_t file_size = source_->size();
  TURBOKV_CHECK(file_size >= 8, "'{}': truncated file ({} bytes; a safetensors file starts with "
                "an 8-byte header length)", file, file_size);
  uint8_t len_bytes[8];
  source_->read(0, 8, len_bytes);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  TURBOKV_CHECK(header_len <= kMaxHeaderBytes,
                "'{}': header length {} exceeds the {}-byte limit (corrupt header length?)", file,
                header_len, kMaxHeaderBytes);
  TURBOKV_CHECK(header_len <= file_size - 8,
                "'{}': truncated file: header length {} but only {} bytes follow", file,
                header_len, file_size - 8);
  TURBOKV_CHECK(header_len >= 2, "'{}': corrupt header: length {} is too short", file, header_len);
  std::string text(header_len, '\0');
  source_->read(8, header_len, text.data());
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  TURBOKV_CHECK(json_depth(text) <= kMaxJsonDepth, "'{}': corrupt header: JSON nested deeper "
                "than {} levels", file, kMaxJsonDepth);
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  TURBOKV_CHECK(!header.is_discarded(), "'{}': corrupt header: not valid JSON", file);
  TURBOKV_CHECK(header.is_object(), "'{}': corrupt header: the JSON is not an object", file);

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      TURBOKV_CHECK(value.is_object(), "'{}': __metadata__ is not an object", file);
      for (const auto& [mk, mv] : value.items()) {
        TURBOKV_CHECK(mv.is_string(), "'{}': __metadata__ value of '{}' is not a string", file,
                      mk);
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string what = fmt::format("'{}': tensor '{}'", file, key);
    TURBOKV_CHECK(value.is_object(), "{}: entry is not an object", what);
    TURBOKV_CHECK(value.contains("dtype") && value.contains("shape") &&
                      value.contains("data_offsets") && value.size() == 3,
                  "{}: entry must have exactly dtype, shape and data_offsets", what);
    TensorInfo info;
    info.name = key;
    TURBOKV_CHECK(value["dtype"].is_string(), "{}: dtype is not a string", what);
    info.dtype = value["dtype"].get<std::string>();
    const size_t elem = detail::dtype_size(info.dtype);
    TURBOKV_CHECK(elem != 0, "{}: unsupported dtype '{}'", what, info.dtype);
    const auto& shape = value["shape"];
    TURBOKV_CHECK(shape.is_array() && shape.size() <= kMaxRank,
                  "{}: shape must be an array of at most {} dims", what, kMaxRank);
    for (const auto& d : shape) {
      const uint64_t dim = json_u64(d, what + " shape dimension");
      TURBOKV_CHECK(dim <= (uint64_t{1} << 62), "{}: shape dimension {} is too large", what, dim);
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& offsets = value["data_offsets"];
    TURBOKV_CHECK(offsets.is_array() && offsets.size() == 2,
                  "{}: data_offsets must be [begin, end]", what);
    info.begin = json_u64(offsets[0], what + " data_offsets");
    info.end = json_u64(offsets[1], what + " data_offsets");
    TURBOKV_CHECK(info.begin <= info.end, "{}: data_offsets [{}, {}] are reversed", what,
                  info.begin, info.end);
    TURBOKV_CHECK(info.end <= data_size,
                  "{}: data_offsets [{}, {}] out of range: the data buffer holds {} bytes "
                  "(truncated file?)",
                  what, info.begin, info.end, data_size);
    const size_t n = detail::checked_elements(info.shape, what);
    TURBOKV_CHECK(n <= data_size / elem && n * elem == info.end - info.begin,
                  "{}: {} bytes in data_offsets but shape [{}] of {} needs {}", what,
                  info.end - info.begin, fmt::join(info.shape, ", "), info.dtype,
                  n <= data_size / elem ? fmt::format("{}", n * elem) : std::string("more"));
    tensors_.push_back(std::move(info));
  }

  // The byte ranges, in order, must tile the buffer exactly.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  for (const TensorInfo* t : by_offset) {
    TURBOKV_CHECK(t->begin == expected,
                  "'{}': tensor '{}' data_offsets [{}, {}] {} (expected it to start at {})", file,
                  t->name, t->begin, t->end,
                  t->begin < expected ? "overlap the previous tensor" : "leave a gap", expected);
    expected = t->end;
  }
  TURBOKV_CHECK(expected == data_size,
                "'{}': the tensors cover {} bytes but the data buffer holds {} (trailing bytes "
                "or a wrong header length)",
                file, expected, data_size);
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
}

const TensorInfo* Reader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

TensorBlob Reader::read(const TensorInfo& info, const std::string& as_name,
                        uint64_t* checksum) const {
  TensorBlob blob{as_name, info.dtype, info.shape, {}};
  blob.data.resize(info.end - info.begin);  // validated against the file size in the constructor
  if (checksum == nullptr) {
    if (!blob.data.empty()) source_->read(data_start_ + info.begin, blob.data.size(), blob.data.data());
    return blob;
  }
  // Pieces small enough to stay in L2 between the read and the hash.
  constexpr size_t kPiece = size_t{256} << 10;
  ChecksumStream hash;
  for (size_t done = 0; done < blob.data.size(); done += kPiece) {
    const size_t n = std::min(kPiece, blob.data.size() - done);
    source_->read(data_start_ + info.begin + done, n, blob.data.data() + done);
    hash.update(std::span<const uint8_t>(blob.data.data() + done, n));
  }
  *checksum = hash.digest();
  return blob;
}

std::vector<uint8_t> serialize(const std::map<std::string, std::string>& metadata,
                               const std::vector<const TensorBlob*>& tensors) {
  uint64_t data_size = 0;
  const std::string header = build_header(metadata, tensors, &data_size);
  std::vector<uint8_t> out(8 + header.size());
  put_u64_le(header.size(), out.data());
  std::memcpy(out.data() + 8, header.data(), header.size());
  out.reserve(out.size() + data_size);
  for (const TensorBlob* t : tensors) out.insert(out.end(), t->data.begin(), t->data.end());
  return out;
}

void write_file(const std::string& path, const std::map<std::string, std::string>& metadata,
                const std::vector<const TensorBlob*>& tensors) {
  uint64_t data_size = 0;
  const std::string header = build_header(metadata, tensors, &data_size);
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  TURBOKV_CHECK(fd >= 0, "cannot create a temporary file next to '{}': {}", path,
                std::strerror(errno));
  bool closed = false;
  try {
    uint8_t len[8];
    put_u64_le(header.size(), len);
    write_all(fd, len, 8, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    for (const TensorBlob* t : tensors) write_all(fd, t->data.data(), t->data.size(), tmp);
    TURBOKV_CHECK(::fchmod(fd, 0644) == 0, "cannot set permissions of '{}': {}", tmp,
                  std::strerror(errno));
    TURBOKV_CHECK(::fsync(fd) == 0, "cannot fsync '{}': {}", tmp, std::strerror(errno));
    closed = true;
    TURBOKV_CHECK(::close(fd) == 0, "cannot close '{}': {}", tmp, std::strerror(errno));
  } catch (...) {
    if (!closed) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err));
  }
  // Make the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace turbokv::safetensors
