// turbokv._core.Model: a Llama-family model (llama2.c .bin or GGUF) with its tokenizer, for
// generation and teacher-forced logits over any KV cache configuration. Generation follows
// `turbokv generate` step for step (same cache defaults, sampler, stop rule and echo), so the
// same arguments give the same text.
#include <fmt/format.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include "binding.hpp"
#include "engine/runtime/forward.hpp"
#include "engine/model/model.hpp"
#include "engine/model/model_files.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/session.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::python {
namespace {

struct KvArgs {
  std::optional<double> kv_bits, key_bits, value_bits;
  std::optional<long long> kv_window, kv_sinks;
  std::optional<std::string> cache;
};

// The cache `turbokv generate` builds for the same flags: the same request through the same
// function (kv_request_config), so kv_bits=4 is the tq4 scheme with int8 attention there and here.
CacheConfig cache_config(const KvArgs& a) {
  KvRequest request;
  request.kv_bits = a.kv_bits;
  request.key_bits = a.key_bits;
  request.value_bits = a.value_bits;
  if (a.kv_window) request.window = non_negative(*a.kv_window, "kv_window");
  if (a.kv_sinks) request.sinks = non_negative(*a.kv_sinks, "kv_sinks");
  if (a.cache) request.cache = *a.cache;
  return kv_request_config(request, std::nullopt);  // as generate: no bits, dense fp16
}

// What the CLI prints for a piece: control bytes other than whitespace are dropped.
std::string printable(const std::string& piece) {
  if (piece.size() == 1) {
    const auto c = static_cast<unsigned char>(piece[0]);
    if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') return "";
  }
  return piece;
}

class PyModel {
 public:
  // `path` may be a bare name, looked up in `models_dirs` first, then where the CLI looks
  // (engine/model/model_files.hpp).
  PyModel(const std::string& path, const std::string& tokenizer, int threads, const std::vector<std::string>& models_dirs) {
    if (threads < 0) throw Error(fmt::format("threads must be >= 0, got {}", threads));
    as_file_errors([&] {
      model_ = engine::load_model(engine::find_model_file(path, models_dirs));
      tokenizer_ = engine::load_tokenizer_for_model(model_, tokenizer);
    });
    pool_ = std::make_unique<ThreadPool>(threads);
  }

  const engine::ModelConfig& config() const { return model_.config; }

  std::vector<int> encode(const std::string& text, bool bos) const { return tokenizer_->encode(text, bos); }
  std::string decode(const std::vector<int>& ids) const { return tokenizer_->decode_all(ids); }

  std::string generate(const std::string& prompt, int max_tokens, const KvArgs& kv, float temperature, float top_p,
                       unsigned long long seed, bool echo) {
    if (max_tokens < 0) throw Error(fmt::format("max_tokens must be >= 0, got {}", max_tokens));
    const CacheConfig config = cache_config(kv);
    engine::Sampler sampler(engine::SamplerOptions{temperature, top_p, seed});
    const auto& c = model_.config;
    std::lock_guard lock(run_mutex_);  // the pool runs one computation at a time
    const auto ids = tokenizer_->encode(prompt, true);
    if (static_cast<int>(ids.size()) >= c.seq_len) {
      throw Error(fmt::format("the prompt needs {} positions; the model's context is {} (the prompt and at least one "
                              "generated token must fit)", ids.size(), c.seq_len));
    }
    engine::Session session(model_, make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, config, c.layer_windows()),
                            *pool_);
    std::string text;
    if (echo) {
      for (size_t i = 1; i < ids.size(); ++i) text += printable(tokenizer_->decode(ids[i - 1], ids[i]));
    }
    session.feed(ids);
    int prev = session.tokens().back();
    const int room = c.seq_len - static_cast<int>(session.position()) + 1;
    const int steps = std::min(max_tokens, std::max(room, 0));
    session.generate(steps, sampler, [&](int id) { return tokenizer_->is_end_of_generation(id); },
                     [&](int id) {
                       if (!tokenizer_->is_end_of_generation(id)) text += printable(tokenizer_->decode(prev, id));
                       prev = id;
                     });
    return text;
  }

  // Every position's logits ([n, vocab]) of a teacher-forced pass over `tokens`.
  std::vector<float> logits(const std::vector<int>& tokens, const KvArgs& kv) {
    const auto& c = model_.config;
    if (tokens.empty()) throw Error("logits: no tokens");
    if (static_cast<long long>(tokens.size()) > c.seq_len) {
      throw Error(fmt::format("logits: {} tokens exceed the model's context of {}", tokens.size(), c.seq_len));
    }
    const CacheConfig config = cache_config(kv);
    std::lock_guard lock(run_mutex_);
    auto prompt = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, config, c.layer_windows());
    std::vector<KVCache*> layers;
    for (size_t i = 0; i < prompt.n_layers(); ++i) layers.push_back(&prompt.layer(i));
    engine::Forward forward(model_, *pool_);
    std::vector<float> out(tokens.size() * static_cast<size_t>(c.vocab_size));
    forward.run_all_logits(tokens, layers, out);
    return out;
  }

 private:
  engine::Model model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::mutex run_mutex_;
};

KvArgs kv_args(std::optional<double> kv_bits, std::optional<double> key_bits, std::optional<double> value_bits,
               std::optional<long long> kv_window, std::optional<long long> kv_sinks, std::optional<std::string> cache) {
  return KvArgs{kv_bits, key_bits, value_bits, kv_window, kv_sinks, std::move(cache)};
}

// The models the installed package carries (turbokv/models/ beside _core, put there by the wheel
// build: setup.py). Needs the GIL.
std::vector<std::string> package_models_dirs() {
  const auto core = py::module_::import("turbokv._core").attr("__file__").cast<std::string>();
  return {(std::filesystem::path(core).parent_path() / "models").string()};
}

#define TURBOKV_KV_ARGS                                                                                   \
  py::arg("kv_bits") = py::none(), py::arg("key_bits") = py::none(), py::arg("value_bits") = py::none(), \
      py::arg("kv_window") = py::none(), py::arg("kv_sinks") = py::none(), py::arg("cache") = py::none()

}  // namespace

void bind_model(py::module_& m) {
  m.def(
      "find_model",
      [](const std::string& name) {
        const auto dirs = package_models_dirs();
        return as_file_errors([&] { return engine::find_model_file(name, dirs); });
      },
      py::arg("name"),
      "The path a model name stands for: a path as given, else the first of the package's models/, the "
      "checkout's models/, the installed share/turbokv/models/ and TURBOKV_MODELS_DIR that holds it. OSError if "
      "none does.");
  py::class_<PyModel>(m, "Model", "A Llama-family model (llama2.c .bin or GGUF) with its tokenizer.")
      .def(py::init([](const std::string& path, const std::string& tokenizer, int threads) {
             const auto dirs = package_models_dirs();
             py::gil_scoped_release unlocked;
             return std::make_unique<PyModel>(path, tokenizer, threads, dirs);
           }),
           py::arg("path"), py::arg("tokenizer") = "", py::arg("threads") = 0)
      .def_static(
          "default",
          [](int threads) {
            const auto dirs = package_models_dirs();
            py::gil_scoped_release unlocked;
            return std::make_unique<PyModel>(engine::kDefaultModel, "", threads, dirs);
          },
          py::arg("threads") = 0,
          "The model the package ships (kjv-llama-3M, head_dim 64, with its tokenizer), as `turbokv generate` "
          "runs by default.")
      .def_property_readonly("config",
                             [](const PyModel& p) {
                               const auto& c = p.config();
                               py::dict d;
                               d["arch"] = c.arch;
                               d["dim"] = c.dim;
                               d["n_layers"] = c.n_layers;
                               d["n_heads"] = c.n_heads;
                               d["n_kv_heads"] = c.n_kv_heads;
                               d["head_dim"] = c.head_dim;
                               d["vocab_size"] = c.vocab_size;
                               d["seq_len"] = c.seq_len;
                               return d;
                             })
      .def("encode", &PyModel::encode, py::arg("text"), py::arg("bos") = true)
      .def("decode", &PyModel::decode, py::arg("ids"))
      .def("generate",
           [](PyModel& p, const std::string& prompt, int max_tokens, std::optional<double> kv_bits,
              std::optional<double> key_bits, std::optional<double> value_bits, std::optional<long long> kv_window,
              std::optional<long long> kv_sinks, std::optional<std::string> cache, float temperature, float top_p,
              unsigned long long seed, bool echo) {
             const KvArgs kv = kv_args(kv_bits, key_bits, value_bits, kv_window, kv_sinks, std::move(cache));
             py::gil_scoped_release unlocked;
             return p.generate(prompt, max_tokens, kv, temperature, top_p, seed, echo);
           },
           py::arg("prompt"), py::arg("max_tokens") = 128, TURBOKV_KV_ARGS, py::arg("temperature") = 0.0f,
           py::arg("top_p") = 0.9f, py::arg("seed") = 42, py::arg("echo") = false)
      .def("logits",
           [](PyModel& p, const std::vector<int>& tokens, std::optional<double> kv_bits, std::optional<double> key_bits,
              std::optional<double> value_bits, std::optional<long long> kv_window, std::optional<long long> kv_sinks,
              std::optional<std::string> cache) {
             const KvArgs kv = kv_args(kv_bits, key_bits, value_bits, kv_window, kv_sinks, std::move(cache));
             const int vocab = p.config().vocab_size;
             std::vector<float> flat;
             {
               py::gil_scoped_release unlocked;
               flat = p.logits(tokens, kv);
             }
             py::array_t<float> out({static_cast<py::ssize_t>(tokens.size()), static_cast<py::ssize_t>(vocab)});
             std::copy(flat.begin(), flat.end(), out.mutable_data());
             return out;
           },
           py::arg("tokens"), TURBOKV_KV_ARGS)
      .def(
          "cache_config",
          [](const PyModel&, std::optional<double> kv_bits, std::optional<double> key_bits,
             std::optional<double> value_bits, std::optional<long long> kv_window, std::optional<long long> kv_sinks,
             std::optional<std::string> cache) {
            return format_cache_config(
                cache_config(kv_args(kv_bits, key_bits, value_bits, kv_window, kv_sinks, std::move(cache))));
          },
          TURBOKV_KV_ARGS,
          "The canonical cache string these keyword arguments build (as generate and logits use it): the same "
          "one `turbokv generate --json` reports as cache_config for the same flags.");
}

}  // namespace turbokv::python
