// Parameter-server jobs run by the built `launch` on hello_worker: what servers and trainers are
// told, log names, failing servers and trainers, servers stopped after the trainers, and the
// explicit --servers/--workers lists selected by --node_ip (two loopback "hosts").
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "env/contract.h"
#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

std::string server_log(const fs::path& dir, int index) {
  return read_file(dir / ("serverlog." + std::to_string(index)));
}

// Every process group of the run: servers and trainers.
std::set<pid_t> every_group(const LaunchRun& run) {
  std::set<pid_t> groups = all_groups(run);
  for (const auto& [index, pid] : run.starts("server")) groups.insert(pid);
  return groups;
}

std::vector<std::string> ps_args(const fs::path& logs, std::vector<std::string> launcher,
                                 std::vector<std::string> worker) {
  std::vector<std::string> args{"--server_num=2", "--worker_num=2", "--log_dir", logs.string(),
                                "--log_level=debug", "--print_config=false"};
  args.insert(args.end(), launcher.begin(), launcher.end());
  args.push_back("hello_worker");
  args.insert(args.end(), worker.begin(), worker.end());
  return args;
}

TEST(PsLaunch, TwoServersAndTwoTrainersGetTheirContract) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // The servers exit on their own after printing; the grace keeps trainers that are done first
  // from getting them stopped before they have written their contract.
  LaunchRun run(tmp, ps_args(logs, {"--server_grace=20"}, {"--lines", "2"}));
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  EXPECT_TRUE(contains(run.err(), "(servers 0..1, ranks 0..1)")) << run.err();
  EXPECT_TRUE(contains(run.out(), "hello from rank 0 of 2")) << "trainer 0 is echoed";
  EXPECT_FALSE(contains(run.out(), "hello from server")) << "servers only go to their logs";

  const std::string s0 = server_log(logs, 0);
  const auto servers = env_values(s0, ddl::env::kPserverEndpoints);
  ASSERT_EQ(servers.size(), 1u) << s0;
  const auto server_list = ddl::env::parse_endpoint_list(servers[0], "servers");
  ASSERT_EQ(server_list.size(), 2u);
  const auto trainers = env_values(s0, ddl::env::kTrainerEndpoints);
  ASSERT_EQ(trainers.size(), 1u) << s0;
  const auto trainer_list = ddl::env::parse_endpoint_list(trainers[0], "trainers");
  ASSERT_EQ(trainer_list.size(), 2u);
  std::set<int> ports;
  for (const auto* list : {&server_list, &trainer_list}) {
    for (const auto& e : *list) ports.insert(e.port);
  }
  EXPECT_EQ(ports.size(), 4u) << "servers and trainers have distinct ports";

  for (int i = 0; i < 2; ++i) {
    const std::string I = std::to_string(i);
    const std::string log = server_log(logs, i);
    SCOPED_TRACE("serverlog." + I + ":\n" + log);
    EXPECT_TRUE(contains(log, "ROLE PSERVER index " + I + " of 2 servers, servers " + servers[0] +
                                  ", 2 trainers\n"));
    EXPECT_TRUE(contains(log, "ENV TRAINING_ROLE=PSERVER\n"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_CURRENT_ENDPOINT=" + server_list[i].str() + "\n"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_PORT=" + std::to_string(server_list[i].port) + "\n"));
    EXPECT_TRUE(contains(log, "ENV POD_IP=127.0.0.1\n"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_TRAINERS_NUM=2\n"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_TRAINER_ID=<unset>\n"));
    EXPECT_TRUE(contains(log, "server " + I + " line 1 of 2"));

    const std::string tlog = worker_log(logs, i);
    SCOPED_TRACE("workerlog." + I + ":\n" + tlog);
    EXPECT_TRUE(contains(tlog, "ROLE TRAINER id " + I + " of 2 trainers, servers " + servers[0] +
                                   "\n"));
    EXPECT_TRUE(contains(tlog, "ENV TRAINING_ROLE=TRAINER\n"));
    EXPECT_TRUE(contains(tlog, "ENV PADDLE_TRAINER_ID=" + I + "\n"));
    EXPECT_TRUE(contains(tlog, "ENV PADDLE_PSERVERS_IP_PORT_LIST=" + servers[0] + "\n"));
    EXPECT_TRUE(contains(tlog, "ENV PADDLE_CURRENT_ENDPOINT=" + trainer_list[i].str() + "\n"));
    EXPECT_TRUE(contains(tlog, "ENV PADDLE_PORT=" + std::to_string(trainer_list[i].port) + "\n"))
        << "a trainer's own port, as the fleet and 2.x launchers give it";
  }
  EXPECT_FALSE(fs::exists(logs / "serverlog.2"));
  EXPECT_FALSE(fs::exists(logs / "workerlog.2"));
  expect_nothing_left(every_group(run));
}

TEST(PsLaunch, AFailingServerFailsTheJobFast) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, ps_args(logs, {}, {"--fail_server", "1", "--exit_code", "5", "--sleep_ms",
                                        "60000", "--spawn_child"}));
  ASSERT_EQ(run.wait(milliseconds(8000)), 5) << run.err();
  EXPECT_LT(run.elapsed(), milliseconds(5000));
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "job failed: server 1")) << err;
  EXPECT_TRUE(contains(err, "exited with code 5")) << err;
  EXPECT_TRUE(contains(err, (logs / "serverlog.1").string())) << err;
  ASSERT_EQ(run.server_pids().size(), 2u) << err;
  ASSERT_EQ(run.worker_pids().size(), 2u) << err;
  expect_nothing_left(every_group(run));
}

TEST(PsLaunch, AFailingTrainerFailsTheJobFast) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, ps_args(logs, {}, {"--fail_rank", "1", "--exit_code", "4", "--sleep_ms",
                                        "60000", "--spawn_child"}));
  ASSERT_EQ(run.wait(milliseconds(8000)), 4) << run.err();
  EXPECT_LT(run.elapsed(), milliseconds(5000));
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "job failed: rank 1")) << err;
  EXPECT_TRUE(contains(err, (logs / "workerlog.1").string())) << err;
  ASSERT_EQ(run.server_pids().size(), 2u) << err;
  expect_nothing_left(every_group(run));
}

TEST(PsLaunch, ServersStillRunningAfterTheTrainersAreStoppedAndTheJobSucceeds) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // The servers would sleep a minute and ignore SIGTERM (so do the trainers, which exit at once
  // by themselves): only the SIGKILL after the grace and kill timeout ends them.
  LaunchRun run(tmp, ps_args(logs, {"--server_grace=0.5", "--kill_timeout=0.5"},
                             {"--server_sleep_ms", "60000", "--ignore_sigterm", "--spawn_child"}));
  ASSERT_EQ(run.wait(milliseconds(10'000)), 0) << run.err();
  EXPECT_GE(run.elapsed(), milliseconds(900)) << "the grace and the kill timeout were waited out";
  EXPECT_LT(run.elapsed(), milliseconds(8000));
  const std::string err = run.err();
  EXPECT_EQ(count(err, "are still running 0.5 s later (--server_grace): stopping them"), 1) << err;
  EXPECT_TRUE(contains(err, "all 2 trainer(s) exited with code 0 and 2 server(s)")) << err;
  EXPECT_TRUE(contains(err, "still running 500 ms after it was told to stop: SIGKILL")) << err;
  EXPECT_TRUE(contains(err, "2 server(s) were stopped after them")) << err;
  EXPECT_FALSE(contains(err, "job failed")) << err;
  ASSERT_EQ(run.server_pids().size(), 2u) << err;
  expect_nothing_left(every_group(run));
}

TEST(PsLaunch, ByDefaultServersStopAsSoonAsTheTrainersAreDone) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // Servers that would serve a minute (as Paddle's serve forever): stopped at once, no grace.
  LaunchRun run(tmp, ps_args(logs, {}, {"--server_sleep_ms", "60000"}));
  ASSERT_EQ(run.wait(milliseconds(10'000)), 0) << run.err();
  EXPECT_LT(run.elapsed(), milliseconds(5000)) << "neither a grace nor the kill timeout";
  const std::string err = run.err();
  EXPECT_EQ(count(err, "all workers exit, going to finish parameter server\n"), 1) << err;
  EXPECT_EQ(count(err, "all parameter server are killed"), 1) << err;
  EXPECT_TRUE(contains(err, "2 server(s) were stopped after them")) << err;
  EXPECT_FALSE(contains(err, "--server_grace")) << err;
  expect_nothing_left(every_group(run));
}

TEST(PsLaunch, ServersThatExitWithinTheGraceAreNotStopped) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, ps_args(logs, {"--server_grace=20"}, {"--server_sleep_ms", "1000"}));
  ASSERT_EQ(run.wait(milliseconds(15'000)), 0) << run.err();
  EXPECT_LT(run.elapsed(), milliseconds(10'000)) << "the servers exited by themselves";
  const std::string err = run.err();
  EXPECT_FALSE(contains(err, "stopping them")) << err;
  EXPECT_TRUE(contains(err, "all 4 worker(s) exited with code 0")) << err;
  expect_nothing_left(every_group(run));
}

TEST(PsLaunch, ServersExitingFirstLeaveTheTrainersRunning) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // Trainers outlive the servers by a second; the job waits for them and succeeds.
  LaunchRun run(tmp, ps_args(logs, {}, {"--sleep_ms", "1000", "--server_sleep_ms", "0"}));
  ASSERT_EQ(run.wait(milliseconds(15'000)), 0) << run.err();
  EXPECT_GE(run.elapsed(), milliseconds(900));
  EXPECT_TRUE(contains(run.err(), "all 4 worker(s) exited with code 0")) << run.err();
}

TEST(PsLaunch, ARestartStartsServersAndTrainersTogether) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // Trainer 1 fails at step 1 of the first start only; the second start runs clean. Nobody
  // steps before the go file exists, and it is made once both servers of the first start have
  // written their environment (they print READY after it), so they are not stopped before. In
  // the second start the trainers may end before the servers' last step: --server_grace lets the
  // servers finish it.
  const fs::path go = tmp.path() / "go";
  LaunchRun run(tmp,
                ps_args(logs, {"--max_restarts=1", "--server_grace=20"},
                        {"--steps", "3", "--step_ms", "100", "--start_file", go.string()}),
                {{ddl::env::kFault, "rank=1,step=1,exit=3,restart=0"}});
  const bool servers_ready = wait_until(
      [&] {
        return contains(server_log(logs, 0), "READY pid") &&
               contains(server_log(logs, 1), "READY pid");
      },
      milliseconds(20'000));
  std::ofstream(go) << "go\n";
  ASSERT_TRUE(servers_ready) << server_log(logs, 0) << server_log(logs, 1);
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  EXPECT_EQ(run.starts("server").size(), 4u) << "both servers started twice\n" << run.err();
  EXPECT_EQ(run.starts().size(), 4u) << "both trainers started twice\n" << run.err();
  const std::string s0 = server_log(logs, 0);
  EXPECT_TRUE(contains(s0, "==== restart 1 ====")) << s0;
  EXPECT_EQ(env_values(s0, ddl::env::kJobId).size(), 2u) << s0;
  EXPECT_TRUE(contains(s0, "server 0 step 2 restart 1")) << s0;
  expect_nothing_left(every_group(run));
}

// --- Explicit lists ---------------------------------------------------------------------------

const std::string kHostA = "127.0.0.1";
const std::string kHostB = "127.0.0.2";

TEST(PsLaunch, ExplicitListsStartTheEntriesOfNodeIp) {
  const int port = free_loopback_port();
  auto ep = [&](const std::string& host, int offset) {
    return host + ":" + std::to_string(port + offset);
  };
  const std::string servers = ep(kHostA, 0) + "," + ep(kHostB, 1);
  const std::string workers = ep(kHostB, 2) + "," + ep(kHostA, 3) + "," + ep(kHostB, 4);
  const ddl::env::EnvMap identity = {{ddl::env::kJobId, "ps-explicit"},
                                     {ddl::env::kJobSecret, "ps-secret"}};
  TempDir tmp_a, tmp_b;
  const fs::path logs_a = tmp_a.path() / "logs", logs_b = tmp_b.path() / "logs";
  auto args = [&](const std::string& host, const fs::path& logs) {
    // --server_grace: the server exits on its own after printing its contract (see above).
    return std::vector<std::string>{"--servers=" + servers, "--workers=" + workers,
                                    "--node_ip=" + host,    "--server_grace=20",
                                    "--log_dir",            logs.string(),
                                    "--log_level=debug",    "--print_config=false",
                                    "hello_worker"};
  };
  LaunchRun a(tmp_a, args(kHostA, logs_a), identity);
  LaunchRun b(tmp_b, args(kHostB, logs_b), identity);
  ASSERT_EQ(a.wait(milliseconds(20'000)), 0) << a.err();
  ASSERT_EQ(b.wait(milliseconds(20'000)), 0) << b.err();
  EXPECT_TRUE(contains(a.err(), "(servers 0..0, ranks 1..1)")) << a.err();
  EXPECT_TRUE(contains(b.err(), "(servers 1..1, ranks 0..2)")) << b.err();

  EXPECT_TRUE(fs::exists(logs_a / "serverlog.0"));
  EXPECT_TRUE(fs::exists(logs_a / "workerlog.1"));
  EXPECT_FALSE(fs::exists(logs_a / "serverlog.1"));
  EXPECT_FALSE(fs::exists(logs_a / "workerlog.0"));
  EXPECT_TRUE(fs::exists(logs_b / "serverlog.1"));
  EXPECT_TRUE(fs::exists(logs_b / "workerlog.0"));
  EXPECT_TRUE(fs::exists(logs_b / "workerlog.2"));
  EXPECT_FALSE(fs::exists(logs_b / "serverlog.0"));

  const std::string s1 = server_log(logs_b, 1);
  EXPECT_TRUE(contains(s1, "ENV PADDLE_CURRENT_ENDPOINT=" + ep(kHostB, 1) + "\n")) << s1;
  EXPECT_TRUE(contains(s1, "ENV POD_IP=" + kHostB + "\n")) << s1;
  EXPECT_TRUE(contains(s1, "ENV PADDLE_TRAINERS_NUM=3\n")) << s1;
  EXPECT_TRUE(contains(s1, "ENV DDL_JOB_ID=ps-explicit-g0\n")) << s1;
  const std::string t1 = worker_log(logs_a, 1);
  EXPECT_TRUE(contains(t1, "ROLE TRAINER id 1 of 3 trainers, servers " + servers + "\n")) << t1;
  EXPECT_TRUE(contains(t1, "ENV PADDLE_TRAINER_ENDPOINTS=" + workers + "\n")) << t1;
  EXPECT_TRUE(contains(t1, "ENV LOCAL_WORLD_SIZE=1\n")) << t1;
  const std::string t2 = worker_log(logs_b, 2);
  EXPECT_TRUE(contains(t2, "ENV LOCAL_RANK=1\n")) << t2;
  EXPECT_TRUE(contains(t2, "ENV DDL_JOB_ID=ps-explicit-g0\n")) << "the same job on both hosts";
  expect_nothing_left(every_group(a));
  expect_nothing_left(every_group(b));
}

// Lists across hosts without DDL_JOB_ID/DDL_JOB_SECRET run as Paddle runs them: a
// static job whose id every host derives alike; a site that demands a secret gets a refusal.
TEST(PsLaunch, ExplicitListsRefuseANodeWithNothingAndDeriveAMissingIdentity) {
  TempDir tmp;
  const std::vector<std::string> lists = {"--servers=" + kHostA + ":7000",
                                          "--workers=" + kHostB + ":7001"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = lists;
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("hello_worker");
    return args;
  };
  const ddl::env::EnvMap identity = {{ddl::env::kJobId, "j"}, {ddl::env::kJobSecret, "s"}};
  LaunchRun nothing(tmp, with({"--node_ip=127.0.0.3", "--print_config=false"}), identity);
  ASSERT_EQ(nothing.wait(milliseconds(10'000)), 2) << nothing.err();
  EXPECT_TRUE(contains(nothing.err(), "--node_ip='127.0.0.3'")) << nothing.err();
  EXPECT_TRUE(contains(nothing.err(), "this node would start nothing")) << nothing.err();

  TempDir tmp2;
  LaunchRun anonymous(tmp2, with({"--node_ip=" + kHostA, "--print_config=false"}));
  ASSERT_EQ(anonymous.wait(milliseconds(10'000)), 0) << anonymous.err();
  EXPECT_TRUE(contains(anonymous.err(), "on 2 hosts: static job static-")) << anonymous.err();

  TempDir tmp3;
  LaunchRun required(tmp3, with({"--node_ip=" + kHostA, "--print_config=false"}),
                     {{ddl::env::kRequireSecret, "1"}});
  ASSERT_EQ(required.wait(milliseconds(10'000)), 2) << required.err();
  EXPECT_TRUE(contains(required.err(), "needs the same DDL_JOB_SECRET")) << required.err();
}

}  // namespace
