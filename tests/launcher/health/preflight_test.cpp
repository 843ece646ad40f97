// The pre-flight check's rules (launcher/health/preflight.h): the rounds of pairs, the numbers'
// encoding, which nodes a verdict names, and what a node does with it.
#include "launcher/health/preflight.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

namespace ddl::launcher::preflight {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Node `node` with `gflops` and its links out to each of `peers` at `rate` MB/s.
NodeCheck node_check(int node, double gflops, const std::vector<int>& peers, double rate) {
  NodeCheck c;
  c.node = node;
  c.gflops = gflops;
  for (int p : peers) c.links.push_back(LinkCheck{p, rate, 0.1, ""});
  return c;
}

// The links every node of `count` sends on, as run_check makes them, all at `rate` but those out
// of `slow` (at `slow_rate`).
std::vector<NodeCheck> ring(int count, double rate, int slow = -1, double slow_rate = 0) {
  std::vector<NodeCheck> checks;
  for (int p = 0; p < count; ++p) {
    std::vector<int> peers;
    for (int r = 0; r < rounds(count); ++r) peers.push_back(send_to(p, r, count));
    checks.push_back(node_check(p, 10, peers, p == slow ? slow_rate : rate));
  }
  return checks;
}

TEST(PreflightRounds, EveryNodeMeetsLogNPartnersEachWay) {
  EXPECT_EQ(rounds(1), 0);
  EXPECT_EQ(rounds(2), 1);
  EXPECT_EQ(rounds(3), 2);
  EXPECT_EQ(rounds(8), 3);
  EXPECT_EQ(rounds(9), 4);
  EXPECT_EQ(rounds(1024), 10);
  for (int n : {2, 3, 5, 8, 13, 64}) {
    for (int p = 0; p < n; ++p) {
      std::set<int> out, in;
      for (int r = 0; r < rounds(n); ++r) {
        const int to = send_to(p, r, n);
        EXPECT_NE(to, p);
        EXPECT_EQ(receive_from(to, r, n), p) << "n " << n << " round " << r;
        out.insert(to);
        in.insert(receive_from(p, r, n));
      }
      // Distinct partners: no link is measured twice.
      EXPECT_EQ(static_cast<int>(out.size()), rounds(n)) << "n " << n << " p " << p;
      EXPECT_EQ(static_cast<int>(in.size()), rounds(n));
    }
  }
}

TEST(PreflightNumbers, EncodeDecodeRoundTripsAndRefusesGarbage) {
  NodeCheck c;
  c.node = 3;
  c.gflops = 12.5;
  c.links.push_back(LinkCheck{4, 840.25, 0.125, ""});
  c.links.push_back(LinkCheck{5, std::nullopt, 0, "cannot connect; refused"});
  const NodeCheck d = decode(3, encode(c));
  EXPECT_EQ(d.node, 3);
  EXPECT_DOUBLE_EQ(d.gflops, 12.5);
  ASSERT_EQ(d.links.size(), 2u);
  EXPECT_EQ(d.links[0].peer, 4);
  EXPECT_NEAR(*d.links[0].megabytes_per_s, 840, 1);
  EXPECT_NEAR(d.links[0].round_trip_ms, 0.125, 1e-9);
  EXPECT_EQ(d.links[1].peer, 5);
  EXPECT_FALSE(d.links[1].megabytes_per_s);
  EXPECT_EQ(d.links[1].error, "cannot connect, refused");
  for (const std::string bad : {"", "gflops=x", "gflops=-1", "link=1,2,3", "gflops=1;link=1",
                                "gflops=1;speed=3", "gflops=1;link=a,2,3"}) {
    EXPECT_THROW(decode(0, bad), std::invalid_argument) << bad;
  }
}

TEST(PreflightVerdict, EqualNodesPass) {
  const Verdict v = judge(ring(8, 1000), 2);
  EXPECT_TRUE(v.passed()) << named_text(v);
  EXPECT_EQ(v.nodes.size(), 8u);
  EXPECT_DOUBLE_EQ(v.median_gflops, 10);
  EXPECT_DOUBLE_EQ(*v.median_sent, 1000);
}

TEST(PreflightVerdict, ASlowMatmulIsNamedWithItsNumbers) {
  std::vector<NodeCheck> checks = ring(5, 1000);
  checks[2].gflops = 4.9;  // below 10 / 2
  checks[3].gflops = 5.1;  // not
  const Verdict v = judge(checks, 2);
  ASSERT_EQ(v.named.size(), 1u) << named_text(v);
  EXPECT_EQ(v.named[0].node, 2);
  EXPECT_TRUE(has(v.named[0].why, "its matmul runs at 4.9 GFLOP/s against the median 10 "))
      << v.named[0].why;
  EXPECT_TRUE(has(v.named[0].why, "below 1/2 of it"));
}

TEST(PreflightVerdict, ASlowLinkOutIsPinnedOnItsNodeFromThreeNodesOn) {
  for (int n : {3, 4, 8}) {
    // Links are named an order of magnitude below the median (kLinkRatio), not at `ratio`.
    EXPECT_TRUE(judge(ring(n, 1000, 1, 150), 2).passed());
    const Verdict v = judge(ring(n, 1000, 1, 20), 2);
    ASSERT_EQ(v.named.size(), 1u) << n << ": " << named_text(v);
    EXPECT_EQ(v.named[0].node, 1);
    EXPECT_TRUE(has(v.named[0].why,
                    "its best link out runs at 20 MB/s against the median 1000 "
                    "(below 1/10 of it)"))
        << v.named[0].why;
  }
  // Two nodes share their only link: it is not pinned on either.
  EXPECT_TRUE(judge(ring(2, 1000, 1, 20), 2).passed());
}

TEST(PreflightVerdict, AnUnreachableNodeIsNamedAndItsPartnersAreNot) {
  std::vector<NodeCheck> checks = ring(5, 1000);
  // Node 3 cannot be reached and reaches nobody.
  for (NodeCheck& c : checks) {
    for (LinkCheck& l : c.links) {
      if (c.node == 3 || l.peer == 3) {
        l.megabytes_per_s.reset();
        l.error = "no connection within 5000 ms";
      }
    }
  }
  const Verdict v = judge(checks, 2);
  ASSERT_EQ(v.named.size(), 1u) << named_text(v);
  EXPECT_EQ(v.named[0].node, 3);
  EXPECT_TRUE(has(v.named[0].why, "every link it was on failed")) << v.named[0].why;
  EXPECT_TRUE(has(v.named[0].why, "no connection within 5000 ms")) << v.named[0].why;
}

TEST(PreflightVerdict, AFailedLinkBetweenTwoNodesNamesBoth) {
  std::vector<NodeCheck> checks = ring(2, 1000);
  for (NodeCheck& c : checks) c.links[0] = LinkCheck{1 - c.node, std::nullopt, 0, "refused"};
  const Verdict v = judge(checks, 2);
  ASSERT_EQ(v.named.size(), 2u) << named_text(v);
  EXPECT_TRUE(has(named_text(v), "node 0 -> node 1: refused"));
}

TEST(PreflightVerdict, LinksToNodesOutsideTheGenerationAreNotCounted) {
  std::vector<NodeCheck> checks = ring(3, 1000);
  checks[0].links.push_back(LinkCheck{9, std::nullopt, 0, "refused"});
  EXPECT_TRUE(judge(checks, 2).passed());
}

Verdict slow_node_2() {
  std::vector<NodeCheck> checks = ring(3, 1000);
  checks[2].gflops = 1;
  return judge(checks, 2);
}

TEST(PreflightDecision, AFixedJobStops) {
  JobShape job;
  job.me = 0;
  job.restart_left = true;
  const Decision d = decide(slow_node_2(), 0, job);
  EXPECT_EQ(d.action, Action::kStop);
  EXPECT_TRUE(has(d.line, "the pre-flight check of generation 0 named node 2: its matmul"))
      << d.line;
  EXPECT_TRUE(has(d.line, "a job with a fixed --nnodes cannot go on without it")) << d.line;
}

TEST(PreflightDecision, AnElasticJobGoesOnWithoutTheNamedNode) {
  JobShape job;
  job.elastic = true;
  job.min_nodes = 2;
  job.restart_left = true;
  job.store_host = 0;
  job.me = 1;
  EXPECT_EQ(decide(slow_node_2(), 0, job).action, Action::kRestartWithout);
  job.me = 2;
  const Decision leave = decide(slow_node_2(), 0, job);
  EXPECT_EQ(leave.action, Action::kLeave);
  EXPECT_TRUE(has(leave.line, "named this node (node 2): its matmul runs at 1 GFLOP/s"))
      << leave.line;
  // ... unless too few nodes would be left, no restart is left, or it hosts the store.
  job.min_nodes = 3;
  EXPECT_TRUE(has(decide(slow_node_2(), 0, job).line, "2 node(s) would be left, fewer than the 3"));
  EXPECT_EQ(decide(slow_node_2(), 0, job).action, Action::kStop);
  job.min_nodes = 2;
  job.restart_left = false;
  EXPECT_TRUE(has(decide(slow_node_2(), 0, job).line, "no restart is left"));
  job.restart_left = true;
  job.store_host = 2;
  EXPECT_TRUE(has(decide(slow_node_2(), 0, job).line, "node 2 hosts the control store"));
  JobShape fine;
  EXPECT_EQ(decide(judge(ring(3, 1000), 2), 0, fine).action, Action::kGoOn);
}

}  // namespace
}  // namespace ddl::launcher::preflight
