// MappedFile: a whole file mapped read-only into memory (POSIX mmap), for model weights.
//
// Model loaders hand out pointers into the mapping (weight views), so the MappedFile must
// outlive them; it is movable, not copyable. Every access is checked against size():
// bytes() and at() throw turbokv::Error instead of reading past the end of a truncated file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace turbokv::engine {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only; throws turbokv::Error naming the path if it cannot be opened,
  // stat'ed or mapped. An empty file gives size() == 0 and data() == nullptr.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  const uint8_t* data() const { return data_; }

  // Pointer to [offset, offset + length); throws turbokv::Error (naming `what`) if that range
  // is not inside the file. Overflow-safe.
  const uint8_t* bytes(size_t offset, size_t length, const char* what = "range") const;

  // True if [offset, offset + length) lies inside the file (overflow-safe).
  bool contains(size_t offset, size_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }

 private:
  void release() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace turbokv::engine
