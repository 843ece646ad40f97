// The servers-after-trainers rule on its own (launcher/supervise/roles.h): when the servers and
// heter workers of a generation are stopped, and the lines that say so.
#include "launcher/supervise/roles.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using Action = ServersVerdict::Action;

RoleView trainer(bool running, bool exited_zero = false) {
  return RoleView{env::Role::kTrainer, running, exited_zero};
}
RoleView server(bool running) { return RoleView{env::Role::kServer, running, false}; }
RoleView heter(bool running) { return RoleView{env::Role::kHeterTrainer, running, false}; }

TEST(ServersAfterTrainers, WaitWhileATrainerRunsOrFailed) {
  const ServersAfterTrainers rule(std::nullopt, milliseconds(10'000));
  EXPECT_EQ(rule.check({server(true), trainer(true), trainer(false, true)}).action, Action::kWait);
  EXPECT_EQ(rule.check({server(true), trainer(false, false)}).action, Action::kWait)
      << "a trainer that failed decides nothing here: the supervisor fails the generation";
}

TEST(ServersAfterTrainers, WithoutGraceServersStopAtOnceWithPaddlesLines) {
  ServersAfterTrainers rule(std::nullopt, milliseconds(10'000));
  const std::vector<RoleView> group = {server(true), server(true), trainer(false, true),
                                       trainer(false, true)};
  const ServersVerdict v = rule.check(group);
  EXPECT_EQ(v.action, Action::kStopNow);
  EXPECT_EQ(v.trainers, 2);
  EXPECT_EQ(v.running, 2);
  EXPECT_EQ(rule.stop(group, v), "all workers exit, going to finish parameter server");
  EXPECT_EQ(rule.stopped().servers, 2);
  EXPECT_TRUE(rule.stopped().paddle);
  EXPECT_EQ(rule.success_lines(""),
            (std::vector<std::string>{
                "all parameter server are killed",
                "job succeeded: every trainer exited with code 0; 2 server(s) were stopped after "
                "them"}));
}

TEST(ServersAfterTrainers, HeterWorkersAreNamedInPaddlesLines) {
  ServersAfterTrainers rule(std::nullopt, milliseconds(10'000));
  const std::vector<RoleView> group = {server(true), heter(true), trainer(false, true)};
  const ServersVerdict v = rule.check(group);
  ASSERT_EQ(v.action, Action::kStopNow);
  EXPECT_EQ(rule.stop(group, v),
            "all workers exit, going to finish parameter server and heter_worker.");
  EXPECT_EQ(rule.stopped().heter_workers, 1);
  EXPECT_EQ(rule.stopped().total(), 2);
  const std::vector<std::string> lines = rule.success_lines(" after 1 restart(s)");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "all heter_worker are killed");
  EXPECT_EQ(lines[1], "all parameter server are killed");
  EXPECT_EQ(lines[2],
            "job succeeded after 1 restart(s): every trainer exited with code 0; 2 server(s) were "
            "stopped after them");
}

TEST(ServersAfterTrainers, WithGraceServersStillRunningAfterItAreStoppedWithOurLine) {
  ServersAfterTrainers rule(milliseconds(20'000), milliseconds(1500));
  const std::vector<RoleView> group = {server(true), server(false), trainer(false, true)};
  const ServersVerdict v = rule.check(group);
  ASSERT_EQ(v.action, Action::kGrace);
  EXPECT_EQ(rule.grace_line(v),
            "all 1 trainer(s) exited with code 0; 1 server(s) have 20 s to exit");
  EXPECT_EQ(rule.stop(group, v),
            "all 1 trainer(s) exited with code 0 and 1 server(s) are still running 20 s later "
            "(--server_grace): stopping them (SIGTERM, SIGKILL after 1.5 s); the job succeeds");
  EXPECT_FALSE(rule.stopped().paddle);
  EXPECT_EQ(rule.success_lines(""),
            (std::vector<std::string>{"job succeeded: every trainer exited with code 0; 1 "
                                      "server(s) were stopped after them"}))
      << "no Paddle lines after a grace";
}

TEST(ServersAfterTrainers, ServersThatExitDuringTheGraceLeaveNothingToStop) {
  ServersAfterTrainers rule(milliseconds(20'000), milliseconds(1000));
  const ServersVerdict v = rule.check({server(true), trainer(false, true)});
  ASSERT_EQ(v.action, Action::kGrace);
  EXPECT_EQ(rule.stop({server(false), trainer(false, true)}, v), "");
  EXPECT_EQ(rule.stopped().total(), 0);
  EXPECT_TRUE(rule.success_lines("").empty());
}

TEST(ServersAfterTrainers, ANodeOfServersAloneWaitsForThem) {
  const ServersAfterTrainers rule(std::nullopt, milliseconds(10'000));
  EXPECT_EQ(rule.check({server(true), server(false)}).action, Action::kWait);
}

TEST(ServersAfterTrainers, TrainersAloneNeedNothing) {
  const ServersAfterTrainers rule(std::nullopt, milliseconds(10'000));
  EXPECT_EQ(rule.check({trainer(false, true), trainer(false, true)}).action, Action::kWait);
  EXPECT_EQ(rule.check({server(false), trainer(false, true)}).action, Action::kWait)
      << "the servers are gone already";
}

TEST(ServersAfterTrainers, ANewGenerationForgetsWhatWasStopped) {
  ServersAfterTrainers rule(std::nullopt, milliseconds(10'000));
  const std::vector<RoleView> group = {server(true), trainer(false, true)};
  rule.stop(group, rule.check(group));
  ASSERT_EQ(rule.stopped().total(), 1);
  rule.reset();
  EXPECT_EQ(rule.stopped().total(), 0);
  EXPECT_FALSE(rule.stopped().paddle);
}

}  // namespace
}  // namespace ddl::launcher
