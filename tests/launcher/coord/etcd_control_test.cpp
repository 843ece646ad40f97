// The etcd control plane against a real 3-member etcd cluster on loopback: every "node" an
// EtcdControl in this process (threads), except where a node must die without a goodbye: that one
// is a forked process, SIGKILLed.
#include "launcher/coord/etcd_control.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include "launcher/coord/etcd_client.h"
#include "tests/launcher/coord/control_fixtures.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/poll.h"
#include "tests/support/ports.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

ControlOptions options_for(const std::vector<env::Endpoint>& etcd, int node, int nnodes,
                           int min_nnodes = 0) {
  ControlOptions o;
  o.etcd_endpoints = etcd;
  o.job_id = "etcd-control-test";
  o.secret = "s3cret";
  o.node_rank = node;
  o.nnodes = nnodes;
  o.min_nnodes = min_nnodes;
  o.max_restarts = 3;
  o.last_call_timeout = milliseconds(500);
  o.rendezvous_timeout = milliseconds(8000);
  o.heartbeat_interval = milliseconds(200);
  o.heartbeat_timeout = milliseconds(2000);
  return o;
}

using control_fixtures::description;
using control_fixtures::endpoints;

// A node in a process of its own that joins generation 0 of a `nnodes` job as node `node`, says
// so through a pipe and waits to be SIGKILLed: a launcher that dies without a goodbye. Forked
// before the calling test starts any thread.
struct DoomedNode {
  DoomedNode(const ControlOptions& options, const std::vector<env::Endpoint>& local) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
      ::close(fds[0]);
      try {
        EtcdControl c(options);
        c.rendezvous(description(2), local, "j");
        c.watch(std::make_shared<ExternalStop>());
        c.join_generation(Generation());
        const char ok = 1;
        if (::write(fds[1], &ok, 1) != 1) ::_exit(3);
        ::pause();
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    ready = fds[0];
  }
  // True once the node joined generation 0.
  bool joined() {
    char byte = 0;
    return ::read(ready, &byte, 1) == 1;
  }
  void kill() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~DoomedNode() {
    kill();
    ::close(ready);
  }
  pid_t pid = -1;
  int ready = -1;
};

std::size_t keys_under(const std::vector<env::Endpoint>& etcd, const std::string& prefix) {
  etcd::ClientOptions o;
  o.endpoints = etcd;
  etcd::Client client(o);
  return client.get_prefix(prefix).kvs.size();
}

// A shared fixture: one cluster for the whole suite (starting one takes a second or two).
class EtcdControlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new testing::EtcdCluster(3); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    // Each test its own job id, so that a failed test leaves nothing for the next one.
    job_ = std::string("job-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  ControlOptions options(int node, int nnodes, int min_nnodes = 0) const {
    ControlOptions o = options_for(cluster_->endpoints(), node, nnodes, min_nnodes);
    o.job_id = job_;
    return o;
  }
  static testing::EtcdCluster* cluster_;
  std::string job_;
};
testing::EtcdCluster* EtcdControlTest::cluster_ = nullptr;

TEST_F(EtcdControlTest, TwoNodesAgreeOnEndpointsAndTheFirstJobIdAndLeaveNoKeys) {
  auto c1_future = std::async(std::launch::async, [&] {
    auto c = std::make_unique<EtcdControl>(options(kAutoNodeRank, 2));
    const auto agreement = c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "late");
    return std::make_pair(std::move(c), agreement);
  });
  std::this_thread::sleep_for(milliseconds(200));
  EtcdControl c0(options(kAutoNodeRank, 2));
  const auto a0 = c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "other");
  auto [c1, a1] = c1_future.get();
  EXPECT_EQ(c1->node_rank(), 0) << "the first launcher takes the lowest free node rank";
  EXPECT_EQ(c0.node_rank(), 1);
  EXPECT_EQ(a0.job_id, "late");
  EXPECT_EQ(a1.job_id, "late");

  auto m1 = std::async(std::launch::async, [&] { return c1->join_generation(Generation()); });
  const Membership m0 = c0.join_generation(Generation());
  const Membership other = m1.get();
  EXPECT_EQ(m0.nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(m0.endpoints, other.endpoints);
  ASSERT_EQ(m0.endpoints.size(), 4u);
  EXPECT_EQ(m0.endpoints[0].host, "127.0.0.2") << "node 0's endpoints first";
  EXPECT_EQ(m0.position, 1);
  EXPECT_EQ(other.position, 0);

  auto stop0 = std::make_shared<ExternalStop>();
  auto stop1 = std::make_shared<ExternalStop>();
  c0.watch(stop0);
  c1->watch(stop1);
  c0.report_generation_success(Generation(0));
  c1->report_generation_success(Generation(0));
  ASSERT_TRUE(ddl::testing::wait_until(
      [&] { return stop0->succeeded(Generation(0)) && stop1->succeeded(Generation(0)); },
      milliseconds(3000)));
  EXPECT_FALSE(c0.finish());
  EXPECT_FALSE(c1->finish());
  EXPECT_EQ(keys_under(cluster_->endpoints(), "/ddl/" + job_ + "/"), 0u)
      << "the last launcher out removes every key of the job";
}

TEST_F(EtcdControlTest, MismatchFailsOnBothSides) {
  auto c1_future = std::async(std::launch::async, [&]() -> std::string {
    EtcdControl c(options(1, 2));
    try {
      c.rendezvous(description(3), endpoints("127.0.0.2", 7000, 3), "");
      c.join_generation(Generation());
    } catch (const ControlError& e) {
      c.abandon();
      return e.what();
    }
    return "no error";
  });
  EtcdControl c0(options(0, 2));
  std::string error0 = "no error";
  try {
    c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
    c0.join_generation(Generation());
  } catch (const ControlError& e) {
    error0 = e.what();
    c0.abandon();
  }
  const std::string error1 = c1_future.get();
  for (const std::string& e : {error0, error1}) {
    EXPECT_NE(e.find("nproc_per_node"), std::string::npos) << e;
  }
}

TEST_F(EtcdControlTest, ASecondLauncherForTheSameNodeRankIsRefused) {
  EtcdControl c0(options(0, 2));
  try {
    EtcdControl again(options(0, 2));
    FAIL() << "a second node 0 was admitted";
  } catch (const ControlError& e) {
    EXPECT_NE(std::string(e.what()).find("already joined the job as node 0"), std::string::npos)
        << e.what();
  }
}

TEST_F(EtcdControlTest, AValueWithoutTheSecretIsRefusedNamingItsKey) {
  EtcdControl c0(options(0, 2));
  // A stranger (no secret) writes node 1's description.
  etcd::ClientOptions o;
  o.endpoints = cluster_->endpoints();
  etcd::Client stranger(o);
  stranger.put(c0.run_prefix() + "desc/1", "{\"record\":\"job description\",\"fields\":[]}");
  try {
    c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
    FAIL() << "an unsigned description was read";
  } catch (const ControlError& e) {
    EXPECT_NE(std::string(e.what()).find(c0.run_prefix() + "desc/1"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("DDL_JOB_SECRET"), std::string::npos) << e.what();
  }
  c0.abandon();
  stranger.erase_prefix("/ddl/" + job_ + "/");
}

TEST_F(EtcdControlTest, AStaleRunOfTheSameJobIdIsReplaced) {
  // What a job whose launchers all crashed leaves: a run pointer and a failure, nobody present.
  etcd::ClientOptions o;
  o.endpoints = cluster_->endpoints();
  etcd::Client client(o);
  client.put("/ddl/" + job_ + "/run", "a:b");  // not even signed: it is replaced, not read
  client.put("/ddl/" + job_ + "/oldrun/failed", "x");
  {
    EtcdControl c0(options(0, 1 + 1, 1));
    EXPECT_EQ(c0.run_prefix().find("oldrun"), std::string::npos);
  }
  (void)client;
}

// Three nodes, elastic 2:3. Node 0 is a separate process that is SIGKILLed while generation 0
// runs: its lease expires, the others fail generation 0, form generation 1 without it, and the
// job goes on.
TEST_F(EtcdControlTest, TheJobSurvivesNodeZerosLauncherBeingKilled) {
  DoomedNode node0(options(0, 3, 2), endpoints("127.0.0.1", 9000, 2));
  auto node = [&](int rank, std::uint16_t port) {
    auto c = std::make_unique<EtcdControl>(options(rank, 3, 2));
    c->rendezvous(description(2), endpoints("127.0.0.1", port, 2), "j");
    return c;
  };
  auto f1 = std::async(std::launch::async, node, 1, 7000);
  auto f2 = std::async(std::launch::async, node, 2, 8000);
  auto c1 = f1.get();
  auto c2 = f2.get();
  auto stop1 = std::make_shared<ExternalStop>();
  auto stop2 = std::make_shared<ExternalStop>();
  c1->watch(stop1);
  c2->watch(stop2);
  auto j1 = std::async(std::launch::async, [&] { return c1->join_generation(Generation()); });
  const Membership m2 = c2->join_generation(Generation());
  EXPECT_EQ(j1.get().nodes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(m2.nodes, (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(node0.joined()) << "node 0 did not join";

  const auto killed = Clock::now();
  node0.kill();
  ASSERT_TRUE(ddl::testing::wait_until(
      [&] { return stop1->generation_failure(Generation(0)).has_value(); }, milliseconds(8000)));
  EXPECT_LT(Clock::now() - killed, milliseconds(6000)) << "about the lease's TTL (2 s)";
  EXPECT_NE(stop1->generation_failure(Generation(0))->second.find("node 0's launcher stopped"),
            std::string::npos)
      << stop1->generation_failure(Generation(0))->second;
  EXPECT_FALSE(stop1->requested()) << "an elastic job goes on";

  auto n1 = std::async(std::launch::async, [&] { return c1->join_generation(Generation(1)); });
  const Membership next = c2->join_generation(Generation(1));
  EXPECT_EQ(next.nodes, (std::vector<int>{1, 2}));
  EXPECT_EQ(n1.get().nodes, (std::vector<int>{1, 2}));
  EXPECT_EQ(next.position, 1);
  c1->report_generation_success(Generation(1));
  c2->report_generation_success(Generation(1));
  EXPECT_FALSE(c1->finish());
  EXPECT_FALSE(c2->finish());
  EXPECT_EQ(keys_under(cluster_->endpoints(), "/ddl/" + job_ + "/"), 0u);
}

// A fixed-size job: a node that dies ends the job on the others (named), within the lease.
TEST_F(EtcdControlTest, AFixedJobStopsNamingTheLostNode) {
  DoomedNode node1(options(1, 2), endpoints("127.0.0.2", 7000, 2));
  auto c0 = std::make_unique<EtcdControl>(options(0, 2));
  c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  c0->join_generation(Generation());
  auto stop0 = std::make_shared<ExternalStop>();
  c0->watch(stop0);
  ASSERT_TRUE(node1.joined());
  node1.kill();
  ASSERT_TRUE(
      ddl::testing::wait_until([&] { return stop0->requested().has_value(); }, milliseconds(8000)));
  EXPECT_NE(stop0->requested()->second.find("node 1's launcher stopped answering"),
            std::string::npos)
      << stop0->requested()->second;
  const auto failure = c0->finish();
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->node, 1);
}

TEST(EtcdControl, UnreachableEtcdIsOneErrorNamingEveryEndpointWithinTheDeadline) {
  std::vector<env::Endpoint> nowhere;
  for (int i = 0; i < 3; ++i) nowhere.push_back({"127.0.0.1", ddl::testing::free_port()});
  ControlOptions o = options_for(nowhere, 0, 2);
  o.rendezvous_timeout = milliseconds(1500);
  const auto start = Clock::now();
  try {
    EtcdControl c(o);
    FAIL() << "connected to nothing";
  } catch (const ControlError& e) {
    const std::string what = e.what();
    for (const auto& ep : nowhere) EXPECT_NE(what.find(ep.str()), std::string::npos) << what;
    EXPECT_NE(what.find("rendezvous deadline"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_LT(Clock::now() - start, milliseconds(1500 + 3 * 700 + 1000));
}

}  // namespace
}  // namespace ddl::launcher
