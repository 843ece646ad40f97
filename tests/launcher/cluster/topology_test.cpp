// Slurm's environment: hostlist expansion and the plan a 2-node allocation produces; the torchrun
// spelling of the node flags.
#include "launcher/cluster/topology.h"

#include <gtest/gtest.h>

#include "env/host.h"
#include "env/slurm.h"
#include "launcher/cluster/plan.h"
#include "launcher/options/options.h"

namespace ddl::launcher {
namespace {

using Hosts = std::vector<std::string>;

LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "launch");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

Hosts expand(const std::string& text) { return env::expand_hostlist(text, "LIST"); }

TEST(Hostlist, Expands) {
  EXPECT_EQ(expand("node[01-04]"), (Hosts{"node01", "node02", "node03", "node04"}));
  EXPECT_EQ(expand("a[1,3-5]b"), (Hosts{"a1b", "a3b", "a4b", "a5b"}));
  EXPECT_EQ(expand("plain"), (Hosts{"plain"}));
  EXPECT_EQ(expand("n1,n2"), (Hosts{"n1", "n2"}));
  EXPECT_EQ(expand("gpu[1-2],cpu7,x[9-10]"), (Hosts{"gpu1", "gpu2", "cpu7", "x9", "x10"}));
  EXPECT_EQ(expand("x[8-10]"), (Hosts{"x8", "x9", "x10"})) << "no padding from a 1-digit bound";
  EXPECT_EQ(expand("x[098-101]"), (Hosts{"x098", "x099", "x100", "x101"}));
  EXPECT_EQ(expand("x[007]"), (Hosts{"x007"}));
  EXPECT_EQ(expand("r[1-2]n[1-2]"), (Hosts{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expand("[1-2]x"), (Hosts{"1x", "2x"}));
  EXPECT_EQ(expand("127.0.0.[1-2]"), (Hosts{"127.0.0.1", "127.0.0.2"}));
  EXPECT_EQ(expand("node-a.example.com,node[3-3].ib"), (Hosts{"node-a.example.com", "node3.ib"}));
  EXPECT_EQ(expand("n[1-65536]").size(), env::kMaxHostlistHosts);
}

TEST(Hostlist, RejectsMalformedListsQuotingThem) {
  for (const std::string bad :
       {"", "n[1-2", "n1-2]", "n[]", "n[2-1]", "n[a-b]", "n[1-]", "n[-1]", "n[1,,2]", "n1,,n2",
        "n1,", ",n1", "n[[1]]", "n[1-2]x]", "n 1", "n[1-70000]", "n[0-999]m[0-999]"}) {
    try {
      expand(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const env::EnvError& e) {
      EXPECT_NE(std::string(e.what()).find("LIST='" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

env::EnvMap two_node_allocation(const std::string& node_id) {
  return {{env::kSlurmJobNodelist, "gpu[07-08]"},
          {env::kSlurmNnodes, "2"},
          {env::kSlurmNodeId, node_id},
          {env::kSlurmJobId, "4242"},
          {env::kSlurmNtasksPerNode, "1"}};
}

TEST(Slurm, ReadsTheAllocation) {
  EXPECT_FALSE(env::slurm_nodes({}));
  EXPECT_FALSE(env::slurm_nodes({{env::kSlurmJobNodelist, "a[1-2]"}})) << "NODEID/NNODES missing";
  const auto nodes = env::slurm_nodes(two_node_allocation("1"));
  ASSERT_TRUE(nodes);
  EXPECT_EQ(nodes->hosts, (Hosts{"gpu07", "gpu08"}));
  EXPECT_EQ(nodes->node_rank, 1);
  EXPECT_EQ(nodes->job_id, "4242");
}

TEST(Slurm, RejectsInconsistentAllocations) {
  auto expect_error = [](env::EnvMap env, const std::string& part) {
    try {
      env::slurm_nodes(env);
      ADD_FAILURE() << "accepted; expected an error about " << part;
    } catch (const env::EnvError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto env = two_node_allocation("2");
  expect_error(env, "SLURM_NODEID='2'");
  env = two_node_allocation("0");
  env[env::kSlurmNnodes] = "3";
  expect_error(env, "SLURM_NNODES='3'");
  env = two_node_allocation("0");
  env[env::kSlurmNtasksPerNode] = "4";
  expect_error(env, "--ntasks-per-node=1");
  env = two_node_allocation("x");
  expect_error(env, "SLURM_NODEID='x'");
  env = two_node_allocation("0");
  env[env::kSlurmJobNodelist] = "a,a";
  expect_error(env, "twice");
  env = two_node_allocation("0");
  env[env::kSlurmJobNodelist] = "gpu07,$(id)";
  expect_error(env,
               "SLURM_JOB_NODELIST='gpu07,$(id)': '$(id)' is not an IPv4 address or host name");
}

TEST(Slurm, TwoNodeAllocationGivesTheTopologyAndThePlan) {
  const LaunchOptions options = parse({"--nproc_per_node=2", "--started_port=7000", "w"});
  for (int node = 0; node < 2; ++node) {
    SCOPED_TRACE("node " + std::to_string(node));
    const NodeTopology t = resolve_topology(options, two_node_allocation(std::to_string(node)));
    EXPECT_TRUE(t.multi_node());
    EXPECT_EQ(t.nnodes, 2);
    EXPECT_EQ(t.node_rank, node);
    EXPECT_EQ(t.hosts, (Hosts{"gpu07", "gpu08"}));
    EXPECT_EQ(t.local_host, node == 0 ? "gpu07" : "gpu08");
    EXPECT_EQ(t.control.str(), "gpu07:6999") << "started_port - 1 on node 0";
    EXPECT_NE(t.source.find("Slurm job 4242"), std::string::npos) << t.source;

    // The endpoints every node publishes, as `launch` gathers them through the control store.
    PlanInputs in;
    in.cores = 4;
    in.job_id = "j";
    in.job_secret = "s";
    in.node_rank = t.node_rank;
    in.cluster_endpoints = std::vector<env::Endpoint>{
        {"gpu07", 7000}, {"gpu07", 7001}, {"gpu08", 7000}, {"gpu08", 7001}};
    // The planner's part of the options (launcher/cluster/job_config.h).
    JobConfig config;
    config.nproc_per_node = 2;
    config.started_port = 7000;
    const ClusterPlan plan = make_plan(config, in);
    EXPECT_EQ(plan.world_size, 4);
    ASSERT_EQ(plan.local.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      const auto& c = plan.local[i].contract;
      EXPECT_EQ(c.rank, node * 2 + i);
      EXPECT_EQ(c.local_rank, i);
      EXPECT_EQ(c.current.str(), t.hosts[node] + ":" + std::to_string(7000 + i));
      EXPECT_EQ(plan.local[i].env.at(env::kTrainerEndpoints),
                "gpu07:7000,gpu07:7001,gpu08:7000,gpu08:7001");
      EXPECT_EQ(plan.local[i].env.at(env::kMasterAddr), "gpu07");
    }
  }
}

TEST(Slurm, NodeFlagsWinAndOneNodeAllocationsStaySingleNode) {
  const auto slurm = two_node_allocation("1");
  const NodeTopology flags =
      resolve_topology(parse({"--ips=10.0.0.1,10.0.0.2", "--node_ip=10.0.0.1", "w"}), slurm);
  EXPECT_EQ(flags.node_rank, 0);
  EXPECT_EQ(flags.hosts, (Hosts{"10.0.0.1", "10.0.0.2"}));
  EXPECT_EQ(flags.control.str(), "10.0.0.1:" + std::to_string(kDefaultControlPort));

  env::EnvMap one = {
      {env::kSlurmJobNodelist, "solo"}, {env::kSlurmNnodes, "1"}, {env::kSlurmNodeId, "0"}};
  const NodeTopology single = resolve_topology(parse({"w"}), one);
  EXPECT_FALSE(single.multi_node());
  EXPECT_EQ(single.local_host, "127.0.0.1");
}

TEST(Torchrun, SpellingMapsOntoTheTopology) {
  const LaunchOptions o = parse({"--nnodes=3", "--node_rank=2", "--master_addr=head.example",
                                 "--master_port=1234", "--nproc_per_node=4", "w"});
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  const NodeTopology t = resolve_topology(o, {});
  EXPECT_EQ(t.nnodes, 3);
  EXPECT_EQ(t.node_rank, 2);
  EXPECT_TRUE(t.hosts.empty()) << "the other nodes publish their own endpoints";
  EXPECT_FALSE(t.local_host) << "found by routing towards the master";
  EXPECT_EQ(t.control.str(), "head.example:1235")
      << "static spelling: MASTER_PORT 1234 is rank 0's, the control store is next to it";

  const NodeTopology with_ip = resolve_topology(
      parse({"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", "--node_ip=10.0.0.7", "w"}),
      {});
  EXPECT_EQ(with_ip.local_host, "10.0.0.7");
  EXPECT_EQ(with_ip.control.port, kDefaultControlPort + 1) << "MASTER_PORT defaults to 29500";

  // The other spellings keep the control store on the port they name.
  EXPECT_EQ(resolve_topology(parse({"--nnodes=2", "--rdzv_endpoint=h:1234", "w"}), {}).control.port,
            1234);
  EXPECT_EQ(
      resolve_topology(parse({"--nnodes=2", "--rank=0", "--master=h:1234", "w"}), {}).control.port,
      1234);
  EXPECT_EQ(resolve_topology(parse({"--nnodes=2", "--node_rank=0", "--master_addr=h",
                                    "--master_port=1234", "--started_port=6170", "w"}),
                             {})
                .control.port,
            1234)
      << "with --started_port rank 0's port is that one, MASTER_PORT is free for the store";

  EXPECT_FALSE(resolve_topology(parse({"--nnodes=1", "w"}), {}).multi_node());
}

TEST(Torchrun, BadCombinationsNameTheFlags) {
  auto expect_error = [](std::vector<std::string> args, const std::string& part) {
    try {
      parse(args);
      ADD_FAILURE() << "accepted; expected an error about " << part;
    } catch (const OptionsError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error({"--nnodes=2", "--node_rank=2", "--master_addr=a", "w"}, "--node_rank=2");
  expect_error({"--nnodes=2", "--node_rank=1", "w"}, "--master_addr");
  expect_error({"--nnodes=2", "--ips=10.0.0.1,10.0.0.2", "--master_addr=a", "w"}, "one spelling");
  expect_error({"--nnodes=0", "w"}, "--nnodes");
  expect_error({"--master_port=0", "w"}, "--master_port");
  expect_error({"--master_addr=bad host", "w"}, "--master_addr");
  expect_error({"--ips=node_a!,b", "w"}, "--ips");
}

// An etcd cluster as the control plane: no node hosts a control store; the node count and rank
// come from --nnodes and --node_rank (or --rank) as in torchrun's spelling.
TEST(Etcd, EitherSpellingGivesTheEtcdTopology) {
  const NodeTopology t = resolve_topology(
      parse({"--rdzv_backend=etcd", "--rdzv_endpoint=10.0.0.1:2379,http://10.0.0.2:2379",
             "--nnodes=2:3", "w"}),
      {});
  ASSERT_TRUE(t.etcd());
  EXPECT_EQ(t.etcd()->endpoints,
            (std::vector<env::Endpoint>{{"10.0.0.1", 2379}, {"10.0.0.2", 2379}}));
  EXPECT_EQ(t.source, "--rdzv_backend=etcd");
  EXPECT_EQ(t.nnodes, 3);
  EXPECT_EQ(t.min_nnodes, 2);
  EXPECT_TRUE(t.elastic());
  EXPECT_TRUE(t.auto_node_rank);
  EXPECT_EQ(t.control, env::Endpoint{}) << "no node hosts a control store";
  EXPECT_TRUE(t.hosts.empty());
  EXPECT_FALSE(t.local_host) << "found by routing towards the first etcd endpoint";
  EXPECT_FALSE(t.paddle_static());

  const NodeTopology paddle =
      resolve_topology(parse({"--master=etcd://localhost:2379", "--nnodes=2", "--rank=1",
                              "--node_ip=10.0.0.7", "w"}),
                       {});
  ASSERT_TRUE(paddle.etcd());
  EXPECT_EQ(paddle.etcd()->endpoints, (std::vector<env::Endpoint>{{"localhost", 2379}}));
  EXPECT_EQ(paddle.source, "--master=etcd://");
  EXPECT_EQ(paddle.nnodes, 2);
  EXPECT_EQ(paddle.min_nnodes, 2);
  EXPECT_EQ(paddle.node_rank, 1);
  EXPECT_FALSE(paddle.auto_node_rank) << "--rank given";
  EXPECT_EQ(paddle.local_host, "10.0.0.7");

  const NodeTopology single = resolve_topology(parse({"--master=etcd://localhost", "w"}), {});
  EXPECT_FALSE(single.multi_node());
  EXPECT_FALSE(single.auto_node_rank) << "one node has nothing to number";
  EXPECT_EQ(single.local_host, kDefaultNodeIp);
}

TEST(Etcd, SchedulersAndNodeListsDoNotCombineWithIt) {
  // Slurm's and PaddleCloud's variables are not consulted: etcd numbers the nodes.
  const env::EnvMap slurm = {{"SLURM_JOB_NODELIST", "n[1-2]"},
                             {"SLURM_NNODES", "2"},
                             {"SLURM_NODEID", "1"},
                             {"SLURM_JOB_ID", "7"},
                             {"PADDLE_TRAINERS", "10.0.0.1,10.0.0.2"},
                             {"POD_IP", "10.0.0.2"},
                             {"PADDLE_TRAINER_ID", "1"},
                             {"PADDLE_TRAINERS_NUM", "2"}};
  const NodeTopology t = resolve_topology(
      parse({"--rdzv_backend=etcd-v2", "--rdzv_endpoint=10.0.0.1", "--nnodes=2", "w"}), slurm);
  EXPECT_EQ(t.source, "--rdzv_backend=etcd-v2");
  EXPECT_FALSE(t.cloud());
  EXPECT_TRUE(t.hosts.empty());
  EXPECT_TRUE(t.auto_node_rank);
  // A node list with etcd cannot even be written down (one case per job); the command line
  // refuses it.
  EXPECT_THROW(parse({"--master=etcd://10.0.0.1", "--ips=a,b", "--node_ip=a", "w"}), OptionsError);
}

// One case per way a job is described, decided once: the command line's (parse_options), then
// the environment's where the command line lists no nodes (resolve_topology).
TEST(NodeDescription, EachWayIsItsOwnCase) {
  const env::EnvMap slurm = {
      {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}};
  const env::EnvMap mpi = {{"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_RANK", "1"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  const env::EnvMap cloud = {{"PADDLE_TRAINERS", "10.0.0.1,10.0.0.2"},
                             {"POD_IP", "10.0.0.2"},
                             {"PADDLE_TRAINER_ID", "1"},
                             {"PADDLE_TRAINERS_NUM", "2"}};
  const auto how = [](const std::vector<std::string>& args, const env::EnvMap& env) {
    return resolve_topology(parse(args), env).how.index();
  };
  const auto index_of = [](NodeDescription d) { return d.index(); };
  EXPECT_EQ(how({"w"}, {}), index_of(nodes::OneNode{}));
  EXPECT_EQ(how({"--ips=a,b", "--node_ip=b", "w"}, {}), index_of(nodes::NodeList{}));
  EXPECT_EQ(how({"--ips=a,b", "--node_ip=b", "w"}, slurm), index_of(nodes::NodeList{}))
      << "node flags: Slurm's variables are not read";
  EXPECT_EQ(how({"--nnodes=2", "--master_addr=a", "w"}, mpi), index_of(nodes::ControlStore{}));
  EXPECT_EQ(how({"--rdzv_backend=etcd", "--rdzv_endpoint=e", "--nnodes=2", "w"}, cloud),
            index_of(nodes::Etcd{}));
  EXPECT_EQ(how({"w"}, cloud), index_of(nodes::PaddleCloud{}));
  EXPECT_EQ(how({"w"}, slurm), index_of(nodes::Scheduler{}));
  EXPECT_EQ(how({"w"}, mpi), index_of(nodes::Scheduler{}));
  EXPECT_FALSE(std::get<nodes::Scheduler>(resolve_topology(parse({"w"}), mpi).how).hosts_known);
  EXPECT_TRUE(resolve_topology(parse({"--ips=a,b", "--node_ip=a", "w"}), {}).paddle_static());
  EXPECT_FALSE(resolve_topology(parse({"w"}), slurm).paddle_static());
}

TEST(Options, HostNamesAreAcceptedInTheNodeList) {
  const LaunchOptions o = parse({"--ips=gpu07,gpu08.cluster", "--node_ip=gpu08.cluster", "w"});
  EXPECT_EQ(o.cluster_node_ips, (Hosts{"gpu07", "gpu08.cluster"}));
  EXPECT_EQ(o.node_index(), 1);
  EXPECT_TRUE(env::is_valid_host("10.0.0.1"));
  EXPECT_FALSE(env::is_valid_host("10.0.0"));
  EXPECT_FALSE(env::is_valid_host("-a"));
  EXPECT_FALSE(env::is_valid_host("a..b"));
}

}  // namespace
}  // namespace ddl::launcher

namespace ddl::launcher {
namespace {

// PaddleCloud's variables and FLAGS_START_PORT.
LaunchOptions parse_env(std::vector<std::string> args, const env::EnvMap& env) {
  args.insert(args.begin(), "launch");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data(), env);
}

const env::EnvMap kCloudEnv = {{"PADDLE_TRAINERS", "10.0.0.1,10.0.0.2"},
                               {"POD_IP", "10.0.0.2"},
                               {"PADDLE_TRAINER_ID", "1"},
                               {"PADDLE_TRAINERS_NUM", "2"}};

TEST(CloudTopology, TheFleetSwitchNeedsNoFlag) {
  const NodeTopology t = resolve_topology(
      parse_env({"--ips=10.0.0.9", "--node_ip=10.0.0.9", "w"}, kCloudEnv), kCloudEnv);
  EXPECT_TRUE(t.cloud());
  EXPECT_TRUE(t.paddle_static());
  EXPECT_EQ(t.nnodes, 2);
  EXPECT_EQ(t.node_rank, 1);
  EXPECT_EQ(t.hosts, (Hosts{"10.0.0.1", "10.0.0.2"})) << "the node flags given are ignored";
}

TEST(CloudTopology, OneTrainerOrTorchrunSpellingIsNotCloud) {
  env::EnvMap one = kCloudEnv;
  one["PADDLE_TRAINERS_NUM"] = "1";
  EXPECT_FALSE(resolve_topology(parse_env({"w"}, one), one).cloud());
  EXPECT_FALSE(resolve_topology(parse_env({"--use_paddlecloud", "w"}, one), one).cloud())
      << "Paddle 1.8: one trainer, no cloud";
  const LaunchOptions torchrun =
      parse_env({"--nnodes=2", "--node_rank=0", "--master_addr=10.0.0.1", "w"}, kCloudEnv);
  EXPECT_FALSE(resolve_topology(torchrun, kCloudEnv).cloud());
  EXPECT_FALSE(resolve_topology(parse_env({"--server_num=1", "w"}, kCloudEnv), kCloudEnv).cloud())
      << "parameter-server jobs are not PaddleCloud collective jobs";
}

TEST(CloudTopology, TheFlagWithoutVariablesIsAnError) {
  const env::EnvMap env = {{"PADDLE_TRAINERS_NUM", "2"}, {"POD_IP", "10.0.0.2"}};
  try {
    resolve_topology(parse_env({"--use_paddlecloud", "w"}, env), env);
    FAIL() << "PADDLE_TRAINERS and PADDLE_TRAINER_ID are missing";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("PADDLE_TRAINERS,PADDLE_TRAINER_ID"), std::string::npos)
        << e.what();
  }
}

TEST(CloudTopology, ANodeListIsPaddleStatic) {
  EXPECT_TRUE(
      resolve_topology(parse_env({"--ips=10.0.0.1,10.0.0.2", "--node_ip=10.0.0.1", "w"}, {}), {})
          .paddle_static());
  EXPECT_FALSE(resolve_topology(parse_env({"--nnodes=2", "--master_addr=10.0.0.1", "w"}, {}), {})
                   .paddle_static());
}

// PaddleCloud's variables and the other variables that name hosts pass the same check as the
// flags (env/host.h): `$(id)` is no host.
TEST(CloudTopology, AVariableThatIsNoHostIsRefusedNamingIt) {
  const auto error_of = [](const env::EnvMap& env) -> std::string {
    try {
      resolve_topology(parse_env({"w"}, env), env);
    } catch (const env::EnvError& e) {
      EXPECT_EQ(e.exit_code(), kExitParallel);
      return e.what();
    }
    return "";
  };
  env::EnvMap env = kCloudEnv;
  env["PADDLE_TRAINERS"] = "10.0.0.1,$(id)";
  env["POD_IP"] = "$(id)";
  EXPECT_NE(error_of(env).find(
                "PADDLE_TRAINERS='10.0.0.1,$(id)': '$(id)' is not an IPv4 address or host name"),
            std::string::npos)
      << error_of(env);
  env = kCloudEnv;
  env["POD_IP"] = "$(id)";
  EXPECT_NE(error_of(env).find("POD_IP='$(id)': not an IPv4 address or host name"),
            std::string::npos)
      << error_of(env);
  env = kCloudEnv;
  env["DISTRIBUTED_TRAINER_ENDPOINTS"] = "10.0.0.1:6170,$(id):6170";
  EXPECT_NE(error_of(env).find("DISTRIBUTED_TRAINER_ENDPOINTS='10.0.0.1:6170,$(id):6170': entry "
                               "'$(id):6170': '$(id)' is not an IPv4 address"),
            std::string::npos)
      << error_of(env);
  const env::EnvMap mpi = {{"OMPI_COMM_WORLD_RANK", "1"},
                           {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                           {"MASTER_ADDR", "$(id)"}};
  EXPECT_NE(error_of(mpi).find("MASTER_ADDR='$(id)': not an IPv4 address or host name"),
            std::string::npos)
      << error_of(mpi);
}

TEST(FlagsStartPort, IsTheFirstPortUnlessAFlagOrPaddle2xSaysOtherwise) {
  EXPECT_EQ(parse_env({"w"}, {{"FLAGS_START_PORT", "7100"}}).started_port, 7100);
  EXPECT_EQ(parse_env({"--started_port=7200", "w"}, {{"FLAGS_START_PORT", "7100"}}).started_port,
            7200);
  EXPECT_EQ(
      parse_env({"w"}, {{"FLAGS_START_PORT", "7100"}, {"PADDLE_START_PORT", "7300"}}).started_port,
      7300);
  EXPECT_FALSE(parse_env({"w"}, {}).started_port);
}

}  // namespace
}  // namespace ddl::launcher
