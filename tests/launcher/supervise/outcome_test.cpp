// The Outcome on its own: which failure and which stop it keeps, and the exit code, words and
// report line it gives for each way a generation can end.
#include "launcher/supervise/outcome.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "env/exit_codes.h"

namespace ddl::launcher {
namespace {

Failure worker_failed(int exit_code, const std::string& name = "rank 1") {
  Failure f;
  f.kind = Failure::Kind::kWorker;
  f.exit_code = exit_code;
  f.what = name + " exited with code " + std::to_string(exit_code);
  f.process = 1;
  f.process_name = name;
  f.rank = 1;
  return f;
}

TEST(Outcome, StartsRunningAndOk) {
  const Outcome o;
  EXPECT_EQ(o.stage(), Outcome::Stage::kRunning);
  EXPECT_TRUE(o.ok());
  EXPECT_FALSE(o.restartable());
  EXPECT_EQ(o.exit_code(), 0);
  EXPECT_EQ(o.what(), "");
  EXPECT_EQ(o.state_name(), "running");
  EXPECT_EQ(o.summary(), "succeeded");
}

TEST(Outcome, TheFirstFailureStays) {
  Outcome o;
  EXPECT_TRUE(o.fail(worker_failed(3)));
  EXPECT_FALSE(o.fail(Failure::hang("hang guard: ..."))) << "the first failure stays";
  EXPECT_FALSE(o.fail(worker_failed(4, "rank 0")));
  EXPECT_TRUE(o.failed(Failure::Kind::kWorker));
  EXPECT_TRUE(o.restartable());
  EXPECT_EQ(o.exit_code(), 3);
  EXPECT_EQ(o.what(), "rank 1 exited with code 3");
  EXPECT_EQ(o.summary(), "worker failed: rank 1 exited with code 3");
}

TEST(Outcome, EachFailureKindHasItsCodeAndName) {
  Outcome hung;
  hung.fail(Failure::hang("hang guard: no output from any rank for 1 s; silent: rank 0 (1.0 s)"));
  EXPECT_EQ(hung.exit_code(), kExitDeadline);
  EXPECT_EQ(hung.summary(),
            "hung: hang guard: no output from any rank for 1 s; silent: rank 0 (1.0 s)");
  Outcome peer;
  peer.fail(Failure::peer(7, "generation 0 failed on node 1: rank 3 exited with code 7"));
  EXPECT_EQ(peer.exit_code(), 7);
  EXPECT_EQ(peer.state_name(), "failed on another node");
  EXPECT_TRUE(peer.from_peer());
  EXPECT_FALSE(hung.from_peer());
}

TEST(Outcome, NoFailureIsRecordedAfterAStop) {
  Outcome o;
  o.stop(Stop::interrupted(SIGINT));
  EXPECT_FALSE(o.fail(worker_failed(143))) << "the stop's own victims are no failure";
  EXPECT_FALSE(o.failure());
  EXPECT_EQ(o.exit_code(), 128 + SIGINT);
  EXPECT_EQ(o.summary(), "interrupted: the launcher was stopped by SIGINT");
}

TEST(Outcome, AStopOnTopOfAFailureKeepsTheFailuresCode) {
  Outcome o;
  o.fail(worker_failed(5));
  EXPECT_TRUE(o.stop(Stop::interrupted(SIGTERM)));
  EXPECT_FALSE(o.restartable());
  EXPECT_EQ(o.exit_code(), 5);
  EXPECT_EQ(o.what(), "rank 1 exited with code 5");
  EXPECT_EQ(o.summary(), "interrupted: rank 1 exited with code 5");
}

TEST(Outcome, StopsOverrideInOrderAndTheFirstOfAKindStays) {
  Outcome o;
  EXPECT_TRUE(o.stop(Stop::external(137, "node 1 failed first")));
  EXPECT_EQ(o.exit_code(), 137);
  EXPECT_EQ(o.summary(), "stopped externally: node 1 failed first");
  EXPECT_FALSE(o.stop(Stop::external(1, "node 2 failed")));
  EXPECT_EQ(o.stopped()->what, "node 1 failed first");
  EXPECT_TRUE(o.stop(Stop::spawn_failed("could not start rank 0: denied")));
  EXPECT_EQ(o.exit_code(), kExitError);
  EXPECT_EQ(o.state_name(), "spawn failed");
  EXPECT_TRUE(o.stop(Stop::interrupted(SIGHUP)));
  EXPECT_FALSE(o.stop(Stop::interrupted(SIGINT))) << "a second signal does not replace the first";
  EXPECT_FALSE(o.stop(Stop::external(1, "late"))) << "an earlier kind never overrides";
  EXPECT_EQ(o.stopped()->signal, SIGHUP);
  EXPECT_EQ(o.exit_code(), 128 + SIGHUP);
}

TEST(Outcome, APeerFailureUnderAStopOfOurOwnIsNotFromThePeer) {
  Outcome external;
  external.fail(Failure::peer(7, "generation 0 failed on node 1"));
  external.stop(Stop::external(7, "node 1 failed for good"));
  EXPECT_FALSE(external.from_peer());
  Outcome spawn;
  spawn.fail(Failure::peer(7, "generation 0 failed on node 1"));
  spawn.stop(Stop::spawn_failed("could not prepare restart 1: ..."));
  EXPECT_TRUE(spawn.from_peer()) << "the restart that could not be prepared was the peer's";
  EXPECT_EQ(spawn.exit_code(), 7);
}

TEST(Outcome, ANewGenerationForgetsTheFailure) {
  Outcome o;
  o.fail(worker_failed(3));
  o.enter(Outcome::Stage::kRestarting);
  o.next_generation();
  EXPECT_EQ(o.stage(), Outcome::Stage::kRunning);
  EXPECT_TRUE(o.ok());
  EXPECT_EQ(o.exit_code(), 0);
}

TEST(Outcome, RenamingTheCauseReplacesTheFailure) {
  Outcome o;
  o.rename_cause(worker_failed(1, "rank 0"));
  EXPECT_TRUE(o.ok()) << "nothing to rename";
  o.fail(worker_failed(143));
  o.rename_cause(worker_failed(1, "rank 0"));
  EXPECT_EQ(o.failure()->process_name, "rank 0");
  EXPECT_EQ(o.exit_code(), 1);
}

}  // namespace
}  // namespace ddl::launcher
