// Paddle's fleet elastic variables and flags (launcher/options/fleet_elastic.h): when they turn
// the elastic mode on, what they become on launch's etcd control plane, and the errors.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/options/options.h"
#include "tests/launcher/options/parse_args.h"

namespace ddl::launcher {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

env::EnvMap elastic_env(const std::string& np) {
  return {{"PADDLE_ELASTIC_SERVER", "127.0.0.1:2379"},
          {"PADDLE_ELASTIC_JOB_ID", "job-1"},
          {"PADDLE_ELASTIC_NP", np}};
}

TEST(FleetElastic, TheThreeVariablesMakeAnEtcdJob) {
  const LaunchOptions o = parse({"train.py"}, elastic_env("2"));
  ASSERT_NE(o.etcd(), nullptr);
  EXPECT_EQ(o.etcd()->endpoints.front().str(), "127.0.0.1:2379");
  EXPECT_EQ(o.etcd()->spelling, "PADDLE_ELASTIC_SERVER");
  EXPECT_TRUE(o.paddle_elastic);
  EXPECT_EQ(o.fleet_level, 1) << "N: fault tolerance";
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_FALSE(o.min_nnodes);
  EXPECT_FALSE(o.node_rank) << "etcd numbers the nodes";
  EXPECT_EQ(o.job_id, "job-1");
  // The fleet manager's defaults: 120 s for more nodes, Paddle's 3 restarts.
  EXPECT_EQ(o.last_call_timeout, std::chrono::seconds(120));
  EXPECT_EQ(o.max_restarts, 3);
}

TEST(FleetElastic, MinMaxIsAnElasticJob) {
  env::EnvMap env = elastic_env("2:4");
  env["PADDLE_ELASTIC_TIMEOUT"] = "5";
  const LaunchOptions o = parse({"train.py"}, env);
  EXPECT_EQ(o.fleet_level, 2);
  EXPECT_EQ(o.min_nnodes, 2);
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.last_call_timeout, std::chrono::seconds(5));
  // Two equal counts are a fixed one, as Paddle's manager corrects it.
  EXPECT_EQ(parse({"train.py"}, elastic_env("3:3")).fleet_level, 1);
}

TEST(FleetElastic, TheFleetLaunchersFlagsSayTheSame) {
  const LaunchOptions o = parse(
      {"--elastic_server=10.0.0.5:2379", "--job_id=j2", "--np=3", "--max_restarts=1", "train.py"});
  ASSERT_NE(o.etcd(), nullptr);
  EXPECT_EQ(o.etcd()->spelling, "--elastic_server");
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.job_id, "j2");
  EXPECT_EQ(o.max_restarts, 1) << "given restarts are kept";
  // Kubernetes' service variables stand for the server.
  const LaunchOptions k = parse({"train.py"}, {{"PADDLE_ELASTIC_ETCD_SERVICE_HOST", "10.1.2.3"},
                                               {"PADDLE_ELASTIC_ETCD_SERVICE_PORT", "2379"},
                                               {"PADDLE_ELASTIC_JOB_ID", "j"},
                                               {"PADDLE_ELASTIC_NP", "2"}});
  ASSERT_NE(k.etcd(), nullptr);
  EXPECT_EQ(k.etcd()->endpoints.front().str(), "10.1.2.3:2379");
}

TEST(FleetElastic, ANodeKeepsItsPlace) {
  env::EnvMap env = elastic_env("3");
  env["PADDLE_TRAINER_ID"] = "2";  // Paddle's operator numbers the pods
  env["POD_IP"] = "10.0.0.7";
  LaunchOptions o = parse({"train.py"}, env);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.node_ip, "10.0.0.7");
  // Without it, this node's place in --ips.
  o = parse({"--ips=10.0.0.1,10.0.0.2", "--node_ip=10.0.0.2", "train.py"}, elastic_env("2"));
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_NE(o.etcd(), nullptr);
  // A trainer id beyond the count is an error naming the variable.
  env["PADDLE_TRAINER_ID"] = "3";
  EXPECT_TRUE(has(error_of({"train.py"}, env), "--node_rank='3'")) << error_of({"train.py"}, env);
}

TEST(FleetElastic, HalfGivenItIsOffWithAWarning) {
  env::EnvMap env = elastic_env("2");
  env.erase("PADDLE_ELASTIC_JOB_ID");
  const LaunchOptions o = parse({"train.py"}, env);
  EXPECT_FALSE(o.paddle_elastic);
  EXPECT_EQ(o.etcd(), nullptr);
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_TRUE(has(o.warnings[0], "Paddle's elastic mode is off")) << o.warnings[0];
  EXPECT_TRUE(has(o.warnings[0], "a job id (--job_id, PADDLE_ELASTIC_JOB_ID)")) << o.warnings[0];
  // A job id alone is Paddle 2.x's ordinary flag: no warning.
  EXPECT_TRUE(parse({"--job_id=x", "train.py"}).warnings.empty());
}

TEST(FleetElastic, BadInputIsOneLine) {
  EXPECT_TRUE(has(error_of({"train.py"}, elastic_env("two")), "PADDLE_ELASTIC_NP='two'"))
      << error_of({"train.py"}, elastic_env("two"));
  EXPECT_TRUE(has(error_of({"train.py"}, elastic_env("4:2")), "MIN <= MAX"));
  EXPECT_TRUE(has(error_of({"train.py"}, elastic_env("0")), "PADDLE_ELASTIC_NP='0'"));
  env::EnvMap env = elastic_env("2");
  env["PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"] = "3";
  EXPECT_TRUE(has(error_of({"train.py"}, env), "expected 1 (fault tolerance) or 2 (elastic)"));
  env["PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"] = "2";
  const LaunchOptions o = parse({"train.py"}, env);
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_TRUE(has(o.warnings[0], "is not used: --np=2 makes the job fault-tolerant"))
      << o.warnings[0];
  // Another description of the nodes with it.
  EXPECT_TRUE(has(error_of({"--nnodes=2", "--master=127.0.0.1:6170", "train.py"}, elastic_env("2")),
                  "makes etcd gather the nodes"));
  EXPECT_TRUE(has(error_of({"--server_num=1", "--worker_num=1", "train.py"}, elastic_env("2")),
                  "runs collective jobs"));
  EXPECT_TRUE(has(error_of({"train.py"}, {{"PADDLE_ELASTIC_SERVER", "a b:1"},
                                          {"PADDLE_ELASTIC_JOB_ID", "j"},
                                          {"PADDLE_ELASTIC_NP", "2"}}),
                  "PADDLE_ELASTIC_SERVER='a b:1'"));
}

}  // namespace
}  // namespace ddl::launcher
