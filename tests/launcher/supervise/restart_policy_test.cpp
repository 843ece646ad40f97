// The restart policy on its own: what it decides for each way a generation can end.
#include "launcher/supervise/restart_policy.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <stdexcept>

namespace ddl::launcher {
namespace {

GenerationEnd ended(int generation, JobState state, std::optional<int> failure = std::nullopt) {
  GenerationEnd end;
  end.generation = Generation(generation);
  end.state = state;
  end.failure_exit_code = failure;
  return end;
}

TEST(RestartPolicy, SuccessStopsWithZero) {
  const RestartDecision d = RestartPolicy(3).decide(ended(0, JobState::kRunning));
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, 0);
  EXPECT_TRUE(d.vetoed_by.empty());
}

TEST(RestartPolicy, WorkerFailureRestartsUntilMaxRestarts) {
  const RestartPolicy policy(2);
  for (int g : {0, 1}) {
    const RestartDecision d = policy.decide(ended(g, JobState::kWorkerFailed, 3));
    ASSERT_TRUE(d.restart()) << "generation " << g;
    EXPECT_EQ(d.next, Generation(g + 1));
  }
  const RestartDecision last = policy.decide(ended(2, JobState::kWorkerFailed, 3));
  EXPECT_FALSE(last.restart()) << "two restarts done";
  EXPECT_EQ(last.exit_code, 3) << "the failed worker's code";
  EXPECT_TRUE(last.vetoed_by.empty());
  EXPECT_FALSE(RestartPolicy(0).decide(ended(0, JobState::kWorkerFailed, 137)).restart());
  EXPECT_EQ(RestartPolicy(0).decide(ended(0, JobState::kWorkerFailed, 137)).exit_code, 137);
}

TEST(RestartPolicy, HangIsAFailureLikeAnyOther) {
  EXPECT_TRUE(RestartPolicy(1).decide(ended(0, JobState::kHung, kExitDeadline)).restart());
  const RestartDecision d = RestartPolicy(1).decide(ended(1, JobState::kHung, kExitDeadline));
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, kExitDeadline);
}

TEST(RestartPolicy, InterruptNeverRestarts) {
  GenerationEnd plain = ended(0, JobState::kInterrupted);
  plain.interrupt_signal = SIGTERM;
  const RestartDecision d = RestartPolicy(5).decide(plain);
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, 128 + SIGTERM);
  EXPECT_TRUE(d.vetoed_by.empty()) << "nothing to restart";

  // A signal while a failed generation is being stopped: the failure names the code, the signal
  // rules out the restart that was due.
  GenerationEnd after_failure = ended(0, JobState::kInterrupted, 5);
  after_failure.interrupt_signal = SIGINT;
  const RestartDecision v = RestartPolicy(5).decide(after_failure);
  EXPECT_FALSE(v.restart());
  EXPECT_EQ(v.exit_code, 5);
  EXPECT_EQ(v.vetoed_by, "the launcher was stopped by SIGINT");
}

TEST(RestartPolicy, ExternalStopNeverRestarts) {
  GenerationEnd end = ended(0, JobState::kStoppedExternally);
  end.external_exit_code = 137;
  end.external_reason = "node 1 failed first (...)";
  const RestartDecision d = RestartPolicy(5).decide(end);
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, 137) << "the other node's code";

  end.failure_exit_code = 3;
  const RestartDecision v = RestartPolicy(5).decide(end);
  EXPECT_FALSE(v.restart());
  EXPECT_EQ(v.exit_code, 3) << "this node's own failure came first";
  EXPECT_EQ(v.vetoed_by, "node 1 failed first (...)");

  end.interrupt_signal = SIGHUP;
  end.failure_exit_code.reset();
  end.state = JobState::kInterrupted;
  EXPECT_EQ(RestartPolicy(5).decide(end).exit_code, 128 + SIGHUP) << "a signal beats the request";
}

TEST(RestartPolicy, SpawnFailureNeverRestarts) {
  const RestartDecision d = RestartPolicy(5).decide(ended(0, JobState::kSpawnFailed));
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, kExitError);
  // A restart that could not be prepared ends the job with the failure that asked for it.
  const RestartDecision after = RestartPolicy(5).decide(ended(1, JobState::kSpawnFailed, 9));
  EXPECT_FALSE(after.restart());
  EXPECT_EQ(after.exit_code, 9);
}

TEST(RestartPolicy, StatesOverrideInOrder) {
  EXPECT_TRUE(overrides(JobState::kWorkerFailed, JobState::kRunning));
  EXPECT_FALSE(overrides(JobState::kHung, JobState::kWorkerFailed)) << "the first failure stays";
  EXPECT_FALSE(overrides(JobState::kWorkerFailed, JobState::kHung));
  EXPECT_TRUE(overrides(JobState::kStoppedExternally, JobState::kHung));
  EXPECT_TRUE(overrides(JobState::kSpawnFailed, JobState::kStoppedExternally));
  EXPECT_TRUE(overrides(JobState::kInterrupted, JobState::kSpawnFailed));
  EXPECT_FALSE(overrides(JobState::kRunning, JobState::kInterrupted));
  EXPECT_EQ(state_name(JobState::kStoppedExternally), "stopped externally");
}

TEST(RestartPolicy, NegativeMaxRestartsIsRefused) {
  EXPECT_THROW(RestartPolicy(-1), std::invalid_argument);
  EXPECT_EQ(RestartPolicy().max_restarts(), 0);
}

}  // namespace
}  // namespace ddl::launcher
