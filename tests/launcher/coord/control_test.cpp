// The control connection of a multi-node job, with every "node" a ControlChannel in this process
// (threads), on 127.0.0.1 and a free port.
#include "launcher/coord/control.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include "tests/launcher/coord/control_fixtures.h"
#include "tests/support/ports.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

ControlOptions options_for(std::uint16_t port, int node, int nnodes) {
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

using control_fixtures::description;
using control_fixtures::endpoints;

bool wait_for(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

using ddl::testing::free_port;

TEST(ControlRecords, FailureRecordRoundTrips) {
  const FailureRecord r{1, 3, 137, "rank 3 was killed by SIGKILL (exit code 137)"};
  EXPECT_EQ(r.str(), "node 1 rank 3 exit 137: rank 3 was killed by SIGKILL (exit code 137)");
  EXPECT_EQ(decode_failure(encode_failure(r), "test"), r);
  const FailureRecord no_rank{0, std::nullopt, 130, "stopped by SIGINT: a \"quoted\"\nline"};
  const FailureRecord back = decode_failure(encode_failure(no_rank), "test");
  EXPECT_FALSE(back.rank);
  EXPECT_EQ(back, no_rank) << "quotes and newlines survive";
  EXPECT_EQ(
      decode_failure(R"({"record":"failure","node":2,"exit_code":1,"what":"x","extra":1})", "test")
          .node,
      2)
      << "unknown fields are ignored";
}

TEST(ControlRecords, OtherRecordsRoundTrip) {
  const std::vector<env::Endpoint> eps = endpoints("10.0.0.2", 7000, 3);
  EXPECT_EQ(decode_endpoints(encode_endpoints(eps), "test"), eps);
  EXPECT_EQ(decode_job_id(encode_job_id("3f9a-job"), "test"), "3f9a-job");
  const JobDescription odd = {{"name=with=equals", "value\nwith newline"}, {"empty", ""}};
  EXPECT_EQ(decode_description(encode_description(odd), "test"), odd)
      << "names and values are carried as they are";
}

// The decoder's message for `text`, or "" when it was accepted.
template <typename Decode>
std::string rejection(Decode decode, const std::string& text) {
  try {
    decode(text, "key 'failed' of the control store at 127.0.0.1:1");
  } catch (const RecordError& e) {
    return e.what();
  }
  return "";
}

TEST(ControlRecords, MalformedRecordsAreRefusedWithContext) {
  auto failure = [](const std::string& t, std::string_view s) { return decode_failure(t, s); };
  struct Case {
    std::string text;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {"node 1 rank 3 exit 137: old text form", "not JSON"},
           {"[1,2]", "not a JSON object"},
           {R"({"node":1,"exit_code":1,"what":"x"})", "no \"record\" field"},
           {R"({"record":"job id","job_id":"j"})", "a \"job id\" record where a \"failure\""},
           {R"({"record":"failure","exit_code":1,"what":"x"})", "field \"node\" is missing"},
           {R"({"record":"failure","node":"1","exit_code":1,"what":"x"})",
            "field \"node\" is not an integer"},
           {R"({"record":"failure","node":1.5,"exit_code":1,"what":"x"})",
            "field \"node\" is not an integer"},
           {R"({"record":"failure","node":-1,"exit_code":1,"what":"x"})",
            "field \"node\" is -1, expected 0..2147483647"},
           {R"({"record":"failure","node":1,"exit_code":256,"what":"x"})",
            "field \"exit_code\" is 256, expected 0..255"},
           {R"({"record":"failure","node":99999999999,"exit_code":1,"what":"x"})",
            "field \"node\" is 99999999999, expected 0..2147483647"},
           {R"({"record":"failure","node":10000000000000000000,"exit_code":1,"what":"x"})",
            "field \"node\" is out of range"},
           {R"({"record":"failure","node":1,"rank":-2,"exit_code":1,"what":"x"})",
            "field \"rank\" is -2"},
           {R"({"record":"failure","node":1,"exit_code":1,"what":7})",
            "field \"what\" is not a string"},
       }) {
    const std::string message = rejection(failure, c.text);
    EXPECT_NE(message.find(c.why), std::string::npos) << c.text << " -> " << message;
    EXPECT_NE(message.find("malformed failure record from key 'failed' of the control store at "
                           "127.0.0.1:1"),
              std::string::npos)
        << message;
  }
  EXPECT_NE(rejection(failure, std::string(500, 'x')).find(std::string(120, 'x') + "...'"),
            std::string::npos)
      << "a long text is quoted only in part";

  auto eps = [](const std::string& t, std::string_view s) { return decode_endpoints(t, s); };
  EXPECT_NE(rejection(eps, R"({"record":"endpoints","endpoints":[]})").find("is empty"),
            std::string::npos);
  EXPECT_NE(rejection(eps, R"({"record":"endpoints","endpoints":["h:0"]})").find("port"),
            std::string::npos);
  EXPECT_NE(rejection(eps, R"({"record":"endpoints","endpoints":[5]})").find("not a string"),
            std::string::npos);
  auto desc = [](const std::string& t, std::string_view s) { return decode_description(t, s); };
  EXPECT_NE(rejection(desc, R"({"record":"job description","fields":[["a"]]})")
                .find("not a [name, value] pair"),
            std::string::npos);
  EXPECT_NE(rejection(desc, "nnodes=2\nnproc_per_node=4\n").find("not JSON"), std::string::npos)
      << "the old line form is refused, not half-read";
  auto job = [](const std::string& t, std::string_view s) { return decode_job_id(t, s); };
  EXPECT_NE(rejection(job, R"({"record":"job id","job_id":""})").find("is empty"),
            std::string::npos);
}

TEST(ControlRecords, MismatchNamesTheFieldAndBothValues) {
  EXPECT_FALSE(description_mismatch(description(2), 0, description(2), 1));
  const auto why = description_mismatch(description(2), 0, description(3), 1);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why,
            "the job description differs between nodes: nproc_per_node is '2' on node 0 (this "
            "node) but '3' on node 1");
  EXPECT_EQ(decode_description(encode_description(description(5)), "test"), description(5));
}

TEST(ControlChannel, TwoNodesAgreeOnEndpointsAndJobId) {
  const std::uint16_t port = free_port();
  auto node1 = std::async(std::launch::async, [port] {
    ControlChannel c(options_for(port, 1, 2));
    auto agreement = c.rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "ignored");
    auto membership = c.join_generation(Generation());
    EXPECT_FALSE(c.finish());
    return std::make_pair(agreement, membership);
  });
  ControlChannel c0(options_for(port, 0, 2));
  const auto a0 = c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "job-of-node-0");
  const Membership m0 = c0.join_generation(Generation());
  const auto [a1, m1] = node1.get();
  EXPECT_FALSE(c0.finish());
  EXPECT_EQ(env::join_endpoints(m0.endpoints),
            "127.0.0.1:9000,127.0.0.1:9001,127.0.0.2:7000,127.0.0.2:7001");
  EXPECT_EQ(m0.endpoints, m1.endpoints);
  EXPECT_EQ(m0.nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(m0.position, 0);
  EXPECT_EQ(m1.position, 1);
  EXPECT_EQ(a0.job_id, "job-of-node-0");
  EXPECT_EQ(a1.job_id, "job-of-node-0");
}

TEST(ControlChannel, AutoNodeRanksGoToTheHostFirstAndAreNeverHandedOutTwice) {
  const std::uint16_t port = free_port();
  ControlChannel first(options_for(port, kAutoNodeRank, 2));
  EXPECT_EQ(first.node_rank(), 0) << "the first launcher at the address hosts the store";
  ControlChannel second(options_for(port, kAutoNodeRank, 2));
  EXPECT_EQ(second.node_rank(), 1);
  try {
    ControlChannel surplus(options_for(port, kAutoNodeRank, 2));
    FAIL() << "a third launcher of a 2-node job got node rank " << surplus.node_rank();
  } catch (const ControlError& e) {
    EXPECT_NE(std::string(e.what()).find("more launchers than --nnodes=2 joined"),
              std::string::npos)
        << e.what();
  }
}

TEST(ControlChannel, MismatchFailsOnBothSides) {
  const std::uint16_t port = free_port();
  auto node1 = std::async(std::launch::async, [port]() -> std::string {
    ControlChannel c(options_for(port, 1, 2));
    try {
      c.rendezvous(description(3), endpoints("127.0.0.2", 7000, 3), "");
    } catch (const ControlError& e) {
      c.abandon();
      return e.what();
    }
    return "no error";
  });
  ControlChannel c0(options_for(port, 0, 2));
  const auto started = Clock::now();
  std::string error0 = "no error";
  try {
    c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  } catch (const ControlError& e) {
    error0 = e.what();
    c0.abandon();
  }
  const std::string error1 = node1.get();
  EXPECT_LT(Clock::now() - started, milliseconds(4000)) << "well before the deadline";
  EXPECT_NE(error0.find("nproc_per_node is '2' on node 0 (this node) but '3' on node 1"),
            std::string::npos)
      << error0;
  EXPECT_NE(error1.find("nproc_per_node is '3' on node 1 (this node) but '2' on node 0"),
            std::string::npos)
      << error1;
}

TEST(ControlChannel, MissingNodeIsNamedAtTheDeadline) {
  auto options = options_for(free_port(), 0, 3);
  options.rendezvous_timeout = milliseconds(500);
  ControlChannel c0(options);
  const auto started = Clock::now();
  try {
    c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
    ADD_FAILURE() << "no error";
  } catch (const ControlError& e) {
    EXPECT_NE(std::string(e.what()).find("node(s) 1, 2 of 3 did not join"), std::string::npos)
        << e.what();
  }
  EXPECT_GE(Clock::now() - started, milliseconds(500));
  EXPECT_LT(Clock::now() - started, milliseconds(3000));
}

// Node 1 arrives after node 0 gave up at its rendezvous deadline: it is told that no control
// store answers at node 0's address, naming the endpoint and the deadline and what that means,
// with the last attempt's own error (not "name resolution timed out").
TEST(ControlChannel, ALateNodeIsToldTheRendezvousDeadlinePassed) {
  const std::uint16_t port = free_port();
  auto options0 = options_for(port, 0, 2);
  options0.rendezvous_timeout = milliseconds(300);
  {
    ControlChannel c0(options0);
    EXPECT_THROW(c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j"), ControlError);
  }
  auto options1 = options_for(port, 1, 2);
  options1.rendezvous_timeout = milliseconds(400);
  const auto started = Clock::now();
  try {
    ControlChannel c1(options1);
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
    EXPECT_NE(msg.find("the job already started or ended"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Connection refused"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("timed out"), std::string::npos) << msg;
  }
  EXPECT_GE(Clock::now() - started, milliseconds(400));
  EXPECT_LT(Clock::now() - started, milliseconds(3000));
}

TEST(ControlChannel, AFailureReachesTheOtherNodeAndNamesItself) {
  const std::uint16_t port = free_port();
  ControlChannel c0(options_for(port, 0, 2));
  auto c1_future = std::async(std::launch::async, [port] {
    auto c = std::make_unique<ControlChannel>(options_for(port, 1, 2));
    c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "");
    return c;
  });
  c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  auto c1 = c1_future.get();
  auto stop0 = std::make_shared<ExternalStop>();
  auto stop1 = std::make_shared<ExternalStop>();
  c0.watch(stop0);
  c1->watch(stop1);

  c1->report_failure(FailureNotice{3, 137, "rank 3 was killed by SIGKILL (exit code 137)"});
  c0.report_failure(FailureNotice{0, 143, "a later failure does not replace the first"});
  ASSERT_TRUE(wait_for([&] { return stop0->requested().has_value(); }, milliseconds(2000)));
  EXPECT_EQ(stop0->requested()->first, 137);
  EXPECT_NE(stop0->requested()->second.find("node 1 failed first (node 1 rank 3 exit 137"),
            std::string::npos)
      << stop0->requested()->second;
  EXPECT_FALSE(stop1->requested()) << "a node is not told about its own failure";

  auto f1 = std::async(std::launch::async, [&] { return c1->finish(); });
  const auto f0 = c0.finish();
  const auto first1 = f1.get();
  ASSERT_TRUE(f0);
  ASSERT_TRUE(first1);
  EXPECT_EQ(f0->str(), first1->str());
  EXPECT_EQ(f0->node, 1);
  EXPECT_EQ(f0->rank, 3);
}

TEST(ControlChannel, AVanishedNodeIsNoticedWithinTheHeartbeatTimeout) {
  const std::uint16_t port = free_port();
  ControlChannel c0(options_for(port, 0, 2));
  auto c1_future = std::async(std::launch::async, [port] {
    auto c = std::make_unique<ControlChannel>(options_for(port, 1, 2));
    c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "");
    return c;
  });
  c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  auto c1 = c1_future.get();
  auto stop0 = std::make_shared<ExternalStop>();
  c0.watch(stop0);
  c1->watch(std::make_shared<ExternalStop>());
  std::this_thread::sleep_for(milliseconds(300));  // a few heartbeats
  const auto vanished = Clock::now();
  c1.reset();  // no goodbye: like a launcher that was SIGKILLed
  ASSERT_TRUE(wait_for([&] { return stop0->requested().has_value(); }, milliseconds(3000)));
  EXPECT_LT(Clock::now() - vanished, milliseconds(2500));
  EXPECT_NE(stop0->requested()->second.find("node 1's launcher stopped answering"),
            std::string::npos)
      << stop0->requested()->second;
  const auto first = c0.finish();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->node, 1);
}

TEST(ControlChannel, LosingNodeZeroStopsTheOthers) {
  const std::uint16_t port = free_port();
  auto c0 = std::make_unique<ControlChannel>(options_for(port, 0, 2));
  auto c1_future = std::async(std::launch::async, [port] {
    auto c = std::make_unique<ControlChannel>(options_for(port, 1, 2));
    c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "");
    return c;
  });
  c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  auto c1 = c1_future.get();
  auto stop1 = std::make_shared<ExternalStop>();
  c1->watch(stop1);
  c0.reset();
  ASSERT_TRUE(wait_for([&] { return stop1->requested().has_value(); }, milliseconds(3000)));
  EXPECT_NE(stop1->requested()->second.find("lost the control connection"), std::string::npos)
      << stop1->requested()->second;
  EXPECT_EQ(stop1->requested()->first, 1);
}

}  // namespace
}  // namespace ddl::launcher

namespace ddl::launcher {
namespace {

TEST(ControlRecords, MembersRoundTripAndMalformedOnesAreRefused) {
  const Members m{3,
                  {0, 2, 5},
                  {endpoints("127.0.0.1", 9000, 2), endpoints("127.0.0.3", 7000, 2),
                   endpoints("127.0.0.6", 7100, 1)}};
  const Members back = decode_members(encode_members(m), "test");
  EXPECT_EQ(back.generation, 3);
  EXPECT_EQ(back.nodes, m.nodes);
  EXPECT_EQ(back.endpoints, m.endpoints);
  for (const char* bad :
       {R"({"record":"members","generation":1,"nodes":[],"endpoints":[]})",
        R"({"record":"members","generation":1,"nodes":[2,1],"endpoints":[["a:1"],["a:2"]]})",
        R"({"record":"members","generation":-1,"nodes":[0],"endpoints":[["a:1"]]})",
        R"({"record":"members","generation":1,"nodes":["a"],"endpoints":[["a:1"]]})",
        R"({"record":"members","generation":1,"nodes":[0]})",
        R"({"record":"members","generation":1,"nodes":[0,1],"endpoints":[["a:1"]]})",
        R"({"record":"members","generation":1,"nodes":[0],"endpoints":[[]]})",
        R"({"record":"members","generation":1,"nodes":[0],"endpoints":[["a"]]})"}) {
    EXPECT_THROW(decode_members(bad, "test"), RecordError) << bad;
  }
}

// Two nodes run generation 0 together: a failure on node 1 reaches node 0 as a generation
// failure (restartable), both join generation 1, and when both report success every watcher
// says so.
TEST(ControlChannel, GenerationsFailAndSucceedForEveryNode) {
  const std::uint16_t port = free_port();
  ControlChannel c0(options_for(port, 0, 2));
  auto c1_future = std::async(std::launch::async, [port] {
    auto c = std::make_unique<ControlChannel>(options_for(port, 1, 2));
    c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "");
    c->join_generation(Generation());
    return c;
  });
  c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  c0.join_generation(Generation());
  auto c1 = c1_future.get();
  auto stop0 = std::make_shared<ExternalStop>();
  auto stop1 = std::make_shared<ExternalStop>();
  c0.watch(stop0);
  c1->watch(stop1);

  c1->report_generation_failure(Generation(0), FailureNotice{3, 7, "rank 3 exited with code 7"});
  ASSERT_TRUE(wait_for([&] { return stop0->generation_failure(Generation(0)).has_value(); },
                       milliseconds(2000)));
  EXPECT_EQ(stop0->generation_failure(Generation(0))->first, 7);
  EXPECT_EQ(stop0->generation_failure(Generation(0))->second,
            "generation 0 failed on node 1: rank 3 exited with code 7");
  EXPECT_FALSE(stop0->requested()) << "a restartable failure does not end the job";
  EXPECT_FALSE(stop1->generation_failure(Generation(0))) << "not told about its own failure";

  auto m1 = std::async(std::launch::async, [&] { return c1->join_generation(Generation(1)); });
  const Membership m0 = c0.join_generation(Generation(1));
  EXPECT_EQ(m1.get().endpoints, m0.endpoints);
  EXPECT_EQ(m0.generation, Generation(1));

  c0.report_generation_success(Generation(1));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(stop0->succeeded(Generation(1))) << "one node of two is not the job";
  c1->report_generation_success(Generation(1));
  EXPECT_TRUE(wait_for([&] { return stop0->succeeded(Generation(1)); }, milliseconds(2000)));
  EXPECT_TRUE(wait_for([&] { return stop1->succeeded(Generation(1)); }, milliseconds(2000)));
  auto f1 = std::async(std::launch::async, [&] { return c1->finish(); });
  EXPECT_FALSE(c0.finish());
  EXPECT_FALSE(f1.get());
}

// Elastic 1..3 nodes: node 0 starts generation 0 alone after the last call; a node that comes
// later is admitted into generation 1 after node 0's watcher fails generation 0 for it.
TEST(ControlChannel, ElasticJobStartsWithTheMinimumAndAdmitsALateNode) {
  const std::uint16_t port = free_port();
  auto elastic = [port](int node) {
    ControlOptions o = options_for(port, node, 3);
    o.min_nnodes = 1;
    o.max_restarts = 1;
    o.last_call_timeout = milliseconds(300);
    return o;
  };
  ControlChannel c0(elastic(0));
  c0.rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "j");
  const auto started = Clock::now();
  const Membership g0 = c0.join_generation(Generation());
  EXPECT_GE(Clock::now() - started, milliseconds(300));
  EXPECT_EQ(g0.nodes, std::vector<int>{0});
  auto stop0 = std::make_shared<ExternalStop>();
  c0.watch(stop0);

  auto late = std::async(std::launch::async, [&] {
    ControlChannel c2(elastic(2));
    c2.rendezvous(description(2), endpoints("127.0.0.3", 7000, 2), "");
    Membership m = c2.join_generation(Generation());
    c2.finish();
    return m;
  });
  ASSERT_TRUE(wait_for([&] { return stop0->generation_failure(Generation(0)).has_value(); },
                       milliseconds(3000)));
  EXPECT_NE(stop0->generation_failure(Generation(0))->second.find("node 2 asks to join the job"),
            std::string::npos);
  const Membership g1 = c0.join_generation(Generation(1));
  EXPECT_EQ(g1.nodes, (std::vector<int>{0, 2}));
  const Membership m2 = late.get();
  EXPECT_EQ(m2.generation, Generation(1));
  EXPECT_EQ(m2.position, 1);
  EXPECT_EQ(env::join_endpoints(m2.endpoints),
            "127.0.0.1:9000,127.0.0.1:9001,127.0.0.3:7000,127.0.0.3:7001");
  c0.finish();
}

// --- ready_members: the rule both control planes decide a generation's members by -----------

ControlOptions rule_options(int nnodes, int min_nnodes) {
  ControlOptions o;
  o.nnodes = nnodes;
  o.min_nnodes = min_nnodes;
  o.last_call_timeout = milliseconds(2000);
  o.rendezvous_timeout = milliseconds(10'000);
  return o;
}

GenerationCandidates candidates(int generation, std::set<int> joined, std::set<int> expected,
                                std::set<int> lost = {}) {
  GenerationCandidates c;
  c.generation = generation;
  c.joined = std::move(joined);
  c.expected = std::move(expected);
  c.lost = std::move(lost);
  return c;
}

TEST(ReadyMembers, AFixedJobWaitsForEveryNodeThenStarts) {
  const ControlOptions o = rule_options(3, 0);
  const auto t0 = Clock::now();
  const auto deadline = t0 + o.rendezvous_timeout;
  std::optional<Clock::time_point> last_call;
  EXPECT_FALSE(ready_members(o, candidates(0, {0, 2}, {0, 1, 2}), t0, deadline, last_call, "", ""));
  EXPECT_FALSE(last_call) << "no last call below the minimum (all 3 with a fixed count)";
  EXPECT_FALSE(ready_members(o, candidates(0, {0, 2}, {0, 1, 2}), t0 + milliseconds(9000), deadline,
                             last_call, "", ""));
  EXPECT_EQ(ready_members(o, candidates(0, {0, 1, 2}, {0, 1, 2}), t0, deadline, last_call, "", ""),
            (std::vector<int>{0, 1, 2}));
}

TEST(ReadyMembers, TooFewAtTheDeadlineNamesWhoJoinedAndWhoIsMissing) {
  const ControlOptions o = rule_options(3, 0);
  const auto t0 = Clock::now();
  std::optional<Clock::time_point> last_call;
  try {
    ready_members(o, candidates(0, {0, 2}, {0, 1, 2}), t0 + o.rendezvous_timeout,
                  t0 + o.rendezvous_timeout, last_call, "in etcd at 10.0.0.1:2379", "");
    FAIL() << "no error at the deadline";
  } catch (const ControlError& e) {
    EXPECT_EQ(std::string(e.what()),
              "2 node(s) (0, 2) joined generation 0 in etcd at 10.0.0.1:2379 within the "
              "rendezvous deadline (10 s), 3 are needed; missing: 1");
  }
}

TEST(ReadyMembers, AnElasticJobStartsWithTheMinimumAfterTheLastCall) {
  const ControlOptions o = rule_options(3, 2);
  const auto t0 = Clock::now();
  const auto deadline = t0 + o.rendezvous_timeout;
  std::optional<Clock::time_point> last_call;
  EXPECT_FALSE(ready_members(o, candidates(0, {0}, {0, 1, 2}), t0, deadline, last_call, "", ""));
  EXPECT_FALSE(last_call);
  EXPECT_FALSE(ready_members(o, candidates(0, {0, 1}, {0, 1, 2}), t0 + milliseconds(500), deadline,
                             last_call, "", ""));
  ASSERT_TRUE(last_call) << "the minimum is there: the last call begins";
  EXPECT_EQ(*last_call, t0 + milliseconds(2500));
  EXPECT_FALSE(ready_members(o, candidates(0, {0, 1}, {0, 1, 2}), t0 + milliseconds(2400), deadline,
                             last_call, "", ""));
  EXPECT_EQ(ready_members(o, candidates(0, {0, 1}, {0, 1, 2}), t0 + milliseconds(2500), deadline,
                          last_call, "", ""),
            (std::vector<int>{0, 1}));
}

TEST(ReadyMembers, AnElasticJobStopsWaitingForALostNode) {
  const ControlOptions o = rule_options(3, 2);
  const auto t0 = Clock::now();
  std::optional<Clock::time_point> last_call;
  EXPECT_EQ(ready_members(o, candidates(1, {1, 2}, {0, 1, 2}, {0}), t0, t0 + o.rendezvous_timeout,
                          last_call, "", ""),
            (std::vector<int>{1, 2}))
      << "node 0 lost: nothing left to wait for";
}

TEST(ReadyMembers, AFixedJobCannotStartWithoutALostNode) {
  const ControlOptions o = rule_options(3, 0);
  const auto t0 = Clock::now();
  std::optional<Clock::time_point> last_call;
  try {
    ready_members(o, candidates(1, {1, 2}, {0, 1, 2}, {0}), t0, t0 + o.rendezvous_timeout,
                  last_call, "", " (their etcd leases expired)");
    FAIL() << "a fixed job started without node 0";
  } catch (const ControlError& e) {
    EXPECT_EQ(std::string(e.what()),
              "node(s) 0 of 3 were lost (their etcd leases expired); a job with a fixed --nnodes "
              "cannot start generation 1 without them (--nnodes=MIN:MAX lets it go on with "
              "fewer)");
  }
}

}  // namespace
}  // namespace ddl::launcher
