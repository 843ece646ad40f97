// The progress protocol's parser and the pace rules (launcher/health/): what a line means, when a
// rank is named a straggler (and when not: noise, equal ranks, start-up, pauses), when it has
// recovered, and when a rank is late for its next step.
#include "launcher/health/pace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/health/ledger.h"
#include "launcher/health/progress.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using Clock = PaceTracker::Clock;

ProgressMessage parse_ok(const std::string& line) {
  std::string error;
  const auto m = parse_progress_line(line, error);
  EXPECT_TRUE(m.has_value()) << line << ": " << error;
  return m.value_or(ProgressMessage{});
}

std::string parse_error(const std::string& line) {
  std::string error;
  EXPECT_FALSE(parse_progress_line(line, error).has_value()) << line;
  return error;
}

TEST(ProgressLine, StepsWithAndWithoutSections) {
  auto m = parse_ok("step 12");
  EXPECT_EQ(m.kind, ProgressMessage::Kind::kStep);
  EXPECT_EQ(m.step, 12);
  EXPECT_TRUE(m.sections.empty());
  m = parse_ok("step 3 data=0.002 compute=0.031 allreduce=0.004 wait=0.001\r");
  ASSERT_EQ(m.sections.size(), 4u);
  EXPECT_EQ(m.sections[1].first, "compute");
  EXPECT_DOUBLE_EQ(m.sections[1].second, 0.031);
  EXPECT_DOUBLE_EQ(m.waiting_seconds(), 0.005);
  EXPECT_TRUE(is_waiting_section("comm"));
  EXPECT_FALSE(is_waiting_section("compute"));
}

TEST(ProgressLine, PauseAndCheckpoint) {
  auto m = parse_ok("pause  evaluation of epoch 2");
  EXPECT_EQ(m.kind, ProgressMessage::Kind::kPause);
  EXPECT_EQ(m.what, "evaluation of epoch 2");
  EXPECT_EQ(parse_ok("pause").what, "");
  m = parse_ok("checkpoint 400");
  EXPECT_EQ(m.kind, ProgressMessage::Kind::kCheckpoint);
  EXPECT_EQ(m.step, 400);
  m = parse_ok("phase communicator");
  EXPECT_EQ(m.kind, ProgressMessage::Kind::kPhase);
  EXPECT_EQ(m.what, "communicator");
  m = parse_ok("epoch 2 300");
  EXPECT_EQ(m.kind, ProgressMessage::Kind::kEpoch);
  EXPECT_EQ(m.step, 2);
  EXPECT_EQ(m.batches, 300);
}

TEST(ProgressLine, AnythingElseIsRefusedWithAReason) {
  EXPECT_EQ(parse_error(""), "empty");
  EXPECT_EQ(parse_error("epoch: 0, batch: 1, loss is: [2.3]"),
            "not step, pause, checkpoint, phase or epoch");
  EXPECT_EQ(parse_error("step"), "step needs a step number (0 or more)");
  EXPECT_EQ(parse_error("step -1"), "step needs a step number (0 or more)");
  EXPECT_EQ(parse_error("step 1x"), "step needs a step number (0 or more)");
  EXPECT_EQ(parse_error("step 1 compute"), "section 'compute' is not NAME=SECONDS");
  EXPECT_EQ(parse_error("step 1 compute=-1"), "section 'compute=-1' is not NAME=SECONDS");
  EXPECT_EQ(parse_error("step 1 compute=nan"), "section 'compute=nan' is not NAME=SECONDS");
  EXPECT_EQ(parse_error("step 1 a$b=1"), "section 'a$b=1' is not NAME=SECONDS");
  EXPECT_EQ(parse_error("checkpoint 4 extra"), "checkpoint takes only a step number");
  EXPECT_EQ(parse_error("phase"), "phase takes one name");
  EXPECT_EQ(parse_error("phase a b"), "phase takes one name");
  for (const char* bad : {"epoch", "epoch 1", "epoch 1 0", "epoch x 3", "epoch 1 3 4"}) {
    EXPECT_EQ(parse_error(bad), "epoch takes an epoch number and its batches (more than 0)") << bad;
  }
  EXPECT_EQ(parse_error("step 1 " + std::string(600, 'x')), "longer than 512 bytes");
}

TEST(Median, OddEvenAndOne) {
  std::vector<double> v{3, 1, 2};
  EXPECT_DOUBLE_EQ(median_of(v), 2);
  v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(median_of(v), 2.5);
  v = {7};
  EXPECT_DOUBLE_EQ(median_of(v), 7);
}

// Drives a tracker with a synthetic clock: every rank reports its steps at its own pace.
class Steps {
 public:
  explicit Steps(int ranks, PaceOptions options = {})
      : tracker_(options, names(ranks), "on node 0") {
    for (int i = 0; i < ranks; ++i) tracker_.started(static_cast<std::size_t>(i), t0_);
    last_.assign(static_cast<std::size_t>(ranks), t0_);
    step_.assign(static_cast<std::size_t>(ranks), 0);
  }

  // Rank `i` finishes a step `ms` after its previous one, `waiting_ms` of it spent waiting for the
  // others. Returns the verdict, if any.
  std::optional<PaceTracker::Verdict> step(std::size_t i, int ms, int waiting_ms = 0) {
    last_[i] += milliseconds(ms);
    ProgressMessage m;
    m.step = ++step_[i];
    if (waiting_ms > 0) m.sections.emplace_back("allreduce", waiting_ms / 1000.0);
    auto v = tracker_.on_message(i, m, last_[i]);
    if (v) verdicts_.push_back(*v);
    return v;
  }
  // Every rank steps once; rank i's step takes ms[i].
  void round(const std::vector<int>& ms) {
    for (std::size_t i = 0; i < ms.size(); ++i) step(i, ms[i]);
  }
  void pause(std::size_t i) {
    ProgressMessage m;
    m.kind = ProgressMessage::Kind::kPause;
    tracker_.on_message(i, m, last_[i]);
  }

  PaceTracker& tracker() { return tracker_; }
  Clock::time_point at(std::size_t i) const { return last_[i]; }
  const std::vector<PaceTracker::Verdict>& verdicts() const { return verdicts_; }
  std::int64_t steps(std::size_t i) const { return step_[i]; }

 private:
  static std::vector<std::string> names(int n) {
    std::vector<std::string> v;
    for (int i = 0; i < n; ++i) v.push_back("rank " + std::to_string(i));
    return v;
  }

  Clock::time_point t0_ = Clock::now();
  PaceTracker tracker_;
  std::vector<Clock::time_point> last_;
  std::vector<std::int64_t> step_;
  std::vector<PaceTracker::Verdict> verdicts_;
};

TEST(Straggler, ARankTwiceAsSlowIsNamedWithinTenSteps) {
  Steps s(4);
  for (int k = 0; k < 20; ++k) s.round({100, 101, 99, 100});
  EXPECT_TRUE(s.verdicts().empty());
  int named_after = -1;
  for (int k = 1; k <= 10 && named_after < 0; ++k) {
    s.round({100, 99, 200, 101});
    if (!s.verdicts().empty()) named_after = k;
  }
  ASSERT_GT(named_after, 0) << "not named within 10 steps";
  EXPECT_EQ(named_after, static_cast<int>(kSlowSteps) + kPaceSustain - 1);
  const auto& v = s.verdicts().front();
  EXPECT_TRUE(v.straggler);
  EXPECT_EQ(v.process, 2u);
  EXPECT_NE(v.message.find("straggler: rank 2 on node 0 takes 200.0 ms of its own per step, "
                           "2.00x the other ranks' median 100.0 ms (last 7 steps"),
            std::string::npos)
      << v.message;
  EXPECT_NE(v.message.find("its own first steps took 99.0 ms"), std::string::npos) << v.message;
  EXPECT_TRUE(s.tracker().summary(2).straggler);
  // Named once, however long it stays slow.
  for (int k = 0; k < 20; ++k) s.round({100, 99, 200, 101});
  EXPECT_EQ(s.verdicts().size(), 1u);
}

TEST(Straggler, RecoveryIsSaidAndTheRankMayBeNamedAgain) {
  Steps s(2);
  for (int k = 0; k < 10; ++k) s.round({50, 50});
  for (int k = 0; k < 10; ++k) s.round({50, 120});
  ASSERT_EQ(s.verdicts().size(), 1u);
  for (int k = 0; k < 10; ++k) s.round({50, 50});
  ASSERT_EQ(s.verdicts().size(), 2u);
  EXPECT_FALSE(s.verdicts()[1].straggler);
  EXPECT_NE(s.verdicts()[1].message.find("rank 1 on node 0 is back at the other ranks' pace"),
            std::string::npos);
  for (int k = 0; k < 10; ++k) s.round({50, 120});
  EXPECT_EQ(s.verdicts().size(), 3u);
}

TEST(Straggler, InASynchronousJobTheOwnTimeTellsWhoItIs) {
  // Every step takes 100 ms, each rank's own; then 200 ms everywhere: rank 1 computes for 190 of
  // them, the others wait 100.
  Steps s(3);
  for (int k = 0; k < 12; ++k) s.round({100, 100, 100});
  for (int k = 0; k < 15; ++k) {
    s.step(0, 200, 100);
    s.step(1, 200, 10);
    s.step(2, 200, 100);
  }
  ASSERT_EQ(s.verdicts().size(), 1u);
  EXPECT_EQ(s.verdicts()[0].process, 1u);
}

TEST(Straggler, NoiseEqualRanksAndSmallGapsAreNotStragglers) {
  Steps s(8);
  // Jitter of +-30% around 100 ms, a different rank slow at each step.
  for (int k = 0; k < 60; ++k) {
    std::vector<int> ms(8, 100);
    ms[static_cast<std::size_t>(k % 8)] = 130;
    ms[static_cast<std::size_t>((k + 3) % 8)] = 70;
    s.round(ms);
  }
  EXPECT_TRUE(s.verdicts().empty()) << s.verdicts()[0].message;
  // 2x slower, but 2 ms against 1 ms: below kStragglerMinGap.
  Steps tiny(2);
  for (int k = 0; k < 30; ++k) tiny.round({1, 2});
  EXPECT_TRUE(tiny.verdicts().empty());
  // Off: nothing is judged.
  PaceOptions off;
  off.stragglers = false;
  Steps quiet(2, off);
  for (int k = 0; k < 30; ++k) quiet.round({50, 200});
  EXPECT_TRUE(quiet.verdicts().empty());
}

TEST(Straggler, ASlowerRankFromTheStartOrABriefSpellIsNotAStraggler) {
  // Other hardware: rank 1 always twice as slow.
  Steps always(2);
  for (int k = 0; k < 40; ++k) always.round({50, 100});
  EXPECT_TRUE(always.verdicts().empty());
  // A rank descheduled for 5 steps (a node with more ranks than cores).
  Steps brief(4);
  for (int k = 0; k < 20; ++k) brief.round({30, 30, 31, 29});
  for (int k = 0; k < 5; ++k) brief.round({30, 30, 31, 70});
  for (int k = 0; k < 20; ++k) brief.round({30, 30, 31, 29});
  EXPECT_TRUE(brief.verdicts().empty()) << brief.verdicts()[0].message;
}

TEST(Straggler, StartUpAndStepsAfterAPauseDoNotCount) {
  Steps s(2);
  // A slow first step (start-up) on rank 1, then an evaluation after step 10.
  s.round({100, 3000});
  for (int k = 0; k < 9; ++k) s.round({100, 100});
  s.pause(1);
  s.round({100, 5000});
  for (int k = 0; k < 10; ++k) s.round({100, 100});
  EXPECT_TRUE(s.verdicts().empty());
}

TEST(StepTimeout, NoneUntilThePaceIsKnown) {
  Steps s(2);
  EXPECT_FALSE(s.tracker().step_timeout());
  EXPECT_FALSE(s.tracker().next_deadline());
  for (int k = 0; k < kPaceWarmup + static_cast<int>(kPaceWindow) - 1; ++k) s.round({100, 100});
  EXPECT_FALSE(s.tracker().step_timeout()) << "a window is not full yet";
  s.round({100, 100});
  ASSERT_TRUE(s.tracker().step_timeout());
}

TEST(StepTimeout, FactorTimesThePaceWithAFloor) {
  PaceOptions o;
  o.step_timeout_factor = 5;
  o.step_timeout_floor = milliseconds(300);
  Steps s(2, o);
  for (int k = 0; k < 10; ++k) s.round({200, 200});
  EXPECT_EQ(*s.tracker().step_timeout(), milliseconds(1000));
  EXPECT_EQ(*s.tracker().next_deadline(), std::min(s.at(0), s.at(1)) + milliseconds(1000));
  // Rank 1 stops; rank 0 goes on for a while, then blocks as well.
  s.step(0, 200);
  const auto t = s.at(1);
  EXPECT_FALSE(s.tracker().late(t + milliseconds(999)));
  const auto late = s.tracker().late(t + milliseconds(1000));
  ASSERT_TRUE(late);
  EXPECT_NE(late->find("step timeout: no step finished for 1.00 s by rank 1 (the job's pace is "
                       "200.0 ms per step; the timeout 1.00 s is 5 times that, at least 300.0 ms)"),
            std::string::npos)
      << *late;
  EXPECT_NE(late->find("last steps: rank 0 at step 11 800.0 ms ago, rank 1 at step 10 1.00 s ago"),
            std::string::npos)
      << *late;
  // The floor: fast steps get at least it.
  PaceOptions floor = o;
  floor.step_timeout_floor = milliseconds(3000);
  Steps fast(1, floor);
  for (int k = 0; k < 10; ++k) fast.round({10});
  EXPECT_EQ(*fast.tracker().step_timeout(), milliseconds(3000));
}

TEST(StepTimeout, PausedExitedAndOffAreNotLate) {
  Steps s(2);
  for (int k = 0; k < 10; ++k) s.round({100, 100});
  s.pause(0);
  s.tracker().exited(1);
  EXPECT_FALSE(s.tracker().next_deadline());
  EXPECT_FALSE(s.tracker().late(s.at(0) + std::chrono::seconds(60)));
  s.step(0, 100);  // back: watched again
  EXPECT_TRUE(s.tracker().late(s.at(0) + std::chrono::seconds(60)));
  PaceOptions off;
  off.step_timeout_factor = 0;
  Steps never(1, off);
  for (int k = 0; k < 10; ++k) never.round({100});
  EXPECT_FALSE(never.tracker().late(never.at(0) + std::chrono::hours(1)));
}

TEST(StepTimeout, ANewGenerationForgetsThePace) {
  Steps s(2);
  for (int k = 0; k < 10; ++k) s.round({100, 100});
  s.tracker().begin_generation({"rank 0", "rank 1"});
  EXPECT_FALSE(s.tracker().step_timeout());
  EXPECT_EQ(s.tracker().summary(0).steps, 0);
}

PaceTracker::Summary reached(std::optional<std::int64_t> step,
                             std::optional<std::int64_t> checkpoint = std::nullopt) {
  PaceTracker::Summary s;
  s.last_step = step;
  s.last_checkpoint = checkpoint;
  s.steps = step.value_or(0);
  return s;
}

TEST(ProgressLedger, FailuresWithoutANewCheckpointAreCountedInARow) {
  ProgressLedger l;
  l.generation_ended(0, {reached(450, 400), reached(450, 400)}, true);
  EXPECT_EQ(l.stalled(), 0) << "the first checkpoint is progress";
  l.generation_ended(1, {reached(430, 400), reached(431)}, true);
  EXPECT_EQ(l.stalled(), 1);
  EXPECT_EQ(l.why(),
            "generation 1 failed without a checkpoint past step 400 (the last one written)");
  l.generation_ended(2, {reached(401), reached(402)}, true);
  EXPECT_EQ(l.stalled(), 2);
  EXPECT_EQ(l.why(),
            "generations 1 and 2 failed without a checkpoint past step 400 (the last one written)");
  l.generation_ended(3, {reached(900, 800)}, true);
  EXPECT_EQ(l.stalled(), 0) << "a new checkpoint is progress";
  EXPECT_EQ(l.why(), "");
}

TEST(ProgressLedger, WithoutCheckpointsTheFurthestStepCounts) {
  ProgressLedger l;
  l.generation_ended(0, {reached(50)}, true);
  EXPECT_EQ(l.stalled(), 0);
  l.generation_ended(1, {reached(50)}, true);
  l.generation_ended(2, {reached(12)}, true);
  EXPECT_EQ(l.stalled(), 2);
  EXPECT_EQ(l.why(),
            "generations 1 and 2 failed without passing step 50 (the furthest any generation "
            "reached)");
  l.generation_ended(3, {reached(51)}, true);
  EXPECT_EQ(l.stalled(), 0);
}

TEST(ProgressLedger, SilentGenerationsAndSuccessesDoNotCount) {
  ProgressLedger l;
  l.generation_ended(0, {reached(50)}, true);
  l.generation_ended(1, {reached(40)}, true);
  l.generation_ended(2, {reached(std::nullopt)}, true);
  EXPECT_EQ(l.stalled(), 1) << "a generation that reported nothing tells nothing";
  l.generation_ended(3, {reached(30)}, false);
  EXPECT_EQ(l.stalled(), 0);
}

}  // namespace
}  // namespace ddl::launcher
