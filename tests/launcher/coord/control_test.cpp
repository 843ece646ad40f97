// The control plane's records (launcher/coord/records.h) and the rule that decides a generation's
// members (ready_members, control_plane.h). The engine itself: engine_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <set>

#include "launcher/coord/control_plane.h"
#include "tests/launcher/coord/control_fixtures.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using control_fixtures::description;
using control_fixtures::endpoints;

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

}  // namespace
}  // namespace ddl::launcher

namespace ddl::launcher {
namespace {

TEST(ControlRecords, MembersRoundTripAndMalformedOnesAreRefused) {
  const Members m{3,
                  {0, 2, 5},
                  {endpoints("127.0.0.1", 9000, 2), endpoints("127.0.0.3", 7000, 2),
                   endpoints("127.0.0.6", 7100, 1)},
                  {"a", "b", "c"}};
  const Members back = decode_members(encode_members(m), "test");
  EXPECT_EQ(back.generation, 3);
  EXPECT_EQ(back.nodes, m.nodes);
  EXPECT_EQ(back.endpoints, m.endpoints);
  EXPECT_EQ(back.launchers, m.launchers);
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

TEST(ControlRecords, PresentationsRoundTripAndMalformedOnesAreRefused) {
  const Presentation p{description(2), endpoints("127.0.0.1", 9000, 2), "job-1", "", ""};
  const Presentation back = decode_presentation(encode_presentation(p), "test");
  EXPECT_EQ(back.description, p.description);
  EXPECT_EQ(back.endpoints, p.endpoints);
  EXPECT_EQ(back.job_id, "job-1");
  EXPECT_EQ(back.job_secret, "");
  EXPECT_THROW(decode_presentation(R"({"record":"node","description":"x"})", "test"), RecordError);
  EXPECT_THROW(decode_presentation(R"({"record":"node","description":"{}","endpoints":"[]",)"
                                   R"("job_id":1,"job_secret":""})",
                                   "test"),
               RecordError);
}

// --- ready_members: the rule the engine decides a generation's members by -----------

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

// --sort_ip: a generation's members, and so the plan's ranks, in the order of their addresses.
TEST(MembershipOf, ByAddressOrdersIpv4NumericallyThenNamesThenNodeRank) {
  Members members;
  members.generation = 2;
  members.nodes = {0, 1, 2, 3, 4};
  const char* hosts[] = {"10.0.0.10", "10.0.0.9", "node-b", "10.0.0.9", "192.168.0.1"};
  for (int i = 0; i < 5; ++i) {
    members.endpoints.push_back({env::Endpoint{hosts[i], 7000}, env::Endpoint{hosts[i], 7001}});
  }
  const Membership plain = membership_of(members, 3, true);
  EXPECT_EQ(plain.nodes, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(plain.position, 3);
  const Membership sorted = membership_of(members, 3, true, true);
  EXPECT_EQ(sorted.nodes, (std::vector<int>{1, 3, 0, 4, 2}))
      << "10.0.0.9 < 10.0.0.10 by value (not as text); equal hosts by node rank; names last";
  EXPECT_EQ(sorted.position, 1);
  EXPECT_EQ(sorted.hosts, (std::vector<std::string>{"10.0.0.9", "10.0.0.9", "10.0.0.10",
                                                    "192.168.0.1", "node-b"}));
  ASSERT_EQ(sorted.endpoints.size(), 10u);
  EXPECT_EQ(sorted.endpoints[4].str(), "10.0.0.10:7000") << "each member's endpoints move with it";
  EXPECT_EQ(sorted.generation.index(), 2);
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
