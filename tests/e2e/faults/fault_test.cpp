// Fault tests on real training jobs: `launch` running `train_mnist` on the real MNIST
// (DDL_SOURCE_DIR/data/mnist, fetched by scripts/setup.sh). Each test states its bound and checks
// that no process of the job is left. Links no LibTorch: it drives the built executables.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>
#include <atomic>
#include <cmath>

#include "tests/e2e/faults/train_job.h"
#include "net/frame.h"

namespace {

using namespace ddl::launch_test;
using nlohmann::json;

constexpr milliseconds kJobTimeout{240'000};

// Common train_mnist arguments for a short, deterministic run.
std::vector<std::string> train_args(int max_steps, const fs::path& save) {
  return {kTrain,         "--data_dir",  kData,        "--max_steps", std::to_string(max_steps),
          "--epochs",     "1",           "--seed",     "7",           "--log_interval",
          "5",            "--save",      save.string(), "--threads",  "1"};
}

// Waits until rank `rank`'s log shows training progress (a batch line past the first).
bool training_started(const fs::path& log_dir, int rank, milliseconds timeout) {
  return wait_until([&] { return contains(worker_log(log_dir, rank), "batch: 5,"); }, timeout);
}

// An undisturbed 2-rank run; returns rank 0's summary.
json undisturbed_run(int max_steps) {
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  LaunchRun run(dir, concat({"--nproc_per_node=2", "--log_dir", logs.string(), "--print_config=false"},
                            train_args(max_steps, dir.path() / "ck")));
  EXPECT_EQ(run.wait(kJobTimeout), 0) << run.err();
  json s = summary_of(logs, 0);
  EXPECT_TRUE(s.is_object()) << worker_log(logs, 0);
  return s;
}

// Starts a 2-rank training job that runs until stopped, with the launcher's debug log (worker
// pids) and `flags` added to launch's options.
LaunchRun start_endless_job(const TempDir& dir, const fs::path& logs,
                            std::vector<std::string> flags) {
  return LaunchRun(dir, concat(concat({"--nproc_per_node=2", "--log_dir", logs.string(),
                                       "--log_level=debug"},
                                      flags),
                               train_args(100000, "")));
}

TEST(Faults, SigkillOfOneWorkerEndsTheJobWithin5s) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  LaunchRun run = start_endless_job(dir, logs, {"--kill_timeout=3"});
  ASSERT_TRUE(training_started(logs, 1, kJobTimeout)) << run.err();
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.size(), 2u) << run.err();
  ::kill(pids.at(1), SIGKILL);
  const auto killed_at = Clock::now();
  const auto code = run.wait(milliseconds(5000));
  ASSERT_TRUE(code.has_value()) << "launcher still running 5 s after rank 1 was SIGKILLed";
  EXPECT_EQ(*code, 128 + SIGKILL) << run.err();
  EXPECT_LT(Clock::now() - killed_at, milliseconds(5000));
  EXPECT_TRUE(contains(run.err(), "rank 1")) << run.err();
  expect_nothing_left(pids);
}

TEST(Faults, SigintThenSigtermToTheLauncherEndsEverythingWithinTheGracePeriod) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  LaunchRun run = start_endless_job(dir, logs, {"--kill_timeout=3"});
  ASSERT_TRUE(training_started(logs, 0, kJobTimeout)) << run.err();
  const auto pids = run.worker_pids();
  ::kill(run.pid(), SIGINT);
  std::this_thread::sleep_for(milliseconds(100));
  ::kill(run.pid(), SIGTERM);
  const auto code = run.wait(milliseconds(3000 + 2000));  // grace period + slack
  ASSERT_TRUE(code.has_value()) << "launcher outlived its grace period";
  // README, failure semantics: a second signal SIGKILLs at once and the exit code is 128 + the
  // first signal (the workers that die of the forwarded signals are not failures).
  EXPECT_EQ(*code, 128 + SIGINT) << run.err();
  expect_nothing_left(pids);
}

TEST(Faults, SigkillOfTheLauncherTakesEveryWorkerWithin2s) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  LaunchRun run = start_endless_job(dir, logs, {});
  ASSERT_TRUE(training_started(logs, 0, kJobTimeout)) << run.err();
  const auto pids = run.worker_pids();
  ::kill(run.pid(), SIGKILL);
  ASSERT_EQ(run.wait(milliseconds(2000)), 128 + SIGKILL);
  expect_nothing_left(pids);  // waits up to 2 s
}

TEST(Faults, ARankThatNeverStartsFailsTheOthersAtTheDeadlineNamingIt) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  // Rank 1 is stuck before it ever starts the trainer; rank 0 must give up at the 3 s deadline.
  const std::string script =
      "if [ \"$PADDLE_TRAINER_ID\" = 1 ]; then exec sleep 60; fi; exec \"$0\" \"$@\"";
  LaunchRun run(dir, concat({"--nproc_per_node=2", "--log_dir", logs.string(), "--log_level=debug",
                             "--rendezvous_timeout=3", "--kill_timeout=2", "/bin/sh", "-c", script},
                            train_args(10, "")));
  const auto code = run.wait(milliseconds(30'000));
  ASSERT_TRUE(code.has_value()) << "job still running 30 s after a 3 s rendezvous deadline";
  EXPECT_EQ(*code, 124) << run.err();  // train_mnist's exit code at a rendezvous deadline
  const std::string log0 = worker_log(logs, 0);
  EXPECT_TRUE(contains(log0, "1/2 ranks arrived (0); missing: 1")) << log0;
  expect_nothing_left(run.worker_pids());
}

// Sends what a confused or hostile client might to the store at `port` until `stop` is set.
void disturb_store(std::uint16_t port, const std::atomic<bool>& stop, std::atomic<int>& sent) {
  auto send_all = [&](const std::string& bytes) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) > 0) ++sent;
    }
    ::close(fd);
  };
  using namespace ddl::net;
  PayloadWriter hello;
  hello.u32(1).u32(2).str(std::string(32, 'p')).str(std::string(32, 'n'));  // a proof guessed
  const Bytes wrong_secret = encode(Frame{Service::kStore,
                                          static_cast<std::uint8_t>(TransportOp::kHello), 0,
                                          "some-job", hello.take()});
  // Magic, version 3, store, op 16, request 0, no job id, then a payload of 2 GiB announced.
  std::string oversized("DDLS\x00\x03\x01\x10\x00\x00\x00\x00\x00\x00", 14);
  oversized += std::string("\x7f\xff\xff\xff", 4);
  while (!stop) {
    send_all("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    send_all(oversized);
    send_all(std::string(wrong_secret.begin(), wrong_secret.end()));
    send_all(std::string(wrong_secret.begin(), wrong_secret.begin() + 7));  // half a frame
    std::this_thread::sleep_for(milliseconds(20));
  }
}


TEST(Faults, GarbageOversizedAndWrongSecretConnectionsDoNotDisturbTheJob) {
  SKIP_WITHOUT_DATA();
  const json clean = undisturbed_run(40);
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  const auto port = static_cast<std::uint16_t>(free_loopback_port());
  ASSERT_NE(port, 0);
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::thread intruder(disturb_store, port, std::cref(stop), std::ref(sent));
  LaunchRun run(dir, concat({"--nproc_per_node=2", "--log_dir", logs.string(), "--print_config=false",
                             "--started_port", std::to_string(port)},
                            train_args(40, dir.path() / "ck")));
  const auto code = run.wait(kJobTimeout);
  stop = true;
  intruder.join();
  ASSERT_EQ(code, 0) << run.err() << worker_log(logs, 0);
  EXPECT_GT(sent.load(), 0) << "the intruder never reached the store";
  const json s0 = summary_of(logs, 0), s1 = summary_of(logs, 1);
  EXPECT_EQ(s0["param_checksum"], clean["param_checksum"]);
  EXPECT_EQ(s1["param_checksum"], clean["param_checksum"]);
}

TEST(Faults, RestartAfterOneFailureResumesAndMatchesAnUndisturbedRun) {
  SKIP_WITHOUT_DATA();
  const json clean = undisturbed_run(60);
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  LaunchRun run(dir,
                concat({"--nproc_per_node=2", "--log_dir", logs.string(), "--print_config=false",
                        "--max_restarts=1"},
                       concat(train_args(60, dir.path() / "ck"), {"--save_every", "10"})),
                {{ddl::env::kFault, "rank=1,step=25,exit=3,restart=0"}});
  ASSERT_EQ(run.wait(kJobTimeout), 0) << run.err();
  EXPECT_TRUE(contains(run.err(), "restarting the job (restart 1 of 1)")) << run.err();
  EXPECT_TRUE(contains(worker_log(logs, 1), "fault injection: rank 1 exits with code 3 at step 25"));
  const json s0 = summary_of(logs, 0);
  ASSERT_TRUE(s0.is_object()) << worker_log(logs, 0);
  EXPECT_EQ(s0["resumed"], true);
  EXPECT_EQ(s0["global_step"], 60);
  EXPECT_NEAR(s0["test_accuracy"].get<double>(), clean["test_accuracy"].get<double>(), 0.005);
  EXPECT_EQ(summary_of(logs, 1)["param_checksum"], s0["param_checksum"]);
}

// Runs `args` (train_mnist alone, a world of one) in its own process group with stdout+stderr
// to `log`; returns its exit code (128+signal when killed), -1 when it did not end in time.
int run_trainer(const std::vector<std::string>& args, const fs::path& log) {
  ddl::testing::SpawnOptions options;
  options.argv = args;
  options.stdout_path = log;
  options.own_process_group = true;
  ddl::testing::ChildProcess child(std::move(options));
  return child.wait(kJobTimeout).value_or(-1);
}

TEST(Faults, ACheckpointInterruptedMidWriteLeavesThePreviousOneLoadable) {
  SKIP_WITHOUT_DATA();
  ASSERT_TRUE(fs::exists("/usr/bin/strace")) << "strace is missing (scripts/setup.sh installs it)";
  TempDir dir;
  const fs::path save = dir.path() / "ck";
  const fs::path ckpt = dir.path() / "ck.pt", tmp = dir.path() / "ck.pt.tmp";
  // A checkpoint after every step; strace SIGKILLs the trainer in the middle of one: at the 5th
  // write(2) to the temporary file (a checkpoint is built in memory and written in one write(2),
  // so four checkpoints are complete and the fifth's temporary file is left empty; however many
  // writes a checkpoint takes, the kill lands inside a checkpoint's write).
  const int code = run_trainer(
      concat({"/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-P", tmp.string(), "-e",
              "trace=write", "-e", "inject=write:signal=KILL:when=5"},
             concat(train_args(100000, save), {"--save_every", "1"})),
      dir.path() / "train.log");
  EXPECT_EQ(code, 128 + SIGKILL) << read_file(dir.path() / "train.log");
  ASSERT_TRUE(fs::exists(tmp)) << "the kill did not land during a checkpoint write";
  ASSERT_TRUE(fs::exists(ckpt)) << "no complete checkpoint before the interrupted one";
  EXPECT_LT(fs::file_size(tmp), fs::file_size(ckpt)) << "the temporary file should be torn";

  // The previous checkpoint loads. --max_steps counts the resumed steps too, so a limit of 1
  // loads it, trains nothing more, evaluates and exits.
  const int check_code = run_trainer({kTrain, "--data_dir", kData, "--save", save.string(), "--resume",
                                     "--epochs", "1", "--max_steps", "1", "--threads", "1", "--seed",
                                     "7"},
                                    dir.path() / "check.log");
  const std::string check_log = read_file(dir.path() / "check.log");
  ASSERT_EQ(check_code, 0) << "the previous checkpoint did not load:\n" << check_log;
  EXPECT_TRUE(contains(check_log, "resumed from")) << check_log;
  // The torn temporary file is removed at that start, and said so.
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_TRUE(contains(check_log, "removed " + tmp.string())) << check_log;
}

}  // namespace
