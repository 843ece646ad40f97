// supervise() in this process, on a mix of parameter servers and trainers (hello_worker playing
// both): log names, console prefixes, failure summaries and restarts name each process by its
// role and index.
#include "launcher/supervise/supervisor.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <sstream>

#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::contains;
using testing::count;
using testing::read_file;
using testing::TempDir;

const std::string kHello = std::string(DDL_BIN_DIR) + "/hello_worker";

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// The launcher's log lines while it lives (spdlog's default logger, restored afterwards).
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()), level_(spdlog::get_level()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
    spdlog::set_level(spdlog::level::debug);
  }
  ~CapturedLog() {
    spdlog::set_default_logger(previous_);
    spdlog::set_level(level_);
  }
  std::string str() const { return text_.str(); }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  spdlog::level::level_enum level_;
  std::ostringstream text_;
};

// Two servers on 127.0.0.2 and two trainers on 127.0.0.1, in that order; `args(role, index)`
// gives each its hello_worker arguments.
std::vector<Worker> mixed_job(
    const std::function<std::vector<std::string>(env::Role, int)>& args, Generation generation) {
  const std::vector<env::Endpoint> trainers = {{"127.0.0.1", 7000}, {"127.0.0.1", 7001}};
  const std::vector<env::Endpoint> servers = {{"127.0.0.2", 8000}, {"127.0.0.2", 8001}};
  std::vector<Worker> launches;
  for (env::Role role : {env::Role::kServer, env::Role::kTrainer}) {
    for (int i = 0; i < 2; ++i) {
      env::WorkerContract c;
      c.role = role;
      c.rank = i;
      c.world_size = 2;
      c.local_rank = i;
      c.local_world_size = 2;
      c.endpoints = trainers;
      c.server_endpoints = servers;
      c.current = role == env::Role::kServer ? servers[i] : trainers[i];
      c.job_id = generation.job_id("mixed");
      c.restart_count = generation.index();
      Worker l;
      l.role = role;
      l.index = i;
      l.executable = kHello;
      l.args = args(role, i);
      l.env = env::to_env(c);
      l.env["PATH"] = "/usr/bin:/bin";
      launches.push_back(std::move(l));
    }
  }
  return launches;
}

SupervisorOptions options_with_logs(const TempDir& dir) {
  SupervisorOptions o;
  o.log_dir = dir.file("logs");
  o.kill_timeout = milliseconds(1000);
  return o;
}

TEST(SupervisorRoles, LogFilesAndEnvironmentFollowTheRole) {
  TempDir dir;
  const auto launches = mixed_job(
      [](env::Role, int) {
        return std::vector<std::string>{"--lines", "2"};
      },
      Generation());
  // The servers print and exit by themselves: a grace keeps Paddle's rule (stop the servers as
  // soon as the trainers are done) from killing one before it has printed.
  SupervisorOptions o = options_with_logs(dir);
  o.server_grace = milliseconds(20'000);
  const JobOutcome outcome = supervise(launches, o);
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_TRUE(outcome.last.ok());
  const std::string logs = dir.file("logs");
  EXPECT_EQ(entries(logs),
            (std::set<std::string>{"serverlog.0", "serverlog.1", "workerlog.0", "workerlog.1"}));
  const std::string server1 = read_file(logs + "/serverlog.1");
  EXPECT_TRUE(contains(server1,
                       "hello from server 1 of 2 (local server 1 of 2), endpoint "
                       "127.0.0.2:8001, 2 trainer(s)"))
      << server1;
  EXPECT_TRUE(contains(server1, "ENV TRAINING_ROLE=PSERVER\n")) << server1;
  EXPECT_TRUE(contains(server1, "ENV PADDLE_TRAINER_ID=<unset>\n")) << server1;
  EXPECT_TRUE(contains(server1, "server 1 line 1 of 2")) << server1;
  const std::string trainer1 = read_file(logs + "/workerlog.1");
  EXPECT_TRUE(contains(trainer1, "hello from rank 1 of 2")) << trainer1;
  EXPECT_TRUE(contains(trainer1, "ENV TRAINING_ROLE=TRAINER\n")) << trainer1;
  EXPECT_TRUE(
      contains(trainer1, "ENV PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.2:8000,127.0.0.2:8001\n"))
      << trainer1;
}

TEST(SupervisorRoles, AFailingServerIsNamedInTheSummary) {
  TempDir dir;
  CapturedLog log;
  const auto launches = mixed_job(
      [](env::Role role, int i) {
        if (role == env::Role::kServer && i == 1)
          return std::vector<std::string>{"--exit_code", "4"};
        return std::vector<std::string>{"--sleep_ms", "20000"};
      },
      Generation());
  SupervisorOptions o = options_with_logs(dir);
  std::vector<FailureNotice> notices;
  o.on_failure = [&notices](const FailureNotice& n) { notices.push_back(n); };
  const auto started = Clock::now();
  const JobOutcome outcome = supervise(launches, o);
  EXPECT_LT(Clock::now() - started, milliseconds(8000)) << "the others are stopped at once";
  EXPECT_EQ(outcome.exit_code, 4);
  EXPECT_TRUE(outcome.last.failed(Failure::Kind::kWorker));
  ASSERT_TRUE(outcome.last.failure());
  EXPECT_EQ(outcome.last.failure()->process_name, "server 1");
  EXPECT_FALSE(outcome.last.failure()->rank) << "a server has no rank";
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].what, "server 1 exited with code 4");
  EXPECT_FALSE(notices[0].rank);
  const std::string text = log.str();
  EXPECT_TRUE(contains(text, "starting 4 worker(s) (servers 0..1, ranks 0..1)")) << text;
  EXPECT_TRUE(contains(text, "server 1 (pid ")) << text;
  EXPECT_TRUE(contains(text, "job failed: server 1 (pid ")) << text;
  EXPECT_TRUE(contains(
      text, "exited with code 4; launcher exit code 4; log: " + dir.file("logs") + "/serverlog.1"))
      << text;
}

TEST(SupervisorRoles, ConsolePrefixNamesTheRole) {
  ::testing::internal::CaptureStdout();
  const auto launches = mixed_job(
      [](env::Role, int) {
        return std::vector<std::string>{"--lines", "2"};
      },
      Generation());
  SupervisorOptions o;  // no log dir: everything to the console, prefixed
  o.kill_timeout = milliseconds(1000);
  o.server_grace = milliseconds(20'000);  // the servers exit by themselves once they printed
  const JobOutcome outcome = supervise(launches, o);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_TRUE(contains(out, "[server 1] server 1 line 1 of 2")) << out;
  EXPECT_TRUE(contains(out, "[server 0] hello from server 0 of 2")) << out;
  EXPECT_TRUE(contains(out, "[rank 1] rank 1 line 0 of 2")) << out;
}

TEST(SupervisorRoles, HangGuardNamesEachSilentProcess) {
  TempDir dir;
  CapturedLog log;
  const auto launches = mixed_job(
      [](env::Role, int) {
        return std::vector<std::string>{"--sleep_ms", "20000"};
      },
      Generation());
  SupervisorOptions o = options_with_logs(dir);
  o.hang_timeout = milliseconds(500);
  const JobOutcome outcome = supervise(launches, o);
  EXPECT_EQ(outcome.exit_code, kExitDeadline);
  EXPECT_TRUE(outcome.last.failed(Failure::Kind::kHang));
  const std::string text = log.str();
  EXPECT_TRUE(contains(text, "silent: server 0 (0.")) << text;
  EXPECT_TRUE(contains(text, ", rank 1 (0.")) << text;
  EXPECT_TRUE(contains(text, "server 1 (" + dir.file("logs") + "/serverlog.1): last line: READY"))
      << text;
}

TEST(SupervisorRoles, ARestartStartsEveryRoleAgain) {
  TempDir dir;
  const GenerationFactory factory = [](Generation g) {
    return mixed_job(
        [g](env::Role role, int i) {
          if (g.first() && role == env::Role::kServer && i == 1) {
            return std::vector<std::string>{"--exit_code", "4"};
          }
          // The first generation's trainers outlive the failing server (else Paddle's rule
          // would end the servers once the trainers are done, failure unseen).
          if (g.first() && role == env::Role::kTrainer) {
            return std::vector<std::string>{"--lines", "1", "--sleep_ms", "20000"};
          }
          return std::vector<std::string>{"--lines", "1"};
        },
        g);
  };
  SupervisorOptions o = options_with_logs(dir);
  o.restart_policy = RestartPolicy(1);
  o.server_grace = milliseconds(20'000);  // the second generation's servers exit by themselves
  const JobOutcome outcome = supervise(factory, o);
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(outcome.restarts, 1);
  for (const char* name : {"serverlog.0", "serverlog.1", "workerlog.0", "workerlog.1"}) {
    const std::string text = read_file(dir.file("logs") + "/" + name);
    EXPECT_EQ(count(text, "==== restart 1 ====\n"), 1) << name;
    EXPECT_TRUE(contains(text, "ENV DDL_JOB_ID=mixed-g1\n")) << name << ": " << text;
  }
}

TEST(SupervisorRoles, ARestartThatChangesTheRolesIsRefused) {
  TempDir dir;
  CapturedLog log;
  const GenerationFactory factory = [](Generation g) {
    auto launches = mixed_job(
        [g](env::Role role, int i) {
          if (role == env::Role::kTrainer && i == 0)
            return std::vector<std::string>{"--exit_code", "6"};
          return std::vector<std::string>{};
        },
        g);
    if (!g.first()) std::swap(launches[0], launches[2]);  // a trainer where a server was
    return launches;
  };
  SupervisorOptions o = options_with_logs(dir);
  o.restart_policy = RestartPolicy(3);
  const JobOutcome outcome = supervise(factory, o);
  EXPECT_EQ(outcome.exit_code, 6) << "the failure that asked for the restart";
  EXPECT_TRUE(outcome.last.stopped(Stop::Kind::kSpawnFailed));
  EXPECT_EQ(outcome.restarts, 0);
  EXPECT_TRUE(contains(log.str(),
                       "could not prepare restart 1: restart 1 starts rank 0 where the "
                       "job had server 0"))
      << log.str();
}

TEST(SupervisorRoles, TwoProcessesWithOneNameAreRefused) {
  TempDir dir;
  auto launches =
      mixed_job([](env::Role, int) { return std::vector<std::string>{}; }, Generation());
  launches[1].index = 0;
  try {
    supervise(launches, options_with_logs(dir));
    ADD_FAILURE() << "no error";
  } catch (const SupervisorError& e) {
    EXPECT_EQ(std::string(e.what()), "two processes of the job are both server 0");
  }
}

}  // namespace
}  // namespace ddl::launcher

namespace ddl::launcher {
namespace {

// --- Servers after the trainers -------------------------------------------------------------------

TEST(SupervisorServerGrace, HangGuardIsOffWhileTheServersHaveTheirGrace) {
  TempDir dir;
  CapturedLog log;
  const auto launches = mixed_job(
      [](env::Role role, int) {
        return role == env::Role::kServer
                   ? std::vector<std::string>{"--sleep_ms", "60000"}
                   : std::vector<std::string>{};
      },
      Generation());
  SupervisorOptions o = options_with_logs(dir);
  o.hang_timeout = milliseconds(300);  // shorter than the grace: it must not fire
  o.server_grace = milliseconds(1000);
  o.kill_timeout = milliseconds(500);
  const auto start = Clock::now();
  const JobOutcome outcome = supervise(launches, o);
  EXPECT_EQ(outcome.exit_code, 0) << log.str();
  EXPECT_TRUE(outcome.last.ok());
  EXPECT_EQ(outcome.servers_stopped, 2);
  EXPECT_GE(Clock::now() - start, milliseconds(950));
  EXPECT_FALSE(contains(log.str(), "hang guard")) << log.str();
  EXPECT_EQ(count(log.str(), "(--server_grace): stopping them"), 1) << log.str();
}

TEST(SupervisorServerGrace, WithoutGraceServersStopAtOnceWithPaddlesLines) {
  TempDir dir;
  CapturedLog log;
  const auto launches = mixed_job(
      [](env::Role role, int) {
        return role == env::Role::kServer
                   ? std::vector<std::string>{"--sleep_ms", "60000"}
                   : std::vector<std::string>{"--sleep_ms", "200"};
      },
      Generation());
  SupervisorOptions o = options_with_logs(dir);  // no server_grace: Paddle's rule
  const auto start = Clock::now();
  const JobOutcome outcome = supervise(launches, o);
  EXPECT_EQ(outcome.exit_code, 0) << log.str();
  EXPECT_EQ(outcome.servers_stopped, 2);
  EXPECT_LT(Clock::now() - start, milliseconds(5000)) << "not kill_timeout nor a grace later";
  const std::string text = log.str();
  EXPECT_EQ(count(text, "all workers exit, going to finish parameter server"), 1) << text;
  EXPECT_EQ(count(text, "all parameter server are killed"), 1) << text;
  EXPECT_LT(text.find("going to finish parameter server"), text.find("server are killed"));
  EXPECT_FALSE(contains(text, "heter_worker")) << "no heter workers here: 1.8's words";
  EXPECT_FALSE(contains(text, "--server_grace")) << text;
}

TEST(SupervisorServerGrace, AServerFailingDuringTheGraceFailsTheJob) {
  TempDir dir;
  CapturedLog log;
  const auto launches = mixed_job(
      [](env::Role role, int index) {
        if (role == env::Role::kTrainer) return std::vector<std::string>{};
        if (index == 1) {
          return std::vector<std::string>{"--sleep_ms", "300", "--exit_code", "6"};
        }
        return std::vector<std::string>{"--sleep_ms", "60000"};
      },
      Generation());
  SupervisorOptions o = options_with_logs(dir);
  o.server_grace = milliseconds(5000);
  const JobOutcome outcome = supervise(launches, o);
  EXPECT_EQ(outcome.exit_code, 6) << log.str();
  ASSERT_TRUE(outcome.last.failure());
  EXPECT_EQ(outcome.last.failure()->process_name, "server 1");
  EXPECT_EQ(outcome.servers_stopped, 0);
  EXPECT_FALSE(contains(log.str(), "stopping them")) << log.str();
}

TEST(SupervisorServerGrace, ANodeOfServersAloneWaitsForThem) {
  TempDir dir;
  CapturedLog log;
  std::vector<Worker> launches = mixed_job(
      [](env::Role, int) {
        return std::vector<std::string>{"--sleep_ms", "700"};
      },
      Generation());
  launches.resize(2);  // the servers only
  SupervisorOptions o = options_with_logs(dir);
  o.server_grace = milliseconds(0);  // would stop them at once if the rule applied
  const auto start = Clock::now();
  const JobOutcome outcome = supervise(launches, o);
  EXPECT_EQ(outcome.exit_code, 0) << log.str();
  EXPECT_EQ(outcome.servers_stopped, 0);
  EXPECT_GE(Clock::now() - start, milliseconds(650)) << "the servers ran to their end";
  EXPECT_TRUE(contains(log.str(), "all 2 worker(s) exited with code 0")) << log.str();
}

// Rank 0 fails first (its error line) but takes a while to exit; rank 1 sees the
// connection close and exits at once. The summary names rank 0's failure, not rank 1's echo.
TEST(SupervisorFailures, TheFirstFailureByTimeIsNamedNotItsEchoOnAnotherRank) {
  TempDir dir;
  CapturedLog log;
  std::vector<Worker> launches;
  const std::vector<std::string> scripts = {
      "echo 'rank 0: checkpoint failed: Too many open files' >&2; sleep 1.5; exit 4",
      "sleep 0.5; echo 'rank 1: Connection closed by peer' >&2; exit 1"};
  for (int i = 0; i < 2; ++i) {
    Worker w;
    w.role = env::Role::kTrainer;
    w.index = i;
    w.executable = "/bin/sh";
    w.args = {"-c", scripts[static_cast<std::size_t>(i)]};
    w.env["PATH"] = "/usr/bin:/bin";
    launches.push_back(std::move(w));
  }
  SupervisorOptions o = options_with_logs(dir);
  o.kill_timeout = milliseconds(5000);  // rank 0 ends by itself, well before the SIGKILL
  const JobOutcome outcome = supervise(launches, o);
  ASSERT_TRUE(outcome.last.failure());
  EXPECT_EQ(outcome.last.failure()->rank, 0);
  EXPECT_EQ(outcome.last.failure()->process_name, "rank 0");
  const std::string text = log.str();
  EXPECT_TRUE(contains(text, "job failed: rank 0 (pid ")) << text;
  EXPECT_TRUE(contains(text, "checkpoint failed: Too many open files")) << text;
  EXPECT_TRUE(
      contains(text, "rank 1 exited first (exited with code 1), but rank 0 failed before it"))
      << text;
}

}  // namespace
}  // namespace ddl::launcher
