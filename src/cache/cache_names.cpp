// Configuration names (cache_config.hpp): the short names of eval tables and command lines
// ("tq4", "k3v2s1w12-x16", "q4_0h", "kivi2", ...) and, through parse_cache_config, the long
// kind:key=value strings; the measured TurboQuant schemes those names and `--kv-bits 3.5 / 4` stand for.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "core/check.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"

namespace turbokv {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Reads a non-negative decimal number (digits, optional ".digits") at pos; advances pos.
bool read_number(const std::string& s, size_t& pos, double& value) {
  const size_t start = pos;
  while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.')) ++pos;
  if (pos == start) return false;
  const auto [end, ec] = std::from_chars(s.data() + start, s.data() + pos, value);
  return ec == std::errc() && end == s.data() + pos;
}

bool read_count(const std::string& s, size_t& pos, size_t& value) {
  const size_t start = pos;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
  if (pos == start || pos - start > 9) return false;
  const auto [end, ec] = std::from_chars(s.data() + start, s.data() + pos, value);
  return ec == std::errc() && end == s.data() + pos;
}

std::string bits_text(double b) { return fmt::format("{}b", b); }

KVConfigSpec parse_turboquant(const std::string& name) {
  KVConfigSpec spec{name, "", {}};
  spec.config.kind = "turboquant";
  auto& tq = spec.config.tq;
  size_t pos = 0;
  double a = 0, b = 0;
  const auto bad = [&](const char* why) {
    detail::fail("configuration '{}': {} (expected e.g. tq3, k4v2, prod3, tq3s4w64, tq3s4-ctr)",
                 name, why);
  };
  if (starts_with(name, "tq")) {
    pos = 2;
    if (!read_number(name, pos, a)) bad("missing bit width after 'tq'");
    tq.key_bits = tq.value_bits = a;
  } else if (starts_with(name, "prod")) {
    pos = 4;
    if (!read_number(name, pos, a)) bad("missing bit width after 'prod'");
    tq.key_bits = tq.value_bits = a;
    tq.key_codec = TurboQuantCodecKind::prod;
  } else {  // k<A>v<B>
    pos = 1;
    if (!read_number(name, pos, a) || pos >= name.size() || name[pos] != 'v') {
      bad("expected k<bits>v<bits>");
    }
    ++pos;
    if (!read_number(name, pos, b)) bad("missing value bit width after 'v'");
    tq.key_bits = a;
    tq.value_bits = b;
  }
  if (pos < name.size() && name[pos] == 's') {
    ++pos;
    if (!read_count(name, pos, tq.sinks)) bad("expected a token count after 's'");
  }
  if (pos < name.size() && name[pos] == 'w') {
    ++pos;
    if (!read_count(name, pos, tq.window)) bad("expected a token count after 'w'");
  }
  while (pos < name.size()) {
    if (name[pos] != '-') bad("unexpected characters");
    const size_t end = std::min(name.find('-', pos + 1), name.size());
    const std::string flag = name.substr(pos + 1, end - pos - 1);
    if (flag == "nc") {  // the default since norm correction measured best; kept for old names
      tq.norm_correction = true;
    } else if (flag == "nonc") {
      tq.norm_correction = false;
    } else if (flag == "ctr") {
      tq.center = true;
    } else if (flag == "f32n") {
      tq.fp32_norm = true;
    } else if (flag == "haar") {
      tq.rotation = RotationKind::haar;
    } else if (flag == "x16") {
      tq.exact_dtype = DenseDtype::f16;
    } else if (flag == "i8") {
      tq.int8_attention = true;
    } else if (flag == "plain") {  // tq4-plain, tq3.5-plain: the uniform codec the bare names once meant
    } else {
      detail::fail("configuration '{}': unknown flag '-{}' (known: -nonc, -nc, -ctr, -f32n, -haar, -x16, -i8, -plain)",
                   name, flag);
    }
    pos = end;
  }
  TURBOKV_CHECK(tq.key_bits >= 1 && tq.key_bits <= 8 && tq.value_bits >= 1 && tq.value_bits <= 8,
                "configuration '{}': bit widths must be in [1, 8]", name);
  TURBOKV_CHECK(tq.key_codec != TurboQuantCodecKind::prod || tq.key_bits >= 2,
                "configuration '{}': the prod codec needs at least 2 bits", name);
  TURBOKV_CHECK(!tq.center || tq.sinks >= 1,
                "configuration '{}': -ctr centers on the sinks' mean and needs s<N> with N >= 1",
                name);
  std::string d = fmt::format("TurboQuant keys {} {}, values {}", bits_text(tq.key_bits),
                              tq.key_codec == TurboQuantCodecKind::prod ? "prod" : "mse",
                              bits_text(tq.value_bits));
  if (tq.sinks > 0) d += fmt::format(", {} sinks exact", tq.sinks);
  if (tq.window > 0) d += fmt::format(", newest {} exact", tq.window);
  if (!tq.norm_correction) d += ", no norm correction";
  if (tq.center) d += ", centered on the sinks' mean";
  if (tq.fp32_norm) d += ", fp32 norms";
  if (tq.rotation == RotationKind::haar) d += ", Haar rotation";
  if (tq.exact_dtype == DenseDtype::f16 && (tq.sinks > 0 || tq.window > 0)) d += " (in fp16)";
  if (tq.int8_attention) d += ", int8 attention";
  spec.description = d;
  return spec;
}


// The description of a scheme, e.g. "TurboQuant scheme: keys 3b values 2b, 1 sink and the
// newest 12 tokens exact (fp16)" (with per-layer widths if it has any).
std::string scheme_description(const CacheConfig& c) {
  std::string d = fmt::format("TurboQuant scheme: keys {} values {}", bits_text(c.tq.key_bits), bits_text(c.tq.value_bits));
  for (const LayerBits& lb : c.layer_bits) {
    d += fmt::format("; layer {}: keys {} values {}", lb.layer, bits_text(lb.key_bits), bits_text(lb.value_bits));
  }
  d += fmt::format(", {} sink and the newest {} tokens exact (fp16)", c.tq.sinks, c.tq.window);
  if (c.tq.int8_attention) d += ", int8 attention";
  return d;
}

}  // namespace

std::optional<CacheConfig> turboquant_scheme(double bits) {
  // Measured on kjv-llama-3M (docs/history/benchmarks-notebook.md, "Where the KL comes from";
  // scripts/kl-sources.sh): the newest tokens in fp16 take out most of the error, since they
  // are the ones a position attends to most, so the budget goes to a window first; keys pay
  // more per bit than values; widths per layer (layer_bits) measured no better than uniform
  // ones at the same bits once the window is there. No width above 4: every layer's fused
  // attention reads fewer bytes per token than plain tq4's.
  CacheConfig c;
  c.kind = "turboquant";
  c.tq.sinks = 1;
  c.tq.exact_dtype = DenseDtype::f16;
  if (bits == 3.5) {  // 3.42 bits/value at 256 positions, everything counted
    c.tq.key_bits = 3;
    c.tq.value_bits = 2;
    c.tq.window = 12;
  } else if (bits == 4) {  // 4.20 bits/value at 256 positions
    c.tq.key_bits = 3;
    c.tq.value_bits = 3;
    c.tq.window = 18;
  } else {
    return std::nullopt;
  }
  return c;
}

KVConfigSpec parse_kv_config(const std::string& name) {
  TURBOKV_CHECK(!name.empty(), "configuration name is empty");
  TURBOKV_CHECK(name.size() <= 200, "configuration name is too long");
  if (name.find(':') != std::string::npos) {
    KVConfigSpec spec{name, "", parse_cache_config(name)};
    spec.description = format_cache_config(spec.config);
    return spec;
  }
  KVConfigSpec spec{name, "", {}};
  auto& c = spec.config;
  if (name == "dense16" || name == "dense32") {
    c.kind = "dense";
    c.dense_dtype = name == "dense16" ? DenseDtype::f16 : DenseDtype::f32;
    spec.description = std::string("dense ") + (name == "dense16" ? "fp16" : "f32");
    return spec;
  }
  if (name == "q8_0" || name == "q4_0" || name == "q8_0h" || name == "q4_0h") {
    c.kind = name.substr(0, 4);
    const bool rotated = name.size() == 5;
    if (rotated) c.options.emplace("hadamard", std::string(1, '1'));
    spec.description = fmt::format("llama.cpp {} (32-value blocks, fp16 scale){}", c.kind,
                                   rotated ? " after a Hadamard rotation" : "");
    return spec;
  }
  if (starts_with(name, "kivi")) {
    size_t pos = 4, bits = 0, residual = 32;
    TURBOKV_CHECK(read_count(name, pos, bits) && (bits == 2 || bits == 4),
                  "configuration '{}': KIVI takes 2 or 4 bits (kivi2, kivi4)", name);
    if (pos < name.size() && name[pos] == 'r') {
      ++pos;
      TURBOKV_CHECK(read_count(name, pos, residual) && residual % 32 == 0 && residual <= 65536,
                    "configuration '{}': expected r<residual tokens, a multiple of 32>", name);
    }
    TURBOKV_CHECK(pos == name.size(), "configuration '{}': unexpected characters", name);
    c.kind = "kivi";
    c.options = {{"bits", std::to_string(bits)}, {"residual", std::to_string(residual)}};
    spec.description = fmt::format("KIVI {}-bit (keys per channel, values per token, groups of "
                                   "32, {} recent tokens fp16)",
                                   bits, residual);
    return spec;
  }
  if (starts_with(name, "affine")) {
    size_t pos = 6, bits = 0;
    TURBOKV_CHECK(read_count(name, pos, bits) && pos == name.size() &&
                      (bits == 2 || bits == 4 || bits == 8),
                  "configuration '{}': affine takes 2, 4 or 8 bits (affine4, affine8)", name);
    c.kind = "affine";
    c.options = {{"bits", std::to_string(bits)}};
    spec.description = fmt::format("mlx-lm affine {}-bit (groups of 64, fp16 scale and bias)", bits);
    return spec;
  }
  if (name == "tq3.5" || name == "tq4" || name == "tq3.5-i8" || name == "tq4-i8") {
    c = *turboquant_scheme(starts_with(name, "tq4") ? 4.0 : 3.5);
    c.tq.int8_attention = name.ends_with("-i8");
    spec.description = scheme_description(c);
    return spec;
  }
  if (starts_with(name, "tq") || starts_with(name, "prod") ||
      (name.size() > 1 && name[0] == 'k' && std::isdigit(static_cast<unsigned char>(name[1])))) {
    return parse_turboquant(name);
  }
  // The long form's bare class names ("dense", "turboquant", "kivi"): that class's defaults.
  if (const auto kinds = registered_cache_classes(); std::find(kinds.begin(), kinds.end(), name) != kinds.end()) {
    KVConfigSpec spec{name, "", parse_cache_config(name)};
    spec.description = format_cache_config(spec.config);
    return spec;
  }
  detail::fail("unknown configuration '{}' (known: dense16, dense32, tq<bits>, k<bits>v<bits>, "
               "prod<bits>, [s<N>][w<N>][-nonc][-ctr][-f32n][-haar][-x16][-i8][-plain], q8_0, q4_0, q8_0h, q4_0h, kivi2, "
               "kivi4, affine4, affine8, a cache class (dense, turboquant, ...) or kind:key=value,...)",
               name);
}

std::vector<KVConfigSpec> parse_kv_config_list(const std::string& list) {
  std::vector<KVConfigSpec> specs;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    // The long form has commas inside ("turboquant:key_bits=4,value_bits=2"): an item without
    // '=' after a long-form item starts a new configuration, one with '=' continues it.
    std::string item = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (item.find(':') != std::string::npos) {
      while (end != std::string::npos) {
        const size_t next = list.find(',', end + 1);
        const std::string more = list.substr(end + 1, next == std::string::npos ? std::string::npos
                                                                                 : next - end - 1);
        if (more.find('=') == std::string::npos || more.find(':') != std::string::npos) break;
        item += "," + more;
        end = next;
      }
    }
    if (!item.empty()) specs.push_back(parse_kv_config(item));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  TURBOKV_CHECK(!specs.empty(), "configuration list '{}' names no configuration", list);
  return specs;
}

std::unique_ptr<KVCache> make_kv_cache(const KVConfigSpec& spec, int kv_heads, int head_dim) {
  const std::string problem = kv_config_problem(spec, kv_heads, head_dim);
  if (!problem.empty()) throw NotApplicableError(problem);
  return make_kv_cache(kv_heads, head_dim, spec.config);
}

std::unique_ptr<KVCache> make_kv_cache(const std::string& name, int kv_heads, int head_dim) {
  return make_kv_cache(parse_kv_config(name), kv_heads, head_dim);
}

double kv_bits_per_value(const KVCache& cache) {
  if (cache.size() == 0) return 0.0;
  return 8.0 * static_cast<double>(cache.nbytes()) /
         (2.0 * static_cast<double>(cache.size()) * cache.kv_heads() * cache.head_dim());
}

}  // namespace turbokv
