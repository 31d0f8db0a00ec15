// Helpers shared by the fuzz targets.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace turbokv::fuzz {

// Path-only loaders (mmap-based) read the input from a file: one per process in /dev/shm (a
// RAM file system, so a run is not disk-bound), rewritten for each input, removed at exit.
class InputFile {
 public:
  explicit InputFile(const char* tag) {
    const char* dir = std::getenv("TURBOKV_FUZZ_TMPDIR");
    path_ = std::string(dir ? dir : "/dev/shm") + "/turbokv-fuzz-" + tag + "-" + std::to_string(getpid());
  }
  ~InputFile() { unlink(path_.c_str()); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& write(const uint8_t* data, size_t size) {
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    close(fd);
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace turbokv::fuzz
