// GGUF (versions 2 and 3, little-endian) reader and writer.
//
// File layout: "GGUF" magic, uint32 version, uint64 tensor_count, uint64 kv_count; kv_count
// metadata pairs (key: uint64 length + UTF-8 bytes; uint32 value type; value); tensor_count
// tensor infos (name string; uint32 n_dims; n_dims x uint64 dims, dims[0] the fastest-varying
// (row length); uint32 ggml type; uint64 offset relative to the data section); padding to the
// alignment (metadata key general.alignment, default 32); the data section. Each tensor's offset
// is a multiple of the alignment. Strings in values use the same length-prefixed form; an array
// is uint32 element type, uint64 count, then the elements.
//
// GgufFile validates every field on open (magic, version, counts against the file size, each
// string and array length, value and element types, tensor dims/types/offsets/alignment, data
// inside the file) and throws turbokv::Error naming the field; nothing is allocated from an
// unchecked size. Tensor data stays in the read-only mapping: TensorInfo::data points into it
// and lives as long as the GgufFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/mapped_file.hpp"
#include "engine/tensor/tensor_types.hpp"

namespace turbokv::engine {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

const char* gguf_value_type_name(GgufValueType type);

constexpr uint32_t kGgufDefaultAlignment = 32;

class GgufFile {
 public:
  struct TensorInfo {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> shape;  // GGUF order: shape[0] is the row length (fastest-varying)
    const void* data = nullptr;  // inside the mapping
    size_t nbytes = 0;
    uint64_t offset = 0;         // relative to the data section, as stored
  };

  static GgufFile open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }

  bool has(const std::string& key) const { return values_.count(key) != 0; }
  std::vector<std::string> keys() const;
  // Type of the value (ARRAY for arrays); throws if the key is absent.
  GgufValueType value_type(const std::string& key) const;
  // Element type and length of an array value; throws if absent or not an array.
  GgufValueType array_type(const std::string& key) const;
  uint64_t array_size(const std::string& key) const;

  // Typed getters throw turbokv::Error naming the key if it is absent or of another type.
  // get_int accepts every integer type (and bool); get_float accepts floats and integers.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;

  const TensorInfo* find_tensor(const std::string& name) const;  // nullptr if absent
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The tensor as a [rows][cols] matrix: cols = shape[0], rows = product of the other dims.
  // Throws if absent.
  WeightMatrix matrix(const std::string& name) const;

 private:
  struct Value {
    GgufValueType type;
    GgufValueType element_type;  // arrays only
    uint64_t count = 0;          // arrays only
    size_t offset = 0;           // file offset of the payload (after the type / array header)
  };

  GgufFile() = default;
  const Value& value(const std::string& key) const;
  const Value& array_of(const std::string& key, const char* wanted) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  size_t data_offset_ = 0;
  std::map<std::string, Value> values_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Builds a GGUF v3 file: metadata in insertion order, tensors in insertion order, each tensor's
// data aligned. Setting a key twice replaces its value.
class GgufWriter {
 public:
  void set_string(const std::string& key, const std::string& value);
  void set_uint32(const std::string& key, uint32_t value);
  void set_int32(const std::string& key, int32_t value);
  void set_uint64(const std::string& key, uint64_t value);
  void set_float32(const std::string& key, float value);
  void set_bool(const std::string& key, bool value);
  void set_string_array(const std::string& key, const std::vector<std::string>& values);
  void set_float32_array(const std::string& key, const std::vector<float>& values);
  void set_int32_array(const std::string& key, const std::vector<int32_t>& values);
  // Sets general.alignment (a power of two) and uses it for the data section.
  void set_alignment(uint32_t alignment);

  // shape in GGUF order (shape[0] = row length); bytes must be exactly the encoded tensor.
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                  std::vector<uint8_t> bytes);

  // The whole file as bytes (tests), or written to `path` (throws turbokv::Error on I/O failure).
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  void set_raw(const std::string& key, GgufValueType type, std::vector<uint8_t> payload);
  std::vector<uint8_t> header_and_infos() const;  // everything before the data section's padding

  std::vector<std::pair<std::string, std::pair<GgufValueType, std::vector<uint8_t>>>> kv_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = kGgufDefaultAlignment;
};

// Size in bytes of a tensor of `type` with `shape` (GGUF order); throws on a bad shape.
size_t gguf_tensor_bytes(GgmlType type, const std::vector<int64_t>& shape);

}  // namespace turbokv::engine
