// The shared prefix tier without Redis: two schedulers (replicas A and B) over one
// MemoryPrefixStore on the kjv model. B restores what A computed and answers exactly as A; a
// store that is down or evicts mid-lookup, and values that are garbage, truncated or another
// model's, are counted and computed instead, with the same answer. And the value format on its
// own: round trip and every rejection.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/prefix/prefix_store.hpp"
#include "server/prefix/prefix_store_redis.hpp"
#include "server/prefix/prefix_value.hpp"
#include "server/scheduling/scheduler.hpp"
#include "kjv_server_fixture.hpp"
#include "server/prefix/shared_prefixes.hpp"
#include "turbokv/error.hpp"

namespace turbokv::server {
namespace {

using test::kjv;

constexpr size_t kPage = 16;
const std::string kCache = "turboquant:bits=4,window=32,sinks=1,exact=f16";

SchedulerOptions options(std::shared_ptr<PrefixStore> store, bool local_prefixes = true) {
  SchedulerOptions o = test::small_scheduler(kCache, 64 << 20);
  static_assert(kPage == 16, "the fixture's pages");
  o.prefix_cache = local_prefixes;
  o.prefix_store = std::move(store);
  return o;
}

using Result = test::GreedyResult;
using test::run;

const std::string kLong =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness "
    "was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there "
    "be light: and there was light. And God saw the light, that it was good: and God divided the light from the "
    "darkness.";

std::vector<int> long_prompt(const std::string& tail = "") { return kjv().tok->encode(kLong + tail, true); }

TEST(SharedPrefixes, ReplicaBRestoresWhatReplicaAComputedAndAnswersTheSame) {
  auto store = std::make_shared<MemoryPrefixStore>();
  const auto prompt = long_prompt();
  ASSERT_GT(prompt.size(), 6 * kPage);
  Result a;
  {
    Scheduler replica_a(kjv().model, *kjv().tok, options(store));
    a = run(replica_a, prompt);
    ASSERT_EQ(a.error, "");
    EXPECT_EQ(a.usage.store_tokens, 0u);
  }  // A is gone; the store outlives it.
  EXPECT_GE(store->snapshot().size(), 1u);
  Scheduler replica_b(kjv().model, *kjv().tok, options(store));
  const Result b = run(replica_b, prompt);
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(b.text, a.text);
  EXPECT_EQ(b.usage.store_tokens, (prompt.size() - 1) / kPage * kPage);
  EXPECT_LE(b.usage.prompt_tokens - b.usage.cached_tokens, kPage);  // at most one block computed
  const auto m = replica_b.metrics();
  EXPECT_EQ(m.prompt_tokens_store_total, b.usage.store_tokens);
  EXPECT_EQ(m.prefix_store_hits_total, 1u);
  EXPECT_EQ(m.shared.hits_total, 1u);
  // B found the prompt there: it does not write it again (at most its answer's prefix).
  EXPECT_LE(m.shared.offers_total, 1u);

  // A longer prompt that extends it restores the shared part from B's own store lookup and
  // computes only its tail; the output equals a replica that computes everything.
  const auto longer = long_prompt(" And God called the light Day, and the darkness he called Night.");
  Scheduler alone(kjv().model, *kjv().tok, options(nullptr, false));
  const Result want = run(alone, longer);
  Scheduler replica_c(kjv().model, *kjv().tok, options(store));
  const Result c = run(replica_c, longer);
  EXPECT_EQ(c.text, want.text);
  // At least the first prompt's prefix; more when A's answer began as this prompt goes on.
  EXPECT_GE(c.usage.store_tokens, (prompt.size() - 1) / kPage * kPage);
}

TEST(SharedPrefixes, AGeneratedAnswerIsStoredForTheNextTurn) {
  auto store = std::make_shared<MemoryPrefixStore>();
  const auto prompt = long_prompt();
  Result a;
  {
    Scheduler replica_a(kjv().model, *kjv().tok, options(store));
    a = run(replica_a, prompt, 40);
    ASSERT_EQ(a.error, "");
  }
  // Every value A stored is a prefix of its answer's (the longest): stored superseding them all,
  // so a store short of room evicts them before other conversations' values.
  const auto values = store->snapshot();
  ASSERT_GE(values.size(), 2u);
  std::string answer_key;
  for (const auto& [key, value] : values) {
    if (answer_key.empty() || value.size() > values.at(answer_key).size()) answer_key = key;
  }
  const auto supersessions = store->supersessions();
  ASSERT_EQ(supersessions.count(answer_key), 1u);
  const std::vector<std::string>& shorter = supersessions.at(answer_key);
  // One key per shorter whole block: the answer's value reaches past the prompt's last block.
  EXPECT_GT(shorter.size() + 1, prompt.size() / kPage);
  EXPECT_LE(shorter.size() + 1, (prompt.size() + 40) / kPage);
  for (const auto& [key, value] : values) {
    if (key != answer_key) {
      EXPECT_NE(std::find(shorter.begin(), shorter.end(), key), shorter.end()) << key;
    }
  }
  // The next turn, tokenized from its text as a client sends it: the prompt, the answer, more.
  const auto next = long_prompt(a.text + " And the evening and the morning were the first day.");
  Scheduler alone(kjv().model, *kjv().tok, options(nullptr, false));
  const Result want = run(alone, next);
  Scheduler replica_b(kjv().model, *kjv().tok, options(store));
  const Result b = run(replica_b, next);
  EXPECT_EQ(b.text, want.text);
  // Tokenizing the answer's text may differ from the sampled ids somewhere; up to there, the
  // answer's stored prefix serves, so more than the prompt is restored.
  EXPECT_GT(b.usage.store_tokens, prompt.size());
}

TEST(SharedPrefixes, StoreDownOrEvictingMidLookupComputesAndCounts) {
  auto store = std::make_shared<MemoryPrefixStore>();
  const auto prompt = long_prompt();
  Scheduler alone(kjv().model, *kjv().tok, options(nullptr, false));
  const Result want = run(alone, prompt);
  {
    Scheduler replica_a(kjv().model, *kjv().tok, options(store));
    EXPECT_EQ(run(replica_a, prompt).text, want.text);
  }
  store->down = true;
  {
    Scheduler replica_b(kjv().model, *kjv().tok, options(store, false));
    const Result b = run(replica_b, prompt);
    EXPECT_EQ(b.error, "");
    EXPECT_EQ(b.text, want.text);
    EXPECT_EQ(b.usage.cached_tokens, 0u);
    const auto m = replica_b.metrics();
    EXPECT_EQ(m.shared.unavailable_total, 1u);
    EXPECT_GE(m.shared.store.writes_failed_total, 1u);  // its own write found the store down too
  }
  store->down = false;
  store->evicting = true;
  {
    Scheduler replica_b(kjv().model, *kjv().tok, options(store, false));
    const Result b = run(replica_b, prompt);
    EXPECT_EQ(b.text, want.text);
    EXPECT_EQ(b.usage.cached_tokens, 0u);
    EXPECT_EQ(replica_b.metrics().shared.evicted_total, 1u);
  }
}

TEST(SharedPrefixes, DamagedOrForeignValuesAreRefusedCountedAndReplaced) {
  const auto prompt = long_prompt();
  Scheduler alone(kjv().model, *kjv().tok, options(nullptr, false));
  const Result want = run(alone, prompt);
  auto store = std::make_shared<MemoryPrefixStore>();
  {
    Scheduler replica_a(kjv().model, *kjv().tok, options(store));
    EXPECT_EQ(run(replica_a, prompt).text, want.text);
  }
  // The key of the prompt's prefix (A also stored its answer's, under another key).
  const size_t n = (prompt.size() - 1) / kPage * kPage;
  CacheConfig config = parse_cache_config(kCache);  // as the scheduler sets it: pages of kPage
  config.tq.page_tokens = config.dense_page_tokens = kPage;
  SharedPrefixes tier(store, kjv().model, config, kPage);
  const std::string key = prefix_key(prefix_chain(tier.identity(), prompt, n / kPage).back());
  const std::string good = store->snapshot().at(key);

  // Another model's value under this key: the same bytes with another model fingerprint in a
  // self-consistent value (a valid checksum), as a replica serving another model would write.
  PrefixIdentity other{0x1234, cache_config_hash(parse_cache_config(kCache)), kPage};
  PrefixExpectation expect{tier.identity(), std::span<const int>(prompt.data(), n), kjv().model.config.n_layers,
                           kjv().model.config.n_kv_heads, kjv().model.config.head_dim};
  const PromptCache restored = decode_prefix_value(good, expect);
  std::string foreign = encode_prefix_value(other, std::span<const int>(prompt.data(), n), restored);
  // Another quantizer's (3-bit) cache with this model's identity.
  PromptCache three = make_prompt_cache(kjv().model.config.n_layers, kjv().model.config.n_kv_heads,
                                        kjv().model.config.head_dim, parse_cache_config("turboquant:bits=3"));
  std::vector<float> kv(static_cast<size_t>(kjv().model.config.n_kv_heads * kjv().model.config.head_dim) * n, 0.5f);
  for (size_t l = 0; l < three.n_layers(); ++l) three.layer(l).append(kv, kv, n);
  std::string other_quantizer = encode_prefix_value(tier.identity(), std::span<const int>(prompt.data(), n), three);

  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"garbage", std::string(4096, 'x')},
      {"truncated", good.substr(0, good.size() / 2)},
      {"flipped", flipped},
      {"foreign", foreign},
      {"other quantizer", other_quantizer},
  };
  for (const auto& [what, value] : bad) {
    SCOPED_TRACE(what);
    store->overwrite(key, value);
    Scheduler replica_b(kjv().model, *kjv().tok, options(store, false));
    const Result b = run(replica_b, prompt);
    EXPECT_EQ(b.error, "");
    EXPECT_EQ(b.text, want.text);
    EXPECT_EQ(b.usage.cached_tokens, 0u);
    const auto m = replica_b.metrics();
    EXPECT_EQ(m.shared.rejected_total, 1u);
    // B's own result replaced the bad value.
    EXPECT_GE(m.shared.offers_total, 1u);
    EXPECT_EQ(store->snapshot().at(key), good);
  }
}

TEST(PrefixValue, RoundTripAndEveryTruncationRefused) {
  const auto prompt = long_prompt();
  const auto& c = kjv().model.config;
  PromptCache cache = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, parse_cache_config(kCache));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const size_t n = 2 * kPage;
  std::vector<float> k(static_cast<size_t>(c.n_kv_heads * c.head_dim) * n), v(k.size());
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  for (size_t l = 0; l < cache.n_layers(); ++l) cache.layer(l).append(k, v, n);
  const PrefixIdentity id{7, 9, kPage};
  const std::string value = encode_prefix_value(id, std::span<const int>(prompt.data(), n), cache);
  const PrefixExpectation expect{id, std::span<const int>(prompt.data(), n), c.n_layers, c.n_kv_heads, c.head_dim};
  const PromptCache back = decode_prefix_value(value, expect);
  EXPECT_EQ(serialize_prompt_cache(back), serialize_prompt_cache(cache));
  for (size_t cut = 0; cut < value.size(); cut += 97) {
    EXPECT_THROW(decode_prefix_value(std::string_view(value).substr(0, cut), expect), PrefixValueError) << cut;
  }
  // Other tokens (a hash collision) and another identity.
  std::vector<int> other(prompt.begin(), prompt.begin() + static_cast<long>(n));
  other[5] += 1;
  EXPECT_THROW(decode_prefix_value(value, {id, other, c.n_layers, c.n_kv_heads, c.head_dim}), PrefixValueError);
  EXPECT_THROW(decode_prefix_value(value, {{7, 10, kPage}, expect.tokens, c.n_layers, c.n_kv_heads, c.head_dim}),
               PrefixValueError);
  // Keys chain: a prefix's key depends on every earlier token and on the identity.
  const auto chain = prefix_chain(id, prompt, 3);
  auto changed = prompt;
  changed[0] += 1;
  const auto chain2 = prefix_chain(id, changed, 3);
  for (size_t b = 0; b < 3; ++b) EXPECT_NE(chain[b], chain2[b]);
  EXPECT_NE(prefix_chain({8, 9, kPage}, prompt, 1)[0], chain[0]);
}

TEST(RedisPrefixStore, UrlsAndADownStoreCostsOneTimeout) {
  const RedisAddress a = parse_redis_url("redis://:secret@10.0.0.5:6380/2");
  EXPECT_EQ(a.host, "10.0.0.5");
  EXPECT_EQ(a.port, 6380);
  EXPECT_EQ(a.db, 2);
  EXPECT_EQ(a.password, "secret");
  EXPECT_EQ(parse_redis_url("redis://cache").port, 6379);
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:99999", "redis://h:1/x", "redis://h:p"}) {
    EXPECT_THROW(parse_redis_url(bad), Error) << bad;
  }
  // Nothing listens on port 1: the lookup fails fast, then the store is skipped (no new
  // connection attempt per request) until the back-off ends.
  RedisPrefixStore store(parse_redis_url("redis://127.0.0.1:1"), {.timeout_ms = 30, .retry_ms = 60000});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(store.exists({"a", "b"}), StoreUnavailable);
  EXPECT_THROW(store.get("a"), StoreUnavailable);
  store.put("a", "b");
  store.flush(1000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  const auto counters = store.counters();
  EXPECT_EQ(counters.calls_failed_total, 1u);
  EXPECT_EQ(counters.writes_failed_total, 1u);
}

// An impostor Redis on 127.0.0.1: answers the first command of each connection with `reply`,
// then sends `trickle` every `every` (each piece within the client's per-read timeout) for
// `stream_for`, then closes. Stopped by the destructor.
class FakeRedis {
 public:
  FakeRedis(std::string reply, std::string trickle, std::chrono::milliseconds every,
            std::chrono::milliseconds stream_for)
      : reply_(std::move(reply)), trickle_(std::move(trickle)), every_(every), stream_for_(stream_for) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(listen_fd_, 4) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw Error("fake redis: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeRedis() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      char command[4096];
      pollfd c{fd, POLLIN, 0};
      if (poll(&c, 1, 1000) > 0 && recv(fd, command, sizeof command, 0) > 0) {
        bool ok = send(fd, reply_.data(), reply_.size(), MSG_NOSIGNAL) >= 0;
        const auto end = std::chrono::steady_clock::now() + stream_for_;
        while (ok && !stop_ && std::chrono::steady_clock::now() < end) {
          ok = send(fd, trickle_.data(), trickle_.size(), MSG_NOSIGNAL) >= 0;
          std::this_thread::sleep_for(every_);
        }
      }
      close(fd);
    }
  }
  std::string reply_, trickle_;
  std::chrono::milliseconds every_, stream_for_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Bytes of this process's peak resident set since reset_peak_rss().
size_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}
bool reset_peak_rss() { return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5"); }
size_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

struct Outcome {
  std::string error;  // empty: the call returned
  double seconds = 0;
  size_t peak_growth = 0;
};

template <typename Call>
Outcome hostile_call(Call call) {
  Outcome o;
  const bool peak_known = reset_peak_rss();
  const size_t before = rss_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    call();
  } catch (const StoreUnavailable& e) {
    o.error = e.what();
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t peak = peak_rss_bytes();
  o.peak_growth = peak_known && peak > before ? peak - before : 0;
  return o;
}

constexpr size_t kMemoryBound = 64 << 20;

// Issue 26, finding 8: "*2147483647" made hiredis allocate the array's pointers (16 GiB) and read
// elements for as long as they came: the request hung > 30 s and the replica grew to 8.3 GB.
// None of the store's commands is answered with an array: refused at once.
TEST(RedisPrefixStore, AnImpostorsHugeArrayIsRefusedAtOnce) {
  std::string elements;
  for (int i = 0; i < 10000; ++i) elements += ":1\r\n";
  FakeRedis fake("*2147483647\r\n", elements, std::chrono::milliseconds(5), std::chrono::seconds(3));
  RedisPrefixStore store(parse_redis_url("redis://127.0.0.1:" + std::to_string(fake.port())),
                         {.timeout_ms = 200, .retry_ms = 0});
  const Outcome o = hostile_call([&] { store.exists({"a", "b"}); });
  EXPECT_NE(o.error.find("array"), std::string::npos) << o.error;
  EXPECT_LT(o.seconds, 1.0);
  EXPECT_LT(o.peak_growth, kMemoryBound);
}

// A string longer than any value the store holds, streamed fast: refused once that many bytes
// have come, whatever the length it announced.
TEST(RedisPrefixStore, AReplyLongerThanAnyValueIsRefused) {
  FakeRedis fake("$2147483647\r\n", std::string(256 << 10, 'x'), std::chrono::milliseconds(5), std::chrono::seconds(3));
  RedisPrefixStore store(parse_redis_url("redis://127.0.0.1:" + std::to_string(fake.port())),
                         {.timeout_ms = 2000, .retry_ms = 0, .max_value_bytes = 1 << 20});
  const Outcome o = hostile_call([&] { store.get("a"); });
  EXPECT_NE(o.error.find("bytes"), std::string::npos) << o.error;
  EXPECT_LT(o.seconds, 1.0);
  EXPECT_LT(o.peak_growth, kMemoryBound);
}

// A reply trickled a byte at a time, each within the per-read timeout: the whole call is bounded
// by --prefix-store-timeout, not each read.
TEST(RedisPrefixStore, ATrickledReplyCostsOneTimeout) {
  FakeRedis fake("$100\r\n", "x", std::chrono::milliseconds(20), std::chrono::seconds(3));
  RedisPrefixStore store(parse_redis_url("redis://127.0.0.1:" + std::to_string(fake.port())),
                         {.timeout_ms = 200, .retry_ms = 0});
  const Outcome o = hostile_call([&] { store.get("a"); });
  EXPECT_NE(o.error.find("timed out"), std::string::npos) << o.error;
  EXPECT_LT(o.seconds, 1.0);
}

}  // namespace
}  // namespace turbokv::server
