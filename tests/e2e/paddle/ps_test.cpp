// Parameter-server jobs as Paddle users run them: the fleet launcher's and Paddle 1.8's
// test_launch_ps.sh / test_fleet_launch_ps.sh command lines, Paddle 2.x's --run_mode=ps, and
// heterogeneous jobs (--heter_worker_num, --heter_workers, --heter_devices). The program is a
// standard-library Python script that reads Paddle's variables as Paddle's scripts do: servers and
// heter workers serve "forever" (a minute), trainers print their environment and exit 0 once
// every server and heter worker of the node is up. Paddle's launchers stop the servers as soon as
// the trainers are done and print "all parameter server are killed" on stderr, where Paddle's
// tests grep for it; so must `launch`.
#include <gtest/gtest.h>

#include "tests/e2e/launch/launch_helpers.h"

namespace ddl::launch_test {
namespace {

// argv[1]: the log folder. FAIL_HETER=1: heter workers exit 3 at once.
constexpr const char* kProgram = R"PY(
import glob, os, sys, time
role = os.environ.get("TRAINING_ROLE", "")
for k in ("TRAINING_ROLE", "PADDLE_ROLE", "PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM",
          "PADDLE_PORT", "POD_IP", "PADDLE_CURRENT_ENDPOINT", "PADDLE_PSERVERS_IP_PORT_LIST",
          "PADDLE_TRAINER_ENDPOINTS", "STAGE_ID", "STAGE_NUM", "HETER_DEVICE_TYPE",
          "PADDLE_STAGE_TRAINERS_NUM", "PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST",
          "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"):
    print("ENV %s=%s" % (k, os.environ.get(k, "<unset>")))
if role == "HETER_TRAINER" and os.environ.get("FAIL_HETER") == "1":
    sys.exit(3)
if role in ("PSERVER", "HETER_TRAINER"):
    print("READY")
    sys.stdout.flush()
    time.sleep(60)
    sys.exit(0)
# A trainer: wait (20 s at most) until every server and heter worker log says READY.
servers = len(os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(","))
heter = os.environ.get("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "")
expected = servers + (len(heter.split(",")) if heter else 0)
deadline = time.time() + 20
while time.time() < deadline:
    logs = glob.glob(os.path.join(sys.argv[1], "serverlog.*")) + \
           glob.glob(os.path.join(sys.argv[1], "heterlog.*"))
    ready = [p for p in logs if "READY" in open(p).read()]
    if len(ready) >= expected:
        break
    time.sleep(0.05)
print("TRAINER DONE %s" % time.time())
)PY";

struct PsJob {
  TempDir dir{"paddle_ps"};
  fs::path logs = dir.path() / "log";
  std::unique_ptr<LaunchRun> run;
  std::optional<int> code;

  PsJob(const std::vector<std::string>& flags, env::EnvMap env = {}) {
    const fs::path script = dir.path() / "ps_program.py";
    std::ofstream(script) << kProgram;
    std::vector<std::string> args = flags;
    for (const std::string& a :
         {std::string("--log_dir"), logs.string(), script.string(), logs.string()}) {
      args.push_back(a);
    }
    run = std::make_unique<LaunchRun>(dir, args, std::move(env));
    code = run->wait(milliseconds(30'000));
  }
  std::string log(const std::string& name) const { return read_file(logs / name); }
  // The log file names of the folder, sorted.
  std::vector<std::string> log_names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(logs)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("report.", 0) != 0) names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

// The time a trainer printed when it was done (seconds since the epoch).
double done_at(const std::string& log) {
  const auto at = log.find("TRAINER DONE ");
  return at == std::string::npos ? 0.0 : std::stod(log.substr(at + 13));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(PaddlePs, FleetStyleServersAreKilledAsSoonAsTheTrainersAreDone) {
  // test_fleet_launch_ps.sh: --server_num=2 --worker_num=2, then grep "server are killed".
  PsJob job({"--server_num=2", "--worker_num=2"});
  const std::string err = job.run->err();
  ASSERT_EQ(job.code, 0) << err;
  const double ended = now_seconds();
  const double last_trainer =
      std::max(done_at(job.log("workerlog.0")), done_at(job.log("workerlog.1")));
  ASSERT_GT(last_trainer, 0.0) << job.log("workerlog.0");
  EXPECT_LT(ended - last_trainer, 5.0) << "servers stopped well before the 10 s of a grace";
  EXPECT_TRUE(contains(err, "server are killed")) << err;
  EXPECT_TRUE(contains(err, "all workers exit, going to finish parameter server")) << err;
  EXPECT_EQ(job.log_names(),
            (std::vector<std::string>{"serverlog.0", "serverlog.1", "workerlog.0", "workerlog.1"}));
  for (int i = 0; i < 2; ++i) {
    const std::string s = job.log("serverlog." + std::to_string(i));
    EXPECT_TRUE(contains(s, "ENV TRAINING_ROLE=PSERVER\n")) << s;
    EXPECT_TRUE(contains(s, "ENV PADDLE_ROLE=PSERVER\n")) << s;
    EXPECT_TRUE(contains(s, "ENV PADDLE_TRAINER_ID=<unset>\n")) << s;
    EXPECT_TRUE(contains(s, "ENV POD_IP=127.0.0.1\n")) << s;
    EXPECT_TRUE(contains(s, "ENV PADDLE_TRAINERS_NUM=2\n")) << s;
    const std::string t = job.log("workerlog." + std::to_string(i));
    EXPECT_TRUE(contains(t, "ENV TRAINING_ROLE=TRAINER\n")) << t;
    EXPECT_TRUE(contains(t, "ENV PADDLE_ROLE=TRAINER\n")) << t;
    EXPECT_TRUE(contains(t, "ENV PADDLE_TRAINER_ID=" + std::to_string(i) + "\n")) << t;
    EXPECT_FALSE(contains(t, "ENV PADDLE_PORT=<unset>")) << "its own port, as fleet gives it";
    EXPECT_TRUE(contains(t, "ENV STAGE_ID=<unset>\n")) << "no heter workers, no stages";
  }
}

TEST(PaddlePs, ExplicitServerGraceKeepsOurGrace) {
  PsJob job({"--server_num=1", "--worker_num=1", "--server_grace=1"});
  const std::string err = job.run->err();
  ASSERT_EQ(job.code, 0) << err;
  EXPECT_TRUE(contains(err, "(--server_grace): stopping them")) << err;
  EXPECT_FALSE(contains(err, "server are killed")) << err;
}

TEST(PaddlePs, RunModePsAloneIsOneServerAndOneTrainer) {
  // Paddle 2.x's ps controller: server_num or 1, trainer_num or 1.
  PsJob job({"--run_mode=ps"});
  const std::string err = job.run->err();
  ASSERT_EQ(job.code, 0) << err;
  // Paddle 2.x's spelling: its log folder also holds the launcher's own JOB_ID.POD.log.
  const std::vector<std::string> names = job.log_names();
  ASSERT_EQ(names.size(), 3u) << err;
  EXPECT_EQ(names[0].rfind("default.", 0), 0u) << names[0];
  EXPECT_EQ(names[0].substr(names[0].size() - 4), ".log") << names[0];
  EXPECT_EQ(names[1], "serverlog.0");
  EXPECT_EQ(names[2], "workerlog.0");
  EXPECT_TRUE(contains(job.log("serverlog.0"), "ENV PADDLE_ROLE=PSERVER\n"));
  EXPECT_TRUE(contains(job.log("workerlog.0"), "ENV PADDLE_ROLE=TRAINER\n"));
  EXPECT_TRUE(contains(err, "server are killed")) << err;
}

TEST(PaddlePs, HeterWorkersGetTheirStagesAndLogsAndStopWithTheServers) {
  // test_fleet_launch_ps.sh's heter case, with two heter stages of different devices.
  PsJob job(
      {"--server_num=1", "--worker_num=2", "--heter_worker_num=1;2", "--heter_devices=gpu;xpu"});
  const std::string err = job.run->err();
  ASSERT_EQ(job.code, 0) << err;
  EXPECT_EQ(job.log_names(),
            (std::vector<std::string>{"heterlog.0", "heterlog.1", "heterlog.2", "serverlog.0",
                                      "workerlog.0", "workerlog.1"}));
  EXPECT_TRUE(contains(err, "all heter_worker are killed")) << err;
  EXPECT_TRUE(contains(err, "server are killed")) << err;
  const std::string h0 = job.log("heterlog.0");
  EXPECT_TRUE(contains(h0, "ENV TRAINING_ROLE=HETER_TRAINER\n")) << h0;
  EXPECT_TRUE(contains(h0, "ENV STAGE_ID=2\n")) << h0;
  EXPECT_TRUE(contains(h0, "ENV STAGE_NUM=3\n")) << h0;
  EXPECT_TRUE(contains(h0, "ENV HETER_DEVICE_TYPE=gpu\n")) << h0;
  EXPECT_TRUE(contains(h0, "ENV PADDLE_STAGE_TRAINERS_NUM=[2, 1, 2]\n")) << h0;
  EXPECT_TRUE(contains(h0, "ENV PADDLE_TRAINER_ID=<unset>\n")) << h0;
  const std::string h2 = job.log("heterlog.2");
  EXPECT_TRUE(contains(h2, "ENV STAGE_ID=3\n")) << h2;
  EXPECT_TRUE(contains(h2, "ENV HETER_DEVICE_TYPE=xpu\n")) << h2;
  EXPECT_TRUE(contains(h2, "ENV PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST=\n")) << h2;
  const std::string t0 = job.log("workerlog.0");
  EXPECT_TRUE(contains(t0, "ENV STAGE_ID=1\n")) << t0;
  EXPECT_TRUE(contains(t0, "ENV HETER_DEVICE_TYPE=cpu\n")) << t0;
  EXPECT_TRUE(contains(t0, "ENV PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST=\n")) << t0;
  EXPECT_FALSE(contains(t0, "ENV PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST=\n")) << t0;
}

TEST(PaddlePs, AFailingHeterWorkerFailsTheJobFast) {
  const auto start = Clock::now();
  PsJob job({"--server_num=1", "--worker_num=1", "--heter_worker_num=1"}, {{"FAIL_HETER", "1"}});
  const std::string err = job.run->err();
  EXPECT_EQ(job.code, 3) << err;
  EXPECT_LT(Clock::now() - start, milliseconds(10'000)) << "not the trainers' 20 s wait";
  EXPECT_TRUE(contains(err, "heter worker 0")) << err;
  EXPECT_TRUE(contains(err, "heterlog.0")) << err;
}

TEST(PaddlePs, BadHeterCombinationsAreOneLineErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {"--heter_worker_num=1"},
      {"--server_num=1", "--heter_worker_num=1;1", "--heter_devices=gpu"},
      {"--server_num=1", "--heter_workers=127.0.0.1:7002"},
      {"--run_mode=ps-heter"},
  };
  for (const auto& flags : bad) {
    PsJob job(flags);
    const std::string err = job.run->err();
    EXPECT_EQ(job.code, 2) << flags[0] << "\n" << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

// `launch_ps` (a link to launch) runs Paddle 1.8's test_launch_ps.sh command line unchanged:
// `python -m paddle.distributed.launch_ps fleet_ps_training.py` without flags is 2 servers at
// 127.0.0.1:6170 and 6171, 2 trainers, logs in ./logs, the servers killed once the trainers end.
// Port 6170 is fixed: the test holds the RESOURCE_LOCK paddle_cloud_port.
struct LaunchPsJob {
  TempDir dir{"paddle_launch_ps"};
  std::unique_ptr<testing::ChildProcess> child;
  std::optional<int> code;

  explicit LaunchPsJob(const std::string& flags) {
    std::ofstream(dir.path() / "ps_program.py") << kProgram;
    env::EnvMap environment = env::current_environment();
    environment.erase(env::kJobSecret);
    environment.erase(env::kJobId);
    environment.erase(env::kOmpNumThreads);
    testing::SpawnOptions o;
    const std::string launch_ps = (fs::path(kLaunch).parent_path() / "launch_ps").string();
    o.argv = {"/bin/sh", "-c",
              "cd '" + dir.path().string() + "' && exec '" + launch_ps + "' " + flags +
                  " ps_program.py logs"};
    o.env = environment;
    o.stdout_path = dir.path() / "stdout";
    o.stderr_path = dir.path() / "stderr";
    o.own_process_group = true;
    child = std::make_unique<testing::ChildProcess>(o);
    code = child->wait(milliseconds(30'000));
  }
  std::string err() const { return read_file(dir.path() / "stderr"); }
  std::string log(const std::string& name) const { return read_file(dir.path() / "logs" / name); }
};

TEST(PaddlePs, LaunchPsWithoutFlagsIsPaddle18sDefaultJob) {
  LaunchPsJob job("");
  ASSERT_EQ(job.code, 0) << job.err();
  for (int i = 0; i < 2; ++i) {
    const std::string s = job.log("serverlog." + std::to_string(i));
    EXPECT_TRUE(contains(s, "ENV TRAINING_ROLE=PSERVER\n")) << s;
    EXPECT_TRUE(contains(s, "ENV PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:6170,127.0.0.1:6171\n"))
        << s;
    EXPECT_TRUE(contains(s, "ENV PADDLE_PORT=" + std::to_string(6170 + i) + "\n")) << s;
    const std::string t = job.log("workerlog." + std::to_string(i));
    EXPECT_TRUE(contains(t, "ENV TRAINING_ROLE=TRAINER\n")) << t;
    EXPECT_TRUE(contains(t, "ENV PADDLE_TRAINER_ID=" + std::to_string(i) + "\n")) << t;
    EXPECT_TRUE(contains(t, "ENV PADDLE_TRAINERS_NUM=2\n")) << t;
    EXPECT_TRUE(contains(t, "TRAINER DONE")) << t;
  }
  EXPECT_TRUE(contains(job.err(), "all parameter server are killed")) << job.err();
}

TEST(PaddlePs, LaunchPsEndpointsAreTheServerList) {
  const int a = ddl::testing::free_port_block_above_ephemeral(),
            b = ddl::testing::free_port_block_above_ephemeral();
  const std::string list = "127.0.0.1:" + std::to_string(a) + ",127.0.0.1:" + std::to_string(b);
  LaunchPsJob job("--endpoints=" + list + " --worker_num=1");
  ASSERT_EQ(job.code, 0) << job.err();
  EXPECT_TRUE(contains(job.log("serverlog.1"), "ENV PADDLE_PORT=" + std::to_string(b) + "\n"))
      << job.log("serverlog.1");
  EXPECT_TRUE(contains(job.log("workerlog.0"), "ENV PADDLE_PSERVERS_IP_PORT_LIST=" + list + "\n"))
      << job.log("workerlog.0");
  EXPECT_FALSE(fs::exists(job.dir.path() / "logs" / "workerlog.1")) << "--worker_num=1";
}

}  // namespace
}  // namespace ddl::launch_test
