// Fuzzes llama2.c's tokenizer.bin reader (load_llama2c_tokenizer) and then drives the loaded
// vocabulary: a hostile vocabulary must not make encode/decode misbehave either.
// Expected rejections are turbokv::Error; anything else (crash, leak, UB, hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/tokenizer/tokenizer.hpp"
#include "fuzz_util.hpp"
#include "turbokv/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static turbokv::fuzz::InputFile file("tokenizer_bin");
  const std::string& path = file.write(data, size);
  std::unique_ptr<turbokv::engine::SentencePieceTokenizer> tok;
  try {
    // Both reading modes: to the end of the file, and an expected count from a model header.
    tok = turbokv::engine::load_llama2c_tokenizer(path);
  } catch (const turbokv::Error&) {
  }
  try {
    (void)turbokv::engine::load_llama2c_tokenizer(path, 5);
  } catch (const turbokv::Error&) {
  }
  if (!tok) return 0;
  try {
    const auto ids = tok->encode("Once upon a time, \xc3\xbc \xe2\x96\x81<0x41> \xff end", true, true);
    (void)tok->decode_all(ids);
    const int n = tok->vocab_size() < 300 ? tok->vocab_size() : 300;
    for (int id = 0; id < n; ++id) (void)tok->decode(tok->bos_id(), id);
    // Text taken from the input itself reaches the merge loop with arbitrary bytes.
    const size_t text_len = size < 64 ? size : 64;
    (void)tok->encode(std::string_view(reinterpret_cast<const char*>(data) + size - text_len, text_len), false);
  } catch (const turbokv::Error&) {
  }
  return 0;
}
