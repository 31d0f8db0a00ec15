// GGUF reader: one validating pass over the header, metadata and tensor infos at open; values
// are decoded on demand from the mapping, whose bounds that pass already checked.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>

#include "engine/model/gguf.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {
namespace {

constexpr uint32_t kMaxDims = 4;
// Smallest possible encodings, used to cap counts against the bytes left before allocating.
constexpr size_t kMinKvBytes = 8 + 4 + 1;                // empty key, type, one-byte value
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, one dim

size_t scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY: return 0;
  }
  return 0;
}

bool valid_value_type(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

// Reads little-endian fields from the mapping, failing with the field's name instead of
// reading past the end.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(fmt::format("GGUF '{}': {}", path_, fmt::format(format, std::forward<Args>(args)...)));
  }

  void need(size_t n, std::string_view what) const {
    if (n > remaining()) {
      fail("truncated: {} at offset {} needs {} bytes, only {} left", what, pos_, n, remaining());
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(std::string_view what) {
    const uint64_t length = read<uint64_t>(what);
    if (length > remaining()) {
      fail("{}: string length {} at offset {} runs past the end of the file ({} bytes left)", what, length,
           pos_ - 8, remaining());
    }
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(length));
    pos_ += static_cast<size_t>(length);
    return s;
  }

  // One element of a string array; the field name is only formatted on failure, since a
  // vocabulary has hundreds of thousands of them.
  void skip_array_string(const std::string& key, uint64_t index) {
    if (remaining() < 8) fail("truncated: '{}'[{}] at offset {} needs 8 bytes, only {} left", key, index, pos_, remaining());
    uint64_t length;
    std::memcpy(&length, data_ + pos_, 8);
    pos_ += 8;
    if (length > remaining()) {
      fail("'{}'[{}]: string length {} at offset {} runs past the end of the file ({} bytes left)", key, index,
           length, pos_ - 8, remaining());
    }
    pos_ += static_cast<size_t>(length);
  }

  void skip(size_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  const std::string& path_;
  size_t pos_ = 0;
};

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// The tensors must tile the data section the way GGUF writers lay it out (llama.cpp's
// gguf_write and GgufWriter): in offset order, each starts where the previous one ends rounded
// up to the alignment, the first at 0, and the file ends inside the last one's padding. So an
// offset moved onto another tensor's bytes (an overlap), or a type or shape edited to one of
// another size (a gap, an overlap or trailing bytes), is refused instead of reading the wrong
// bytes. An edit that keeps every padded size (F16 <-> BF16, or a size change smaller than the
// alignment padding) cannot be seen in the layout; nothing in GGUF checksums the data.
void check_tiling(const std::vector<GgufFile::TensorInfo>& tensors, uint32_t alignment, size_t data_bytes,
                  const Cursor& in) {
  if (tensors.empty()) return;
  std::vector<const GgufFile::TensorInfo*> order;
  order.reserve(tensors.size());
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  uint64_t expected = 0;  // where the next tensor must start
  const GgufFile::TensorInfo* prev = nullptr;
  for (const auto* t : order) {
    if (t->offset < expected) {
      in.fail("tensor '{}' data [{}, {}) overlaps tensor '{}' [{}, {})", t->name, t->offset, t->offset + t->nbytes,
              prev->name, prev->offset, prev->offset + prev->nbytes);
    }
    if (t->offset > expected) {
      if (prev == nullptr) {
        in.fail("tensor '{}' is the first in the data section but starts at offset {}, not 0", t->name, t->offset);
      }
      in.fail("tensor '{}' starts at {} but tensor '{}' ends at {} ({} with alignment padding): {} unused bytes "
              "between them (a wrong offset, type or shape)", t->name, t->offset, prev->name,
              prev->offset + prev->nbytes, expected, t->offset - expected);
    }
    expected = align_up(t->offset + t->nbytes, alignment);
    prev = t;
  }
  const uint64_t end = prev->offset + prev->nbytes;
  if (data_bytes > expected) {
    in.fail("{} bytes follow the last tensor '{}' (ends at {} of a {}-byte data section): a wrong offset, type "
            "or shape, or trailing data", data_bytes - end, prev->name, end, data_bytes);
  }
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "uint8";
    case GgufValueType::INT8: return "int8";
    case GgufValueType::UINT16: return "uint16";
    case GgufValueType::INT16: return "int16";
    case GgufValueType::UINT32: return "uint32";
    case GgufValueType::INT32: return "int32";
    case GgufValueType::FLOAT32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "uint64";
    case GgufValueType::INT64: return "int64";
    case GgufValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

size_t gguf_tensor_bytes(GgmlType type, const std::vector<int64_t>& shape) {
  if (shape.empty() || shape.size() > kMaxDims) {
    throw Error(fmt::format("tensor has {} dimensions, expected 1 to {}", shape.size(), kMaxDims));
  }
  for (int64_t d : shape) {
    if (d < 1) throw Error(fmt::format("tensor dimension {} is not positive", d));
  }
  size_t bytes = row_bytes(type, shape[0]);
  for (size_t i = 1; i < shape.size(); ++i) {
    if (bytes != 0 && static_cast<uint64_t>(shape[i]) > std::numeric_limits<size_t>::max() / bytes) {
      throw Error("tensor size overflows");
    }
    bytes *= static_cast<size_t>(shape[i]);
  }
  return bytes;
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.file_ = MappedFile(path);
  Cursor in(f.file_.data(), f.file_.size(), f.file_.path());

  in.need(4, "magic");
  if (std::memcmp(f.file_.data(), "GGUF", 4) != 0) in.fail("bad magic: not a GGUF file");
  in.skip(4, "magic");
  f.version_ = in.read<uint32_t>("version");
  if (f.version_ != 2 && f.version_ != 3) {
    in.fail("unsupported version {} (this reader handles GGUF versions 2 and 3, little-endian)", f.version_);
  }
  const uint64_t tensor_count = in.read<uint64_t>("tensor_count");
  const uint64_t kv_count = in.read<uint64_t>("metadata_kv_count");
  if (kv_count > in.remaining() / kMinKvBytes) {
    in.fail("metadata_kv_count {} cannot fit in the {} bytes left", kv_count, in.remaining());
  }
  if (tensor_count > in.remaining() / kMinTensorInfoBytes) {
    in.fail("tensor_count {} cannot fit in the {} bytes left", tensor_count, in.remaining());
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key(in.read_string(fmt::format("metadata key #{}", i)));
    const uint32_t raw_type = in.read<uint32_t>(fmt::format("value type of '{}'", key));
    if (!valid_value_type(raw_type)) in.fail("metadata '{}': unknown value type {}", key, raw_type);
    Value v{static_cast<GgufValueType>(raw_type), GgufValueType::UINT8, 0, 0};
    if (v.type == GgufValueType::ARRAY) {
      const uint32_t raw_element = in.read<uint32_t>(fmt::format("array element type of '{}'", key));
      if (!valid_value_type(raw_element)) in.fail("metadata '{}': unknown array element type {}", key, raw_element);
      v.element_type = static_cast<GgufValueType>(raw_element);
      if (v.element_type == GgufValueType::ARRAY) in.fail("metadata '{}': nested arrays are not supported", key);
      v.count = in.read<uint64_t>(fmt::format("array length of '{}'", key));
      v.offset = in.pos();
      if (v.element_type == GgufValueType::STRING) {
        if (v.count > in.remaining() / 8) {
          in.fail("metadata '{}': array of {} strings cannot fit in the {} bytes left", key, v.count, in.remaining());
        }
        for (uint64_t j = 0; j < v.count; ++j) in.skip_array_string(key, j);
      } else {
        const size_t element = scalar_size(v.element_type);
        if (v.count > in.remaining() / element) {
          in.fail("metadata '{}': array of {} {} values cannot fit in the {} bytes left", key, v.count,
                  gguf_value_type_name(v.element_type), in.remaining());
        }
        in.skip(static_cast<size_t>(v.count) * element, key);
      }
    } else {
      v.offset = in.pos();
      if (v.type == GgufValueType::STRING) {
        in.read_string(fmt::format("value of '{}'", key));
      } else {
        in.skip(scalar_size(v.type), fmt::format("value of '{}'", key));
      }
    }
    if (!f.values_.emplace(key, v).second) in.fail("duplicate metadata key '{}'", key);
  }

  if (f.has("general.alignment")) {
    const int64_t alignment = f.get_int("general.alignment");
    if (alignment <= 0 || alignment > (1 << 30) || (alignment & (alignment - 1)) != 0) {
      in.fail("general.alignment {} is not a power of two in [1, 2^30]", alignment);
    }
    f.alignment_ = static_cast<uint32_t>(alignment);
  }

  f.tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo t;
    t.name = std::string(in.read_string(fmt::format("tensor #{} name", i)));
    const uint32_t n_dims = in.read<uint32_t>(fmt::format("n_dims of tensor '{}'", t.name));
    if (n_dims < 1 || n_dims > kMaxDims) {
      in.fail("tensor '{}': n_dims {} outside [1, {}]", t.name, n_dims, kMaxDims);
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = in.read<uint64_t>(fmt::format("dimension {} of tensor '{}'", d, t.name));
      if (dim < 1 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        in.fail("tensor '{}': dimension {} is {}", t.name, d, dim);
      }
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint32_t raw_type = in.read<uint32_t>(fmt::format("type of tensor '{}'", t.name));
    if (!is_supported_type(raw_type)) in.fail("tensor '{}': {}", t.name, unsupported_type_message(raw_type));
    t.type = static_cast<GgmlType>(raw_type);
    t.offset = in.read<uint64_t>(fmt::format("offset of tensor '{}'", t.name));
    try {
      t.nbytes = gguf_tensor_bytes(t.type, t.shape);
    } catch (const Error& e) {
      in.fail("tensor '{}' ({}): {}", t.name, type_name(t.type), e.what());
    }
    if (t.offset % f.alignment_ != 0) {
      in.fail("tensor '{}': offset {} is not a multiple of the alignment {}", t.name, t.offset, f.alignment_);
    }
    if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second) in.fail("duplicate tensor name '{}'", t.name);
    f.tensors_.push_back(std::move(t));
  }

  const size_t end_of_infos = in.pos();
  const size_t padding = (f.alignment_ - end_of_infos % f.alignment_) % f.alignment_;
  f.data_offset_ = end_of_infos + padding;
  if (!f.tensors_.empty() && f.data_offset_ > f.file_.size()) {
    in.fail("truncated: the data section would start at offset {} but the file has {} bytes", f.data_offset_,
            f.file_.size());
  }
  const size_t data_bytes = f.file_.size() - std::min(f.data_offset_, f.file_.size());
  for (auto& t : f.tensors_) {
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset) {
      in.fail("truncated: tensor '{}' needs data bytes [{}, {}+{}) but the data section has {} bytes", t.name,
              t.offset, t.offset, t.nbytes, data_bytes);
    }
    t.data = f.file_.data() + f.data_offset_ + t.offset;
  }
  check_tiling(f.tensors_, f.alignment_, data_bytes, in);
  return f;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : values_) out.push_back(k);
  return out;
}

const GgufFile::Value& GgufFile::value(const std::string& key) const {
  const auto it = values_.find(key);
  if (it == values_.end()) throw Error(fmt::format("GGUF '{}': missing metadata key '{}'", path(), key));
  return it->second;
}

GgufValueType GgufFile::value_type(const std::string& key) const { return value(key).type; }

const GgufFile::Value& GgufFile::array_of(const std::string& key, const char* wanted) const {
  const Value& v = value(key);
  if (v.type != GgufValueType::ARRAY) {
    throw Error(fmt::format("GGUF '{}': metadata '{}' is a {}, expected an array of {}", path(), key,
                            gguf_value_type_name(v.type), wanted));
  }
  return v;
}

GgufValueType GgufFile::array_type(const std::string& key) const { return array_of(key, "anything").element_type; }
uint64_t GgufFile::array_size(const std::string& key) const { return array_of(key, "anything").count; }

namespace {

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::BOOL: return true;
    default: return false;
  }
}

// Reads one integer of type t at p; false if a uint64 does not fit int64.
bool load_integer(GgufValueType t, const uint8_t* p, int64_t& out) {
  switch (t) {
    case GgufValueType::UINT8: out = load<uint8_t>(p); return true;
    case GgufValueType::INT8: out = load<int8_t>(p); return true;
    case GgufValueType::BOOL: out = load<uint8_t>(p) != 0; return true;
    case GgufValueType::UINT16: out = load<uint16_t>(p); return true;
    case GgufValueType::INT16: out = load<int16_t>(p); return true;
    case GgufValueType::UINT32: out = load<uint32_t>(p); return true;
    case GgufValueType::INT32: out = load<int32_t>(p); return true;
    case GgufValueType::INT64: out = load<int64_t>(p); return true;
    case GgufValueType::UINT64: {
      const uint64_t u = load<uint64_t>(p);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out = static_cast<int64_t>(u);
      return true;
    }
    default: return false;
  }
}

std::string load_string(const uint8_t* p, size_t& consumed) {
  const uint64_t length = load<uint64_t>(p);
  consumed = 8 + static_cast<size_t>(length);
  return std::string(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(length));
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const Value& v = value(key);
  if (v.type != GgufValueType::STRING) {
    throw Error(fmt::format("GGUF '{}': metadata '{}' is a {}, expected a string", path(), key,
                            gguf_value_type_name(v.type)));
  }
  size_t consumed = 0;
  return load_string(file_.data() + v.offset, consumed);
}

int64_t GgufFile::get_int(const std::string& key) const {
  const Value& v = value(key);
  int64_t out = 0;
  if (!is_integer(v.type) || !load_integer(v.type, file_.data() + v.offset, out)) {
    throw Error(fmt::format("GGUF '{}': metadata '{}' ({}) is not an integer that fits int64", path(), key,
                            gguf_value_type_name(v.type)));
  }
  return out;
}

double GgufFile::get_float(const std::string& key) const {
  const Value& v = value(key);
  if (v.type == GgufValueType::FLOAT32) return load<float>(file_.data() + v.offset);
  if (v.type == GgufValueType::FLOAT64) return load<double>(file_.data() + v.offset);
  if (is_integer(v.type) && v.type != GgufValueType::BOOL) return static_cast<double>(get_int(key));
  throw Error(fmt::format("GGUF '{}': metadata '{}' is a {}, expected a number", path(), key,
                          gguf_value_type_name(v.type)));
}

bool GgufFile::get_bool(const std::string& key) const {
  const Value& v = value(key);
  if (v.type != GgufValueType::BOOL) {
    throw Error(fmt::format("GGUF '{}': metadata '{}' is a {}, expected a bool", path(), key,
                            gguf_value_type_name(v.type)));
  }
  return load<uint8_t>(file_.data() + v.offset) != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const Value& v = array_of(key, "strings");
  if (v.element_type != GgufValueType::STRING) {
    throw Error(fmt::format("GGUF '{}': metadata '{}' is an array of {}, expected strings", path(), key,
                            gguf_value_type_name(v.element_type)));
  }
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(v.count));  // count was checked against the file size
  const uint8_t* p = file_.data() + v.offset;
  for (uint64_t i = 0; i < v.count; ++i) {
    size_t consumed = 0;
    out.push_back(load_string(p, consumed));
    p += consumed;
  }
  return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const Value& v = array_of(key, "floats");
  const uint8_t* p = file_.data() + v.offset;
  std::vector<float> out(static_cast<size_t>(v.count));
  if (v.element_type == GgufValueType::FLOAT32) {
    if (v.count != 0) std::memcpy(out.data(), p, out.size() * 4);
  } else if (v.element_type == GgufValueType::FLOAT64) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
  } else {
    throw Error(fmt::format("GGUF '{}': metadata '{}' is an array of {}, expected floats", path(), key,
                            gguf_value_type_name(v.element_type)));
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const Value& v = array_of(key, "integers");
  if (!is_integer(v.element_type)) {
    throw Error(fmt::format("GGUF '{}': metadata '{}' is an array of {}, expected integers", path(), key,
                            gguf_value_type_name(v.element_type)));
  }
  const size_t element = scalar_size(v.element_type);
  const uint8_t* p = file_.data() + v.offset;
  std::vector<int64_t> out(static_cast<size_t>(v.count));
  for (size_t i = 0; i < out.size(); ++i) {
    if (!load_integer(v.element_type, p + element * i, out[i])) {
      throw Error(fmt::format("GGUF '{}': metadata '{}'[{}] does not fit int64", path(), key, i));
    }
  }
  return out;
}

std::string GgufFile::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}
int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}
double GgufFile::get_float_or(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

const GgufFile::TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

WeightMatrix GgufFile::matrix(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) throw Error(fmt::format("GGUF '{}': missing tensor '{}'", path(), name));
  int64_t rows = 1;
  for (size_t i = 1; i < t->shape.size(); ++i) rows *= t->shape[i];  // bounded by nbytes <= file size
  return WeightMatrix{t->type, rows, t->shape[0], t->data};
}

}  // namespace turbokv::engine
