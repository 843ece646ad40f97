// The restart policy on its own: what it decides for each way a generation can end.
#include "launcher/supervise/restart_policy.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <stdexcept>

namespace ddl::launcher {
namespace {

Failure worker_failed(int exit_code) {
  Failure f;
  f.kind = Failure::Kind::kWorker;
  f.exit_code = exit_code;
  f.what = "rank 1 exited with code " + std::to_string(exit_code);
  return f;
}

Outcome failed(const Failure& failure) {
  Outcome o;
  o.fail(failure);
  return o;
}

TEST(RestartPolicy, SuccessStopsWithZero) {
  const RestartDecision d = RestartPolicy(3).decide(Generation(0), Outcome());
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, 0);
  EXPECT_TRUE(d.vetoed_by.empty());
}

TEST(RestartPolicy, WorkerFailureRestartsUntilMaxRestarts) {
  const RestartPolicy policy(2);
  for (int g : {0, 1}) {
    const RestartDecision d = policy.decide(Generation(g), failed(worker_failed(3)));
    ASSERT_TRUE(d.restart()) << "generation " << g;
    EXPECT_EQ(d.next, Generation(g + 1));
  }
  const RestartDecision last = policy.decide(Generation(2), failed(worker_failed(3)));
  EXPECT_FALSE(last.restart()) << "two restarts done";
  EXPECT_EQ(last.exit_code, 3) << "the failed worker's code";
  EXPECT_TRUE(last.vetoed_by.empty());
  EXPECT_FALSE(RestartPolicy(0).decide(Generation(0), failed(worker_failed(137))).restart());
  EXPECT_EQ(RestartPolicy(0).decide(Generation(0), failed(worker_failed(137))).exit_code, 137);
}

TEST(RestartPolicy, HangAndPeerFailuresAreFailuresLikeAnyOther) {
  const Outcome hung = failed(Failure::hang("hang guard: ..."));
  EXPECT_TRUE(RestartPolicy(1).decide(Generation(0), hung).restart());
  const RestartDecision d = RestartPolicy(1).decide(Generation(1), hung);
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, kExitDeadline);

  const Outcome peer = failed(Failure::peer(7, "generation 0 failed on node 1: rank 3 ..."));
  EXPECT_TRUE(RestartPolicy(1).decide(Generation(0), peer).restart());
  EXPECT_EQ(RestartPolicy(0).decide(Generation(0), peer).exit_code, 7) << "the other node's code";
}

TEST(RestartPolicy, InterruptNeverRestarts) {
  Outcome plain;
  plain.stop(Stop::interrupted(SIGTERM));
  const RestartDecision d = RestartPolicy(5).decide(Generation(0), plain);
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, 128 + SIGTERM);
  EXPECT_TRUE(d.vetoed_by.empty()) << "nothing to restart";

  // A signal while a failed generation is being stopped: the failure names the code, the signal
  // rules out the restart that was due.
  Outcome after_failure = failed(worker_failed(5));
  after_failure.stop(Stop::interrupted(SIGINT));
  const RestartDecision v = RestartPolicy(5).decide(Generation(0), after_failure);
  EXPECT_FALSE(v.restart());
  EXPECT_EQ(v.exit_code, 5);
  EXPECT_EQ(v.vetoed_by, "the launcher was stopped by SIGINT");
}

TEST(RestartPolicy, ExternalStopNeverRestarts) {
  Outcome stopped;
  stopped.stop(Stop::external(137, "node 1 failed first (...)"));
  const RestartDecision d = RestartPolicy(5).decide(Generation(0), stopped);
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, 137) << "the other node's code";

  Outcome after_failure = failed(worker_failed(3));
  after_failure.stop(Stop::external(137, "node 1 failed first (...)"));
  const RestartDecision v = RestartPolicy(5).decide(Generation(0), after_failure);
  EXPECT_FALSE(v.restart());
  EXPECT_EQ(v.exit_code, 3) << "this node's own failure came first";
  EXPECT_EQ(v.vetoed_by, "node 1 failed first (...)");

  stopped.stop(Stop::interrupted(SIGHUP));
  EXPECT_EQ(RestartPolicy(5).decide(Generation(0), stopped).exit_code, 128 + SIGHUP)
      << "a signal beats the request";
}

TEST(RestartPolicy, SpawnFailureNeverRestarts) {
  Outcome spawn;
  spawn.stop(Stop::spawn_failed("could not start rank 0: No such file or directory"));
  const RestartDecision d = RestartPolicy(5).decide(Generation(0), spawn);
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, kExitError);
  // A restart that could not be prepared ends the job with the failure that asked for it.
  Outcome after = failed(worker_failed(9));
  after.stop(Stop::spawn_failed("could not prepare restart 2: ..."));
  const RestartDecision a = RestartPolicy(5).decide(Generation(1), after);
  EXPECT_FALSE(a.restart());
  EXPECT_EQ(a.exit_code, 9);
}

TEST(RestartPolicy, RestartsThatMakeNoProgressStopWithTheirOwnCode) {
  const RestartPolicy policy(5, 2);
  const Outcome o = failed(worker_failed(3));
  EXPECT_TRUE(policy.decide(Generation(1), o, Stall{1, "generation 1 failed ..."}).restart());
  const RestartDecision d = policy.decide(Generation(2), o, Stall{2, "generations 1 and 2 failed"});
  EXPECT_FALSE(d.restart());
  EXPECT_EQ(d.exit_code, kExitNoProgress);
  EXPECT_EQ(d.vetoed_by,
            "no progress: generations 1 and 2 failed (--no_progress_restarts=2); exit code 93");
  // Off (0): only --max_restarts counts.
  EXPECT_TRUE(RestartPolicy(5).decide(Generation(2), o, Stall{4, "..."}).restart());
  // Restarts used up: the failure's own code, as always.
  EXPECT_EQ(RestartPolicy(2, 2).decide(Generation(2), o, Stall{2, "..."}).exit_code, 3);
}

TEST(RestartPolicy, NegativeMaxRestartsIsRefused) {
  EXPECT_THROW(RestartPolicy(-1), std::invalid_argument);
  EXPECT_THROW(RestartPolicy(1, -1), std::invalid_argument);
  EXPECT_EQ(RestartPolicy().max_restarts(), 0);
}

}  // namespace
}  // namespace ddl::launcher
