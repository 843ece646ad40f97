// WorkerGroup alone, on /bin/sh: each process in its own group with its output on the pipe, exits
// reported with their status, a spawn error returned, the stop sequence, the drain of a pipe held
// open outside the group, and a second generation in the same group.
#include "launcher/supervise/worker_group.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/poll.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using testing::TempDir;
using testing::wait_until;
using Process = WorkerGroup::Process;

Worker shell(int index, const std::string& script, env::EnvMap extra = {}) {
  Worker w;
  w.index = index;
  w.executable = "/bin/sh";
  w.args = {"-c", script};
  w.env = {{"PATH", "/usr/bin:/bin"}};
  for (const auto& [k, v] : extra) w.env[k] = v;
  return w;
}

// A group of `workers` with its io_context, outputs and the events it reported.
class Fixture {
 public:
  explicit Fixture(const std::vector<Worker>& workers,
                   milliseconds kill_timeout = milliseconds(5000))
      : console_(-1),
        group_(io_, kill_timeout,
               WorkerGroup::Events{[this](Process& p) { exited.push_back(p.name); },
                                   [this] { ++closed; },
                                   [this](Process& p, const std::string& line) {
                                     progress.push_back(p.name + ": " + line);
                                   }}) {
    for (const Worker& w : workers) {
      outputs_.push_back(std::make_unique<ProcessOutput>(w.name(), "", false, "", console_));
      group_.add(w, *outputs_.back());
    }
  }

  WorkerGroup& group() { return group_; }
  const Process& at(std::size_t i) { return *group_.processes().at(i); }
  const ProcessOutput& output(std::size_t i) { return *outputs_.at(i); }

  // Runs the io_context and reaps (the supervisor does so on SIGCHLD) until `done` or `timeout`.
  bool run_until(const std::function<bool()>& done, milliseconds timeout = milliseconds(10'000)) {
    return wait_until(
        [&] {
          io_.restart();
          io_.run_for(milliseconds(10));
          group_.reap();
          return done();
        },
        timeout, milliseconds(0));
  }

  std::vector<std::string> exited;
  int closed = 0;
  std::vector<std::string> progress;  // "rank 0: step 1"

 private:
  boost::asio::io_context io_;
  Console console_;
  std::vector<std::unique_ptr<ProcessOutput>> outputs_;
  WorkerGroup group_;
};

// A new generation of `f`'s group, every worker of `workers` started.
void start_all(Fixture& f, const std::vector<Worker>& workers) {
  f.group().begin_generation();
  for (std::size_t i = 0; i < workers.size(); ++i) {
    std::string error;
    ASSERT_TRUE(f.group().start(i, workers[i], error)) << error;
  }
}

bool killed_by(const Process& p, int signo) {
  return WIFSIGNALED(p.status) && WTERMSIG(p.status) == signo;
}

TEST(WorkerGroup, RunsEachWorkerInItsOwnGroupWithItsOutputOnThePipe) {
  const std::vector<Worker> workers = {
      shell(0,
            "[ \"$(cut -d' ' -f5 /proc/$$/stat)\" = \"$$\" ] && echo own group; "
            "echo to stderr >&2; exit 3"),
      shell(1, "echo one")};
  Fixture f(workers);
  start_all(f, workers);
  EXPECT_TRUE(f.at(0).started);
  EXPECT_GT(f.at(0).pid, 0);
  ASSERT_TRUE(f.run_until([&] { return f.group().running() == 0 && f.group().output_closed(); }));
  EXPECT_EQ(f.exited.size(), 2u);
  EXPECT_TRUE(WIFEXITED(f.at(0).status));
  EXPECT_EQ(WEXITSTATUS(f.at(0).status), 3);
  EXPECT_EQ(WEXITSTATUS(f.at(1).status), 0);
  EXPECT_EQ(f.output(0).tail(), (std::deque<std::string>{"own group", "to stderr"}));
  EXPECT_EQ(f.output(1).tail(), (std::deque<std::string>{"one"}));
  EXPECT_EQ(f.closed, 2);
}

// DDL_PROGRESS_FD names a pipe of each process's own: whole lines arrive as they were written, a
// line cut over two writes included; one too long is dropped whole; the write end never blocks.
TEST(WorkerGroup, EachProcessHasAProgressPipeOfItsOwn) {
  // bash: dash cannot redirect to a descriptor above 9.
  std::vector<Worker> workers = {
      shell(0,
            "fd=$DDL_PROGRESS_FD; echo 'step 1' >&$fd; printf 'step ' >&$fd; sleep 0.1; "
            "echo '2 compute=0.5' >&$fd; head -c 3000 /dev/zero | tr '\\0' x >&$fd; "
            "echo >&$fd; echo 'pause eval' >&$fd; "
            "grep -q '^flags:.*4...$' /proc/$$/fdinfo/$fd && echo non-blocking"),
      shell(1, "echo 'checkpoint 7' >&$DDL_PROGRESS_FD")};
  for (Worker& w : workers) w.executable = "/bin/bash";
  Fixture f(workers);
  start_all(f, workers);
  ASSERT_TRUE(f.run_until([&] { return f.group().running() == 0 && f.group().output_closed(); }));
  f.run_until([&] { return f.progress.size() >= 4; }, milliseconds(2000));
  std::vector<std::string> rank0;
  for (const std::string& line : f.progress) {
    if (line.rfind("rank 0: ", 0) == 0) rank0.push_back(line);
  }
  EXPECT_EQ(rank0, (std::vector<std::string>{"rank 0: step 1", "rank 0: step 2 compute=0.5",
                                             "rank 0: pause eval"}));
  EXPECT_NE(std::find(f.progress.begin(), f.progress.end(), "rank 1: checkpoint 7"),
            f.progress.end());
  EXPECT_EQ(f.output(0).tail(), (std::deque<std::string>{"non-blocking"}));
}

TEST(WorkerGroup, AProgramThatCannotBeSpawnedIsAnErrorNotAProcess) {
  Worker missing = shell(0, "");
  missing.executable = "/nonexistent/program";
  Fixture f({missing});
  f.group().begin_generation();
  std::string error;
  EXPECT_FALSE(f.group().start(0, missing, error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(f.at(0).started);
  EXPECT_EQ(f.group().running(), 0);
  EXPECT_TRUE(f.group().output_closed());
}

TEST(WorkerGroup, StopEndsEveryProcessOncePerGeneration) {
  const std::vector<Worker> workers = {shell(0, "exec sleep 30"), shell(1, "exec sleep 30")};
  Fixture f(workers);
  start_all(f, workers);
  EXPECT_FALSE(f.group().stopping());
  EXPECT_TRUE(f.group().stop(SIGTERM));
  EXPECT_TRUE(f.group().stopping());
  EXPECT_FALSE(f.group().stop(SIGINT));
  ASSERT_TRUE(f.run_until([&] { return f.group().running() == 0; }));
  EXPECT_TRUE(killed_by(f.at(0), SIGTERM));
  EXPECT_TRUE(killed_by(f.at(1), SIGTERM));
}

TEST(WorkerGroup, TheErrorFileOfAFailedWorkerIsRead) {
  TempDir dir;
  const std::string path = dir.file("error.0.json");
  {
    std::ofstream stale(path);
    stale << R"({"message": "from an earlier run"})";
  }
  const Worker w = shell(0,
                         "[ -e \"$TORCHELASTIC_ERROR_FILE\" ] && echo stale; "
                         "echo '{\"message\": \"RuntimeError: boom\"}' > "
                         "\"$TORCHELASTIC_ERROR_FILE\"; exit 1",
                         {{env::kElasticErrorFile, path}});
  Fixture f({w});
  start_all(f, {w});
  ASSERT_TRUE(f.run_until([&] { return f.group().running() == 0 && f.group().output_closed(); }));
  EXPECT_TRUE(f.output(0).tail().empty());  // the stale file was removed before the start
  EXPECT_EQ(f.at(0).recorded_error, "RuntimeError: boom");
}

TEST(WorkerGroup, FinishClosesAPipeHeldOpenOutsideTheGroupAfterTheDrainTimeout) {
  // The worker exits at once; `setsid sleep` keeps its pipe open from a session of its own, out
  // of reach of the group's SIGKILL.
  const Worker w = shell(0, "setsid sleep 10 & echo $!; exit 0");
  Fixture f({w});
  start_all(f, {w});
  ASSERT_TRUE(f.run_until([&] { return f.group().running() == 0 && !f.output(0).tail().empty(); }));
  const pid_t holder = std::stoi(f.output(0).tail().front());
  ASSERT_TRUE(wait_until([&] { return testing::stat_field(holder, 6) == std::to_string(holder); },
                         milliseconds(5000)));  // out of the group by now
  f.group().finish();
  const auto finished = std::chrono::steady_clock::now();
  EXPECT_FALSE(f.group().output_closed());
  ASSERT_TRUE(f.run_until([&] { return f.group().output_closed(); }));
  EXPECT_GE(testing::elapsed_ms(finished), kDrainTimeout.count() - 50);
  EXPECT_EQ(f.closed, 1);
  ::kill(holder, SIGKILL);
}

TEST(WorkerGroup, ANewGenerationStartsTheSameWorkersAfresh) {
  const std::vector<Worker> workers = {shell(0, "echo first; exit 1")};
  Fixture f(workers);
  start_all(f, workers);
  ASSERT_TRUE(f.run_until([&] { return f.group().running() == 0 && f.group().output_closed(); }));
  const pid_t first = f.at(0).pid;
  f.group().finish();
  start_all(f, {shell(0, "echo second")});
  EXPECT_NE(f.at(0).pid, first);
  EXPECT_TRUE(f.at(0).running);
  ASSERT_TRUE(f.run_until([&] { return f.group().running() == 0 && f.group().output_closed(); }));
  EXPECT_EQ(WEXITSTATUS(f.at(0).status), 0);
  EXPECT_EQ(f.exited, (std::vector<std::string>{"rank 0", "rank 0"}));
}

}  // namespace
}  // namespace ddl::launcher
