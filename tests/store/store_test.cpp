// The Store contract, checked against every implementation: MemoryStore and TcpStore (a loopback
// TcpStoreServer with one TcpStore client per simulated rank).
#include "store/store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/memory_store.h"
#include "store/prefix_store.h"
#include "store/tcp_store.h"
#include "tests/store/test_util.h"
#include "tests/support/bytes.h"

namespace ddl {
namespace {

using std::chrono::milliseconds;
using testing::elapsed_ms;

// Upper slack for "returned soon after its timeout" (generous: CI machines are busy, and TSan).
constexpr double kTimeoutSlackMs = 1500;

using testing::bytes;
using testing::text;

// Each environment hands out one Store per rank; all of them see the same data.
class MemoryStoreEnv {
 public:
  std::shared_ptr<Store> client(int /*rank*/) {
    return std::shared_ptr<Store>(std::shared_ptr<Store>(), &store_);  // non-owning
  }

 private:
  MemoryStore store_;
};

class TcpStoreEnv {
 public:
  TcpStoreEnv() : server_(testing::loopback_options(0)) {}
  std::shared_ptr<Store> client(int rank) {
    return std::make_shared<TcpStore>(testing::loopback_options(server_.port(), rank, 16));
  }

 private:
  TcpStoreServer server_;
};

template <class Env>
class StoreTest : public ::testing::Test {
 protected:
  Env env_;
};

using StoreEnvs = ::testing::Types<MemoryStoreEnv, TcpStoreEnv>;
class EnvNames {
 public:
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, MemoryStoreEnv> ? "Memory" : "Tcp";
  }
};
TYPED_TEST_SUITE(StoreTest, StoreEnvs, EnvNames);

// Runs fn(rank) on `n` threads and returns the messages of any exceptions they threw.
template <class Fn>
std::vector<std::string> run_ranks(int n, Fn fn) {
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TYPED_TEST(StoreTest, SetThenGetReturnsTheValue) {
  auto store = this->env_.client(0);
  const Bytes binary{'a', '\0', 'b', '\xff', '\n'};
  store->set("binary", binary);
  store->set("empty", Bytes{});
  EXPECT_EQ(store->get("binary", milliseconds(1000)), binary);
  EXPECT_EQ(store->get("empty", milliseconds(1000)), Bytes{});
}

TYPED_TEST(StoreTest, SetReplacesAndOtherClientsSeeIt) {
  auto a = this->env_.client(0);
  auto b = this->env_.client(1);
  a->set("k", bytes("one"));
  a->set("k", bytes("two"));
  EXPECT_EQ(text(b->get("k", milliseconds(1000))), "two");
}

TYPED_TEST(StoreTest, GetWaitsForAValueSetLater) {
  auto getter = this->env_.client(0);
  auto setter = this->env_.client(1);
  Bytes got;
  std::atomic<bool> returned{false};
  std::thread t([&] {
    got = getter->get("late", milliseconds(10'000));
    returned = true;
  });
  // The getter must still be blocked well after it started: the key does not exist yet.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(returned.load()) << "get returned before the key was set";
  const auto set_at = std::chrono::steady_clock::now();
  setter->set("late", bytes("here"));
  t.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(text(got), "here");
  EXPECT_LT(elapsed_ms(set_at), kTimeoutSlackMs) << "the set did not wake the getter promptly";
}

TYPED_TEST(StoreTest, GetTimeoutIsHonoured) {
  auto store = this->env_.client(0);
  const auto start = std::chrono::steady_clock::now();
  try {
    store->get("never", milliseconds(250));
    FAIL() << "get on a key nobody sets returned";
  } catch (const StoreTimeout& e) {
    const double ms = elapsed_ms(start);
    EXPECT_GE(ms, 250.0);
    EXPECT_LT(ms, 250.0 + kTimeoutSlackMs);
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("250 ms"), std::string::npos) << e.what();
  }
}

TYPED_TEST(StoreTest, ZeroTimeoutDoesNotWait) {
  auto store = this->env_.client(0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(store->get("absent", milliseconds(0)), StoreTimeout);
  EXPECT_THROW(store->wait({"absent"}, milliseconds(0)), StoreTimeout);
  EXPECT_LT(elapsed_ms(start), kTimeoutSlackMs);
  store->set("present", bytes("x"));
  EXPECT_NO_THROW(store->wait({"present"}, milliseconds(0)));
}

TYPED_TEST(StoreTest, AddCountsFromZeroAndIsReadableAsText) {
  auto store = this->env_.client(0);
  EXPECT_EQ(store->add("counter", 1), 1);
  EXPECT_EQ(store->add("counter", 5), 6);
  EXPECT_EQ(store->add("counter", -8), -2);
  EXPECT_EQ(text(store->get("counter", milliseconds(1000))), "-2");
}

TYPED_TEST(StoreTest, AddOnANonIntegerValueFailsAndTheStoreStaysUsable) {
  auto store = this->env_.client(0);
  store->set("word", bytes("hello"));
  try {
    store->add("word", 1);
    FAIL() << "add on 'hello' succeeded";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("'word'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a decimal"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store->add("other", 2), 2);
}

TYPED_TEST(StoreTest, CheckDoesNotWait) {
  auto store = this->env_.client(0);
  store->set("a", bytes("1"));
  EXPECT_TRUE(store->check({"a"}));
  EXPECT_FALSE(store->check({"a", "b"}));
  EXPECT_TRUE(store->check({}));
  store->add("b", 1);
  EXPECT_TRUE(store->check({"a", "b"}));
}

TYPED_TEST(StoreTest, WaitReturnsOnceEveryKeyIsSet) {
  auto waiter = this->env_.client(0);
  auto setter = this->env_.client(1);
  std::string error;
  std::thread t([&] {
    try {
      waiter->wait({"x", "y", "z"}, milliseconds(10'000));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  setter->set("x", bytes("1"));
  setter->add("y", 1);
  setter->set("z", bytes("1"));
  t.join();
  EXPECT_EQ(error, "");
}

TYPED_TEST(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto store = this->env_.client(0);
  store->set("here", bytes("1"));
  const auto start = std::chrono::steady_clock::now();
  try {
    store->wait({"here", "gone"}, milliseconds(300));
    FAIL() << "wait returned with a key missing";
  } catch (const StoreTimeout& e) {
    const double ms = elapsed_ms(start);
    EXPECT_GE(ms, 300.0);
    EXPECT_LT(ms, 300.0 + kTimeoutSlackMs);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing: 'gone'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("'here'"), std::string::npos) << msg;
  }
}

TYPED_TEST(StoreTest, ManyConcurrentClientsAddAtomically) {
  constexpr int kClients = 16;
  constexpr int kAddsEach = 50;
  std::mutex mu;
  std::vector<std::int64_t> seen;
  auto errors = run_ranks(kClients, [&](int rank) {
    auto store = this->env_.client(rank);
    for (int i = 0; i < kAddsEach; ++i) {
      const std::int64_t v = store->add("shared", 1);
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(v);
    }
    store->set("done/" + std::to_string(rank), bytes("1"));
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  // Every add returned a distinct value: 1..N, none lost, none repeated.
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kClients * kAddsEach));
  for (std::size_t i = 0; i < seen.size(); ++i)
    ASSERT_EQ(seen[i], static_cast<std::int64_t>(i + 1));
  auto reader = this->env_.client(0);
  EXPECT_EQ(text(reader->get("shared", milliseconds(1000))), std::to_string(kClients * kAddsEach));
}

TYPED_TEST(StoreTest, BarrierReleasesEveryRankOnlyAfterAllArrived) {
  constexpr int kWorld = 4;
  auto errors = run_ranks(kWorld, [&](int rank) {
    auto store = this->env_.client(rank);
    store->set("before/" + std::to_string(rank), bytes("1"));
    barrier(*store, "init", rank, kWorld, milliseconds(10'000));
    for (int r = 0; r < kWorld; ++r) {
      if (!store->check({"before/" + std::to_string(r)})) {
        throw std::runtime_error("passed the barrier before rank " + std::to_string(r) +
                                 " arrived");
      }
    }
    barrier(*store, "second", rank, kWorld, milliseconds(10'000));
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TYPED_TEST(StoreTest, BarrierTimeoutNamesTheMissingRank) {
  constexpr int kWorld = 3;
  std::mutex mu;
  std::vector<std::string> messages;
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(2, [&](int rank) {  // rank 2 never comes
    auto store = this->env_.client(rank);
    try {
      barrier(*store, "join", rank, kWorld, milliseconds(300));
    } catch (const StoreTimeout& e) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(e.what());
    }
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  EXPECT_LT(elapsed_ms(start), 300.0 + kTimeoutSlackMs);
  ASSERT_EQ(messages.size(), 2u);
  for (const auto& m : messages) {
    EXPECT_EQ(m, "barrier 'join' timed out after 300 ms: 2/3 ranks arrived (0,1); missing: 2");
  }
}

TYPED_TEST(StoreTest, WaitForSaysTrueOrFalseInsteadOfThrowing) {
  auto store = this->env_.client(0);
  auto other = this->env_.client(1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(store->wait_for({"a", "b"}, milliseconds(200)));
  EXPECT_GE(elapsed_ms(start), 200.0);
  EXPECT_LT(elapsed_ms(start), 200.0 + kTimeoutSlackMs);
  EXPECT_FALSE(store->wait_for({"a"}, milliseconds(0)));
  other->set("a", bytes("1"));
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(100));
    other->set("b", bytes("2"));
  });
  EXPECT_TRUE(store->wait_for({"a", "b"}, milliseconds(10'000)));
  later.join();
  EXPECT_TRUE(store->wait_for({"a", "b"}, milliseconds(0)));
}

TYPED_TEST(StoreTest, CompareSetSwapsOnlyOnTheExpectedValue) {
  auto store = this->env_.client(0);
  // Absent key: only an "expect absent" swaps.
  EXPECT_EQ(store->compare_set("k", bytes("x"), bytes("y")), std::nullopt);
  EXPECT_FALSE(store->check({"k"}));
  EXPECT_EQ(store->compare_set("k", std::nullopt, bytes("one")), bytes("one"));
  // Present key: a wrong expectation returns the current value and changes nothing.
  EXPECT_EQ(store->compare_set("k", std::nullopt, bytes("two")), bytes("one"));
  EXPECT_EQ(store->compare_set("k", bytes("nope"), bytes("two")), bytes("one"));
  EXPECT_EQ(text(store->get("k", milliseconds(1000))), "one");
  EXPECT_EQ(store->compare_set("k", bytes("one"), bytes("two")), bytes("two"));
  EXPECT_EQ(text(store->get("k", milliseconds(1000))), "two");
  // Empty values are values, not absence.
  EXPECT_EQ(store->compare_set("e", std::nullopt, Bytes{}), Bytes{});
  EXPECT_EQ(store->compare_set("e", Bytes{}, bytes("full")), bytes("full"));
}

TYPED_TEST(StoreTest, CompareSetHasExactlyOneWinnerAmongRacers) {
  constexpr int kRanks = 8;
  std::vector<std::shared_ptr<Store>> clients;
  for (int r = 0; r < kRanks; ++r) clients.push_back(this->env_.client(r));
  std::atomic<int> winners{0};
  auto errors = run_ranks(kRanks, [&](int r) {
    const Bytes mine = bytes("rank " + std::to_string(r));
    if (clients[r]->compare_set("leader", std::nullopt, mine) == mine) ++winners;
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(winners.load(), 1);
}

TYPED_TEST(StoreTest, CompareSetWakesWaiters) {
  auto waiter = this->env_.client(0);
  auto setter = this->env_.client(1);
  Bytes got;
  std::thread t([&] { got = waiter->get("cas", milliseconds(10'000)); });
  std::this_thread::sleep_for(milliseconds(100));
  setter->compare_set("cas", std::nullopt, bytes("v"));
  t.join();
  EXPECT_EQ(text(got), "v");
}

TYPED_TEST(StoreTest, DeleteKeyRemovesItAndSaysWhetherItWasThere) {
  auto store = this->env_.client(0);
  auto other = this->env_.client(1);
  EXPECT_FALSE(store->delete_key("gone"));
  store->set("gone", bytes("x"));
  EXPECT_TRUE(other->delete_key("gone"));
  EXPECT_FALSE(store->check({"gone"}));
  EXPECT_THROW(store->get("gone", milliseconds(0)), StoreTimeout);
  EXPECT_EQ(store->add("gone", 5), 5);  // a deleted counter starts again from zero
}

TYPED_TEST(StoreTest, PrefixStoresAreSeparateKeySpacesOfOneStore) {
  auto base = this->env_.client(0);
  auto other = this->env_.client(1);
  PrefixStore a(*base, "a");
  PrefixStore b(*other, "b");
  PrefixStore nested(a, "inner");
  a.set("k", bytes("in a"));
  b.set("k", bytes("in b"));
  nested.set("k", bytes("in a/inner"));
  EXPECT_EQ(text(base->get("a/k", milliseconds(1000))), "in a");
  EXPECT_EQ(text(other->get("b/k", milliseconds(1000))), "in b");
  EXPECT_EQ(text(base->get("a/inner/k", milliseconds(1000))), "in a/inner");
  EXPECT_FALSE(base->check({"k"}));
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 3), 3);
  EXPECT_TRUE(a.wait_for({"k", "n"}, milliseconds(0)));
  EXPECT_FALSE(a.wait_for({"missing"}, milliseconds(0)));
  EXPECT_EQ(a.compare_set("k", bytes("in a"), bytes("new")), bytes("new"));
  EXPECT_TRUE(b.delete_key("k"));
  EXPECT_FALSE(b.check({"k"}));
  EXPECT_TRUE(a.check({"k"}));
  try {
    b.wait({"k"}, milliseconds(0));
    FAIL() << "wait on a deleted key returned";
  } catch (const StoreTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("'b/k'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PrefixStore(*base, ""), StoreError);
}

TYPED_TEST(StoreTest, MultiSetThenMultiGetReturnsTheValuesInOrder) {
  auto writer = this->env_.client(0);
  auto reader = this->env_.client(1);
  const Bytes binary{'a', '\0', 'b', '\xff'};
  writer->multi_set({"m/a", "m/b", "m/empty"}, {bytes("one"), binary, Bytes{}});
  EXPECT_EQ(reader->multi_get({"m/b", "m/a", "m/empty", "m/b"}, milliseconds(1000)),
            (std::vector<Bytes>{binary, bytes("one"), Bytes{}, binary}));
  EXPECT_EQ(reader->multi_get({}, milliseconds(0)), std::vector<Bytes>{});
  writer->multi_set({"m/a"}, {bytes("replaced")});
  EXPECT_EQ(text(reader->get("m/a", milliseconds(1000))), "replaced");
  writer->multi_set({}, {});
}

TYPED_TEST(StoreTest, MultiSetOfUnequalListsFailsAndSetsNothing) {
  auto store = this->env_.client(0);
  try {
    store->multi_set({"u/a", "u/b"}, {bytes("1")});
    FAIL() << "multi_set took 2 keys and 1 value";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("2 key(s) but 1 value(s)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(store->check({"u/a"}));
  store->set("u/a", bytes("still usable"));
  EXPECT_EQ(text(store->get("u/a", milliseconds(1000))), "still usable");
}

TYPED_TEST(StoreTest, MultiGetWaitsWithOneDeadlineForKeysSetLater) {
  auto reader = this->env_.client(0);
  auto writer = this->env_.client(1);
  writer->set("w/0", bytes("zero"));
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(100));
    writer->set("w/2", bytes("two"));
    std::this_thread::sleep_for(milliseconds(100));
    writer->multi_set({"w/1", "w/3"}, {bytes("one"), bytes("three")});
  });
  const auto start = std::chrono::steady_clock::now();
  const auto values = reader->multi_get({"w/0", "w/1", "w/2", "w/3"}, milliseconds(10'000));
  later.join();
  EXPECT_GE(elapsed_ms(start), 150.0);
  EXPECT_EQ(values,
            (std::vector<Bytes>{bytes("zero"), bytes("one"), bytes("two"), bytes("three")}));
}

TYPED_TEST(StoreTest, MultiGetTimeoutNamesOnlyTheMissingKeys) {
  auto store = this->env_.client(0);
  store->multi_set({"t/here", "t/also"}, {bytes("1"), bytes("2")});
  const auto start = std::chrono::steady_clock::now();
  try {
    store->multi_get({"t/here", "t/gone", "t/also", "t/lost"}, milliseconds(300));
    FAIL() << "multi_get returned with keys missing";
  } catch (const StoreTimeout& e) {
    const double ms = elapsed_ms(start);
    EXPECT_GE(ms, 300.0);
    EXPECT_LT(ms, 300.0 + kTimeoutSlackMs);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("2 missing: 't/gone', 't/lost'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("'t/here'"), std::string::npos) << msg;
  }
}

// A key seen set and then deleted while a wait is parked on a later key is waited for again: the
// server's cursor over a waiter's keys does not skip it.
TYPED_TEST(StoreTest, WaitOnManyKeysWaitsAgainForAKeyDeletedMeanwhile) {
  auto waiter = this->env_.client(0);
  auto other = this->env_.client(1);
  std::atomic<bool> returned{false};
  std::string error;
  other->set("d/a", bytes("1"));
  std::thread t([&] {
    try {
      waiter->wait({"d/a", "d/b"}, milliseconds(10'000));
    } catch (const std::exception& e) {
      error = e.what();
    }
    returned = true;
  });
  std::this_thread::sleep_for(milliseconds(100));  // the wait is parked on "d/b" by now
  EXPECT_TRUE(other->delete_key("d/a"));
  other->set("d/b", bytes("1"));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(returned.load()) << "the wait returned while 'd/a' was deleted";
  other->set("d/a", bytes("2"));
  t.join();
  EXPECT_EQ(error, "");
}

TYPED_TEST(StoreTest, BarrierOfManyRanksReleasesThemAll) {
  constexpr int kWorld = 48;
  std::atomic<int> passed{0};
  auto errors = run_ranks(kWorld, [&](int rank) {
    auto store = this->env_.client(rank);
    barrier(*store, "many", rank, kWorld, milliseconds(20'000));
    ++passed;
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(passed.load(), kWorld);
}

TYPED_TEST(StoreTest, BarrierTimeoutNamesTheMissingRanksOfALargerWorld) {
  constexpr int kWorld = 40;
  std::mutex mu;
  std::vector<std::string> messages;
  auto errors = run_ranks(kWorld, [&](int rank) {
    if (rank == 7 || rank == 31) return;  // never come
    auto store = this->env_.client(rank);
    try {
      barrier(*store, "partial", rank, kWorld, milliseconds(500));
    } catch (const StoreTimeout& e) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(e.what());
    }
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  ASSERT_EQ(messages.size(), static_cast<std::size_t>(kWorld - 2));
  for (const auto& m : messages) {
    EXPECT_NE(m.find("timed out after 500 ms: 38/40 ranks arrived (0,1,2,3,4,5,6,8,"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("; missing: 7,31"), std::string::npos) << m;
  }
}

TYPED_TEST(StoreTest, BarrierRejectsARankOutsideTheWorld) {
  auto store = this->env_.client(0);
  EXPECT_THROW(barrier(*store, "bad", 3, 3, milliseconds(100)), StoreError);
}

// Counts the requests one rank makes (every Store call is one request on TcpStore).
class CountingStore : public Store {
 public:
  explicit CountingStore(Store& base) : base_(base) {}
  int requests() const { return requests_; }

  void set(const std::string& k, const Bytes& v) override { ++requests_, base_.set(k, v); }
  Bytes get(const std::string& k, milliseconds t) override { return ++requests_, base_.get(k, t); }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    return ++requests_, base_.add(k, d);
  }
  bool check(const std::vector<std::string>& k) override { return ++requests_, base_.check(k); }
  void wait(const std::vector<std::string>& k, milliseconds t) override {
    ++requests_, base_.wait(k, t);
  }
  bool wait_for(const std::vector<std::string>& k, milliseconds t) override {
    return ++requests_, base_.wait_for(k, t);
  }
  std::optional<Bytes> compare_set(const std::string& k, const std::optional<Bytes>& e,
                                   const Bytes& d) override {
    return ++requests_, base_.compare_set(k, e, d);
  }
  bool delete_key(const std::string& k) override { return ++requests_, base_.delete_key(k); }
  void multi_set(const std::vector<std::string>& k, const std::vector<Bytes>& v) override {
    ++requests_, base_.multi_set(k, v);
  }
  std::vector<Bytes> multi_get(const std::vector<std::string>& k, milliseconds t) override {
    return ++requests_, base_.multi_get(k, t);
  }

 private:
  Store& base_;
  int requests_ = 0;
};

// The most requests one rank made in a barrier of `world` ranks (`absent` never come).
int most_barrier_requests(int world, const std::vector<int>& absent, milliseconds timeout) {
  MemoryStore shared;
  std::vector<int> requests(static_cast<std::size_t>(world), 0);
  auto errors = run_ranks(world, [&](int rank) {
    if (std::find(absent.begin(), absent.end(), rank) != absent.end()) return;
    CountingStore mine(shared);
    try {
      barrier(mine, "counted", rank, world, timeout);
    } catch (const StoreTimeout&) {
      if (absent.empty()) throw;
    }
    requests[static_cast<std::size_t>(rank)] = mine.requests();
  });
  if (!errors.empty()) throw std::runtime_error(errors.front());
  return *std::max_element(requests.begin(), requests.end());
}

TEST(BarrierCostTest, EveryRankMakesThreeRequestsWhateverTheWorldSize) {
  EXPECT_EQ(most_barrier_requests(2, {}, milliseconds(10'000)), 3);
  EXPECT_EQ(most_barrier_requests(16, {}, milliseconds(10'000)), 3);
  EXPECT_EQ(most_barrier_requests(256, {}, milliseconds(20'000)), 3);
}

TEST(BarrierCostTest, ATimeoutCostsTwoRequestsMoreNotOnePerRank) {
  EXPECT_EQ(most_barrier_requests(64, {5, 60}, milliseconds(300)), 5);
}

}  // namespace
}  // namespace ddl
