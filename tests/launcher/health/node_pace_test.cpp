// Stragglers across nodes (launcher/health/node_pace.h): looks at the members' paces, one per
// heartbeat.
#include "launcher/health/node_pace.h"

#include <gtest/gtest.h>

namespace ddl::launcher {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Looks with every node at `own` seconds but node `slow` at `slow_own`, each at step `step`.
std::vector<NodePaceJudge::Verdict> look(NodePaceJudge& judge, int nodes, std::int64_t step,
                                         double own, int slow = -1, double slow_own = 0) {
  std::vector<NodePace> paces;
  for (int n = 0; n < nodes; ++n) paces.push_back({n, step, n == slow ? slow_own : own});
  return judge.look(paces);
}

TEST(NodePace, ANodeTurnedTwiceAsSlowIsNamedAfterItsSustainedLooks) {
  NodePaceJudge judge(1.5);
  judge.begin_generation(0);
  std::int64_t step = 10;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(look(judge, 3, step++, 0.020).empty());
  for (int i = 1; i < kNodeSustain; ++i) {
    EXPECT_TRUE(look(judge, 3, step++, 0.020, 2, 0.041).empty()) << "look " << i;
  }
  const auto named = look(judge, 3, step++, 0.020, 2, 0.041);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].node, 2);
  EXPECT_TRUE(named[0].straggler);
  EXPECT_TRUE(has(named[0].message,
                  "straggler: node 2 takes 41.0 ms of its own per step, 2.05x "
                  "the other nodes' median 20.0 ms"))
      << named[0].message;
  EXPECT_TRUE(has(named[0].message, "its own first steps took 20.0 ms")) << named[0].message;
  // Named once; back at the others' pace, it says so.
  EXPECT_TRUE(look(judge, 3, step++, 0.020, 2, 0.041).empty());
  for (int i = 1; i < kNodeSustain; ++i) EXPECT_TRUE(look(judge, 3, step++, 0.020).empty());
  const auto back = look(judge, 3, step++, 0.020);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_FALSE(back[0].straggler);
  EXPECT_TRUE(has(back[0].message, "node 2 is back at the other nodes' pace")) << back[0].message;
}

TEST(NodePace, NoAlarmForEqualNodesBriefSpellsStaleFiguresOrSlowFromTheStart) {
  NodePaceJudge judge(1.5);
  judge.begin_generation(0);
  std::int64_t step = 1;
  // Slow from its first figure on: not named (the pre-flight check's business).
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(look(judge, 3, step++, 0.020, 1, 0.060).empty());
  judge.begin_generation(1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(look(judge, 3, step++, 0.020).empty());
  // A spell shorter than kNodeSustain looks.
  for (int round = 0; round < 5; ++round) {
    for (int i = 1; i < kNodeSustain; ++i)
      EXPECT_TRUE(look(judge, 3, step++, 0.020, 0, 0.05).empty());
    EXPECT_TRUE(look(judge, 3, step++, 0.020).empty());
  }
  // The same figure again (no newer step) is not a look at all.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(look(judge, 3, step, 0.020, 0, 0.05).empty());
  // Small gaps are noise: 1.5x of 2 ms is below kStragglerMinGap.
  judge.begin_generation(2);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(look(judge, 3, step++, 0.002, 1, i < 3 ? 0.002 : 0.004).empty());
  }
  // One node alone has nobody to be compared with.
  judge.begin_generation(3);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(look(judge, 1, step++, i < 3 ? 0.02 : 0.2).empty());
}

}  // namespace
}  // namespace ddl::launcher
