// GGUF v3 writer (little-endian hosts only, as is every target this project builds for).
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "engine/model/gguf.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

size_t padding_to(size_t pos, size_t alignment) { return (alignment - pos % alignment) % alignment; }

}  // namespace

void GgufWriter::set_raw(const std::string& key, GgufValueType type, std::vector<uint8_t> payload) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = {type, std::move(payload)};
      return;
    }
  }
  kv_.push_back({key, {type, std::move(payload)}});
}

void GgufWriter::set_string(const std::string& key, const std::string& value) {
  std::vector<uint8_t> p;
  put_string(p, value);
  set_raw(key, GgufValueType::STRING, std::move(p));
}

void GgufWriter::set_uint32(const std::string& key, uint32_t value) {
  std::vector<uint8_t> p;
  put(p, value);
  set_raw(key, GgufValueType::UINT32, std::move(p));
}

void GgufWriter::set_int32(const std::string& key, int32_t value) {
  std::vector<uint8_t> p;
  put(p, value);
  set_raw(key, GgufValueType::INT32, std::move(p));
}

void GgufWriter::set_uint64(const std::string& key, uint64_t value) {
  std::vector<uint8_t> p;
  put(p, value);
  set_raw(key, GgufValueType::UINT64, std::move(p));
}

void GgufWriter::set_float32(const std::string& key, float value) {
  std::vector<uint8_t> p;
  put(p, value);
  set_raw(key, GgufValueType::FLOAT32, std::move(p));
}

void GgufWriter::set_bool(const std::string& key, bool value) {
  std::vector<uint8_t> p;
  put<uint8_t>(p, value ? 1 : 0);
  set_raw(key, GgufValueType::BOOL, std::move(p));
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& values) {
  std::vector<uint8_t> p;
  put(p, static_cast<uint32_t>(GgufValueType::STRING));
  put<uint64_t>(p, values.size());
  for (const auto& s : values) put_string(p, s);
  set_raw(key, GgufValueType::ARRAY, std::move(p));
}

void GgufWriter::set_float32_array(const std::string& key, const std::vector<float>& values) {
  std::vector<uint8_t> p;
  put(p, static_cast<uint32_t>(GgufValueType::FLOAT32));
  put<uint64_t>(p, values.size());
  for (float v : values) put(p, v);
  set_raw(key, GgufValueType::ARRAY, std::move(p));
}

void GgufWriter::set_int32_array(const std::string& key, const std::vector<int32_t>& values) {
  std::vector<uint8_t> p;
  put(p, static_cast<uint32_t>(GgufValueType::INT32));
  put<uint64_t>(p, values.size());
  for (int32_t v : values) put(p, v);
  set_raw(key, GgufValueType::ARRAY, std::move(p));
}

void GgufWriter::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(fmt::format("GgufWriter: alignment {} is not a power of two", alignment));
  }
  alignment_ = alignment;
  set_uint32("general.alignment", alignment);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                            std::vector<uint8_t> bytes) {
  const size_t expected = gguf_tensor_bytes(type, shape);
  if (bytes.size() != expected) {
    throw Error(fmt::format("GgufWriter: tensor '{}' ({}) has {} bytes, its shape needs {}", name,
                            type_name(type), bytes.size(), expected));
  }
  for (const auto& t : tensors_) {
    if (t.name == name) throw Error(fmt::format("GgufWriter: duplicate tensor '{}'", name));
  }
  tensors_.push_back({name, type, shape, std::move(bytes)});
}

std::vector<uint8_t> GgufWriter::header_and_infos() const {
  std::vector<uint8_t> out{'G', 'G', 'U', 'F'};
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& [key, value] : kv_) {
    put_string(out, key);
    put(out, static_cast<uint32_t>(value.first));
    out.insert(out.end(), value.second.begin(), value.second.end());
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) put(out, static_cast<uint64_t>(d));
    put(out, static_cast<uint32_t>(t.type));
    put(out, offset);
    offset += t.bytes.size();
    offset += padding_to(static_cast<size_t>(offset), alignment_);
  }
  return out;
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<uint8_t> out = header_and_infos();
  for (const auto& t : tensors_) {
    out.resize(out.size() + padding_to(out.size(), alignment_), 0);
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) throw Error(fmt::format("GgufWriter: cannot create '{}': {}", path, std::strerror(errno)));
  const std::vector<uint8_t> head = header_and_infos();
  size_t pos = 0;
  const auto emit = [&](const void* data, size_t n) {
    if (n != 0 && std::fwrite(data, 1, n, file.get()) != n) {
      throw Error(fmt::format("GgufWriter: write to '{}' failed: {}", path, std::strerror(errno)));
    }
    pos += n;
  };
  emit(head.data(), head.size());
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (const auto& t : tensors_) {
    emit(zeros.data(), padding_to(pos, alignment_));
    emit(t.bytes.data(), t.bytes.size());
  }
  if (std::fflush(file.get()) != 0) {
    throw Error(fmt::format("GgufWriter: write to '{}' failed: {}", path, std::strerror(errno)));
  }
}

}  // namespace turbokv::engine
