// random_gguf: writes a random-weight GGUF of one architecture (tests/random_gguf.hpp) for the
// end-to-end tests, which cannot call C++ directly.
//   random_gguf ARCH OUT.gguf [--chat-template FILE] [--user-token TEXT]... [--seed N]
// Prints {"path", "vocab", "user_token_ids": [...]} as JSON on stdout.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "random_gguf.hpp"
#include "turbokv/error.hpp"

int main(int argc, char** argv) {
  try {
    if (argc < 3) throw turbokv::Error("usage: random_gguf ARCH OUT.gguf [--chat-template FILE] [--user-token TEXT]... [--seed N]");
    turbokv::test::RandomGgufShape s = turbokv::test::served_shape(argv[1]);
    uint32_t seed = 27;
    for (int i = 3; i < argc; ++i) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) throw turbokv::Error(flag + " needs a value");
      const std::string value = argv[++i];
      if (flag == "--chat-template") {
        std::ifstream f(value, std::ios::binary);
        if (!f) throw turbokv::Error("cannot read " + value);
        s.chat_template.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      } else if (flag == "--user-token") {
        s.user_tokens.push_back(value);
      } else if (flag == "--seed") {
        seed = static_cast<uint32_t>(std::stoul(value));
      } else {
        throw turbokv::Error("unknown option " + flag);
      }
    }
    s.vocab = turbokv::test::kRandomGgufVocab + static_cast<int>(s.user_tokens.size());
    s.keep_values = false;
    const auto written = turbokv::test::write_random_gguf(s, argv[2], seed);
    nlohmann::json ids = nlohmann::json::array();
    for (size_t k = 0; k < s.user_tokens.size(); ++k) ids.push_back(256 + 4 + k);  // after the bytes and merges
    std::printf("%s\n", nlohmann::json{{"path", written.path}, {"vocab", s.vocab}, {"user_token_ids", ids}}.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "random_gguf: %s\n", e.what());
    return 1;
  }
}
