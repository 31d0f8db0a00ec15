// A strict reader and a crash-safe writer of the safetensors format
// (https://huggingface.co/docs/safetensors): 8-byte little-endian header length N, N bytes of a
// JSON object {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [b, e]}},
// then the data buffer; offsets are relative to the buffer's start.
//
// The reader trusts nothing: the header length is capped (kMaxHeaderBytes) and checked against
// the file size before it is read; the JSON must be an object nested at most a few levels; every
// tensor's dtype must be known, its shape non-negative with a non-overflowing element count,
// its byte range exactly shape-product * dtype-size; the ranges, sorted, must tile the buffer
// from 0 to its end with no gap or overlap. Every allocation is sized by a field checked
// against the file size first. Violations throw turbokv::Error naming the file and the problem.
//
// The writer pads the header with spaces to a multiple of 8 bytes (so tensor data is 8-byte
// aligned, as the reference implementation does), writes to a temporary file in the target's
// folder, fsyncs it, renames it over the target and fsyncs the folder: a crash leaves either the
// old file or the new one, never a torn file.
//
// Thread-safety: a Reader is not shared between threads; distinct readers/writes are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "turbokv/kv_cache.hpp"

namespace turbokv::safetensors {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB
constexpr int kMaxJsonDepth = 4;

struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range within the data buffer
  uint64_t end = 0;
};

// Bytes of the data source the reader reads from: a file or (for tests) a memory buffer.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at offset (already checked to be in range) into out.
  virtual void read(uint64_t offset, size_t n, void* out) const = 0;
  virtual const std::string& name() const = 0;
};

std::unique_ptr<Source> open_file_source(const std::string& path);
std::unique_ptr<Source> memory_source(std::span<const uint8_t> bytes, std::string name);

class Reader {
 public:
  // Reads and validates the header; throws turbokv::Error on any problem.
  explicit Reader(std::unique_ptr<Source> source);

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  // Reads a tensor's bytes; `as_name` is the name the returned blob carries. With `checksum`,
  // also sets it to the XXH3-64 of the bytes (turbokv/checksum.hpp), computed piece by piece as
  // they are read so each piece is hashed while still in cache (one pass over memory, not two).
  TensorBlob read(const TensorInfo& info, const std::string& as_name,
                  uint64_t* checksum = nullptr) const;
  const std::string& source_name() const { return source_->name(); }
  uint64_t source_size() const { return source_->size(); }

 private:
  std::unique_ptr<Source> source_;
  uint64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
};

// Writes metadata and tensors (in the given order, data contiguous from offset 0).
// Tensor names must be unique, non-empty and not "__metadata__"; dtypes known; data sizes must
// match the shapes.
void write_file(const std::string& path, const std::map<std::string, std::string>& metadata,
                const std::vector<const TensorBlob*>& tensors);
// The same bytes, in memory (tests, fuzzing).
std::vector<uint8_t> serialize(const std::map<std::string, std::string>& metadata,
                               const std::vector<const TensorBlob*>& tensors);

}  // namespace turbokv::safetensors
