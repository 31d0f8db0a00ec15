// Fuzzes the byte-level BPE tokenizer. Two input forms:
//  - a GGUF file ("GGUF" magic): load_tokenizer_from_gguf (BpeTokenizer::from_gguf for "gpt2",
//    SentencePiece for "llama" vocabularies), then encode/decode fixed texts;
//  - anything else, a compact vocabulary spec that reaches the tokenizer logic directly:
//      line 0: the pre-tokenizer name; then tokens, one per line, up to a line "#";
//      then merges ("left right"), up to a line "#"; the rest is text to encode.
// Expected rejections are turbokv::Error; a crash, leak, UB or hang (e.g. regex backtracking
// on hostile text) is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/bpe_tokenizer.hpp"
#include "engine/model/gguf.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "fuzz_util.hpp"
#include "turbokv/error.hpp"

namespace {

void drive(const turbokv::engine::Tokenizer& tok, std::string_view text) {
  for (std::string_view t : {std::string_view("Hello world! It's 2026, \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80<|eot_id|>\n\n  x"), text}) {
    const auto ids = tok.encode(t, true, true);
    for (int id : ids) {
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();  // encode must emit valid ids
    }
    (void)tok.decode_all(ids);
  }
  const int n = tok.vocab_size() < 512 ? tok.vocab_size() : 512;
  for (int id = 0; id < n; ++id) (void)tok.decode(id);
  (void)tok.is_end_of_generation(tok.eos_id());
}

std::vector<std::string_view> take_lines(std::string_view& rest) {
  std::vector<std::string_view> lines;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line == "#") break;
    lines.push_back(line);
  }
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.substr(0, 4) == "GGUF") {
    static turbokv::fuzz::InputFile file("bpe");
    try {
      const auto gguf = turbokv::engine::GgufFile::open(file.write(data, size));
      drive(*turbokv::engine::load_tokenizer_from_gguf(gguf), {});
    } catch (const turbokv::Error&) {
    }
    return 0;
  }
  std::string_view rest = input;
  const size_t nl = rest.find('\n');
  turbokv::engine::BpeVocab vocab;
  vocab.pre = std::string(rest.substr(0, nl));
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  for (std::string_view t : take_lines(rest)) vocab.tokens.emplace_back(t);
  for (std::string_view m : take_lines(rest)) vocab.merges.emplace_back(m);
  if (vocab.tokens.size() > 2) {
    vocab.bos_id = 0;
    vocab.eos_id = 1;
  }
  try {
    const turbokv::engine::BpeTokenizer tok(std::move(vocab));
    drive(tok, rest);
  } catch (const turbokv::Error&) {
  }
  return 0;
}
