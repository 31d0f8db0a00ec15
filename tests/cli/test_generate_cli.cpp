// `turbokv generate` and `turbokv tokenize` as a user runs them: the published greedy text is
// streamed, the statistics lines are printed, and --save-cache / --load-cache continue with
// the same text.
#include <gtest/gtest.h>

#include "skip_policy.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "test_util.hpp"

namespace {

const std::string kTool = TURBOKV_TOOL_PATH;
const std::string kModels = TURBOKV_MODELS_DIR;

// stdout of a command, and its exit status.
std::pair<std::string, int> run(const std::string& args) {
  const std::string cmd = "TURBOKV_MODELS_DIR='" + kModels + "' '" + kTool + "' " + args + " 2>&1";
  const turbokv::test::CommandOutput out = turbokv::test::run_command(cmd);
  return {out.text, out.status};
}

void require_tool() {
  if (kTool.empty() || !std::filesystem::exists(kTool)) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
}

}  // namespace

TEST(GenerateCli, StreamsPublishedTextAndStatistics) {
  require_tool();
  const auto [out, status] = run("generate --model stories260K.bin --prompt 'Once upon a time' -n 50");
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.", 0),
            0u) << out;
  EXPECT_NE(out.find("prompt: 5 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens/s"), std::string::npos) << out;
  EXPECT_NE(out.find("kv cache [dense f16]"), std::string::npos) << out;
}

TEST(GenerateCli, MissingModelErrorNamesEveryFolderSearched) {
  require_tool();
  const auto [out, status] = run("generate --model no-such-model.bin -n 1");
  EXPECT_NE(status, 0) << out;
  for (const std::string& expected : {std::string("no-such-model.bin"), std::string(TURBOKV_SOURCE_DIR) + "/models",
                                      std::string("share/turbokv/models"), kModels}) {
    EXPECT_NE(out.find(expected), std::string::npos) << "no '" << expected << "' in: " << out;
  }
}

TEST(GenerateCli, SavedCacheContinuesTheSameText) {
  require_tool();
  const auto path = (std::filesystem::temp_directory_path() / "turbokv_test_generate_cli.tkv").string();
  const auto [straight, s1] = run("generate --prompt 'In the beginning' -n 30 --kv-bits 4 --json --save-cache " + path);
  ASSERT_EQ(s1, 0) << straight;
  const auto [resumed, s2] = run("generate --prompt 'In the beginning' -n 30 --json --load-cache " + path);
  ASSERT_EQ(s2, 0) << resumed;
  auto text_of = [](const std::string& json) {
    const auto at = json.find("\"text\":");
    return at == std::string::npos ? std::string() : json.substr(at, json.find("\",\"", at) - at);
  };
  EXPECT_FALSE(text_of(straight).empty());
  EXPECT_EQ(text_of(resumed), text_of(straight));
  EXPECT_NE(resumed.find("\"prompt_tokens_computed\":0"), std::string::npos) << resumed;
  std::filesystem::remove(path);
}

// --kv-bits 3.5 / 4 are budgets (issue 14): the schemes' codes with fp16 exact tokens; without a
// window to spend on, the plain codes of that width.
TEST(GenerateCli, KvBitsBudgetsTakeTheSchemesCodes) {
  require_tool();
  const auto [four, s1] = run("generate --prompt 'In the beginning' -n 3 --kv-bits 4");
  ASSERT_EQ(s1, 0) << four;
  EXPECT_NE(four.find("turboquant k3/v3 mse sinks 1 window 32 (fp16)"), std::string::npos) << four;
  const auto [half, s2] = run("generate --prompt 'In the beginning' -n 3 --kv-bits 3.5");
  ASSERT_EQ(s2, 0) << half;
  EXPECT_NE(half.find("turboquant k3/v2 mse"), std::string::npos) << half;
  const auto [plain, s3] = run("generate --prompt 'In the beginning' -n 3 --kv-bits 4 --kv-window 0");
  ASSERT_EQ(s3, 0) << plain;
  EXPECT_NE(plain.find("turboquant k4/v4 mse sinks 1 (fp16), int8 attention]"), std::string::npos) << plain;
  const auto [exact, s4] = run("generate --prompt 'In the beginning' -n 3 --kv-bits 4 --kv-exact f32");
  ASSERT_EQ(s4, 0) << exact;
  EXPECT_NE(exact.find("k3/v3 mse sinks 1 window 32, int8 attention]"), std::string::npos) << exact;
}

// TurboQuant caches built from the flags attend in int8 unless --kv-attention exact says
// otherwise; a --cache string says it itself (attention=int8), and the flag overrides it.
TEST(GenerateCli, KvAttentionChoosesTheArithmetic) {
  require_tool();
  const auto [exact, s1] = run("generate --prompt 'In the beginning' -n 3 --kv-bits 4 --kv-attention exact");
  ASSERT_EQ(s1, 0) << exact;
  EXPECT_NE(exact.find("window 32 (fp16)]"), std::string::npos) << exact;
  const auto [spec, s2] = run("generate --prompt 'In the beginning' -n 3 --cache turboquant:bits=4,attention=int8");
  ASSERT_EQ(s2, 0) << spec;
  EXPECT_NE(spec.find("k4/v4 mse, int8 attention]"), std::string::npos) << spec;
  const auto [overridden, s3] =
      run("generate --prompt 'In the beginning' -n 3 --cache turboquant:bits=4,attention=int8 --kv-attention exact");
  ASSERT_EQ(s3, 0) << overridden;
  EXPECT_NE(overridden.find("k4/v4 mse]"), std::string::npos) << overridden;
  EXPECT_NE(run("generate --prompt x --kv-attention fast --kv-bits 4").second, 0);  // CLI11's usage error
  EXPECT_EQ(run("generate --prompt x --kv-attention int8").second, 1);  // the dense cache has no codes
}

TEST(GenerateCli, BadArgumentsFailWithAMessage) {
  require_tool();
  EXPECT_EQ(run("generate --model does-not-exist.bin --prompt x").second, 1);
  EXPECT_EQ(run("generate --prompt x --key-bits 4").second, 1);  // value bits missing
  EXPECT_EQ(run("generate --prompt x --kv-window 8").second, 1);  // window needs --kv-bits
  const auto [ids, status] = run("tokenize --tokenizer " + kModels + "/llama2-tokenizer.bin --text 'Hello world'");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(ids, "1 15043 3186\n");
}

// A prompt that fills the model's context (kjv-llama-3M: 256 positions) is an error naming the
// sizes, not a silent empty answer; one that leaves room generates up to the context's end.
TEST(GenerateCli, PromptThatFillsTheContextIsAnError) {
  require_tool();
  std::string words;
  for (int i = 0; i < 120; ++i) words += "and God said ";
  const auto [out, status] = run("generate --prompt '" + words + "' -n 5");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("context is 256"), std::string::npos) << out;
  const auto [ok, ok_status] = run("generate --prompt 'In the beginning' -n 400 --quiet");
  EXPECT_EQ(ok_status, 0) << ok;
  EXPECT_NE(ok.find("generation stopped at the end of the model's context"), std::string::npos) << ok;
  EXPECT_EQ(run("generate --prompt x --kv-exact f16").second, 1);  // needs --kv-bits
  EXPECT_EQ(run("generate --prompt x --kv-bits 4 --kv-exact f16 -n 3 --quiet").second, 0);
}

// A prompt cache whose first layer is a sliding-window ring (drop_before freed its oldest pages)
// and whose second holds every token: cache-info names the ring's held positions and its bytes
// apart from the layers that hold every token.
TEST(CacheInfoCli, ShowsSlidingRingsApart) {
  require_tool();
  turbokv::PromptCache pc;
  const std::vector<float> k(2 * 100 * 8, 0.5f), v(2 * 100 * 8, -0.25f);
  for (int l = 0; l < 2; ++l) {
    auto layer = std::make_unique<turbokv::DenseKVCache>(2, 8, turbokv::DenseDtype::f16, 16);
    layer->append(k, v, 100);
    if (l == 0) {
      EXPECT_EQ(layer->drop_before(64), 64u);
    }
    pc.add_layer(std::move(layer));
  }
  const auto path = std::filesystem::temp_directory_path() / ("turbokv-cli-ring-" + std::to_string(::getpid()) + ".st");
  turbokv::save_prompt_cache(path.string(), pc);
  const auto [out, status] = run("cache-info '" + path.string() + "'");
  EXPECT_EQ(status, 0) << out;
  // 36 held positions x 2 heads x 8 x 2 (keys, values) x 2 bytes; the other layer's 100.
  EXPECT_NE(out.find("sliding-window rings: 1 layers, 2304 bytes; layers holding every token: 1, 6400 bytes"),
            std::string::npos) << out;
  const auto [json, json_status] = run("cache-info --json '" + path.string() + "'");
  EXPECT_EQ(json_status, 0) << json;
  EXPECT_NE(json.find("\"first_held\":64"), std::string::npos) << json;
  std::filesystem::remove(path);
}
