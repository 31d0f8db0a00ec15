// `turbokv convert IN.bin OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|q4_k|...] [--tokenizer PATH]`: a GGUF
// (architecture llama) from a llama2.c checkpoint and its tokenizer.bin.
#include <fmt/format.h>

#include <memory>

#include "engine/model/gguf_convert.hpp"
#include "tools/command_registry.hpp"

namespace turbokv::tools {
namespace {

struct ConvertArgs {
  std::string input;
  std::string output;
  std::string type = "f32";
  std::string tokenizer;
};

const CommandRegistration registration{"convert", [](CLI::App& app) {
  app.description("Convert a llama2.c checkpoint (.bin) and its tokenizer.bin to GGUF");
  auto args = std::make_shared<ConvertArgs>();
  app.add_option("input", args->input, "llama2.c checkpoint (.bin)")->required();
  app.add_option("output", args->output, "GGUF file to write")->required();
  app.add_option("--type", args->type,
                 "weight type of the matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, "
                 "q4_k, q5_k, q6_k, iq4_xs (rows that do not fill whole blocks fall back to a 32-value type or "
                 "f16; norms stay f32)")
      ->capture_default_str();
  app.add_option("--tokenizer", args->tokenizer,
                 "llama2.c tokenizer.bin (default: tok512.bin or tokenizer.bin next to the checkpoint)");
  return [args] {
    engine::ConvertOptions options;
    options.type = engine::parse_weight_type(args->type);
    options.tokenizer_path = args->tokenizer;
    const auto summary = engine::convert_llama2c_to_gguf(args->input, args->output, options);
    fmt::print("wrote {} ({} bytes): {} tensors, matrices {}{}, tokenizer {}\n", args->output, summary.file_bytes,
               summary.n_tensors, engine::type_name(options.type),
               summary.n_fallback > 0 ? fmt::format(" ({} in a fallback type: rows not a whole number of blocks)",
                                                    summary.n_fallback)
                                      : std::string(),
               summary.tokenizer_path);
    return 0;
  };
}};

}  // namespace
}  // namespace turbokv::tools
