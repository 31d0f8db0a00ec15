// The disk tier (serve --prefix-disk): DiskPrefixStore on its own (values kept across a reopen,
// one process per path, LRU within the byte budget across restarts, superseded prefixes first, a
// value over the budget or a refused one dropped), and under the scheduler on the kjv model: a
// prefix the prefix cache evicts is written to disk and restored from it, also by a new server on
// the same path, with the answer a server without prefix tiers gives; idle conversations keep
// their prefixes under a budget that evicts; a damaged value on disk is refused, counted and
// recomputed; a failing disk is a counted miss; the shared store is asked only for more than the
// disk holds.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/prefix/prefix_store.hpp"
#include "server/prefix/prefix_store_disk.hpp"
#include "server/scheduling/scheduler.hpp"
#include "kjv_server_fixture.hpp"
#include "skip_policy.hpp"
#include "test_util.hpp"
#include "turbokv/error.hpp"

namespace turbokv::server {
namespace {

const std::string kModels = TURBOKV_MODELS_DIR;
constexpr size_t kPage = 16;
const std::string kCache = "turboquant:bits=4,window=32,sinks=1,exact=f16";

struct Kjv {
  engine::Model model = engine::load_model(kModels + "/kjv-llama-3M.bin");
  std::unique_ptr<engine::Tokenizer> tok = engine::load_tokenizer_for_model(model);
};

const Kjv& kjv() {
  static const Kjv k;
  return k;
}

// A fresh directory under the test's temporary directory, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() / "turbokv-disk-";
    path += info->name();
    path += "-" + std::to_string(::getpid());
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string str() const { return path.string(); }
};

DiskStoreOptions mib(size_t budget_mib) {
  DiskStoreOptions o;
  o.budget_bytes = budget_mib << 20;
  return o;
}

std::string value_of(size_t bytes, char fill) { return std::string(bytes, fill); }

TEST(DiskPrefixStore, KeepsValuesAcrossAReopenAndRefusesASecondOpener) {
  TempDir dir;
  {
    DiskPrefixStore store(dir.str(), mib(4));
    store.put("a", value_of(100000, 'a'));
    store.put("b", value_of(5000, 'b'));
    store.flush(10000);
    EXPECT_EQ(store.exists({"a", "b", "c"}), (std::vector<bool>{true, true, false}));
    EXPECT_EQ(store.get("b"), value_of(5000, 'b'));
    EXPECT_EQ(store.get("c"), std::nullopt);
    // Another server on the same path is refused while this one runs.
    EXPECT_THROW(DiskPrefixStore(dir.str(), mib(4)), Error);
    const StoreCounters c = store.counters();
    EXPECT_EQ(c.writes_total, 2u);
    EXPECT_EQ(c.write_bytes_total, 105000u);
    EXPECT_EQ(c.read_bytes_total, 5000u);
    EXPECT_EQ(c.stored_values, 2u);
    EXPECT_EQ(c.stored_bytes, 105000u);
  }
  DiskPrefixStore again(dir.str(), mib(4));
  EXPECT_EQ(again.exists({"a", "b"}), (std::vector<bool>{true, true}));
  EXPECT_EQ(again.get("a"), value_of(100000, 'a'));
  EXPECT_EQ(again.counters().stored_bytes, 105000u);
}

TEST(DiskPrefixStore, WritesQueuedAtACleanStopAreKept) {
  TempDir dir;
  {
    DiskPrefixStore store(dir.str(), mib(8));
    for (int i = 0; i < 20; ++i) store.put(fmt::format("k{}", i), value_of(100000, static_cast<char>('a' + i)));
  }  // no flush: the destructor writes what is queued
  DiskPrefixStore again(dir.str(), mib(8));
  EXPECT_EQ(again.counters().stored_values, 20u);
  EXPECT_EQ(again.get("k19"), value_of(100000, static_cast<char>('a' + 19)));
}

TEST(DiskPrefixStore, EvictsTheLeastRecentlyUsedWithinTheBudgetAcrossRestarts) {
  TempDir dir;
  const size_t v = 300 << 10;  // three fit in 1 MiB, four do not
  {
    DiskPrefixStore store(dir.str(), mib(1));
    for (const char* k : {"a", "b", "c"}) {
      store.put(k, value_of(v, k[0]));
      store.flush(10000);
    }
    ASSERT_TRUE(store.get("a"));  // a is now the most recently used; b the least
    store.put("d", value_of(v, 'd'));
    store.flush(10000);
    EXPECT_EQ(store.exists({"a", "b", "c", "d"}), (std::vector<bool>{true, false, true, true}));
    const StoreCounters c = store.counters();
    EXPECT_EQ(c.evictions_total, 1u);
    EXPECT_LE(c.stored_bytes, 1u << 20);
  }
  // The order survives a restart: c is the least recently used now.
  DiskPrefixStore again(dir.str(), mib(1));
  again.put("e", value_of(v, 'e'));
  again.flush(10000);
  EXPECT_EQ(again.exists({"a", "c", "d", "e"}), (std::vector<bool>{true, false, true, true}));
}

// A conversation's next turn holds its earlier ones: stored with put_superseding, the earlier
// turns go before any other value, so an idle conversation's one turn outlasts them although it
// is older, also after a restart; a superseded prefix read again is kept again.
TEST(DiskPrefixStore, SupersededPrefixesAreEvictedFirstAcrossRestarts) {
  TempDir dir;
  const size_t v = 300 << 10;  // three fit in 1 MiB, four do not
  {
    DiskPrefixStore store(dir.str(), mib(1));
    store.put("idle", value_of(v, 'i'));  // another conversation's, older than the turns below
    store.flush(10000);
    store.put("turn1", value_of(v, '1'));
    store.flush(10000);
    store.put_superseding("turn2", value_of(v, '2'), {"turn1", "never-stored"});
    store.flush(10000);
    EXPECT_EQ(store.counters().evictions_total, 0u);
  }
  DiskPrefixStore again(dir.str(), mib(1));
  again.put("other", value_of(v, 'o'));
  again.flush(10000);
  EXPECT_EQ(again.exists({"idle", "turn1", "turn2", "other"}), (std::vector<bool>{true, false, true, true}));
  // The next turn replaces turn2 rather than the idle conversation's value.
  again.put_superseding("turn3", value_of(v, '3'), {"turn1", "turn2"});
  again.flush(10000);
  EXPECT_EQ(again.exists({"idle", "turn2", "other", "turn3"}), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(again.counters().evictions_total, 2u);
  EXPECT_EQ(again.get("idle"), value_of(v, 'i'));
}

TEST(DiskPrefixStore, ASupersededPrefixReadAgainIsKeptAgain) {
  TempDir dir;
  const size_t v = 300 << 10;
  DiskPrefixStore store(dir.str(), mib(1));
  store.put("prompt", value_of(v, 'p'));
  store.flush(10000);
  store.put_superseding("answer", value_of(v, 'a'), {"prompt"});
  store.flush(10000);
  ASSERT_TRUE(store.get("prompt"));  // e.g. the answer regenerated: the prompt's prefix in use
  store.put("c", value_of(v, 'c'));
  store.flush(10000);
  store.put("d", value_of(v, 'd'));
  store.flush(10000);
  EXPECT_EQ(store.exists({"prompt", "answer", "c", "d"}), (std::vector<bool>{true, false, true, true}));
}

// The same through the scheduler and the tool: prefix-disk-bench's chat workload with three of
// eight conversations idle after their first turn and a disk budget well under what the workload
// writes. The idle conversations come back to every token an unbounded disk would give them
// (plain LRU gave none: their values were the oldest), and every answer is the one computed
// without the disk.
TEST(DiskTier, IdleConversationsKeepTheirPrefixesUnderABudgetThatEvicts) {
  const std::string tool = TURBOKV_TOOL_PATH;
  if (tool.empty() || !std::filesystem::exists(tool)) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const auto bench = [&](const std::string& budget) {
    const auto out = test::run_command(tool + " prefix-disk-bench --conversations 8 --idle 3 --turns 3"
                                       " --first-tokens 128 --turn-tokens 32 --answer-tokens 8 --resident 2"
                                       " --threads 2 --json --prefix-disk-budget " + budget);
    EXPECT_EQ(out.status, 0) << out.text;
    return nlohmann::json::parse(out.text, nullptr, false);
  };
  const auto unbounded = bench("64GiB"), tight = bench("2MiB");
  ASSERT_FALSE(unbounded.is_discarded() || tight.is_discarded());
  EXPECT_EQ(unbounded["disk_evictions"], 0);
  EXPECT_GT(tight["disk_evictions"].get<int>(), 0) << "the budget must make the disk choose";
  EXPECT_LT(tight["disk_stored_bytes"].get<double>(), 0.5 * unbounded["disk_stored_bytes"].get<double>());
  EXPECT_GT(unbounded["idle_back_from_disk"].get<int>(), 0);
  EXPECT_EQ(tight["idle_back_from_disk"], unbounded["idle_back_from_disk"]);
  for (const auto* j : {&unbounded, &tight}) {
    EXPECT_EQ((*j)["differing_answers"], 0);
    EXPECT_EQ((*j)["errors"], 0);
  }
}

TEST(DiskPrefixStore, AValueOverTheBudgetAndARefusedValueAreDropped) {
  TempDir dir;
  DiskPrefixStore store(dir.str(), mib(1));
  store.put("big", value_of(2 << 20, 'x'));
  store.put("ok", value_of(1000, 'o'));
  store.flush(10000);
  EXPECT_EQ(store.exists({"big", "ok"}), (std::vector<bool>{false, true}));
  EXPECT_EQ(store.counters().writes_failed_total, 1u);
  store.refused("ok");
  store.flush(10000);
  EXPECT_EQ(store.exists({"ok"}), (std::vector<bool>{false}));
  EXPECT_EQ(store.get("ok"), std::nullopt);  // deleted on disk too
  EXPECT_THROW(DiskPrefixStore("", mib(1)), Error);
  EXPECT_THROW(DiskPrefixStore(dir.str() + "/x", mib(0)), Error);
}

TEST(DiskPrefixStore, AFileThatIsNotAStoreIsAClearError) {
  TempDir dir;
  std::filesystem::create_directories(dir.path);
  std::ofstream(dir.path / "data.mdb") << std::string(100000, 'z');
  try {
    DiskPrefixStore store(dir.str(), mib(1));
    FAIL() << "opened garbage";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--prefix-disk"), std::string::npos) << e.what();
  }
}

// ---- under the scheduler ----

using Result = test::GreedyResult;
using test::run;

// budget_requests: how many requests of `prompt_tokens` + 24 the KV budget holds (so the prefix
// cache must evict a conversation's prefix to admit other ones).
SchedulerOptions options(std::shared_ptr<PrefixStore> disk, std::shared_ptr<PrefixStore> store = nullptr,
                         size_t kv_budget = 64 << 20) {
  SchedulerOptions o;
  o.cache = parse_cache_config(kCache);
  o.kv_budget = kv_budget;
  o.threads = 2;
  o.page_tokens = kPage;
  o.prefix_disk = std::move(disk);
  o.prefix_store = std::move(store);
  return o;
}

const std::string kGenesis =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness "
    "was upon the face of the deep. And the Spirit of God moved upon the face of the waters.";

// Four conversations with different starts, each well over a few pages.
std::vector<std::vector<int>> conversations() {
  const char* starts[] = {"And God said, Let there be light: ", "And the LORD spake unto Moses, saying, ",
                          "Blessed is the man that walketh not ", "The book of the generation of Jesus Christ, "};
  std::vector<std::vector<int>> out;
  for (const char* s : starts) out.push_back(kjv().tok->encode(std::string(s) + kGenesis, true));
  return out;
}

// kFloods requests at once that need the whole KV budget between them (short prompts,
// max_tokens up to the context): admitting them evicts every prefix the prefix cache holds.
constexpr int kFloods = 4;
void flood(Scheduler& s) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < kFloods; ++i) {
    GenerationRequest g;
    g.prompt = kjv().tok->encode("And", true);
    g.max_tokens = s.context() - static_cast<int>(g.prompt.size());
    g.ignore_eos = true;
    handles.push_back(std::make_shared<RequestHandle>());
    std::string why;
    ASSERT_EQ(s.submit(std::move(g), handles.back(), &why), Scheduler::Admission::accepted) << why;
  }
  for (auto& h : handles) {
    StreamEvent ev;
    while (h->wait_next(ev, std::chrono::seconds(60)) && ev.kind == StreamEvent::Kind::text) {
    }
    EXPECT_EQ(ev.kind, StreamEvent::Kind::finished);
  }
}

TEST(DiskTier, APrefixEvictedFromRamIsRestoredFromDiskAlsoAfterARestartAndAnswersTheSame) {
  TempDir dir;
  const auto convs = conversations();
  std::vector<Result> want;
  SchedulerOptions plain = options(nullptr);
  plain.prefix_cache = false;
  Scheduler alone(kjv().model, *kjv().tok, plain);
  for (const auto& c : convs) want.push_back(run(alone, c));
  // Room for kFloods full-context sequences: the conversations' prefixes fit beside each other
  // (and a running conversation), the flood only without them.
  const size_t budget = kFloods * alone.reservation(static_cast<size_t>(alone.context()));
  {
    auto disk = std::make_shared<DiskPrefixStore>(dir.str(), mib(64));
    Scheduler s(kjv().model, *kjv().tok, options(disk, nullptr, budget));
    for (size_t i = 0; i < convs.size(); ++i) EXPECT_EQ(run(s, convs[i]).text, want[i].text) << i;
    ASSERT_EQ(s.metrics().prefix_cache_entries, convs.size()) << "the budget is too small for this test";
    flood(s);
    disk->flush(10000);
    const auto m = s.metrics();
    EXPECT_EQ(m.prefix_cache_entries, 0u);
    EXPECT_EQ(m.prefix_cache_evictions_total, convs.size());
    // Each evicted prefix, each finished conversation's answer (and the flood's, once released).
    EXPECT_GE(m.disk.offers_total, convs.size() + m.prefix_cache_evictions_total);
    // The first conversation again (a regenerated answer: the same prompt): from disk.
    const Result again = run(s, convs[0]);
    EXPECT_EQ(again.text, want[0].text);
    EXPECT_EQ(again.usage.disk_tokens, (convs[0].size() - 1) / kPage * kPage);
    EXPECT_EQ(again.usage.cached_tokens, again.usage.disk_tokens);
    EXPECT_EQ(s.metrics().prefix_disk_hits_total, 1u);
    EXPECT_EQ(s.metrics().prompt_tokens_disk_total, again.usage.disk_tokens);
  }
  // A new server on the same path: every conversation's prefix is read back, the same answers.
  auto disk = std::make_shared<DiskPrefixStore>(dir.str(), mib(64));
  Scheduler s(kjv().model, *kjv().tok, options(disk, nullptr, budget));
  for (size_t i = 0; i < convs.size(); ++i) {
    const Result r = run(s, convs[i]);
    EXPECT_EQ(r.text, want[i].text) << i;
    EXPECT_EQ(r.usage.disk_tokens, (convs[i].size() - 1) / kPage * kPage) << i;
  }
  EXPECT_EQ(s.metrics().disk.rejected_total, 0u);
}

TEST(DiskTier, AFinishedTurnIsKeptForTheNextOne) {
  TempDir dir;
  const auto first = kjv().tok->encode(kGenesis, true);
  auto disk = std::make_shared<DiskPrefixStore>(dir.str(), mib(64));
  Result a;
  {
    Scheduler s(kjv().model, *kjv().tok, options(disk));
    a = run(s, first, 40);
  }
  disk->flush(10000);
  const auto next = kjv().tok->encode(kGenesis + a.text + " And God saw the light, that it was good.", true);
  SchedulerOptions plain = options(nullptr);
  plain.prefix_cache = false;
  Scheduler alone(kjv().model, *kjv().tok, plain);
  const Result want = run(alone, next);
  Scheduler s(kjv().model, *kjv().tok, options(disk));
  const Result b = run(s, next);
  EXPECT_EQ(b.text, want.text);
  // The answer's stored prefix reaches past the first prompt.
  EXPECT_GT(b.usage.disk_tokens, first.size());
}

// Flips one byte of every prefix value in the store's file (found by its magic; the byte is among
// the token ids, inside any value): what a disk that damages data underneath LMDB does.
int damage_values(const std::filesystem::path& dir) {
  std::fstream f(dir / "data.mdb", std::ios::in | std::ios::out | std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  int damaged = 0;
  for (size_t at = data.find("TKVPRFX1"); at != std::string::npos; at = data.find("TKVPRFX1", at + 8)) {
    const size_t where = at + 64;
    f.seekp(static_cast<std::streamoff>(where));
    f.put(static_cast<char>(data[where] ^ 0x10));
    ++damaged;
  }
  return damaged;
}

TEST(DiskTier, ADamagedValueOnDiskIsRefusedCountedDroppedAndRecomputed) {
  TempDir dir;
  const auto prompt = kjv().tok->encode(kGenesis, true);
  SchedulerOptions plain = options(nullptr);
  plain.prefix_cache = false;
  Scheduler alone(kjv().model, *kjv().tok, plain);
  const Result want = run(alone, prompt);
  {
    auto disk = std::make_shared<DiskPrefixStore>(dir.str(), mib(64));
    SchedulerOptions o = options(disk);
    o.prefix_cache = false;  // the prompt's prefix goes straight to disk
    Scheduler s(kjv().model, *kjv().tok, o);
    EXPECT_EQ(run(s, prompt).text, want.text);
    disk->flush(10000);
    ASSERT_GE(disk->counters().stored_values, 1u);
  }
  ASSERT_GE(damage_values(dir.path), 1);
  auto disk = std::make_shared<DiskPrefixStore>(dir.str(), mib(64));
  const size_t held = disk->counters().stored_values;
  Scheduler s(kjv().model, *kjv().tok, options(disk));
  const Result r = run(s, prompt);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.text, want.text);
  EXPECT_EQ(r.usage.cached_tokens, 0u);
  EXPECT_EQ(s.metrics().disk.rejected_total, 1u);
  disk->flush(10000);
  // Dropped from the store (not refused again by the next lookup or server).
  EXPECT_EQ(disk->counters().stored_values, held - 1);
}

TEST(DiskTier, AFailingDiskIsACountedMissNeverAFailedRequest) {
  const auto prompt = kjv().tok->encode(kGenesis, true);
  auto broken = std::make_shared<MemoryPrefixStore>();
  broken->down = true;
  SchedulerOptions o = options(broken);
  o.prefix_cache = false;
  Scheduler s(kjv().model, *kjv().tok, o);
  const Result a = run(s, prompt);
  const Result b = run(s, prompt);
  EXPECT_EQ(a.error, "");
  EXPECT_EQ(b.error, "");
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(b.usage.cached_tokens, 0u);
  const auto m = s.metrics();
  EXPECT_EQ(m.disk.unavailable_total, 2u);
  EXPECT_GE(m.disk.store.writes_failed_total, 1u);
  EXPECT_EQ(m.prefix_disk_misses_total, 2u);
}

TEST(DiskTier, TheSharedStoreIsAskedOnlyForMoreThanTheDiskHolds) {
  TempDir dir;
  const auto prompt = kjv().tok->encode(kGenesis, true);
  auto disk = std::make_shared<DiskPrefixStore>(dir.str(), mib(64));
  auto store = std::make_shared<MemoryPrefixStore>();
  SchedulerOptions o = options(disk, store);
  o.prefix_cache = false;
  Result a;
  {
    Scheduler s(kjv().model, *kjv().tok, o);
    a = run(s, prompt);
  }
  disk->flush(10000);
  ASSERT_GE(store->snapshot().size(), 1u);  // both tiers got the prompt's prefix
  Scheduler s(kjv().model, *kjv().tok, o);
  const Result b = run(s, prompt);
  EXPECT_EQ(b.text, a.text);
  EXPECT_EQ(b.usage.disk_tokens, (prompt.size() - 1) / kPage * kPage);
  EXPECT_EQ(b.usage.store_tokens, 0u);
  const auto m = s.metrics();
  EXPECT_EQ(m.disk.hits_total, 1u);
  EXPECT_EQ(m.shared.lookups_total, 0u);  // the disk had every block there is: no store lookup
  EXPECT_EQ(m.prefix_store_misses_total, 1u);
}

}  // namespace
}  // namespace turbokv::server
