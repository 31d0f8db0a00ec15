// Crash-safe saving (cache_io.hpp: temporary file in the target's folder, fsync, rename): a save
// that fails, or a process killed in the middle of one, leaves the previous file intact and
// loadable, and leaves no temporary file behind when it fails cleanly.
//
// Faults are injected three ways:
//  - this test binary interposes write(), fsync(), rename() and mkstemp() (the executable's
//    definitions take precedence over libc's for the library's calls); when armed they fail or
//    return short counts, when disarmed they forward to the kernel;
//  - real kernel failures: a missing folder, a file where a folder should be, a directory at the
//    target path, RLIMIT_FSIZE (writes past the limit fail with EFBIG) in a forked child;
//  - SIGKILL of a forked child at random points of a large save (20 times).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/error.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;

// ---- fault injection ---------------------------------------------------------------------------

namespace fault {

enum class Mode {
  none,
  write_fails_after,    // write() fails with `error` once `budget` bytes have been written
  write_short,          // every write() writes at most 3 bytes (legal POSIX; must still succeed)
  write_returns_zero,   // write() returns 0 once `budget` bytes have been written
  fsync_fails,          // fsync() fails with EIO
  rename_fails,         // rename() fails with EXDEV
  mkstemp_fails,        // mkstemp() fails with EACCES (a read-only folder, even for root)
};

std::atomic<Mode> mode{Mode::none};
std::atomic<long> budget{0};
std::atomic<int> error{ENOSPC};
std::atomic<int> calls{0};  // faulting calls seen while armed

void arm(Mode m, long bytes = 0, int err = ENOSPC) {
  budget = bytes;
  error = err;
  calls = 0;
  mode = m;
}
void disarm() { mode = Mode::none; }

}  // namespace fault

extern "C" ssize_t write(int fd, const void* buf, size_t n) {
  const fault::Mode m = fault::mode.load();
  if (m == fault::Mode::write_short && n > 3) {
    ++fault::calls;
    n = 3;
  } else if (m == fault::Mode::write_fails_after || m == fault::Mode::write_returns_zero) {
    const long left = fault::budget.load();
    if (left <= 0) {
      ++fault::calls;
      if (m == fault::Mode::write_returns_zero) return 0;
      errno = fault::error.load();
      return -1;
    }
    if (static_cast<long>(n) > left) n = static_cast<size_t>(left);  // a short write first
    fault::budget -= static_cast<long>(n);
  }
  return syscall(SYS_write, fd, buf, n);
}

extern "C" int fsync(int fd) {
  if (fault::mode.load() == fault::Mode::fsync_fails) {
    ++fault::calls;
    errno = EIO;
    return -1;
  }
  return static_cast<int>(syscall(SYS_fsync, fd));
}

extern "C" int rename(const char* from, const char* to) {
  if (fault::mode.load() == fault::Mode::rename_fails) {
    ++fault::calls;
    errno = EXDEV;
    return -1;
  }
  return static_cast<int>(syscall(SYS_renameat, AT_FDCWD, from, AT_FDCWD, to));
}

extern "C" int mkstemp(char* templ) {
  if (fault::mode.load() == fault::Mode::mkstemp_fails) {
    ++fault::calls;
    errno = EACCES;
    return -1;
  }
  // mkstemp's contract: replace the trailing XXXXXX and create the file exclusively.
  const size_t len = std::strlen(templ);
  if (len < 6 || std::strcmp(templ + len - 6, "XXXXXX") != 0) {
    errno = EINVAL;
    return -1;
  }
  static std::atomic<unsigned> counter{0};
  std::mt19937 rng(static_cast<unsigned>(::getpid()) * 7919u + counter++);
  const char* alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int attempt = 0; attempt < 100; ++attempt) {
    for (size_t i = len - 6; i < len; ++i) templ[i] = alphabet[rng() % 62];
    const int fd = ::open(templ, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

// ---- tests -------------------------------------------------------------------------------------

namespace turbokv {
namespace {

namespace fs = std::filesystem;

PromptCache make_cache(const char* config, int layers, int heads, int dim, size_t tokens, uint32_t seed) {
  PromptCache pc;
  for (int l = 0; l < layers; ++l) {
    auto c = make_kv_cache(config, heads, dim);
    const size_t n = static_cast<size_t>(heads) * tokens * dim;
    c->append(random_normal(n, seed + 2 * l), random_normal(n, seed + 2 * l + 1), tokens);
    pc.add_layer(std::move(c));
  }
  pc.metadata()["seed"] = std::to_string(seed);
  return pc;
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CrashSafeSave : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("turbokv-crashsafe-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "cache.safetensors").string();
    previous_ = make_cache("tq3", 2, 2, 64, 50, 1);
    save_prompt_cache(path_, previous_);
    previous_bytes_ = read_file(path_);
    ASSERT_EQ(previous_bytes_, serialize_prompt_cache(previous_));
    next_ = make_cache("dense16", 3, 2, 64, 80, 2);
    next_bytes_ = serialize_prompt_cache(next_);
  }
  void TearDown() override {
    fault::disarm();
    fs::remove_all(dir_);
  }

  // The previous file is there, byte for byte, loads, and nothing else is left in the folder.
  void expect_previous_intact(const std::string& what) {
    EXPECT_EQ(read_file(path_), previous_bytes_) << what;
    EXPECT_NO_THROW(load_prompt_cache(path_)) << what;
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"cache.safetensors"}) << what << ": leftover files";
  }

  fs::path dir_;
  std::string path_;
  PromptCache previous_, next_;
  std::vector<uint8_t> previous_bytes_, next_bytes_;
};

TEST_F(CrashSafeSave, WriteFailuresAtEveryStageKeepThePreviousFile) {
  // ENOSPC / EIO / EDQUOT after 0 bytes, inside the length field, inside the header, inside the
  // data and one byte before the end.
  const long size = static_cast<long>(next_bytes_.size());
  for (int err : {ENOSPC, EIO, EDQUOT}) {
    for (long after : {0L, 5L, 100L, size / 2, size - 1}) {
      fault::arm(fault::Mode::write_fails_after, after, err);
      EXPECT_THROW(save_prompt_cache(path_, next_), Error) << "errno " << err << " after " << after;
      fault::disarm();
      EXPECT_GT(fault::calls.load(), 0);
      expect_previous_intact("write failing after " + std::to_string(after) + " bytes");
    }
  }
}

TEST_F(CrashSafeSave, WriteReturningZeroIsAnError) {
  for (long after : {0L, 64L, static_cast<long>(next_bytes_.size()) - 10}) {
    fault::arm(fault::Mode::write_returns_zero, after);
    EXPECT_THROW(save_prompt_cache(path_, next_), Error) << after;
    fault::disarm();
    expect_previous_intact("write returning 0 after " + std::to_string(after));
  }
}

TEST_F(CrashSafeSave, ShortWritesAreResumed) {
  // POSIX allows write() to write less than asked; the writer must loop, not truncate.
  fault::arm(fault::Mode::write_short);
  save_prompt_cache(path_, previous_);
  fault::disarm();
  EXPECT_GT(fault::calls.load(), 100);
  EXPECT_EQ(read_file(path_), previous_bytes_);
}

TEST_F(CrashSafeSave, FsyncRenameAndTempFileFailuresKeepThePreviousFile) {
  for (fault::Mode m : {fault::Mode::fsync_fails, fault::Mode::rename_fails, fault::Mode::mkstemp_fails}) {
    fault::arm(m);
    EXPECT_THROW(save_prompt_cache(path_, next_), Error) << static_cast<int>(m);
    fault::disarm();
    EXPECT_GT(fault::calls.load(), 0);
    expect_previous_intact("mode " + std::to_string(static_cast<int>(m)));
  }
  // And the next save, with no fault, replaces the file.
  save_prompt_cache(path_, next_);
  EXPECT_EQ(read_file(path_), next_bytes_);
}

TEST_F(CrashSafeSave, BadTargetsFailCleanly) {
  EXPECT_THROW(save_prompt_cache((dir_ / "no_such_dir" / "x.safetensors").string(), next_), Error);
  EXPECT_THROW(save_prompt_cache(path_ + "/x.safetensors", next_), Error);  // parent is a file
  fs::create_directories(dir_ / "a_dir");
  EXPECT_THROW(save_prompt_cache((dir_ / "a_dir").string(), next_), Error);  // target is a folder
  EXPECT_TRUE(fs::is_directory(dir_ / "a_dir"));
  EXPECT_TRUE(fs::is_empty(dir_ / "a_dir"));
  fs::remove(dir_ / "a_dir");
  EXPECT_THROW(save_prompt_cache("", next_), Error);
  expect_previous_intact("bad targets");
  if (::geteuid() != 0) {  // root ignores folder permissions (covered by mkstemp_fails above)
    fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(save_prompt_cache(path_, next_), Error);
    fs::permissions(dir_, fs::perms::owner_all);
    expect_previous_intact("read-only folder");
  }
}

TEST_F(CrashSafeSave, FileSizeLimitInAChildKeepsThePreviousFile) {
  // A real short write from the kernel: past RLIMIT_FSIZE, write() fails with EFBIG (SIGXFSZ
  // ignored), as on a full disk or an exceeded quota.
  for (rlim_t limit : {rlim_t{0}, rlim_t{1000}, static_cast<rlim_t>(next_bytes_.size() - 1)}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit rl{limit, limit};
      ::setrlimit(RLIMIT_FSIZE, &rl);
      int code = 0;
      try {
        save_prompt_cache(path_, next_);
        code = 2;  // should have failed
      } catch (const Error&) {
        code = 0;
      } catch (...) {
        code = 3;
      }
      ::_exit(code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child died, status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "limit " << limit;
    expect_previous_intact("RLIMIT_FSIZE " + std::to_string(limit));
  }
}

TEST_F(CrashSafeSave, KilledMidSaveLeavesOldOrNewFileNeverATornOne) {
  // A large save (32 MiB), killed with SIGKILL at random points of it.
  const PromptCache big = make_cache("dense32", 4, 8, 128, 1024, 3);
  const std::vector<uint8_t> big_bytes = serialize_prompt_cache(big);
  auto save_in_child = [&]() {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        save_prompt_cache(path_, big);
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    return pid;
  };
  // How long one uninterrupted save takes here.
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = save_in_child();
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double save_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(read_file(path_), big_bytes);

  std::mt19937 rng(2026);
  int killed_before_rename = 0, completed = 0;
  for (int round = 0; round < 20; ++round) {
    save_prompt_cache(path_, previous_);  // the "previous" file for this round
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename() != "cache.safetensors") fs::remove(e.path());
    }
    const auto delay = std::chrono::microseconds(
        static_cast<long>(std::uniform_real_distribution<double>(0.0, 1.1 * save_us)(rng)));
    pid = save_in_child();
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(delay);
    ::kill(pid, SIGKILL);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    const std::vector<uint8_t> now = read_file(path_);
    if (now == previous_bytes_) {
      ++killed_before_rename;
    } else {
      ASSERT_EQ(now, big_bytes) << "round " << round << ": torn file of " << now.size() << " bytes";
      ++completed;
    }
    EXPECT_NO_THROW(load_prompt_cache(path_)) << "round " << round;
  }
  std::printf("[ kill test ] save %.0f us; %d rounds killed before the rename, %d completed\n",
              save_us, killed_before_rename, completed);
  EXPECT_GT(killed_before_rename, 0) << "no kill landed inside a save; the test proved nothing";
}

}  // namespace
}  // namespace turbokv
