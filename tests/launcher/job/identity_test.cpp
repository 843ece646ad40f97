// The identity decision (launcher/job/identity.h) and the static job's endpoints and job id
// (launcher/cluster/static_job.h).
#include "launcher/job/identity.h"

#include <gtest/gtest.h>

#include "env/scheduler.h"
#include "launcher/cluster/plan.h"
#include "launcher/cluster/static_job.h"
#include "launcher/cluster/topology.h"

namespace ddl::launcher {
namespace {

IdentityRequest nodes(int n) {
  IdentityRequest r;
  r.nnodes = n;
  r.source = "test";
  return r;
}

TEST(Identity, OneNodeMakesItsOwnSecret) {
  const Identity a = choose_identity(nodes(1));
  EXPECT_EQ(a.mode, IdentityMode::kSingleNode);
  EXPECT_EQ(a.secret.size(), 32u);
  EXPECT_NE(choose_identity(nodes(1)).secret, a.secret);
  IdentityRequest r = nodes(1);
  r.caller_secret = "given";
  r.require_secret = true;
  EXPECT_EQ(choose_identity(r).secret, "given");
}

TEST(Identity, PaddleStaticWithoutSecretHasNoControlStore) {
  IdentityRequest r = nodes(2);
  r.paddle_static = true;
  const Identity id = choose_identity(r);
  EXPECT_EQ(id.mode, IdentityMode::kStatic);
  EXPECT_EQ(id.secret, "") << "the workers' store admits any client of the job id";
  r.caller_secret = "s";
  EXPECT_EQ(choose_identity(r).mode, IdentityMode::kControlStore) << "a secret keeps today's way";
  EXPECT_EQ(choose_identity(r).secret, "s");
}

TEST(Identity, ListedHostsAreStaticWhateverTheSecret) {
  IdentityRequest r = nodes(2);
  r.listed_hosts = true;
  EXPECT_EQ(choose_identity(r).mode, IdentityMode::kStatic);
  r.caller_secret = "s";
  EXPECT_EQ(choose_identity(r).mode, IdentityMode::kStatic);
  EXPECT_EQ(choose_identity(r).secret, "s");
}

TEST(Identity, OtherSpellingsRunUnauthenticatedOrAsRequired) {
  IdentityRequest r = nodes(3);
  EXPECT_EQ(choose_identity(r).mode, IdentityMode::kOpenControlStore);
  EXPECT_EQ(choose_identity(r).secret, "");
  r.require_secret = true;
  try {
    choose_identity(r);
    FAIL() << "a required secret is missing";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("DDL_JOB_SECRET"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 nodes (from test)"), std::string::npos) << e.what();
  }
  r.paddle_static = true;
  EXPECT_THROW(choose_identity(r), PlanError) << "required for Paddle's spelling too";
}

// No node 0 store decodes munge credentials when etcd is the control plane: inside a Slurm job
// such a job without a secret is unauthenticated (or refused when a secret is required).
TEST(Identity, EtcdIsNeverAMungeJob) {
  IdentityRequest r = nodes(2);
  r.slurm_job = "42";
  EXPECT_EQ(choose_identity(r).mode, IdentityMode::kMunge) << "the TCP control store under Slurm";
  r.etcd = true;
  EXPECT_EQ(choose_identity(r).mode, IdentityMode::kOpenControlStore);
  r.caller_secret = "s";
  EXPECT_EQ(choose_identity(r).mode, IdentityMode::kControlStore);
  r.caller_secret.reset();
  r.require_secret = true;
  try {
    choose_identity(r);
    FAIL() << "a required secret is missing";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("admits the launchers to the job's control plane"),
              std::string::npos)
        << e.what();
  }
}

TEST(Identity, RequireSecretVariable) {
  EXPECT_FALSE(secret_required_by({}));
  EXPECT_FALSE(secret_required_by({{env::kRequireSecret, ""}}));
  EXPECT_FALSE(secret_required_by({{env::kRequireSecret, "0"}}));
  EXPECT_TRUE(secret_required_by({{env::kRequireSecret, "1"}}));
  EXPECT_TRUE(secret_required_by({{env::kRequireSecret, "True"}}));
  EXPECT_THROW(secret_required_by({{env::kRequireSecret, "maybe"}}), env::EnvError);
}

TEST(Identity, NoticesSayWhatASecretAdds) {
  const std::string s = without_secret_notice(IdentityMode::kStatic, "a:1");
  for (const char* word : {"cross-node fail-fast", "job-wide restarts", "authenticated stores",
                           "DDL_JOB_SECRET"}) {
    EXPECT_NE(s.find(word), std::string::npos) << word << " in " << s;
  }
  const std::string o = without_secret_notice(IdentityMode::kOpenControlStore, "10.0.0.1:29500");
  EXPECT_NE(o.find("10.0.0.1:29500"), std::string::npos) << o;
  EXPECT_NE(o.find("DDL_JOB_SECRET"), std::string::npos) << o;
  EXPECT_EQ(without_secret_notice(IdentityMode::kControlStore, "x"), "");
}

std::string joined(const std::vector<env::Endpoint>& e) { return env::join_endpoints(e); }

NodeTopology node_list(std::vector<std::string> hosts) {
  NodeTopology t;
  t.hosts = std::move(hosts);
  t.nnodes = static_cast<int>(t.hosts.size());
  t.how = nodes::NodeList{};
  return t;
}

TEST(StaticJob, NodeListUsesStartedPortElsePaddlesDefault) {
  JobConfig c;
  c.nproc_per_node = 2;
  const NodeTopology t = node_list({"10.0.0.1", "10.0.0.2"});
  EXPECT_EQ(joined(static_endpoints(c, t)),
            "10.0.0.1:6070,10.0.0.1:6071,10.0.0.2:6070,10.0.0.2:6071");
  c.started_port = 7000;
  EXPECT_EQ(joined(static_endpoints(c, t)),
            "10.0.0.1:7000,10.0.0.1:7001,10.0.0.2:7000,10.0.0.2:7001");
  c.started_port = 65535;
  EXPECT_THROW(static_endpoints(c, t), PlanError);
}

TEST(StaticJob, ParameterServerBlocksPerNode) {
  JobConfig c;
  c.server_num = 1;
  c.worker_num = 2;
  c.started_port = 9000;
  EXPECT_EQ(joined(static_endpoints(c, node_list({"a", "b"}))),
            "a:9000,a:9001,a:9002,b:9000,b:9001,b:9002");
}

NodeTopology cloud(const env::EnvMap& env) {
  NodeTopology t = node_list({});
  if (auto node = env::paddle_cloud_node(env)) {
    t.hosts = node->node_ips;
    t.how = nodes::PaddleCloud{std::move(*node)};
  }
  return t;
}

const env::EnvMap kCloud = {{"PADDLE_TRAINERS", "127.0.0.1,127.0.0.2"},
                            {"POD_IP", "127.0.0.1"},
                            {"PADDLE_TRAINER_ID", "1"},
                            {"PADDLE_TRAINERS_NUM", "2"}};

TEST(StaticJob, CloudPorts) {
  JobConfig c;
  c.nproc_per_node = 2;
  env::EnvMap env = kCloud;
  EXPECT_EQ(joined(static_endpoints(c, cloud(env))),
            "127.0.0.1:6170,127.0.0.1:6171,127.0.0.2:6170,127.0.0.2:6171");
  env["PADDLE_PORT"] = "35019";
  EXPECT_EQ(joined(static_endpoints(c, cloud(env))).substr(0, 15), "127.0.0.1:6170,")
      << "PADDLE_PORT needs TRAINER_PORTS_NUM >= nproc";
  env["TRAINER_PORTS_NUM"] = "2";
  EXPECT_EQ(joined(static_endpoints(c, cloud(env))),
            "127.0.0.1:35019,127.0.0.1:35020,127.0.0.2:35019,127.0.0.2:35020");
  c.started_port = 4000;
  EXPECT_EQ(joined(static_endpoints(c, cloud(env))).substr(0, 16), "127.0.0.1:35019,")
      << "PADDLE_PORT wins over the first port given, as in Paddle";
  env.erase("PADDLE_PORT");
  EXPECT_EQ(joined(static_endpoints(c, cloud(env))).substr(0, 15), "127.0.0.1:4000,");
}

TEST(StaticJob, CloudEndpointList) {
  JobConfig c;
  c.nproc_per_node = 1;
  env::EnvMap env = kCloud;
  env["DISTRIBUTED_TRAINER_ENDPOINTS"] = "127.0.0.1:1,127.0.0.1:2,127.0.0.2:3,127.0.0.2:4";
  // Without TRAINER_PORTS_NUM the list is split evenly over the nodes, as Paddle 1.8 does.
  EXPECT_EQ(joined(static_endpoints(c, cloud(env))), "127.0.0.1:1,127.0.0.2:3");
  env["DISTRIBUTED_TRAINER_ENDPOINTS"] = "127.0.0.1:1,127.0.0.1:2,127.0.0.2:3";
  EXPECT_THROW(env::paddle_cloud_node(env), env::EnvError) << "3 endpoints over 2 nodes";
  env["DISTRIBUTED_TRAINER_ENDPOINTS"] = "127.0.0.1:1,127.0.0.1:2,127.0.0.2:3,127.0.0.2:4";
  env["TRAINER_PORTS_NUM"] = "3";
  EXPECT_THROW(env::paddle_cloud_node(env), env::EnvError) << "2 nodes x 3 is not 4";
  env["TRAINER_PORTS_NUM"] = "2";
  EXPECT_EQ(joined(static_endpoints(c, cloud(env))), "127.0.0.1:1,127.0.0.2:3")
      << "each node's first nproc entries of its block";
  c.nproc_per_node = 3;
  EXPECT_THROW(static_endpoints(c, cloud(env)), PlanError);
}

TEST(StaticJob, CloudVariables) {
  EXPECT_FALSE(env::paddle_cloud_node({{"PADDLE_TRAINERS", "a"}, {"POD_IP", "a"}}));
  const auto n = env::paddle_cloud_node(kCloud);
  ASSERT_TRUE(n);
  EXPECT_TRUE(n->in_use());
  EXPECT_EQ(n->node_rank, 1);
  env::EnvMap one = kCloud;
  one.erase("PADDLE_TRAINERS_NUM");
  EXPECT_FALSE(env::paddle_cloud_node(one)->in_use()) << "PADDLE_TRAINERS_NUM defaults to 1";
  env::EnvMap bad = kCloud;
  bad["PADDLE_TRAINER_ID"] = "2";
  EXPECT_THROW(env::paddle_cloud_node(bad), env::EnvError);
}

TEST(StaticJob, DerivedJobIdIsStableAndDistinct) {
  EXPECT_EQ(derived_job_id("a"), derived_job_id("a"));
  EXPECT_NE(derived_job_id("a"), derived_job_id("b"));
  EXPECT_EQ(derived_job_id("a").rfind("static-", 0), 0u);
  EXPECT_EQ(derived_job_id("a").size(), 7u + 16u);
}

}  // namespace
}  // namespace ddl::launcher
