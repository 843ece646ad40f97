// Whole jobs run in this process through run_job(), with hello_worker as the worker: what `launch`
// does between parsing its command line and exiting.
#include "launcher/job/job.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <sstream>

#include "env/file.h"
#include "launcher/cluster/plan.h"
#include "launcher/coord/control_plane.h"
#include "launcher/supervise/supervisor.h"
#include "launcher/supervise/worker_lookup.h"
#include "net/ports.h"
#include "store/store.h"
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

LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "launch");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

// This process's environment without what would change the job (a caller's job id, Slurm).
JobContext context(env::EnvMap extra = {}) {
  JobContext c;
  c.caller_env = env::current_environment();
  for (auto it = c.caller_env.begin(); it != c.caller_env.end();) {
    const bool drop = it->first.rfind("SLURM_", 0) == 0 || it->first == env::kJobId ||
                      it->first == env::kJobSecret || it->first == env::kFault;
    it = drop ? c.caller_env.erase(it) : std::next(it);
  }
  for (const auto& [k, v] : extra) c.caller_env[k] = v;
  c.launcher_dir = DDL_BIN_DIR;
  c.cores = 2;
  return c;
}

TEST(Job, TwoWorkersSucceed) {
  TempDir dir;
  std::ostringstream config;
  JobContext ctx = context();
  ctx.config_out = &config;
  const int code = run_job(
      parse({"--nproc_per_node=2", "--log_dir", dir.file("logs"), "hello_worker", "--lines", "2"}),
      ctx);
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(contains(config.str(), "PADDLE_TRAINER_ID=1\n")) << "--print_config went to the "
                                                                  "given stream: "
                                                               << config.str();
  for (int r = 0; r < 2; ++r) {
    const std::string log = read_file(dir.file("logs/workerlog." + std::to_string(r)));
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(r) + " of 2")) << log;
    EXPECT_TRUE(contains(log, "ENV OMP_NUM_THREADS=1\n")) << "2 cores, 2 workers: " << log;
    EXPECT_TRUE(std::regex_search(log, std::regex("ENV DDL_JOB_ID=[0-9a-f]{16}-g0\n"))) << log;
  }
}

// In Paddle 2.x's log folder --job_id names the launcher's own log, LOG_DIR/<job_id>.<pod>.log:
// an id that is a path ("../../x", an absolute one) gives a file name inside LOG_DIR.
TEST(Job, AJobIdThatIsAPathCannotLeaveTheLogFolder) {
  TempDir dir;
  const std::filesystem::path outside = dir.path() / "outside";
  std::filesystem::create_directories(outside);
  for (const std::string& id : {std::string("../../x"), (outside / "x").string()}) {
    SCOPED_TRACE("--job_id=" + id);
    const std::filesystem::path logs = dir.path() / "a" / "b" / "logs";
    const LaunchOptions options =
        parse({"--job_id", id, "--log_dir", logs.string(), "hello_worker"});
    ASSERT_TRUE(options.paddle2_log_folder());
    EXPECT_EQ(options.job_id, id) << "the id itself is kept";
    ASSERT_EQ(run_job(options, context()), 0);
    const std::regex own(env::safe_file_name(id, "default") + R"(\.[a-z]{6}\.log)");
    int own_logs = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
      if (!e.is_regular_file()) continue;
      const std::filesystem::path folder = e.path().parent_path();
      EXPECT_TRUE(folder == logs || folder.filename() == "logs.launch") << e.path();
      own_logs += folder == logs && std::regex_match(e.path().filename().string(), own);
    }
    EXPECT_EQ(own_logs, 1) << "the launcher's log is in " << logs;
    std::filesystem::remove_all(dir.path() / "a");
  }
}

TEST(Job, AFailingWorkerGivesItsExitCode) {
  TempDir dir;
  const auto started = Clock::now();
  const int code = run_job(parse({"--nproc_per_node=3", "--log_dir", dir.file("logs"),
                                  "--print_config=false", "--kill_timeout=1", "hello_worker",
                                  "--fail_rank", "2", "--exit_code", "3", "--sleep_ms", "20000"}),
                           context());
  EXPECT_EQ(code, 3);
  EXPECT_LT(Clock::now() - started, milliseconds(8000)) << "the others were stopped at once";
}

TEST(Job, ARestartHappensWithMaxRestartsOne) {
  TempDir dir;
  const int code =
      run_job(parse({"--nproc_per_node=2", "--log_dir", dir.file("logs"), "--print_config=false",
                     "--max_restarts=1", "hello_worker", "--steps", "3"}),
              context({{env::kFault, "rank=1,step=1,exit=7,restart=0"},
                       {env::kJobId, "jobtest"},
                       {env::kJobSecret, "s3cret"}}));
  EXPECT_EQ(code, 0);
  const std::string log1 = read_file(dir.file("logs/workerlog.1"));
  EXPECT_EQ(count(log1, "==== restart 1 ====\n"), 1) << log1;
  EXPECT_TRUE(contains(log1, "fault injection: rank 1 exits with code 7 at step 1")) << log1;
  EXPECT_TRUE(contains(log1, "ENV DDL_JOB_ID=jobtest-g0\n")) << log1;
  EXPECT_TRUE(contains(log1, "ENV DDL_JOB_ID=jobtest-g1\n")) << log1;
  EXPECT_TRUE(contains(log1, "rank 1 step 2 restart 1\n"))
      << "the restart ran to the end: " << log1;
}

TEST(Job, WithoutRestartsTheFailureEndsTheJob) {
  TempDir dir;
  const int code = run_job(parse({"--nproc_per_node=2", "--log_dir", dir.file("logs"),
                                  "--print_config=false", "hello_worker", "--steps", "3"}),
                           context({{env::kFault, "rank=0,step=1,exit=9"}}));
  EXPECT_EQ(code, 9);
  EXPECT_FALSE(contains(read_file(dir.file("logs/workerlog.0")), "==== restart"));
}

TEST(Job, AMissingWorkerIsATypedError) {
  try {
    run_job(parse({"no_such_worker_for_the_job_test"}), context());
    ADD_FAILURE() << "no error";
  } catch (const WorkerNotFoundError& e) {
    const ErrorExit exit = launch_exit_for(e);
    EXPECT_EQ(exit.exit_code, kExitNotFound);
    EXPECT_TRUE(contains(exit.message, "no_such_worker_for_the_job_test")) << exit.message;
  }
}

TEST(Job, ErrorsMapToTheLaunchersExitCodes) {
  EXPECT_EQ(launch_exit_for(OptionsError("--bogus")).exit_code, kExitUsage);
  EXPECT_EQ(launch_exit_for(OptionsError("--bogus")).message, "bad command line: --bogus");
  EXPECT_EQ(launch_exit_for(PlanError("p")).exit_code, kExitUsage);
  EXPECT_EQ(launch_exit_for(ControlError("c")).exit_code, kExitUsage);
  EXPECT_EQ(launch_exit_for(RecordError("r")).exit_code, kExitUsage) << "a ControlError";
  EXPECT_EQ(launch_exit_for(SupervisorError("s")).exit_code, kExitError);
  EXPECT_EQ(launch_exit_for(net::PortError("n")).exit_code, kExitError);
  EXPECT_EQ(launch_exit_for(env::EnvError("e")).message, "environment contract: e");
  EXPECT_EQ(launch_exit_for(std::runtime_error("x")).message, "unexpected error: x");
  EXPECT_EQ(launch_exit_for(StoreError("s")).message, "unexpected error: s")
      << "a worker's error type reaching launch";
  EXPECT_EQ(launch_exit_for(StoreError("s")).exit_code, kExitError);
}

TEST(Job, ABadPlanIsATypedError) {
  EXPECT_THROW(
      run_job(parse({"--ips=10.0.0.1,10.0.0.2", "--node_ip=10.0.0.1", "--max_restarts=1",
                     "hello_worker"}),
              context()),
      PlanError)
      << "a static job (no secret) cannot restart its nodes together";
}

}  // namespace
}  // namespace ddl::launcher
