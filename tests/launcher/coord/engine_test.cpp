// The control-plane engine (launcher/coord/engine.h) against every store it runs over: memory,
// node 0's TCP store (127.0.0.1, a free port) and a 3-member etcd cluster the test starts
// (tests/support/etcd_cluster.h). Every "node" is a ControlEngine in this process (threads); a
// launcher that crashes is one destroyed without finish() (it stops beating and says no
// goodbye). A stranger is a ControlStore of the same kind writing records of its own: unsigned,
// forged, or replayed from an earlier run.
#include "launcher/coord/engine.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "launcher/coord/etcd_client.h"
#include "net/auth.h"
#include "tests/launcher/coord/control_fixtures.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/poll.h"
#include "tests/support/ports.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using control_fixtures::description;
using control_fixtures::endpoints;
using ddl::testing::wait_until;
using std::chrono::milliseconds;

enum class Kind { kMemory, kTcp, kEtcd };

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::kMemory:
      return "Memory";
    case Kind::kTcp:
      return "TcpStore";
    case Kind::kEtcd:
      return "Etcd";
  }
  return "?";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One etcd cluster for the whole program, started by the first test that needs it.
testing::EtcdCluster& etcd_cluster() {
  static testing::EtcdCluster cluster(3);  // stopped when the program exits
  return cluster;
}

class EngineTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    job_ = std::string("job-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : job_) {
      if (c == '/') c = '-';
    }
    port_ = ddl::testing::free_port();
    state_ = std::make_shared<MemoryControlState>();
  }

  ControlOptions options(int node, int nnodes, int min_nnodes = 0) const {
    ControlOptions o;
    o.endpoint = env::Endpoint{"127.0.0.1", port_};
    if (GetParam() == Kind::kEtcd) o.etcd_endpoints = etcd_cluster().endpoints();
    o.job_id = job_;
    o.secret = "s3cret";
    o.node_rank = node;
    o.nnodes = nnodes;
    o.min_nnodes = min_nnodes;
    o.max_restarts = 3;
    o.last_call_timeout = milliseconds(300);
    o.rendezvous_timeout = milliseconds(5000);
    o.heartbeat_interval = milliseconds(100);
    o.heartbeat_timeout = milliseconds(1000);
    o.linger_timeout = milliseconds(2000);
    o.pace.evict = evict_;
    return o;
  }

  std::unique_ptr<ControlStore> store(ControlOptions& o) const {
    switch (GetParam()) {
      case Kind::kMemory:
        return make_memory_control_store(state_);
      case Kind::kTcp:
        return make_tcp_control_store(o);
      case Kind::kEtcd:
        return make_etcd_control_store(o);
    }
    return nullptr;
  }

  std::unique_ptr<ControlEngine> node(ControlOptions o) const {
    std::unique_ptr<ControlStore> s = store(o);
    return std::make_unique<ControlEngine>(o, std::move(s));
  }

  // A stranger's connection to the job's store (on the TCP store: a client that holds the
  // secret but not the records' signatures, as any process of the job's workers could).
  std::unique_ptr<ControlStore> stranger(bool with_secret = true) const {
    ControlOptions o = options(7, 8);
    if (!with_secret) o.secret.clear();
    return store(o);
  }

  // A node that joined generation 0 with the others and runs.
  struct Running {
    std::unique_ptr<ControlEngine> engine;
    std::shared_ptr<ExternalStop> stop = std::make_shared<ExternalStop>();
    Membership membership;
  };

  // `nnodes` nodes through the rendezvous and generation 0, watching.
  // `count` of them (all when 0; fewer: an elastic job starts without the others).
  std::vector<Running> start(int nnodes, int min_nnodes = 0, int count = 0) const {
    std::vector<std::future<Running>> futures;
    std::unique_ptr<ControlEngine> first =
        node(options(0, nnodes, min_nnodes));  // hosts a TCP store
    for (int n = 0; n < (count > 0 ? count : nnodes); ++n) {
      std::unique_ptr<ControlEngine> engine = n == 0 ? std::move(first) : nullptr;
      futures.push_back(std::async(
          std::launch::async, [this, n, nnodes, min_nnodes, e = std::move(engine)]() mutable {
            Running r;
            r.engine = e ? std::move(e) : node(options(n, nnodes, min_nnodes));
            r.engine->rendezvous(description(2),
                                 endpoints("127.0.0." + std::to_string(n + 1), 9000, 2), "j");
            r.engine->watch(r.stop);
            r.membership = r.engine->join_generation(Generation());
            return r;
          }));
    }
    std::vector<Running> nodes;
    for (auto& f : futures) nodes.push_back(f.get());
    return nodes;
  }

  // Both nodes' processes of generation 0 exit 0 and the nodes finish: no failure anywhere.
  static void succeed_and_finish(std::vector<Running>& nodes) {
    for (Running& n : nodes) n.engine->report_generation_success(Generation(0));
    auto f1 = std::async(std::launch::async, [&] { return nodes[1].engine->finish(); });
    EXPECT_FALSE(nodes[0].engine->finish());
    EXPECT_FALSE(f1.get());
  }

  // The envelope a launcher of this job would write under `name` (engine.h), signed with
  // `secret`: what only a holder of the job's secret can make.
  static std::string signed_record(const std::string& name, int node, const std::string& payload,
                                   const std::string& secret = "s3cret") {
    const std::string body = std::to_string(node) + ":forger:" + payload;
    return net::to_hex(net::hmac_sha256(secret, name + '\0' + body)) + ":" + body;
  }

  std::size_t records_left() const {
    if (GetParam() == Kind::kEtcd) {
      etcd::ClientOptions o;
      o.endpoints = etcd_cluster().endpoints();
      etcd::Client client(o);
      return client.get_prefix("/ddl/" + job_ + "/").kvs.size();
    }
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->rosters.size() + state_->cells.size();
  }

  // Everything of the job in the store, deleted (a stranger with write access).
  void delete_everything() const {
    if (GetParam() == Kind::kEtcd) {
      etcd::ClientOptions o;
      o.endpoints = etcd_cluster().endpoints();
      etcd::Client client(o);
      client.erase_prefix("/ddl/" + job_ + "/");
      return;
    }
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->rosters.clear();
    state_->cells.clear();
  }

  std::string job_;
  bool evict_ = false;  // --straggler=evict for the nodes options() makes
  std::uint16_t port_ = 0;
  std::shared_ptr<MemoryControlState> state_;
};

// --- the contract, on every store ----------------------------------------------------------------

TEST_P(EngineTest, NodesAgreeOnEndpointsAndNodeZerosJobId) {
  auto node1 = std::async(std::launch::async, [this] {
    std::unique_ptr<ControlEngine> c = node(options(1, 2));
    auto agreement = c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "ignored");
    auto membership = c->join_generation(Generation());
    EXPECT_FALSE(c->finish());
    return std::make_pair(agreement, membership);
  });
  std::unique_ptr<ControlEngine> c0 = node(options(0, 2));
  const auto a0 = c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "job-of-node-0");
  const Membership m0 = c0->join_generation(Generation());
  const auto [a1, m1] = node1.get();
  EXPECT_FALSE(c0->finish());
  EXPECT_EQ(env::join_endpoints(m0.endpoints),
            "127.0.0.1:9000,127.0.0.1:9001,127.0.0.2:7000,127.0.0.2:7001");
  EXPECT_EQ(m0.endpoints, m1.endpoints);
  EXPECT_EQ(m0.nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(m0.position, 0);
  EXPECT_EQ(m1.position, 1);
  EXPECT_EQ(a0.job_id, "job-of-node-0");
  EXPECT_EQ(a1.job_id, "job-of-node-0");
  if (GetParam() != Kind::kTcp) {
    EXPECT_EQ(records_left(), 0u) << "the last one out erases the run";
  }
}

TEST_P(EngineTest, AutoNodeRanksAreTheLowestFreeAndNeverHandedOutTwice) {
  std::unique_ptr<ControlEngine> first = node(options(kAutoNodeRank, 2));
  EXPECT_EQ(first->node_rank(), 0);
  std::unique_ptr<ControlEngine> second = node(options(kAutoNodeRank, 2));
  EXPECT_EQ(second->node_rank(), 1);
  try {
    std::unique_ptr<ControlEngine> surplus = node(options(kAutoNodeRank, 2));
    FAIL() << "a third launcher of a 2-node job got node rank " << surplus->node_rank();
  } catch (const ControlError& e) {
    EXPECT_TRUE(has(e.what(), "more launchers than --nnodes=2 joined")) << e.what();
  }
  second->abandon();
  first->abandon();
}

TEST_P(EngineTest, ASecondLauncherForOneNodeRankIsRefused) {
  std::unique_ptr<ControlEngine> c0 = node(options(0, 2));
  std::unique_ptr<ControlEngine> c1 = node(options(1, 2));
  try {
    std::unique_ptr<ControlEngine> again = node(options(1, 2));
    FAIL() << "two launchers hold node rank 1";
  } catch (const ControlError& e) {
    EXPECT_TRUE(has(e.what(), "another launcher has already joined the job as node 1")) << e.what();
  }
  c1->abandon();
  c0->abandon();
}

TEST_P(EngineTest, AMismatchFailsOnBothSides) {
  auto node1 = std::async(std::launch::async, [this]() -> std::string {
    std::unique_ptr<ControlEngine> c = node(options(1, 2));
    try {
      c->rendezvous(description(3), endpoints("127.0.0.2", 7000, 3), "");
    } catch (const ControlError& e) {
      c->abandon();
      return e.what();
    }
    return "no error";
  });
  std::unique_ptr<ControlEngine> c0 = node(options(0, 2));
  const auto started = Clock::now();
  std::string error0 = "no error";
  try {
    c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  } catch (const ControlError& e) {
    error0 = e.what();
    c0->abandon();
  }
  const std::string error1 = node1.get();
  EXPECT_LT(Clock::now() - started, milliseconds(4000)) << "well before the deadline";
  EXPECT_TRUE(has(error0, "nproc_per_node is '2' on node 0 (this node) but '3' on node 1"))
      << error0;
  EXPECT_TRUE(has(error1, "nproc_per_node is '3' on node 1 (this node) but '2' on node 0"))
      << error1;
}

TEST_P(EngineTest, AMissingNodeIsNamedAtTheDeadline) {
  ControlOptions o = options(0, 3);
  o.rendezvous_timeout = milliseconds(500);
  std::unique_ptr<ControlEngine> c0 = node(o);
  const auto started = Clock::now();
  try {
    c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
    ADD_FAILURE() << "no error";
  } catch (const ControlError& e) {
    EXPECT_TRUE(has(e.what(), "node(s) 1, 2 of 3 did not join")) << e.what();
  }
  EXPECT_GE(Clock::now() - started, milliseconds(500));
  EXPECT_LT(Clock::now() - started, milliseconds(3000));
  c0->abandon();
}

TEST_P(EngineTest, AFailureReachesTheOtherNodesAndNamesItsNode) {
  std::vector<Running> nodes = start(2);
  nodes[1].engine->report_failure(FailureNotice{3, 137, "rank 3 was killed by SIGKILL"});
  nodes[0].engine->report_failure(FailureNotice{0, 143, "a later failure does not replace it"});
  ASSERT_TRUE(
      wait_until([&] { return nodes[0].stop->requested().has_value(); }, milliseconds(2000)));
  EXPECT_EQ(nodes[0].stop->requested()->first, 137);
  EXPECT_TRUE(
      has(nodes[0].stop->requested()->second, "node 1 failed first (node 1 rank 3 exit 137"))
      << nodes[0].stop->requested()->second;
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(nodes[1].stop->requested()) << "a node is not told of its own failure";
  auto f1 = std::async(std::launch::async, [&] { return nodes[1].engine->finish(); });
  const auto f0 = nodes[0].engine->finish();
  const auto first1 = f1.get();
  ASSERT_TRUE(f0);
  ASSERT_TRUE(first1);
  EXPECT_EQ(f0->str(), first1->str());
  EXPECT_EQ(f0->node, 1);
  EXPECT_EQ(f0->rank, 3);
}

TEST_P(EngineTest, ACrashedNodeOfAFixedJobEndsItWithinTheHeartbeatTimeout) {
  std::vector<Running> nodes = start(2);
  std::this_thread::sleep_for(milliseconds(300));
  const auto crashed = Clock::now();
  nodes[1].engine.reset();  // no goodbye: like a launcher that was SIGKILLed
  ASSERT_TRUE(
      wait_until([&] { return nodes[0].stop->requested().has_value(); }, milliseconds(4000)));
  EXPECT_LT(Clock::now() - crashed, milliseconds(3000));
  EXPECT_TRUE(has(nodes[0].stop->requested()->second, "node 1's launcher stopped answering"))
      << nodes[0].stop->requested()->second;
  const auto failure = nodes[0].engine->finish();
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->node, 1);
}

TEST_P(EngineTest, GenerationsFailAndSucceedForEveryNode) {
  std::vector<Running> nodes = start(2);
  ControlEngine& c0 = *nodes[0].engine;
  ControlEngine& c1 = *nodes[1].engine;
  auto& stop0 = nodes[0].stop;
  auto& stop1 = nodes[1].stop;
  c1.report_generation_failure(Generation(0), FailureNotice{3, 7, "rank 3 exited with code 7"});
  ASSERT_TRUE(wait_until([&] { return stop0->generation_failure(Generation(0)).has_value(); },
                         milliseconds(2000)));
  EXPECT_EQ(stop0->generation_failure(Generation(0))->first, 7);
  EXPECT_EQ(stop0->generation_failure(Generation(0))->second,
            "generation 0 failed on node 1: rank 3 exited with code 7");
  EXPECT_FALSE(stop0->requested()) << "a restartable failure does not end the job";
  EXPECT_FALSE(stop1->generation_failure(Generation(0))) << "not told of its own failure";

  auto m1 = std::async(std::launch::async, [&] { return c1.join_generation(Generation(1)); });
  const Membership m0 = c0.join_generation(Generation(1));
  EXPECT_EQ(m1.get().endpoints, m0.endpoints);
  EXPECT_EQ(m0.generation, Generation(1));

  c0.report_generation_success(Generation(1));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(stop0->succeeded(Generation(1))) << "one node of two is not the job";
  c1.report_generation_success(Generation(1));
  EXPECT_TRUE(wait_until([&] { return stop0->succeeded(Generation(1)); }, milliseconds(2000)));
  EXPECT_TRUE(wait_until([&] { return stop1->succeeded(Generation(1)); }, milliseconds(2000)));
  auto f1 = std::async(std::launch::async, [&] { return c1.finish(); });
  EXPECT_FALSE(c0.finish());
  EXPECT_FALSE(f1.get());
}

TEST_P(EngineTest, AnElasticJobStartsWithTheMinimumAndAdmitsALateNode) {
  ControlOptions o0 = options(0, 3, 1);
  o0.max_restarts = 1;
  std::unique_ptr<ControlEngine> c0 = node(o0);
  c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  const auto started = Clock::now();
  const Membership g0 = c0->join_generation(Generation());
  EXPECT_GE(Clock::now() - started, milliseconds(300));
  EXPECT_EQ(g0.nodes, std::vector<int>{0});
  auto stop0 = std::make_shared<ExternalStop>();
  c0->watch(stop0);

  auto late = std::async(std::launch::async, [&] {
    ControlOptions o2 = options(2, 3, 1);
    o2.max_restarts = 1;
    std::unique_ptr<ControlEngine> c2 = node(o2);
    c2->rendezvous(description(2), endpoints("127.0.0.3", 7000, 2), "");
    Membership m = c2->join_generation(Generation());
    c2->finish();
    return m;
  });
  ASSERT_TRUE(wait_until([&] { return stop0->generation_failure(Generation(0)).has_value(); },
                         milliseconds(3000)));
  EXPECT_TRUE(has(stop0->generation_failure(Generation(0))->second, "node 2 asks to join the job"));
  const Membership g1 = c0->join_generation(Generation(1));
  EXPECT_EQ(g1.nodes, (std::vector<int>{0, 2}));
  const Membership m2 = late.get();
  EXPECT_EQ(m2.generation, Generation(1));
  EXPECT_EQ(m2.position, 1);
  EXPECT_EQ(env::join_endpoints(m2.endpoints),
            "127.0.0.1:9000,127.0.0.1:9001,127.0.0.3:7000,127.0.0.3:7001");
  c0->finish();
}

// Elastic 2:3: node 0 (the decider) crashes while generation 0 runs; the others fail
// generation 0, form generation 1 without it, and the job goes on. (On the TCP store node 0
// hosts the store: its loss ends the job, see TcpStoreEngine below.)
TEST_P(EngineTest, AnElasticJobSurvivesItsDecidersCrash) {
  if (GetParam() == Kind::kTcp) GTEST_SKIP() << "node 0 hosts the TCP store";
  std::vector<Running> nodes = start(3, 2);
  EXPECT_EQ(nodes[1].membership.nodes, (std::vector<int>{0, 1, 2}));
  const auto crashed = Clock::now();
  nodes[0].engine.reset();
  ASSERT_TRUE(
      wait_until([&] { return nodes[1].stop->generation_failure(Generation(0)).has_value(); },
                 milliseconds(5000)));
  EXPECT_LT(Clock::now() - crashed, milliseconds(3000));
  EXPECT_TRUE(has(nodes[1].stop->generation_failure(Generation(0))->second,
                  "node 0's launcher stopped answering"))
      << nodes[1].stop->generation_failure(Generation(0))->second;
  EXPECT_FALSE(nodes[1].stop->requested()) << "an elastic job goes on";
  auto n1 = std::async(std::launch::async,
                       [&] { return nodes[1].engine->join_generation(Generation(1)); });
  const Membership next = nodes[2].engine->join_generation(Generation(1));
  EXPECT_EQ(next.nodes, (std::vector<int>{1, 2}));
  EXPECT_EQ(n1.get().nodes, (std::vector<int>{1, 2}));
  EXPECT_EQ(next.position, 1);
  nodes[1].engine->report_generation_success(Generation(1));
  nodes[2].engine->report_generation_success(Generation(1));
  auto f1 = std::async(std::launch::async, [&] { return nodes[1].engine->finish(); });
  EXPECT_FALSE(nodes[2].engine->finish());
  EXPECT_FALSE(f1.get());
  EXPECT_EQ(records_left(), 0u);
}

// Elastic 2:3: node 2 crashes; a new launcher without a node rank takes rank 2 (its holder was
// lost) and is admitted into the next generation with the others.
TEST_P(EngineTest, ANewLauncherTakesTheRankOfALostNode) {
  std::vector<Running> nodes = start(3, 2);
  nodes[2].engine.reset();
  ASSERT_TRUE(
      wait_until([&] { return nodes[0].stop->generation_failure(Generation(0)).has_value(); },
                 milliseconds(4000)));
  std::unique_ptr<ControlEngine> again = node(options(kAutoNodeRank, 3, 2));
  EXPECT_EQ(again->node_rank(), 2);
  auto joined = std::async(std::launch::async, [&] {
    again->rendezvous(description(2), endpoints("127.0.0.9", 9000, 2), "");
    return again->join_generation(Generation());
  });
  auto m1 = std::async(std::launch::async,
                       [&] { return nodes[1].engine->join_generation(Generation(1)); });
  const Membership m0 = nodes[0].engine->join_generation(Generation(1));
  EXPECT_EQ(m0.nodes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(m1.get().nodes, m0.nodes);
  const Membership m2 = joined.get();
  EXPECT_EQ(m2.generation, Generation(1));
  EXPECT_EQ(m2.endpoints, m0.endpoints);
  EXPECT_EQ(m2.endpoints.back().host, "127.0.0.9");
  again->abandon();
  nodes[1].engine->abandon();
  nodes[0].engine->abandon();
}

// Up to 64 nodes the defaults; beyond, a big job's beats stretch so that the store serves about
// as many requests per second as for 64 nodes.
TEST(Heartbeat, StretchesPast64Nodes) {
  EXPECT_EQ(heartbeat_for(1).interval, milliseconds(250));
  EXPECT_EQ(heartbeat_for(64).interval, milliseconds(250));
  EXPECT_EQ(heartbeat_for(64).timeout, milliseconds(4'000));
  EXPECT_EQ(heartbeat_for(65).interval, milliseconds(500));
  EXPECT_EQ(heartbeat_for(512).interval, milliseconds(2'000));
  EXPECT_EQ(heartbeat_for(512).timeout, milliseconds(32'000));
}

// --- what the engine trusts
// ------------------------------------------------------------------------

// An unsigned "done" for node 1: node 0 alone is not the job's success.
TEST_P(EngineTest, AnUnsignedDoneIsNotCounted) {
  std::vector<Running> nodes = start(2);
  const std::string token = nodes[0].engine->run_token();
  stranger()->append(token + "/done/0", "-:1:x:");
  stranger()->append(token + "/gend/0",
                     "-:1:x:{\"record\":\"generation succeeded\",\"generation\":0}");
  nodes[0].engine->report_generation_success(Generation(0));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(nodes[0].stop->succeeded(Generation(0)));
  EXPECT_FALSE(nodes[1].stop->succeeded(Generation(0)));
  nodes[1].engine->report_generation_success(Generation(0));
  EXPECT_TRUE(
      wait_until([&] { return nodes[0].stop->succeeded(Generation(0)); }, milliseconds(2000)));
  succeed_and_finish(nodes);
}

// The pre-flight check's exchange: every member's payload, a stranger's entry not among them.
TEST_P(EngineTest, GatherReturnsEveryMembersPayloadAndNoStrangers) {
  std::vector<Running> nodes = start(2);
  const std::string token = nodes[0].engine->run_token();
  stranger()->append(token + "/preflight/0", "-:1:x:forged");
  stranger()->append(token + "/preflight/0", signed_record(token + "/preflight/0", 1, "forged"));
  auto g1 = std::async(std::launch::async, [&] {
    return nodes[1].engine->gather(Generation(0), "preflight", "from 1", milliseconds(3000));
  });
  const std::map<int, std::string> g0 =
      nodes[0].engine->gather(Generation(0), "preflight", "from 0", milliseconds(3000));
  const std::map<int, std::string> expected{{0, "from 0"}, {1, "from 1"}};
  EXPECT_EQ(g0, expected);
  EXPECT_EQ(g1.get(), expected);
  succeed_and_finish(nodes);
}

TEST_P(EngineTest, GatherNamesTheMembersMissingAtItsTimeout) {
  std::vector<Running> nodes = start(2);
  try {
    nodes[0].engine->gather(Generation(0), "preflight", "x", milliseconds(300));
    ADD_FAILURE() << "no error";
  } catch (const ControlError& e) {
    EXPECT_TRUE(has(e.what(), "node(s) 1 did not publish the 'preflight' of generation 0 within"))
        << e.what();
  }
  EXPECT_THROW(nodes[0].engine->gather(Generation(1), "preflight", "x", milliseconds(300)),
               ControlError)
      << "not a member of generation 1 yet";
  succeed_and_finish(nodes);
}

// Every node reports its pace each 30 ms (a step each time): all at `own`, node 2 at `slow_own`
// once 600 ms have passed (so that the decider, whose first look may come late on a loaded
// machine, has seen node 2's own earlier pace first), until destroyed.
class PaceFeeder {
 public:
  PaceFeeder(std::vector<std::unique_ptr<ControlEngine>*> engines, double own, double slow_own)
      : thread_([this, engines, own, slow_own] {
          const auto slow_from = std::chrono::steady_clock::now() + milliseconds(600);
          for (std::int64_t step = 1; !done_; ++step) {
            const bool slow = std::chrono::steady_clock::now() >= slow_from;
            for (std::size_t n = 0; n < engines.size(); ++n) {
              (*engines[n])->report_pace(Generation(0), step, n == 2 && slow ? slow_own : own);
            }
            std::this_thread::sleep_for(milliseconds(30));
          }
        }) {}
  ~PaceFeeder() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// --straggler=evict: the decider names node 2, whose pace turned 5x slower, ends generation 0
// without it; node 2 is told it was evicted, the others form generation 1 without waiting for it.
TEST_P(EngineTest, ASlowNodeIsEvictedFromAnElasticJobAndTheOthersGoOnWithoutIt) {
  evict_ = true;
  std::vector<Running> nodes = start(3, 2);
  {
    PaceFeeder feeder({&nodes[0].engine, &nodes[1].engine, &nodes[2].engine}, 0.010, 0.050);
    ASSERT_TRUE(
        wait_until([&] { return nodes[2].stop->requested().has_value(); }, milliseconds(5000)));
  }
  EXPECT_TRUE(has(nodes[2].stop->requested()->second,
                  "this node (node 2) was evicted from the job: straggler: node 2 takes 50.0 ms "
                  "of its own per step, 5.00x the other nodes' median 10.0 ms"))
      << nodes[2].stop->requested()->second;
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(
        wait_until([&] { return nodes[n].stop->generation_failure(Generation(0)).has_value(); },
                   milliseconds(3000)));
    EXPECT_TRUE(has(nodes[n].stop->generation_failure(Generation(0))->second,
                    "generation 0 failed on node 2: node 2 is a straggler"));
    EXPECT_FALSE(nodes[n].stop->requested());
  }
  auto m1 = std::async(std::launch::async,
                       [&] { return nodes[1].engine->join_generation(Generation(1)); });
  const Membership m0 = nodes[0].engine->join_generation(Generation(1));
  EXPECT_EQ(m0.nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(m1.get().nodes, (std::vector<int>{0, 1}));
  // The decider (node 0) keeps the verdict, with the line it logged, for its run report.
  const std::vector<NodePaceJudge::Verdict> verdicts = nodes[0].engine->take_node_verdicts();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].node, 2);
  EXPECT_TRUE(verdicts[0].straggler);
  EXPECT_TRUE(has(verdicts[0].message, "evicting node 2 (--straggler=evict)"))
      << verdicts[0].message;
  EXPECT_TRUE(nodes[0].engine->take_node_verdicts().empty()) << "taken once";
  EXPECT_TRUE(nodes[1].engine->take_node_verdicts().empty()) << "node 1 does not judge";
  EXPECT_FALSE(nodes[2].engine->finish());
  for (int n = 0; n < 2; ++n) nodes[n].engine->report_generation_success(Generation(1));
  auto f1 = std::async(std::launch::async, [&] { return nodes[1].engine->finish(); });
  EXPECT_FALSE(nodes[0].engine->finish());
  EXPECT_FALSE(f1.get());
}

// Without evict (or in a fixed job) a slow node is only named: nobody is stopped.
TEST_P(EngineTest, ASlowNodeOfAFixedJobIsNotEvicted) {
  evict_ = true;
  std::vector<Running> nodes = start(3);
  {
    PaceFeeder feeder({&nodes[0].engine, &nodes[1].engine, &nodes[2].engine}, 0.010, 0.050);
    std::this_thread::sleep_for(milliseconds(2000));
  }
  for (int n = 0; n < 3; ++n) {
    EXPECT_FALSE(nodes[n].stop->requested());
    EXPECT_FALSE(nodes[n].stop->generation_failure(Generation(0)));
  }
  const std::vector<NodePaceJudge::Verdict> verdicts = nodes[0].engine->take_node_verdicts();
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_TRUE(has(verdicts[0].message, "(--straggler=evict: not evicted, a job with a fixed"))
      << verdicts[0].message;
  for (Running& n : nodes) n.engine->report_generation_success(Generation(0));
  std::vector<std::future<std::optional<FailureRecord>>> f;
  for (int n = 1; n < 3; ++n) {
    f.push_back(std::async(std::launch::async, [&, n] { return nodes[n].engine->finish(); }));
  }
  EXPECT_FALSE(nodes[0].engine->finish());
  for (auto& x : f) EXPECT_FALSE(x.get());
}

// An unsigned goodbye of node 1, then node 1 crashes: it is still declared lost.
TEST_P(EngineTest, AnUnsignedGoodbyeDoesNotHideACrash) {
  std::vector<Running> nodes = start(2);
  stranger()->append(nodes[0].engine->run_token() + "/bye", "-:1:x:");
  nodes[1].engine.reset();
  ASSERT_TRUE(
      wait_until([&] { return nodes[0].stop->requested().has_value(); }, milliseconds(4000)));
  EXPECT_TRUE(has(nodes[0].stop->requested()->second, "node 1's launcher stopped answering"));
  nodes[0].engine->finish();
}

// An unsigned claim of node rank 1 before node 1 arrives: node 1 still holds it.
TEST_P(EngineTest, AnUnsignedClaimTakesNoNodeRank) {
  std::unique_ptr<ControlEngine> c0 = node(options(0, 2));
  stranger()->append(c0->run_token() + "/claim/1", "-:1:intruder:1");
  stranger()->append(c0->run_token() + "/claim/1",
                     signed_record("not/" + c0->run_token() + "/claim/1", 1, "1"));
  std::unique_ptr<ControlEngine> c1;
  ASSERT_NO_THROW(c1 = node(options(1, 2)));
  EXPECT_EQ(c1->node_rank(), 1);
  c1->abandon();
  c0->abandon();
}

// An unsigned "waiting" of a node that never existed, in an elastic 2:3 job running on 2 nodes:
// no restart.
TEST_P(EngineTest, AnUnsignedWaitingNodeIsNotAdmitted) {
  std::vector<Running> nodes = start(3, 2, 2);
  EXPECT_EQ(nodes[0].membership.nodes, (std::vector<int>{0, 1}));
  stranger()->append(nodes[0].engine->run_token() + "/waiting", "-:2:ghost:");
  std::this_thread::sleep_for(milliseconds(800));
  EXPECT_FALSE(nodes[0].stop->generation_failure(Generation(0)));
  EXPECT_FALSE(nodes[1].stop->generation_failure(Generation(0)));
  succeed_and_finish(nodes);
}

// An earlier run crashed after its failure; its signed records stay (or are put back). The next
// run of the same job id is a new run: the old failure is not its own, and an unsigned
// "present" does not make the old run look alive.
TEST_P(EngineTest, AnEarlierRunsRecordsAreNotThisRunsOwn) {
  if (GetParam() == Kind::kTcp) GTEST_SKIP() << "the TCP store ends with its run";
  std::string old_token;
  {
    std::vector<Running> nodes = start(2);
    old_token = nodes[0].engine->run_token();
    nodes[1].engine->report_failure(FailureNotice{0, 9, "the old run's failure"});
    ASSERT_TRUE(
        wait_until([&] { return nodes[0].stop->requested().has_value(); }, milliseconds(2000)));
    stranger()->append(old_token + "/present", "-:0:x:");
  }  // both crash: no goodbye, the records stay
  // A run is live while one of its launchers beat within the heartbeat timeout.
  std::this_thread::sleep_for(milliseconds(1200));
  const auto started = Clock::now();
  std::vector<Running> nodes = start(2);
  EXPECT_NE(nodes[0].engine->run_token(), old_token);
  EXPECT_LT(Clock::now() - started, milliseconds(4000));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(nodes[0].stop->requested());
  succeed_and_finish(nodes);
}

// Every record of a running job deleted: every node stops within the heartbeat timeout, saying
// so, and no node is blamed.
TEST_P(EngineTest, DeletedRecordsStopEveryNodeSayingSo) {
  if (GetParam() == Kind::kTcp) GTEST_SKIP() << "nothing but the job's launchers can write there";
  std::vector<Running> nodes = start(2);
  const auto deleted = Clock::now();
  delete_everything();
  for (auto& n : nodes) {
    ASSERT_TRUE(wait_until([&] { return n.stop->requested().has_value(); }, milliseconds(3000)));
    EXPECT_TRUE(has(n.stop->requested()->second, "were deleted from under it"))
        << n.stop->requested()->second;
    EXPECT_FALSE(has(n.stop->requested()->second, "stopped answering"));
  }
  EXPECT_LT(Clock::now() - deleted, milliseconds(2000));
  for (auto& n : nodes) {
    const auto failure = n.engine->finish();
    ASSERT_TRUE(failure);
    EXPECT_EQ(failure->node, n.engine->node_rank()) << "each node names itself, not the other";
  }
}

// A signed failure record that names node 1, which did not publish it: node 1 stops as well.
TEST_P(EngineTest, ANodeNamedByAFailureStops) {
  std::vector<Running> nodes = start(2);
  const std::string name = nodes[0].engine->run_token() + "/failed";
  stranger()->append(
      name,
      signed_record(name, 0,
                    encode_failure(FailureRecord{1, std::nullopt, 1, "node 1 is taken for lost"})));
  for (auto& n : nodes) {
    ASSERT_TRUE(wait_until([&] { return n.stop->requested().has_value(); }, milliseconds(2000)));
  }
  EXPECT_TRUE(has(nodes[1].stop->requested()->second, "the other nodes took this node for failed"));
  nodes[1].engine->finish();
  nodes[0].engine->finish();
}

// Without a secret (open, as torchrun's): a stranger's failure record that says exit code 0 is
// refused, so no node stops "successfully".
TEST_P(EngineTest, WithoutASecretAFailureWithExitCodeZeroIsRefused) {
  std::vector<Running> nodes;
  {
    // start() with no secret
    std::vector<std::future<Running>> futures;
    ControlOptions o0 = options(0, 2);
    o0.secret.clear();
    std::unique_ptr<ControlEngine> first = node(o0);
    for (int n = 0; n < 2; ++n) {
      std::unique_ptr<ControlEngine> e = n == 0 ? std::move(first) : nullptr;
      futures.push_back(std::async(std::launch::async, [this, n, e = std::move(e)]() mutable {
        Running r;
        ControlOptions o = options(n, 2);
        o.secret.clear();
        r.engine = e ? std::move(e) : node(o);
        r.engine->rendezvous(description(2), endpoints("127.0.0.1", 9000 + 10 * n, 2), "j");
        r.engine->watch(r.stop);
        r.membership = r.engine->join_generation(Generation());
        return r;
      }));
    }
    for (auto& f : futures) nodes.push_back(f.get());
  }
  const std::string name = nodes[0].engine->run_token() + "/failed";
  stranger(false)->append(name,
                          "-:1:x:" + encode_failure(FailureRecord{1, std::nullopt, 0, "stop"}));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(nodes[0].stop->requested());
  EXPECT_FALSE(nodes[1].stop->requested());
  succeed_and_finish(nodes);
}

// Whatever asks a job to stop from outside with exit code 0, the job does not end as a success.
TEST(ExternalStopRequest, ExitCodeZeroCountsAsAFailure) {
  ExternalStop stop;
  stop.request(0, "a stranger's record");
  ASSERT_TRUE(stop.requested());
  EXPECT_EQ(stop.requested()->first, 1);
  ExternalStop other;
  other.request(137, "killed");
  EXPECT_EQ(other.requested()->first, 137);
}

INSTANTIATE_TEST_SUITE_P(Stores, EngineTest,
                         ::testing::Values(Kind::kMemory, Kind::kTcp, Kind::kEtcd),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return kind_name(info.param);
                         });

// --- what only one store does
// ---------------------------------------------------------------------

ControlOptions tcp_options(std::uint16_t port, int node, int nnodes) {
  ControlOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "ddl-control";
  o.secret = "s3cret";
  o.node_rank = node;
  o.nnodes = nnodes;
  o.rendezvous_timeout = milliseconds(5000);
  o.heartbeat_interval = milliseconds(100);
  o.heartbeat_timeout = milliseconds(1000);
  o.linger_timeout = milliseconds(2000);
  return o;
}

// Node 1 arrives after node 0 gave up at its rendezvous deadline: it is told that no control
// store answers at node 0's address, naming the endpoint and the deadline and what that means,
// with the last attempt's own error (not "name resolution timed out").
TEST(TcpStoreEngine, ALateNodeIsToldTheRendezvousDeadlinePassed) {
  const std::uint16_t port = ddl::testing::free_port();
  auto options0 = tcp_options(port, 0, 2);
  options0.rendezvous_timeout = milliseconds(300);
  {
    std::unique_ptr<Control> c0 = make_control(options0);
    EXPECT_THROW(c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j"),
                 ControlError);
  }
  auto options1 = tcp_options(port, 1, 2);
  options1.rendezvous_timeout = milliseconds(400);
  const auto started = Clock::now();
  try {
    std::unique_ptr<Control> c1 = make_control(options1);
    ADD_FAILURE() << "node 1 joined a job that is gone";
  } catch (const ControlError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("node 1: cannot join the job: no control store answered at 127.0.0.1:" +
                            std::to_string(port) +
                            " (node 0's launcher) within the rendezvous deadline (0.4 s, "
                            "--rendezvous_timeout)",
                        0),
              0u)
        << msg;
    EXPECT_TRUE(has(msg, "the job already started or ended")) << msg;
    EXPECT_TRUE(has(msg, "Connection refused")) << msg;
    EXPECT_FALSE(has(msg, "timed out")) << msg;
  }
  EXPECT_GE(Clock::now() - started, milliseconds(400));
  EXPECT_LT(Clock::now() - started, milliseconds(3000));
}

TEST(TcpStoreEngine, TheFirstLauncherAtTheAddressHostsTheStoreAsNodeZero) {
  const std::uint16_t port = ddl::testing::free_port();
  std::unique_ptr<Control> first = make_control(tcp_options(port, kAutoNodeRank, 2));
  EXPECT_EQ(first->node_rank(), 0);
  std::unique_ptr<Control> second = make_control(tcp_options(port, kAutoNodeRank, 2));
  EXPECT_EQ(second->node_rank(), 1);
  second->abandon();
  first->abandon();
}

// A socket bound to 127.0.0.1:port that does not listen (connects to the port are refused);
// -1 when it cannot be bound.
int hold_without_listening(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// A socket that holds the port without listening (another program's, briefly) makes the first
// try to host fail; nobody answers there either, so the launcher tries again while it waits and
// hosts the store once the port is free, instead of waiting for a node 0 that never comes.
TEST(TcpStoreEngine, AnElectedLauncherHostsOnceABusyPortIsFreed) {
  const std::uint16_t port = ddl::testing::free_port_block_above_ephemeral();
  const int holder = hold_without_listening(port);
  ASSERT_GE(holder, 0);
  auto release = std::async(std::launch::async, [holder] {
    std::this_thread::sleep_for(milliseconds(500));
    ::close(holder);
  });
  std::unique_ptr<Control> first = make_control(tcp_options(port, kAutoNodeRank, 2));
  EXPECT_EQ(first->node_rank(), 0);
  std::unique_ptr<Control> second = make_control(tcp_options(port, kAutoNodeRank, 2));
  EXPECT_EQ(second->node_rank(), 1);
  release.get();
  second->abandon();
  first->abandon();
}

// The port stays held: the error says why this launcher did not host the store itself.
TEST(TcpStoreEngine, AnElectedLauncherThatCannotHostSaysWhy) {
  const std::uint16_t port = ddl::testing::free_port_block_above_ephemeral();
  const int holder = hold_without_listening(port);
  ASSERT_GE(holder, 0);
  auto options = tcp_options(port, kAutoNodeRank, 2);
  options.rendezvous_timeout = milliseconds(600);
  try {
    make_control(options);
    FAIL() << "a launcher joined a job nobody hosts";
  } catch (const ControlError& e) {
    EXPECT_TRUE(has(e.what(), "no control store answered at 127.0.0.1:" + std::to_string(port)))
        << e.what();
    EXPECT_TRUE(has(e.what(), "This launcher could not host the store there either")) << e.what();
    EXPECT_TRUE(has(e.what(), "Address already in use")) << e.what();
  }
  ::close(holder);
}

TEST(TcpStoreEngine, LosingNodeZeroStopsTheOthers) {
  const std::uint16_t port = ddl::testing::free_port();
  std::unique_ptr<Control> c0 = make_control(tcp_options(port, 0, 2));
  auto c1_future = std::async(std::launch::async, [port] {
    std::unique_ptr<Control> c = make_control(tcp_options(port, 1, 2));
    c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "");
    return c;
  });
  c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  std::unique_ptr<Control> c1 = c1_future.get();
  auto stop1 = std::make_shared<ExternalStop>();
  c1->watch(stop1);
  c0.reset();
  ASSERT_TRUE(wait_until([&] { return stop1->requested().has_value(); }, milliseconds(3000)));
  EXPECT_TRUE(has(stop1->requested()->second, "lost the control connection"))
      << stop1->requested()->second;
  EXPECT_EQ(stop1->requested()->first, 1);
}

TEST(EtcdEngine, UnreachableEtcdIsOneErrorNamingEveryEndpointWithinTheDeadline) {
  ControlOptions o;
  o.etcd_endpoints = {{"127.0.0.1", ddl::testing::free_port()},
                      {"127.0.0.1", ddl::testing::free_port()}};
  o.job_id = "nobody-home";
  o.rendezvous_timeout = milliseconds(600);
  const auto started = Clock::now();
  try {
    make_control(o);
    FAIL() << "no error";
  } catch (const ControlError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(has(msg, "no etcd member answered at 127.0.0.1:")) << msg;
    EXPECT_TRUE(has(msg, env::join_endpoints(o.etcd_endpoints).substr(0, 10))) << msg;
  }
  EXPECT_LT(Clock::now() - started, milliseconds(5000));
}

}  // namespace
}  // namespace ddl::launcher
