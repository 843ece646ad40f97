// Runs the built `launch` on hello_worker and checks what users see: logs, exit codes, and that
// no process of the job survives the launcher.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "env/contract.h"
#include "env/host.h"
#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

TEST(Launch, LogsLandInWorkerlogsWithEachRanksEnv) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs" / "nested";  // created by the launcher
  fs::create_directories(logs);
  std::ofstream(logs / "workerlog.1") << "STALE LINE FROM AN EARLIER JOB\n";
  LaunchRun run(tmp,
                {"--nproc_per_node=3", "--log_dir", logs.string(), "--log_level=debug",
                 "hello_worker", "--lines", "5", "--show_env", "DDL_TEST_PASSTHROUGH"},
                {{"DDL_TEST_PASSTHROUGH", "kept"}});
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  const std::string out = run.out();
  EXPECT_TRUE(contains(out, "-----------  Configuration Arguments -----------")) << out;
  EXPECT_TRUE(contains(out, "PADDLE_TRAINER_ID=2\n")) << "print_config shows each rank's env";
  EXPECT_TRUE(contains(out, "hello from rank 0 of 3")) << "rank 0 is echoed to the console";
  EXPECT_FALSE(contains(out, "hello from rank 1")) << "other ranks only go to their logs";
  EXPECT_TRUE(contains(run.err(), "OMP_NUM_THREADS is not set")) << run.err();

  std::string endpoints;
  for (int r = 0; r < 3; ++r) {
    const std::string log = read_file(logs / ("workerlog." + std::to_string(r)));
    SCOPED_TRACE("workerlog." + std::to_string(r) + ":\n" + log);
    const std::string R = std::to_string(r);
    EXPECT_FALSE(contains(log, "STALE")) << "logs are truncated when the job starts";
    EXPECT_TRUE(contains(log, "hello from rank " + R + " of 3 (local rank " + R + " of 3)"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_TRAINER_ID=" + R + "\n"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_TRAINERS_NUM=3\n"));
    EXPECT_TRUE(contains(log, "ENV RANK=" + R + "\n"));
    EXPECT_TRUE(contains(log, "ENV LOCAL_RANK=" + R + "\n"));
    EXPECT_TRUE(contains(log, "ENV WORLD_SIZE=3\n"));
    EXPECT_TRUE(contains(log, "ENV LOCAL_WORLD_SIZE=3\n"));
    EXPECT_TRUE(contains(log, "ENV MASTER_ADDR=127.0.0.1\n"));
    EXPECT_TRUE(contains(log, "ENV FLAGS_selected_gpus=\n"))
        << "a CPU worker's empty device list, as Paddle 1.8 and the fleet launcher give it";
    EXPECT_TRUE(contains(log, "ENV OMP_NUM_THREADS="));
    EXPECT_FALSE(contains(log, "ENV OMP_NUM_THREADS=<unset>"));
    EXPECT_TRUE(contains(log, "ENV DDL_TEST_PASSTHROUGH=kept\n")) << "caller's env passes through";
    EXPECT_TRUE(contains(log, "ENV DDL_LOG_LEVEL=debug\n"));
    EXPECT_TRUE(contains(log, "this line goes to stderr")) << "stderr lands in the log too";
    EXPECT_TRUE(contains(log, "rank " + R + " line 4 of 5"));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, std::regex("ENV PADDLE_TRAINER_ENDPOINTS=(\\S+)")));
    if (r == 0) endpoints = m[1];
    EXPECT_EQ(m[1], endpoints) << "every rank sees the same endpoint list";
    const auto list = ddl::env::parse_endpoint_list(endpoints, "endpoints");
    ASSERT_EQ(list.size(), 3u);
    EXPECT_TRUE(contains(log, "ENV PADDLE_CURRENT_ENDPOINT=" + list[r].str() + "\n"));
    EXPECT_TRUE(contains(log, "ENV MASTER_PORT=" + std::to_string(list[0].port) + "\n"));
  }
}

TEST(Launch, GpusQuietAndCallerOmp) {
  TempDir tmp;
  LaunchRun run(tmp,
                {"--gpus=3,5", "--log_dir=" + (tmp.path() / "logs").string(), "--quiet",
                 "--print_config=false", "hello_worker"},
                {{"OMP_NUM_THREADS", "7"}});
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  EXPECT_EQ(run.out(), "") << "--quiet and --print_config=false leave the console to the launcher";
  const std::string log0 = read_file(tmp.path() / "logs" / "workerlog.0");
  const std::string log1 = read_file(tmp.path() / "logs" / "workerlog.1");
  EXPECT_TRUE(contains(log0, "ENV FLAGS_selected_gpus=3\n")) << log0;
  EXPECT_TRUE(contains(log1, "ENV FLAGS_selected_gpus=5\n")) << log1;
  EXPECT_TRUE(contains(log1, "ENV OMP_NUM_THREADS=7\n")) << "the caller's setting wins";
  EXPECT_FALSE(contains(run.err(), "OMP_NUM_THREADS is not set")) << run.err();
}

TEST(Launch, WorkerArgumentsPassUntouched) {
  TempDir tmp;
  LaunchRun run(tmp, {"--print_config=false", "hello_worker", "--", "--nproc_per_node=5",
                      "--log_dir", "two words", ""});
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  const std::string out = run.out();
  EXPECT_TRUE(contains(out, "[rank 0] ARG --nproc_per_node=5\n")) << out;
  EXPECT_TRUE(contains(out, "[rank 0] ARG --log_dir\n")) << out;
  EXPECT_TRUE(contains(out, "[rank 0] ARG two words\n")) << out;
  EXPECT_TRUE(contains(out, "[rank 0] ARG \n")) << out;
  EXPECT_FALSE(contains(out, "[rank 1]")) << "one worker only";
}

TEST(Launch, ConsoleLinesArePrefixedAndNeverInterleaved) {
  TempDir tmp;
  constexpr int kRanks = 3, kLines = 300;
  LaunchRun run(tmp, {"--nproc_per_node=" + std::to_string(kRanks), "--print_config=false",
                      "hello_worker", "--lines", std::to_string(kLines), "--split_writes"});
  ASSERT_EQ(run.wait(milliseconds(30'000)), 0) << run.err();
  std::istringstream out(run.out());
  std::string line;
  std::map<int, int> counted;
  const std::regex prefixed(R"(\[rank (\d+)\] (.*))");
  const std::regex numbered(R"(rank (\d+) line (\d+) of (\d+) x{40})");
  while (std::getline(out, line)) {
    std::smatch m, n;
    ASSERT_TRUE(std::regex_match(line, m, prefixed)) << "unprefixed line: '" << line << "'";
    const std::string body = m[2];
    if (body.rfind("rank ", 0) != 0) continue;  // the greeting and ENV lines
    ASSERT_TRUE(std::regex_match(body, n, numbered)) << "mangled line: '" << line << "'";
    EXPECT_EQ(m[1], n[1]) << "a line of rank " << n[1] << " under the prefix of rank " << m[1];
    ++counted[std::stoi(m[1])];
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(counted[r], kLines) << "rank " << r;
}

// torchrun's --log-line-prefix-template (here from its variable) and --virtual-local-rank.
TEST(Launch, LinePrefixTemplateAndVirtualLocalRank) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--tee=3", "--virtual-local-rank", "--role=trainer",
                 "--log_dir", logs.string(), "--print_config=false", "hello_worker",
                 "--show_env", "CUDA_VISIBLE_DEVICES", "--show_env", "PADDLE_LOCAL_RANK"},
                {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${hostname}:${role_name}${local_rank}/$rank$$ "},
                 {"CUDA_VISIBLE_DEVICES", "6,7"}});
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  const std::string out = run.out();
  const std::string host = ddl::env::this_host_name();
  for (int r = 0; r < 2; ++r) {
    const std::string R = std::to_string(r);
    const std::string prefix = host + ":trainer" + R + "/" + R + "$ ";
    EXPECT_TRUE(contains(out, prefix + "hello from rank " + R + " of 2")) << out;
    const std::string log = worker_log(logs, r);
    EXPECT_TRUE(contains(log, "ENV LOCAL_RANK=0\n")) << log;
    EXPECT_TRUE(contains(log, "ENV CUDA_VISIBLE_DEVICES=" + std::to_string(6 + r) + "\n")) << log;
    EXPECT_TRUE(contains(log, "ENV PADDLE_LOCAL_RANK=" + R + "\n")) << log;
    EXPECT_FALSE(contains(log, prefix)) << "the prefix is the console's, not the log's";
  }
  // A CPU worker beyond the caller's CUDA_VISIBLE_DEVICES list: one line naming it, as torchrun.
  TempDir tmp2;
  LaunchRun short_list(tmp2, {"--nproc_per_node=2", "--virtual_local_rank", "hello_worker"},
                       {{"CUDA_VISIBLE_DEVICES", "3"}});
  const auto code = short_list.wait(milliseconds(20'000));
  ASSERT_TRUE(code);
  EXPECT_NE(*code, 0);
  EXPECT_TRUE(contains(short_list.err(), "local rank 1 has no entry in CUDA_VISIBLE_DEVICES='3'"))
      << short_list.err();
}

// torchrun's --duplicate-stdout-filters: the console's matching lines, as shown, also in
// LOG_DIR/filtered_stdout.log. --numa-binding without a GPU, or with a GPU /sys does not know:
// one line, exit 1, nothing started.
TEST(Launch, DuplicateFiltersAndNumaBinding) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc-per-node=2", "--tee=3", "--log-dir", logs.string(),
                      "--duplicate-stdout-filters=rank 1 of,,x,of 2 (local rank 0",
                      "--print_config=false", "hello_worker"});
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  const std::string filtered = read_file(logs / "filtered_stdout.log");
  EXPECT_TRUE(contains(filtered, "[rank 0] hello from rank 0 of 2 (local rank 0")) << filtered;
  EXPECT_FALSE(contains(filtered, "hello from rank 1")) << "'rank 1 of,x' matches nothing";
  EXPECT_FALSE(fs::exists(logs / "filtered_stderr.log"));

  TempDir cpu;
  LaunchRun no_gpu(cpu, {"--numa-binding=node", "--print_config=false", "hello_worker"});
  EXPECT_EQ(no_gpu.wait(milliseconds(20'000)), 1);
  EXPECT_TRUE(contains(no_gpu.err(), "--numa-binding: it pins each worker near its GPU"))
      << no_gpu.err();
  EXPECT_FALSE(contains(no_gpu.out(), "hello from")) << "nothing started";

  // nvidia-smi names a GPU at a PCI address this machine's /sys does not have.
  TempDir fake;
  const fs::path smi = fake.path() / "nvidia-smi";
  {
    std::ofstream script(smi);
    script << "#!/bin/sh\necho '0, GPU-aaaa, 00000000:FE:1F.7'\n";
  }
  fs::permissions(smi, fs::perms::owner_all);
  LaunchRun unknown(
      fake,
      {"--numa-binding=exclusive", "--selected_gpus=0", "--print_config=false", "hello_worker"},
      {{"PATH", fake.path().string() + ":/usr/bin:/bin"}});
  EXPECT_EQ(unknown.wait(milliseconds(20'000)), 1);
  EXPECT_TRUE(contains(unknown.err(),
                       "--numa-binding: cannot read "
                       "/sys/bus/pci/devices/0000:fe:1f.7/numa_node"))
      << unknown.err();
}

TEST(Launch, FailingRankStopsTheJobQuickly) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=3", "--log_dir", logs.string(), "--log_level=debug",
                      "--print_config=false", "hello_worker", "--fail_rank", "1", "--exit_code",
                      "3", "--sleep_ms", "60000", "--spawn_child"});
  // The default kill timeout is 10 s; the others die at SIGTERM, so this is far quicker.
  ASSERT_EQ(run.wait(milliseconds(8000)), 3) << run.err();
  EXPECT_LT(run.elapsed(), milliseconds(5000));
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "job failed: rank 1")) << err;
  EXPECT_TRUE(contains(err, "exited with code 3")) << err;
  EXPECT_TRUE(contains(err, (logs / "workerlog.1").string())) << err;
  EXPECT_TRUE(contains(err, "READY pid")) << "the summary repeats the last lines: " << err;
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.size(), 3u) << err;
  expect_nothing_left(pids);
}

TEST(Launch, WorkerIgnoringSigtermIsKilledAfterKillTimeout) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--kill_timeout=0.5", "--log_level=debug", "--log_dir",
                      logs.string(), "--print_config=false", "hello_worker", "--sleep_ms", "60000",
                      "--ignore_sigterm"});
  // Both must be past their signal setup before rank 1 "crashes".
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.size(), 2u) << run.err();
  const auto crashed = Clock::now();
  ::kill(pids.at(1), SIGABRT);
  ASSERT_EQ(run.wait(milliseconds(8000)), 128 + SIGABRT) << run.err();
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - crashed);
  EXPECT_GE(took, milliseconds(450)) << "rank 0 ignores SIGTERM: only SIGKILL after 0.5 s stops it";
  EXPECT_LT(took, milliseconds(5000));
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "job failed: rank 1")) << err;
  EXPECT_TRUE(contains(err, "killed by SIGABRT")) << err;
  EXPECT_TRUE(contains(err, "rank 0 (pid " + std::to_string(pids.at(0)) + ") still running"))
      << err;
  expect_nothing_left(pids);
}

class LaunchSignal : public ::testing::TestWithParam<int> {};

TEST_P(LaunchSignal, ForwardedAndNothingLeft) {
  const int signo = GetParam();
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--log_dir", logs.string(), "--log_level=debug",
                 "--print_config=false", "hello_worker", "--sleep_ms", "60000", "--spawn_child"});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  ::kill(run.pid(), signo);
  ASSERT_EQ(run.wait(milliseconds(5000)), 128 + signo) << run.err();
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.size(), 2u) << run.err();
  expect_nothing_left(pids);
}

INSTANTIATE_TEST_SUITE_P(Launcher, LaunchSignal,
                         ::testing::Values(SIGINT, SIGTERM, SIGHUP, SIGQUIT));

TEST(Launch, SecondSigintKillsAtOnce) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", logs.string(), "--log_level=debug",
                      "--kill_timeout=60", "--print_config=false", "hello_worker", "--sleep_ms",
                      "60000", "--ignore_signals"});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  ::kill(run.pid(), SIGINT);
  ASSERT_TRUE(
      wait_until([&] { return contains(run.err(), "received SIGINT"); }, milliseconds(5000)))
      << run.err();
  EXPECT_FALSE(run.wait(milliseconds(300))) << "workers ignore SIGINT, so the job goes on";
  ::kill(run.pid(), SIGINT);
  ASSERT_EQ(run.wait(milliseconds(5000)), 128 + SIGINT) << run.err();
  expect_nothing_left(run.worker_pids());
}

TEST(Launch, SigkillToLauncherTakesTheWorkersAlong) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--log_dir", logs.string(), "--log_level=debug",
                 "--print_config=false", "hello_worker", "--sleep_ms", "60000", "--spawn_child"});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.size(), 2u) << run.err();
  ::kill(run.pid(), SIGKILL);
  ASSERT_EQ(run.wait(milliseconds(5000)), 128 + SIGKILL);
  for (const auto& [rank, pid] : pids) {
    EXPECT_TRUE(wait_until([&] { return !alive(pid); }, milliseconds(2000)))
        << "rank " << rank << " (pid " << pid << ") outlived a SIGKILLed launcher";
  }
  // The workers' own children (the watchdog's part) go too.
  expect_nothing_left(pids);
}

TEST(Launch, SigintThenSigtermEndsEverythingWithinTheGracePeriod) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // The workers ignore both signals, so only the launcher's SIGKILL ends them: the SIGTERM must
  // bring that forward instead of waiting out the 3 s grace period.
  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", logs.string(), "--log_level=debug",
                      "--kill_timeout=3", "--print_config=false", "hello_worker", "--sleep_ms",
                      "60000", "--ignore_signals", "--spawn_child"});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.size(), 2u) << run.err();
  ::kill(run.pid(), SIGINT);
  ASSERT_TRUE(
      wait_until([&] { return contains(run.err(), "received SIGINT"); }, milliseconds(5000)))
      << run.err();
  const auto terminated = Clock::now();
  ::kill(run.pid(), SIGTERM);
  ASSERT_EQ(run.wait(milliseconds(3000)), 128 + SIGINT) << "the first signal names the exit code\n"
                                                        << run.err();
  EXPECT_LT(Clock::now() - terminated, milliseconds(3000)) << "within the grace period";
  expect_nothing_left(pids);
}

// --- Restarts and the hang guard ----------------------------------------------------------------

TEST(Launch, RestartAfterAFailureInTheFirstStartSucceeds) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // Rank 1 exits with 3 at step 2 of the first start only; the restart runs clean.
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--max_restarts=1", "--log_dir", logs.string(),
                 "--log_level=debug", "--print_config=false", "hello_worker", "--steps", "4",
                 "--step_ms", "20"},
                {{ddl::env::kFault, "rank=1,step=2,exit=3,restart=0"}});
  ASSERT_EQ(run.wait(milliseconds(15'000)), 0) << run.err();
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "rank 1 exited with code 3; restarting the job (restart 1 of 1)"))
      << err;
  EXPECT_TRUE(contains(err, "all 2 worker(s) exited with code 0 after 1 restart(s)")) << err;
  EXPECT_EQ(run.starts().size(), 4u) << "two ranks, two starts: " << err;

  for (int r = 0; r < 2; ++r) {
    const std::string log = worker_log(logs, r);
    SCOPED_TRACE("workerlog." + std::to_string(r) + ":\n" + log);
    const std::string R = std::to_string(r);
    EXPECT_EQ(count(log, "==== restart 1 ====\n"), 1) << "one separator between the starts";
    const std::size_t separator = log.find("==== restart 1 ====");
    ASSERT_NE(separator, std::string::npos);
    const std::string first = log.substr(0, separator), second = log.substr(separator);
    EXPECT_TRUE(contains(first, "ENV DDL_RESTART_COUNT=0\n"));
    EXPECT_TRUE(contains(second, "ENV DDL_RESTART_COUNT=1\n"));
    EXPECT_TRUE(contains(second, "rank " + R + " step 3 restart 1\n")) << "the restart finished";
    if (r == 1) {
      EXPECT_TRUE(contains(first, "fault injection: rank 1 exits with code 3 at step 2"));
    }
    // A new rendezvous generation: another job id, same endpoints.
    const auto ids = env_values(log, ddl::env::kJobId);
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_NE(ids[0], ids[1]);
    EXPECT_EQ(ids[0].substr(0, ids[0].size() - 3) + "-g1", ids[1]) << "<job>-g0 -> <job>-g1";
    const auto endpoints = env_values(log, ddl::env::kTrainerEndpoints);
    ASSERT_EQ(endpoints.size(), 2u);
    EXPECT_EQ(endpoints[0], endpoints[1]);
  }
  expect_nothing_left(all_groups(run));
}

// torchrun's error files: what a worker wrote to TORCHELASTIC_ERROR_FILE (as @record does) is
// quoted where its failure is reported; a file left by an earlier start is not.
TEST(Launch, RecordedErrorIsQuotedAndAStaleOneIsNot) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  const fs::path script = tmp.path() / "records.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\n"
           "if [ \"$RANK\" = 1 ]; then\n"
           "  if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
           "    printf '{\"message\": {\"message\": \"ValueError: bad batch\\\\nmore\", "
           "\"extraInfo\": {}}}' > \"$TORCHELASTIC_ERROR_FILE\"\n"
           "  fi\n"
           "  exit 5\n"
           "fi\n"
           "sleep 30\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--max_restarts=1", "--log_dir", logs.string(),
                 "--print_config=false", script.string()},
                {{"TMPDIR", tmp.path().string()}});
  ASSERT_EQ(run.wait(milliseconds(10'000)), 5) << run.err();
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "rank 1 exited with code 5 (ValueError: bad batch); restarting"))
      << "the first line of the recorded message: " << err;
  EXPECT_TRUE(contains(err, "exited with code 5; launcher exit code 5"))
      << "the second start recorded nothing: " << err;
  EXPECT_EQ(count(err, "ValueError"), 3) << "the failure, the restart line and the history: "
                                         << err;
  EXPECT_FALSE(fs::exists(logs / "error.1.json")) << "removed before the second start";

  // Without --log_dir the files go to a scratch folder that is gone when the job ends.
  LaunchRun bare(tmp, {"--nproc_per_node=2", "--print_config=false", script.string()},
                 {{"TMPDIR", tmp.path().string()}});
  ASSERT_EQ(bare.wait(milliseconds(10'000)), 5) << bare.err();
  EXPECT_TRUE(contains(bare.err(), "exited with code 5 (ValueError: bad batch); launcher exit"))
      << bare.err();
  for (const auto& entry : fs::directory_iterator(tmp.path())) {
    EXPECT_NE(entry.path().filename().string().rfind("ddlaunch-", 0), 0u)
        << "scratch folder left behind: " << entry.path();
  }
  expect_nothing_left(all_groups(run));
}

TEST(Launch, AlwaysFailingWorkerEndsAfterMaxRestartsWithItsCode) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--max_restarts=1", "--log_dir", logs.string(),
                 "--log_level=debug", "--print_config=false", "hello_worker", "--steps", "3",
                 "--sleep_ms", "60000", "--spawn_child"},
                {{ddl::env::kFault, "rank=1,step=1,exit=7"}});
  // Each start: rank 1 fails at once, rank 0 dies at SIGTERM; far below the 10 s kill timeout.
  ASSERT_EQ(run.wait(milliseconds(8000)), 7) << run.err();
  EXPECT_LT(run.elapsed(), milliseconds(6000));
  const std::string err = run.err();
  int rank1_starts = 0;
  for (const auto& [rank, pid] : run.starts()) rank1_starts += rank == 1;
  EXPECT_EQ(rank1_starts, 2) << "exactly one restart: " << err;
  EXPECT_EQ(count(err, "restarting the job"), 1) << err;
  EXPECT_TRUE(contains(err, "job failed after 1 restart(s): rank 1")) << err;
  EXPECT_TRUE(contains(err, "exited with code 7; launcher exit code 7")) << err;
  const std::string log1 = worker_log(logs, 1);
  EXPECT_EQ(env_values(log1, ddl::env::kRestartCount), (std::vector<std::string>{"0", "1"}))
      << log1;
  EXPECT_EQ(count(log1, "fault injection: rank 1 exits with code 7 at step 1"), 2) << log1;
  expect_nothing_left(all_groups(run));
}

TEST(Launch, HangGuardEndsASilentJobNamingTheRanks) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--hang_timeout=1", "--log_dir", logs.string(),
                      "--log_level=debug", "--print_config=false", "hello_worker", "--sleep_ms",
                      "60000", "--spawn_child"});
  // 1 s of silence after start-up, then SIGTERM; bound: 3 s from the launcher's start.
  ASSERT_EQ(run.wait(milliseconds(6000)), kExitDeadline) << run.err();
  EXPECT_GE(run.elapsed(), milliseconds(1000));
  EXPECT_LT(run.elapsed(), milliseconds(3000));
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "job failed: hang guard: no output from any rank for 1 s; silent: "
                            "ranks 0 ("))
      << err;
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(silent: ranks 0 \(1\.\d s\), 1 \(1\.\d s\))")))
      << err;
  EXPECT_TRUE(contains(err, "launcher exit code 124")) << err;
  EXPECT_TRUE(contains(err, (logs / "workerlog.1").string() + "): last line: READY")) << err;
  EXPECT_FALSE(contains(err, "restarting")) << err;
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.size(), 2u) << err;
  expect_nothing_left(pids);
}

// SIGUSR1 to the launcher: every running rank's stack goes to LOG_DIR/stacks.0.txt, each rank is
// named with its innermost frame, and the job goes on (here to its normal end).
TEST(Launch, Sigusr1DumpsEveryRanksStackAndStopsNothing) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", logs.string(), "--log_level=debug",
                      "--print_config=false", "hello_worker", "--sleep_ms", "3000"});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  ::kill(run.pid(), SIGUSR1);
  ASSERT_EQ(run.wait(milliseconds(15'000)), 0) << run.err();
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "SIGUSR1 to the launcher: stacks of 2 process(es) in " +
                                (logs / "stacks.0.txt").string()))
      << err;
  const std::string dump = read_file(logs / "stacks.0.txt");
  EXPECT_TRUE(contains(dump, "==== stack dump: SIGUSR1 to the launcher")) << dump;
  for (const char* rank : {"rank 0", "rank 1"}) {
    EXPECT_TRUE(contains(dump, std::string("==== ") + rank + " (pid")) << dump;
    EXPECT_TRUE(contains(err, std::string(rank) + ": ")) << err;
  }
  EXPECT_TRUE(contains(err, "all 2 worker(s) exited with code 0")) << err;
}

TEST(Launch, HangGuardWatchesOnlyRunningRanksAndRestarts) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // Rank 1 hangs at step 2 of the first start while rank 0 goes on printing for 1.5 s: the guard
  // (1 s) must wait for rank 0 to finish, then name rank 1 alone and restart the job.
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--hang_timeout=1", "--max_restarts=1", "--log_dir",
                 logs.string(), "--log_level=debug", "--print_config=false", "hello_worker",
                 "--steps", "30", "--step_ms", "50"},
                {{ddl::env::kFault, "rank=1,step=2,hang,restart=0"}});
  ASSERT_EQ(run.wait(milliseconds(15'000)), 0) << run.err();
  const std::string err = run.err();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      err, m,
      std::regex(R"(hang guard: no output from any rank for 1 s; silent: rank 1 \((\d+\.\d) s\); )"
                 R"(restarting the job \(restart 1 of 1\))")))
      << err;
  EXPECT_GE(std::stod(m[1]), 1.5) << "rank 0's output kept the guard quiet";
  const std::string log1 = worker_log(logs, 1);
  EXPECT_TRUE(contains(log1, "fault injection: rank 1 hangs at step 2")) << log1;
  EXPECT_TRUE(contains(log1, "rank 1 step 29 restart 1")) << log1;
  expect_nothing_left(all_groups(run));
}

class LaunchSignalWithRestarts : public ::testing::TestWithParam<int> {};

TEST_P(LaunchSignalWithRestarts, EndsTheJobWithoutRestart) {
  const int signo = GetParam();
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--max_restarts=3", "--log_dir", logs.string(),
                      "--log_level=debug", "--print_config=false", "hello_worker", "--sleep_ms",
                      "60000", "--spawn_child"});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  ::kill(run.pid(), signo);
  // The workers die at the forwarded signal; bound 5 s (the kill timeout is 10 s).
  ASSERT_EQ(run.wait(milliseconds(5000)), 128 + signo) << run.err();
  const std::string err = run.err();
  EXPECT_FALSE(contains(err, "restart")) << err;
  EXPECT_EQ(run.starts().size(), 2u) << "started once: " << err;
  EXPECT_FALSE(contains(worker_log(logs, 0), "==== restart")) << worker_log(logs, 0);
  expect_nothing_left(all_groups(run));
}

INSTANTIATE_TEST_SUITE_P(Launcher, LaunchSignalWithRestarts,
                         ::testing::Values(SIGINT, SIGTERM, SIGHUP));

TEST(Launch, SigintWhileStoppingAFailedStartPreventsTheRestart) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  const fs::path go = tmp.path() / "go";
  // Rank 1 fails once both are READY; rank 0 ignores SIGTERM, so the launcher waits out
  // --kill_timeout=60 - until SIGINT arrives, which kills at once and ends the job with rank 1's
  // code.
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--max_restarts=3", "--kill_timeout=60", "--log_dir",
                 logs.string(), "--log_level=debug", "--print_config=false", "hello_worker",
                 "--start_file", go.string(), "--steps", "1", "--sleep_ms", "60000",
                 "--ignore_sigterm"},
                {{ddl::env::kFault, "rank=1,step=0,exit=5"}});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  std::ofstream(go).close();
  ASSERT_TRUE(wait_until([&] { return contains(run.err(), "stopping the other 1 worker(s)"); },
                         milliseconds(10'000)))
      << run.err();
  ::kill(run.pid(), SIGINT);
  ASSERT_EQ(run.wait(milliseconds(5000)), 5) << run.err();
  const std::string err = run.err();
  EXPECT_TRUE(contains(err, "not restarting: the launcher was stopped by SIGINT")) << err;
  EXPECT_FALSE(contains(err, "restarting the job")) << err;
  EXPECT_EQ(run.starts().size(), 2u) << err;
  expect_nothing_left(all_groups(run));
}

TEST(Launch, SigkillToLauncherAfterARestartTakesTheWorkersAlong) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--max_restarts=2", "--log_dir", logs.string(),
                 "--log_level=debug", "--print_config=false", "hello_worker", "--steps", "1",
                 "--sleep_ms", "60000", "--spawn_child"},
                {{ddl::env::kFault, "rank=0,step=0,abort,restart=0"}});
  // Both ranks of the second start are sleeping once each log has a READY after the separator.
  ASSERT_TRUE(wait_until(
      [&] {
        for (int r = 0; r < 2; ++r) {
          const std::string log = worker_log(logs, r);
          const std::size_t sep = log.find("==== restart 1 ====");
          if (sep == std::string::npos || log.find("restart 1\n", sep) == std::string::npos)
            return false;
        }
        return true;
      },
      milliseconds(10'000)))
      << run.err();
  EXPECT_TRUE(contains(run.err(), "rank 0 was killed by SIGABRT (exit code 134); restarting"))
      << run.err();
  const auto pids = run.worker_pids();  // the second start's
  ASSERT_EQ(pids.size(), 2u) << run.err();
  ::kill(run.pid(), SIGKILL);
  ASSERT_EQ(run.wait(milliseconds(5000)), 128 + SIGKILL);
  for (const auto& [rank, pid] : pids) {
    EXPECT_TRUE(wait_until([&] { return !alive(pid); }, milliseconds(2000)))
        << "rank " << rank << " (pid " << pid << ") outlived a SIGKILLed launcher";
  }
  expect_nothing_left(all_groups(run));
}

TEST(Launch, MissingOrNonExecutableWorkerIs127) {
  TempDir tmp;
  const fs::path plain = tmp.path() / "not_executable";
  std::ofstream(plain) << "#!/bin/sh\necho hi\n";
  fs::permissions(plain, fs::perms::owner_read | fs::perms::owner_write);
  for (const std::string& worker : {std::string("/nonexistent/worker"),
                                    std::string("no_such_worker_anywhere"), plain.string()}) {
    LaunchRun run(tmp, {"--log_dir", (tmp.path() / "logs").string(), worker});
    ASSERT_EQ(run.wait(milliseconds(10'000)), 127) << run.err();
    EXPECT_TRUE(contains(run.err(), worker)) << run.err();
    EXPECT_EQ(run.out(), "") << "nothing starts, nothing is printed";
    EXPECT_FALSE(fs::exists(tmp.path() / "logs")) << "nothing was set up";
  }
}

TEST(Launch, BadFlagsExit2NamingTheFlag) {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--nproc_per_node=0", "--nproc_per_node"},
      {"--gpus=a", "--gpus"},
      {"--bogus", "--bogus"},
      {"--log_level=loud", "--log_level"},
      {"--started_port=70000", "--started_port"},
      {"--node_ip=10.1.1.1", "--node_ip"}};
  for (const auto& [flag, name] : cases) {
    LaunchRun run(tmp, {flag, "hello_worker"});
    ASSERT_EQ(run.wait(milliseconds(10'000)), 2) << flag << ": " << run.err();
    EXPECT_TRUE(contains(run.err(), name)) << run.err();
    EXPECT_EQ(run.out(), "");
  }
}

TEST(Launch, HelpAndVersion) {
  TempDir tmp;
  LaunchRun help(tmp, {"--help"});
  ASSERT_EQ(help.wait(milliseconds(10'000)), 0);
  EXPECT_TRUE(contains(help.out(), "--selected_gpus")) << help.out();
  LaunchRun version(tmp, {"--version"});
  ASSERT_EQ(version.wait(milliseconds(10'000)), 0);
  EXPECT_TRUE(contains(version.out(), "ddlaunch")) << version.out();
}

}  // namespace
