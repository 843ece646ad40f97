// The etcd v3 gateway client against a real 3-member etcd cluster the test starts
// (tests/support/etcd_cluster.h): keys and values (binary too), transactions (create-once, value
// and mod-revision compares, a CAS counter from two threads, range results), watches (events from
// another client, the timeout, history, compaction), failover when the member it talks to is killed
// or silent, and the error when none answers.
#include "launcher/coord/etcd_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "net/ports.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/poll.h"
#include "tests/support/text.h"

namespace ddl::etcd {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::EtcdCluster;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> keys_of(const std::vector<KeyValue>& kvs) {
  std::vector<std::string> out;
  for (const auto& kv : kvs) out.push_back(kv.key);
  return out;
}

// One cluster for the whole suite (starting one takes a second or two); the failover test
// restarts the member it kills.
class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = std::make_unique<EtcdCluster>(3); }
  static void TearDownTestSuite() { cluster_.reset(); }

  static std::unique_ptr<Client> client(milliseconds timeout = milliseconds(2'000)) {
    return std::make_unique<Client>(ClientOptions{cluster_->endpoints(), timeout});
  }

  static std::unique_ptr<EtcdCluster> cluster_;
};

std::unique_ptr<EtcdCluster> EtcdClientTest::cluster_;

TEST_F(EtcdClientTest, PutGetPrefixErase) {
  auto c = client();
  EXPECT_FALSE(c->get("kv/missing").has_value());
  const std::int64_t r1 = c->put("kv/a", "1");
  const std::int64_t r2 = c->put("kv/b", "22");
  c->put("kv/c/d", "333");
  c->put("kw", "outside the prefix");
  EXPECT_GT(r2, r1);

  auto a = c->get("kv/a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->key, "kv/a");
  EXPECT_EQ(a->value, "1");
  EXPECT_EQ(a->mod_revision, r1);
  EXPECT_EQ(a->create_revision, r1);
  EXPECT_EQ(a->version, 1);

  c->put("kv/a", "");  // an empty value is a value (the gateway leaves the field out)
  a = c->get("kv/a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->value, "");
  EXPECT_EQ(a->version, 2);
  EXPECT_EQ(a->create_revision, r1);

  const RangeResult range = c->get_prefix("kv/");
  EXPECT_EQ(keys_of(range.kvs), (std::vector<std::string>{"kv/a", "kv/b", "kv/c/d"}));
  EXPECT_GE(range.revision, r2);
  EXPECT_EQ(range.kvs[2].value, "333");

  EXPECT_EQ(c->erase("kv/b"), 1);
  EXPECT_EQ(c->erase("kv/b"), 0);
  EXPECT_EQ(c->erase_prefix("kv/"), 2);
  EXPECT_TRUE(c->get_prefix("kv/").kvs.empty());
  EXPECT_EQ(c->get("kw")->value, "outside the prefix");
  c->erase("kw");
}

TEST_F(EtcdClientTest, BinaryKeysAndValues) {
  auto c = client();
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  // Lengths 254..256 cover each base64 padding case.
  for (std::size_t cut : {0, 1, 2}) {
    const std::string value = all.substr(cut);
    c->put(std::string("bin/\0\xff", 6), value);
    const auto kv = c->get(std::string("bin/\0\xff", 6));
    ASSERT_TRUE(kv.has_value());
    EXPECT_EQ(kv->value, value);
    EXPECT_EQ(kv->key, std::string("bin/\0\xff", 6));
  }
  // A prefix ending in 0xff: its range ends after the byte before it.
  c->put(std::string("bin/\xff\xff", 6), "x");
  c->put(std::string("bin0"), "outside");
  const auto range = c->get_prefix(std::string("bin/\xff", 5));
  EXPECT_EQ(keys_of(range.kvs), (std::vector<std::string>{std::string("bin/\xff\xff", 6)}));
  EXPECT_EQ(c->erase_prefix("bin"), 3);
}

TEST_F(EtcdClientTest, TxnCreateOnceAndValueCompare) {
  auto c = client();
  const TxnResult first = c->txn({Compare::absent("txn/owner")}, {Op::put("txn/owner", "node-a")},
                                 {Op::get("txn/owner")});
  EXPECT_TRUE(first.succeeded);
  EXPECT_TRUE(first.ranges.empty());
  EXPECT_GT(first.revision, 0);

  const TxnResult second = c->txn({Compare::absent("txn/owner")}, {Op::put("txn/owner", "node-b")},
                                  {Op::get("txn/owner")});
  EXPECT_FALSE(second.succeeded);
  ASSERT_EQ(second.ranges.size(), 1u);
  ASSERT_EQ(second.ranges[0].size(), 1u);
  EXPECT_EQ(second.ranges[0][0].value, "node-a");
  EXPECT_EQ(c->get("txn/owner")->value, "node-a");

  EXPECT_FALSE(
      c->txn({Compare::value_is("txn/owner", "node-b")}, {Op::erase("txn/owner")}).succeeded);
  EXPECT_FALSE(c->txn({Compare::value_is("txn/nobody", "")}, {Op::put("txn/x", "1")}).succeeded);
  EXPECT_TRUE(
      c->txn({Compare::value_is("txn/owner", "node-a")}, {Op::erase("txn/owner")}).succeeded);
  EXPECT_FALSE(c->get("txn/owner").has_value());
  // mod_revision_is(key, 0): the key does not exist.
  EXPECT_TRUE(c->txn({Compare::mod_revision_is("txn/owner", 0)}, {}).succeeded);
  EXPECT_FALSE(c->get("txn/x").has_value());
}

TEST_F(EtcdClientTest, TxnReturnsRangesInOrder) {
  auto c = client();
  c->put("rg/a/1", "a1");
  c->put("rg/a/2", "a2");
  c->put("rg/b", "b");
  const TxnResult r = c->txn({Compare::absent("rg/none")},
                             {Op::get_prefix("rg/a/"), Op::put("rg/c", "c"), Op::get("rg/b"),
                              Op::get("rg/zz"), Op::erase_prefix("rg/a/"), Op::get_prefix("rg/")});
  ASSERT_TRUE(r.succeeded);
  ASSERT_EQ(r.ranges.size(), 4u);
  EXPECT_EQ(keys_of(r.ranges[0]), (std::vector<std::string>{"rg/a/1", "rg/a/2"}));
  EXPECT_EQ(keys_of(r.ranges[1]), (std::vector<std::string>{"rg/b"}));
  EXPECT_TRUE(r.ranges[2].empty());
  EXPECT_EQ(keys_of(r.ranges[3]), (std::vector<std::string>{"rg/b", "rg/c"}));
  EXPECT_EQ(r.ranges[3][1].mod_revision, r.revision);
  c->erase_prefix("rg/");
}

// Two clients on two threads increment one counter by compare-and-swap on its mod revision:
// every increment that reports success is in the final count.
TEST_F(EtcdClientTest, CasIncrementsFromTwoThreadsLoseNothing) {
  auto first = client();
  auto second = first->clone();
  first->erase("cas/counter");
  constexpr int kEach = 40;
  auto increments = [](Client& c) {
    int conflicts = 0;
    for (int done = 0; done < kEach;) {
      const auto kv = c.get("cas/counter");
      const int value = kv ? std::stoi(kv->value) : 0;
      const std::int64_t revision = kv ? kv->mod_revision : 0;
      const TxnResult r = c.txn({Compare::mod_revision_is("cas/counter", revision)},
                                {Op::put("cas/counter", std::to_string(value + 1))});
      if (r.succeeded) {
        ++done;
      } else {
        ++conflicts;
      }
    }
    return conflicts;
  };
  auto a = std::async(std::launch::async, [&] { return increments(*first); });
  auto b = std::async(std::launch::async, [&] { return increments(*second); });
  const int conflicts = a.get() + b.get();
  EXPECT_EQ(first->get("cas/counter")->value, std::to_string(2 * kEach))
      << conflicts << " conflicts";
  first->erase("cas/counter");
}

TEST_F(EtcdClientTest, WatchSeesPutsAndDeletesOfAnotherClient) {
  auto writer = client();
  auto watcher = writer->clone();
  const std::int64_t from = writer->put("watch/other", "before") + 1;

  auto pending = std::async(std::launch::async, [&] {
    return watcher->watch("watch/", true, from, milliseconds(10'000));
  });
  std::this_thread::sleep_for(milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t put_revision = writer->put("watch/a", "value");
  const WatchResult put = pending.get();
  EXPECT_LT(testing::elapsed_ms(start), 2'000);
  ASSERT_EQ(put.events.size(), 1u);
  EXPECT_EQ(put.events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(put.events[0].kv.key, "watch/a");
  EXPECT_EQ(put.events[0].kv.value, "value");
  EXPECT_EQ(put.events[0].kv.mod_revision, put_revision);
  EXPECT_EQ(put.next_revision, put_revision + 1);

  pending = std::async(std::launch::async, [&] {
    return watcher->watch("watch/a", false, put.next_revision, milliseconds(10'000));
  });
  std::this_thread::sleep_for(milliseconds(200));
  writer->put("watch/unwatched", "x");
  writer->erase("watch/a");
  const WatchResult erased = pending.get();
  ASSERT_EQ(erased.events.size(), 1u);
  EXPECT_EQ(erased.events[0].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(erased.events[0].kv.key, "watch/a");
  EXPECT_GT(erased.events[0].kv.mod_revision, put_revision);
  writer->erase_prefix("watch/");
}

TEST_F(EtcdClientTest, WatchWithoutEventsReturnsAtItsTimeout) {
  auto c = client();
  const auto start = std::chrono::steady_clock::now();
  const WatchResult r = c->watch("quiet/", true, 0, milliseconds(700));
  const double ms = testing::elapsed_ms(start);
  EXPECT_TRUE(r.events.empty());
  EXPECT_GE(ms, 650);
  EXPECT_LE(ms, 1'200);
  EXPECT_GT(r.next_revision, 0);  // "from now" became a revision to resume from
  // The client still works after the watch (its own connection was closed, not this one's).
  c->put("quiet/after", "1");
  const WatchResult again = c->watch("quiet/", true, r.next_revision, milliseconds(2'000));
  ASSERT_EQ(again.events.size(), 1u);
  EXPECT_EQ(again.events[0].kv.key, "quiet/after");
  c->erase_prefix("quiet/");
}

TEST_F(EtcdClientTest, WatchFromAnOldRevisionReturnsHistory) {
  auto c = client();
  const std::int64_t r1 = c->put("hist/k", "1");
  c->put("hist/k", "2");
  c->erase("hist/k");
  const std::int64_t r4 = c->put("hist/k", "4");
  std::vector<WatchEvent> events;
  std::int64_t next = r1;
  while (events.size() < 4) {
    const WatchResult r = c->watch("hist/k", false, next, milliseconds(2'000));
    ASSERT_FALSE(r.events.empty()) << "history ended after " << events.size() << " events";
    events.insert(events.end(), r.events.begin(), r.events.end());
    next = r.next_revision;
  }
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kv.mod_revision, r1);
  EXPECT_EQ(events[0].kv.value, "1");
  EXPECT_EQ(events[1].kv.value, "2");
  EXPECT_EQ(events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[3].kv.value, "4");
  EXPECT_EQ(next, r4 + 1);

  // Compacted history: the watch says so instead of returning nothing.
  const std::string compact = "/usr/bin/etcdctl --endpoints=" + cluster_->endpoints_text() +
                              " compact " + std::to_string(r4) + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(compact.c_str()), 0) << compact;
  try {
    c->watch("hist/k", false, r1, milliseconds(2'000));
    FAIL() << "a watch from a compacted revision returned";
  } catch (const EtcdError& e) {
    EXPECT_TRUE(has(e.what(), "compacted")) << e.what();
  }
  c->erase("hist/k");
}

// A member that accepts connections but never answers costs one request_timeout, then the next
// member serves.
TEST_F(EtcdClientTest, SilentMemberIsSkippedAfterTheRequestTimeout) {
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(silent, 16), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::vector<env::Endpoint> endpoints{{"127.0.0.1", ntohs(a.sin_port)}};
  for (const auto& e : cluster_->endpoints()) endpoints.push_back(e);
  Client c({endpoints, milliseconds(500)});
  const auto start = std::chrono::steady_clock::now();
  c.put("silent/k", "v");
  const double ms = testing::elapsed_ms(start);
  ::close(silent);
  EXPECT_GE(ms, 450);
  EXPECT_LE(ms, 1'500);
  EXPECT_EQ(c.get("silent/k")->value, "v");
  c.erase("silent/k");
}

// The member the client talks to (the first) is killed: the next requests go to the others.
TEST_F(EtcdClientTest, FailoverWhenTheMemberIsKilled) {
  auto c = client();
  auto watcher = c->clone();
  c->put("fo/before", "1");
  const std::int64_t from = c->get("fo/before")->mod_revision + 1;
  cluster_->kill(0);
  const auto start = std::chrono::steady_clock::now();
  c->put("fo/after", "2");
  EXPECT_EQ(c->get("fo/before")->value, "1");
  EXPECT_EQ(c->get("fo/after")->value, "2");
  const WatchResult w = watcher->watch("fo/", true, from, milliseconds(3'000));
  ASSERT_EQ(w.events.size(), 1u);
  EXPECT_EQ(w.events[0].kv.key, "fo/after");
  EXPECT_LT(testing::elapsed_ms(start), 10'000);

  cluster_->restart(0);
  Client only_first({{cluster_->endpoint(0)}, milliseconds(2'000)});
  EXPECT_EQ(only_first.get("fo/after")->value, "2");
  c->erase_prefix("fo/");
}

// Which member leads, by etcdctl's status of each (-1 when none answers it).
int leader_of(const EtcdCluster& cluster) {
  for (int i = 0; i < cluster.size(); ++i) {
    if (!cluster.running(i)) continue;
    const std::string out = cluster.dir().file("status.json");
    const std::string cmd = "/usr/bin/etcdctl --endpoints=" + cluster.endpoint(i).str() +
                            " endpoint status -w json > " + out + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) continue;
    const auto status = nlohmann::json::parse(testing::read_file(out));
    const auto& s = status.at(0).at("Status");
    if (s.at("header").at("member_id") == s.at("leader")) return i;
  }
  return -1;
}

// The leader is killed: until the other two elect one, they answer "unavailable" or time out;
// the client keeps trying them within its budget and the request succeeds.
TEST_F(EtcdClientTest, FailoverWhenTheLeaderIsKilled) {
  const int leader = leader_of(*cluster_);
  ASSERT_GE(leader, 0) << cluster_->logs();
  auto c = client();
  c->put("lead/before", "1");
  cluster_->kill(leader);
  for (int i = 0; i < 5; ++i) c->put("lead/after/" + std::to_string(i), "2");
  EXPECT_EQ(c->get_prefix("lead/").kvs.size(), 6u);
  cluster_->restart(leader);
  c->erase_prefix("lead/");
}

TEST(EtcdClientErrors, NoMemberListeningThrowsUnreachableNamingAll) {
  const auto ports = net::pick_free_ports("127.0.0.1", 3);
  std::vector<env::Endpoint> endpoints;
  for (auto p : ports) endpoints.push_back({"127.0.0.1", p});
  Client c({endpoints, milliseconds(500)});
  const auto start = std::chrono::steady_clock::now();
  try {
    c.put("k", "v");
    FAIL() << "a put with no member listening returned";
  } catch (const EtcdUnreachable& e) {
    for (const auto& ep : endpoints) EXPECT_TRUE(has(e.what(), ep.str())) << e.what();
    EXPECT_TRUE(has(e.what(), "refused")) << e.what();
  }
  EXPECT_LE(testing::elapsed_ms(start), 3 * 500 + 500);
  EXPECT_THROW(Client(ClientOptions{{}, milliseconds(500)}), EtcdError);
}

// Three members that accept connections and never answer: one request_timeout each.
TEST(EtcdClientErrors, SilentMembersThrowUnreachableAfterTheirTimeouts) {
  std::vector<int> sockets;
  std::vector<env::Endpoint> endpoints;
  for (int i = 0; i < 3; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(fd, 16), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    sockets.push_back(fd);
    endpoints.push_back({"127.0.0.1", ntohs(a.sin_port)});
  }
  Client c({endpoints, milliseconds(300)});
  const auto start = std::chrono::steady_clock::now();
  try {
    c.get("k");
    FAIL() << "a get with no member answering returned";
  } catch (const EtcdUnreachable& e) {
    for (const auto& ep : endpoints) EXPECT_TRUE(has(e.what(), ep.str())) << e.what();
    EXPECT_TRUE(has(e.what(), "no reply in time")) << e.what();
  }
  const double ms = testing::elapsed_ms(start);
  for (int fd : sockets) ::close(fd);
  EXPECT_GE(ms, 3 * 300 - 50);
  EXPECT_LE(ms, 3 * 300 + 500);
}

}  // namespace
}  // namespace ddl::etcd
