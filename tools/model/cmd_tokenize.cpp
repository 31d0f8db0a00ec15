// `turbokv tokenize --tokenizer PATH --text TEXT [--json] [--no-bos]`: the token ids of a text.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer_factory.hpp"
#include "tools/command_registry.hpp"

namespace turbokv::tools {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::string text;
  bool json = false;
  bool no_bos = false;
};

const CommandRegistration registration{"tokenize", [](CLI::App& app) {
  app.description("Print the token ids of a text (llama2.c tokenizer.bin or a GGUF file's tokenizer)");
  auto args = std::make_shared<TokenizeArgs>();
  app.add_option("--tokenizer", args->tokenizer, "tokenizer.bin or .gguf")->required();
  app.add_option("--text", args->text, "text to encode")->required();
  app.add_flag("--json", args->json, "print {\"ids\": [...], \"pieces\": [...]}");
  app.add_flag("--no-bos", args->no_bos, "do not start with BOS");
  return [args] {
    const auto tok = engine::load_tokenizer_file(args->tokenizer);
    const auto ids = tok->encode(args->text, !args->no_bos);
    if (args->json) {
      nlohmann::json pieces = nlohmann::json::array();
      for (const int id : ids) {
        // Single bytes of a split UTF-8 character are not valid JSON strings: give them as <0xXX>.
        std::string piece = tok->decode(id);
        bool valid = true;
        try {
          (void)nlohmann::json(piece).dump();
        } catch (const nlohmann::json::exception&) {
          valid = false;
        }
        pieces.push_back(valid ? piece : fmt::format("<0x{:02X}>", static_cast<unsigned char>(piece[0])));
      }
      fmt::print("{}\n", nlohmann::json{{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}}.dump());
    } else {
      fmt::print("{}\n", fmt::join(ids, " "));
    }
    return 0;
  };
}};

}  // namespace
}  // namespace turbokv::tools
