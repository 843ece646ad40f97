#include "launcher/options/options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/options/flags.h"
#include "tests/launcher/options/parse_args.h"

namespace ddl::launcher {
namespace {

TEST(Options, Defaults) {
  LaunchOptions o = parse({"train"});
  EXPECT_TRUE(o.selected_gpus.empty());
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_FALSE(o.log_dir);
  EXPECT_FALSE(o.quiet);
  EXPECT_EQ(o.cluster_node_ips, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(o.node_ip, "127.0.0.1");
  EXPECT_FALSE(o.started_port);
  EXPECT_TRUE(o.print_config);
  EXPECT_EQ(o.log_level, spdlog::level::info);
  EXPECT_FALSE(o.log_level_name);
  EXPECT_EQ(o.kill_timeout, std::chrono::milliseconds(10'000));
  EXPECT_FALSE(o.rendezvous_timeout);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_EQ(o.hang_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(o.worker, "train");
  EXPECT_TRUE(o.worker_args.empty());
  EXPECT_EQ(o.node_index(), 0);
}

TEST(Options, EqualsAndSpaceForms) {
  LaunchOptions a = parse({"--selected_gpus=0,1,2,3", "--log_dir=./mylog", "--started_port=6170",
                           "train_multi_gpu", "--epochs", "3"});
  LaunchOptions b = parse({"--selected_gpus", "0,1,2,3", "--log_dir", "./mylog", "--started_port",
                           "6170", "train_multi_gpu", "--epochs", "3"});
  for (const LaunchOptions& o : {a, b}) {
    EXPECT_EQ(o.selected_gpus, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(o.nproc_per_node, 4);
    EXPECT_EQ(o.log_dir, "./mylog");
    EXPECT_EQ(o.started_port, 6170);
    EXPECT_EQ(o.worker, "train_multi_gpu");
    EXPECT_EQ(o.worker_args, (std::vector<std::string>{"--epochs", "3"}));
  }
}

TEST(Options, Aliases) {
  LaunchOptions o = parse({"--gpus=2,0", "--ips=10.0.0.1,10.0.0.2", "--node_ip=10.0.0.2", "w"});
  EXPECT_EQ(o.selected_gpus, (std::vector<int>{2, 0}));
  EXPECT_EQ(o.cluster_node_ips, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  EXPECT_EQ(o.node_index(), 1);
  EXPECT_NE(error_of({"--gpus=0", "--selected_gpus=1", "w"}), "");
}

TEST(Options, Paddle2AndTorchrunNames) {
  LaunchOptions o = parse({"--devices=1,0", "--nnodes=2", "--rank=1", "--master=10.0.0.1:6000",
                           "--job_id=mnist", "--rdzv_id=abc", "--role=trainer", "w"});
  EXPECT_EQ(o.selected_gpus, (std::vector<int>{1, 0}));
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 6000);
  EXPECT_EQ(o.job_id, "mnist");
  EXPECT_EQ(o.rdzv_id, "abc");
  EXPECT_EQ(o.role, "trainer");
  EXPECT_EQ(parse({"--master=http://10.0.0.1:6000", "--nnodes=2", "w"}).master_port, 6000);
  const LaunchOptions d = parse({"w"});
  EXPECT_FALSE(d.job_id);
  EXPECT_FALSE(d.rdzv_id);
  EXPECT_EQ(d.role, "default");
  const std::string described = describe_options(o);
  EXPECT_NE(described.find("job_id: mnist\n"), std::string::npos) << described;
  EXPECT_NE(described.find("rdzv_id: abc\n"), std::string::npos) << described;

  EXPECT_NE(error_of({"--devices=0", "--gpus=1", "w"}).find("--devices"), std::string::npos);
  EXPECT_NE(error_of({"--rank=1", "--node_rank=1", "--nnodes=2", "--master_addr=h", "w"}), "");
  EXPECT_NE(error_of({"--master=etcd://", "w"}).find("--master='etcd://': "), std::string::npos);
  EXPECT_NE(error_of({"--master=10.0.0.1", "w"}).find("HOST:PORT"), std::string::npos);
  EXPECT_NE(error_of({"--master=10.0.0.1:1", "--master_port=2", "w"}).find("not both"),
            std::string::npos);
  EXPECT_NE(error_of({"--job_id=a b", "w"}).find("--job_id"), std::string::npos);
  EXPECT_NE(error_of({"--rdzv_id=", "w"}).find("--rdzv_id"), std::string::npos);
}

TEST(Options, WorkerArgumentsAreUntouched) {
  LaunchOptions o =
      parse({"--nproc_per_node=2", "w", "--nproc_per_node=9", "--bogus", "--", "x y", "--log_dir"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.worker, "w");
  EXPECT_EQ(o.worker_args,
            (std::vector<std::string>{"--nproc_per_node=9", "--bogus", "--", "x y", "--log_dir"}));
  LaunchOptions d = parse({"--quiet", "--", "--weird-name", "a"});
  EXPECT_TRUE(d.quiet);
  EXPECT_EQ(d.worker, "--weird-name");
  EXPECT_EQ(d.worker_args, std::vector<std::string>{"a"});
}

TEST(Options, SwitchesAndLevels) {
  EXPECT_FALSE(parse({"--print_config=false", "w"}).print_config);
  EXPECT_FALSE(parse({"--print_config=False", "w"}).print_config);
  EXPECT_TRUE(parse({"--print_config", "w"}).print_config);
  EXPECT_TRUE(parse({"--quiet", "w"}).quiet);
  EXPECT_EQ(parse({"--log_level=debug", "w"}).log_level, spdlog::level::debug);
  EXPECT_EQ(parse({"--log_level", "30", "w"}).log_level, spdlog::level::warn);
  EXPECT_EQ(parse({"--log_level=40", "w"}).log_level_name, "error");
  EXPECT_EQ(parse({"--log_level=WARNING", "w"}).log_level_name, "warn");
  EXPECT_EQ(parse({"--log_level=10", "w"}).log_level_name, "debug");
  EXPECT_EQ(parse({"--kill_timeout=0.5", "w"}).kill_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(parse({"--kill_timeout", "0", "w"}).kill_timeout, std::chrono::milliseconds(0));
  EXPECT_EQ(parse({"--rendezvous_timeout=30", "w"}).rendezvous_timeout,
            std::chrono::milliseconds(30'000));
  EXPECT_EQ(parse({"--nproc_per_node", "3", "w"}).nproc_per_node, 3);
}

TEST(Options, RestartsAndHangGuard) {
  EXPECT_EQ(parse({"--max_restarts=3", "w"}).max_restarts, 3);
  EXPECT_EQ(parse({"--max_restarts", "0", "w"}).max_restarts, 0);
  EXPECT_EQ(parse({"--hang_timeout=1.5", "w"}).hang_timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(parse({"--hang_timeout", "0", "w"}).hang_timeout, std::chrono::milliseconds(0));
  const std::string text = describe_options(parse({"--max_restarts=2", "--hang_timeout=30", "w"}));
  EXPECT_NE(text.find("max_restarts: 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hang_timeout: 30\n"), std::string::npos) << text;
  EXPECT_NE(describe_options(parse({"w"})).find("hang_timeout: None\n"), std::string::npos);
  EXPECT_NE(help_text().find("--max_restarts"), std::string::npos);
  EXPECT_NE(help_text().find("--hang_timeout"), std::string::npos);
}

TEST(Options, HelpAndVersionNeedNoWorker) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_TRUE(parse({"--version"}).version);
  EXPECT_NE(help_text().find("--selected_gpus"), std::string::npos);
  EXPECT_NE(version_text().find("ddlaunch"), std::string::npos);
}

struct BadCase {
  std::vector<std::string> args;
  std::vector<std::string> message_has;  // the flag and the bad value
};

class BadOptions : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadOptions, OneLineNamingFlagAndValue) {
  const std::string message = error_of(GetParam().args);
  ASSERT_NE(message, "") << "parsed although bad";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& part : GetParam().message_has) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Launcher, BadOptions,
    ::testing::Values(
        BadCase{{"--selected_gpus=0,x", "w"}, {"--selected_gpus", "0,x"}},
        BadCase{{"--gpus=-1", "w"}, {"--gpus", "-1"}},
        BadCase{{"--gpus=0,1,0", "w"}, {"--gpus", "0,1,0", "twice"}},
        BadCase{{"--gpus=", "w"}, {"--gpus"}}, BadCase{{"--gpus=0,,1", "w"}, {"--gpus", "0,,1"}},
        BadCase{{"--nproc_per_node=0", "w"}, {"--nproc_per_node", "'0'"}},
        BadCase{{"--nproc_per_node=two", "w"}, {"--nproc_per_node", "two"}},
        BadCase{{"--nproc_per_node=3", "--gpus=0,1", "w"},
                {"--nproc_per_node=3", "--selected_gpus"}},
        BadCase{{"--started_port=0", "w"}, {"--started_port", "'0'"}},
        BadCase{{"--started_port=70000", "w"}, {"--started_port", "70000"}},
        BadCase{{"--started_port=65535", "--nproc_per_node=2", "w"}, {"--started_port", "65535"}},
        BadCase{{"--ips=1.2.3", "w"}, {"--ips", "1.2.3"}},
        BadCase{{"--cluster_node_ips=10.0.0.1,10.0.0.1", "--node_ip=10.0.0.1", "w"},
                {"--cluster_node_ips", "twice"}},
        BadCase{{"--node_ip=10.0.0.9", "w"}, {"--node_ip", "10.0.0.9", "--cluster_node_ips"}},
        BadCase{{"--node_ip=localhost", "w"}, {"--node_ip", "localhost"}},
        BadCase{{"--log_level=loud", "w"}, {"--log_level", "loud"}},
        BadCase{{"--log_level=25", "w"}, {"--log_level", "25"}},
        BadCase{{"--kill_timeout=-1", "w"}, {"--kill_timeout", "-1"}},
        BadCase{{"--kill_timeout=soon", "w"}, {"--kill_timeout", "soon"}},
        BadCase{{"--rendezvous_timeout=0", "w"}, {"--rendezvous_timeout", "'0'"}},
        BadCase{{"--max_restarts=-1", "w"}, {"--max_restarts", "-1"}},
        BadCase{{"--max_restarts=many", "w"}, {"--max_restarts", "many"}},
        BadCase{{"--max_restarts=1001", "w"}, {"--max_restarts", "1001"}},
        BadCase{{"--hang_timeout=-2", "w"}, {"--hang_timeout", "-2"}},
        BadCase{{"--hang_timeout=later", "w"}, {"--hang_timeout", "later"}},
        BadCase{{"--print_config=maybe", "w"}, {"--print_config", "maybe"}},
        BadCase{{"--bogus", "w"}, {"--bogus", "--help"}},
        BadCase{{"--bogus=1", "w"}, {"--bogus=1", "--help"}},
        BadCase{{"-n", "2", "w"}, {"-n", "--help"}}, BadCase{{"--log_dir"}, {"--log_dir"}},
        BadCase{{"--nproc_per_node=2"}, {"WORKER"}}, BadCase{{}, {"WORKER"}}));

TEST(Options, ParameterServerCounts) {
  LaunchOptions o = parse({"--server_num=2", "--worker_num=3", "train"});
  EXPECT_TRUE(o.ps_job());
  EXPECT_FALSE(o.explicit_endpoints());
  EXPECT_EQ(o.server_num, 2);
  EXPECT_EQ(o.worker_num, 3);
  EXPECT_EQ(o.nproc_per_node, 3) << "the trainers per node";
  EXPECT_FALSE(o.server_grace) << "no grace by default: servers stop with the trainers";

  LaunchOptions by_nproc = parse({"--server_num=1", "--nproc_per_node=4", "train"});
  EXPECT_EQ(by_nproc.worker_num, 4) << "without --worker_num, --nproc_per_node counts trainers";
  EXPECT_EQ(parse({"--server_num=1", "train"}).worker_num, 1);
  EXPECT_EQ(parse({"--server_num=1", "--worker_num=2", "--nproc_per_node=2", "w"}).worker_num, 2);
  LaunchOptions gpus = parse({"--server_num=1", "--gpus=4,5", "train"});
  EXPECT_EQ(gpus.worker_num, 2) << "one trainer per selected GPU";
  EXPECT_EQ(gpus.selected_gpus, (std::vector<int>{4, 5}));
  LaunchOptions graced = parse({"--server_num=1", "--server_grace=0.25", "--kill_timeout=3", "w"});
  EXPECT_EQ(graced.server_grace, std::chrono::milliseconds(250));
  EXPECT_FALSE(parse({"train"}).ps_job()) << "a collective job by default";
  EXPECT_EQ(parse({"train"}).server_num, 0);
}

TEST(Options, ParameterServerExplicitEndpoints) {
  LaunchOptions o =
      parse({"--servers=10.0.0.1:7000,10.0.0.2:7000",
             "--workers=10.0.0.1:7100,10.0.0.2:7100,10.0.0.2:7101", "--node_ip=10.0.0.2", "train"});
  EXPECT_TRUE(o.ps_job());
  EXPECT_TRUE(o.explicit_endpoints());
  EXPECT_EQ(o.server_num, 2);
  EXPECT_EQ(o.worker_num, 3);
  EXPECT_EQ(o.nproc_per_node, 2) << "the --workers entries on --node_ip";
  EXPECT_EQ(o.cluster_node_ips, std::vector<std::string>{"10.0.0.2"})
      << "--node_ip need not be in --cluster_node_ips";
  EXPECT_EQ(o.servers[1], (env::Endpoint{"10.0.0.2", 7000}));
  EXPECT_EQ(env::join_endpoints(o.workers), "10.0.0.1:7100,10.0.0.2:7100,10.0.0.2:7101");
  // Explicit counts that agree are fine.
  EXPECT_EQ(parse({"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001", "--server_num=1",
                   "--worker_num=1", "w"})
                .server_num,
            1);
}

TEST(Options, DescribeShowsParameterServerFlagsOnlyForSuchJobs) {
  const std::string ps = describe_options(
      parse({"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001", "--server_grace=2", "w"}));
  EXPECT_NE(ps.find("server_num: 1\n"), std::string::npos) << ps;
  EXPECT_NE(ps.find("servers: 127.0.0.1:7000\n"), std::string::npos) << ps;
  EXPECT_NE(ps.find("worker_num: 1\n"), std::string::npos) << ps;
  EXPECT_NE(ps.find("workers: 127.0.0.1:7001\n"), std::string::npos) << ps;
  EXPECT_NE(ps.find("server_grace: 2\n"), std::string::npos) << ps;
  const std::string counts = describe_options(parse({"--server_num=2", "--worker_num=3", "w"}));
  EXPECT_NE(counts.find("servers: None\n"), std::string::npos) << counts;
  EXPECT_NE(counts.find("server_grace: None\n"), std::string::npos) << counts;
  const std::string collective = describe_options(parse({"w"}));
  EXPECT_EQ(collective.find("server"), std::string::npos) << collective;
  EXPECT_EQ(collective.find("worker_num"), std::string::npos) << collective;
  for (const char* flag :
       {"--server_num", "--worker_num", "--servers", "--workers", "--server_grace"}) {
    EXPECT_NE(help_text().find(flag), std::string::npos) << flag;
  }
}

INSTANTIATE_TEST_SUITE_P(
    ParameterServer, BadOptions,
    ::testing::Values(
        BadCase{{"--worker_num=2", "w"},
                {"--worker_num", "'2'", "a parameter-server job needs --server_num or --servers"}},
        BadCase{{"--workers=127.0.0.1:7000", "w"},
                {"--workers", "127.0.0.1:7000", "needs --server_num or --servers"}},
        BadCase{{"--server_grace=1", "w"}, {"--server_grace", "needs --server_num"}},
        BadCase{{"--server_num=0", "w"}, {"--server_num", "'0'"}},
        BadCase{{"--server_num=two", "w"}, {"--server_num", "two"}},
        BadCase{{"--server_num=1", "--worker_num=0", "w"}, {"--worker_num", "'0'"}},
        BadCase{{"--server_num=1", "--worker_num=2", "--nproc_per_node=3", "w"},
                {"--nproc_per_node=3", "--worker_num=2", "not used"}},
        BadCase{{"--server_num=1", "--worker_num=3", "--gpus=0,1", "w"},
                {"--gpus='0,1'", "--worker_num=3", "one GPU per trainer"}},
        BadCase{{"--server_num=1", "--server_grace=-1", "w"}, {"--server_grace", "-1"}},
        BadCase{{"--servers=127.0.0.1", "--workers=127.0.0.1:7001", "w"},
                {"--servers", "127.0.0.1"}},
        BadCase{{"--servers=127.0.0.1:7000,127.0.0.1:7000", "--workers=127.0.0.1:7001", "w"},
                {"--servers", "127.0.0.1:7000", "twice"}},
        BadCase{{"--servers=bad_host!:7000", "--workers=127.0.0.1:7001", "w"},
                {"--servers", "bad_host!"}},
        BadCase{{"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7000", "w"},
                {"--workers", "127.0.0.1:7000", "also in --servers"}},
        BadCase{{"--servers=127.0.0.1:7000", "w"}, {"--servers", "127.0.0.1:7000", "--workers"}},
        BadCase{{"--server_num=1", "--workers=127.0.0.1:7001", "w"},
                {"--workers", "127.0.0.1:7001", "--servers"}},
        BadCase{{"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001", "--server_num=2", "w"},
                {"--server_num=2", "1 endpoint(s) of --servers='127.0.0.1:7000'"}},
        BadCase{{"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001", "--worker_num=3", "w"},
                {"--worker_num=3", "--workers='127.0.0.1:7001'"}},
        BadCase{
            {"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001", "--started_port=6000", "w"},
            {"--started_port", "6000", "--servers/--workers"}},
        BadCase{{"--servers=10.0.0.1:7000", "--workers=10.0.0.1:7001",
                 "--cluster_node_ips=10.0.0.1", "--node_ip=10.0.0.1", "w"},
                {"--servers/--workers", "--cluster_node_ips"}},
        BadCase{{"--servers=10.0.0.1:7000", "--workers=10.0.0.1:7001", "--nnodes=2",
                 "--master_addr=10.0.0.1", "w"},
                {"--servers/--workers", "--nnodes"}},
        BadCase{{"--server_num=3", "--worker_num=3", "--started_port=65531", "w"},
                {"--started_port", "65531", "3 servers and 3 trainers"}}));

TEST(Options, DescribeLooksLikePaddle) {
  LaunchOptions o = parse({"--gpus=0,1", "--log_dir=./mylog", "train", "--lr", "0.1"});
  const std::string text = describe_options(o);
  EXPECT_EQ(text.rfind("-----------  Configuration Arguments -----------\n", 0), 0u) << text;
  EXPECT_NE(text.find("selected_gpus: 0,1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("log_dir: ./mylog\n"), std::string::npos) << text;
  EXPECT_NE(text.find("started_port: None\n"), std::string::npos) << text;
  EXPECT_NE(text.find("training_script_args: ['--lr', '0.1']\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n------------------------------------------------\n"), std::string::npos);
}

}  // namespace
}  // namespace ddl::launcher

namespace ddl::launcher {
namespace {

TEST(Options, ElasticNodeCountsReportAndLastCall) {
  const LaunchOptions o = parse({"--nnodes=2:4", "--node_rank=3", "--master_addr=10.0.0.1",
                                 "--rdzv_conf=last_call_timeout=1.5", "--report=false", "w"});
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.min_nnodes, 2);
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.last_call_timeout, std::chrono::milliseconds(1500));
  EXPECT_FALSE(o.report);
  EXPECT_NE(describe_options(o).find("nnodes: 2:4\n"), std::string::npos);

  const LaunchOptions fixed = parse({"--nnodes=3:3", "--master_addr=h", "w"});
  EXPECT_FALSE(fixed.elastic()) << "MIN == MAX is a fixed count";
  EXPECT_TRUE(parse({"w"}).report);
  EXPECT_EQ(parse({"w"}).last_call_timeout, std::chrono::milliseconds(30'000));

  EXPECT_NE(error_of({"--nnodes=4:2", "--master_addr=h", "w"}).find("MIN:MAX with MIN <= MAX"),
            std::string::npos);
  EXPECT_NE(error_of({"--nnodes=2:x", "--master_addr=h", "w"}).find("--nnodes"), std::string::npos);
  EXPECT_NE(error_of({"--nnodes=2:4", "--node_rank=4", "--master_addr=h", "w"})
                .find("is not below --nnodes=4"),
            std::string::npos);
  EXPECT_NE(error_of({"--rdzv_conf=timeout=3", "w"}).find("KEY last_call_timeout"),
            std::string::npos);
  EXPECT_NE(error_of({"--report=maybe", "w"}).find("expected true or false"), std::string::npos);
  EXPECT_NE(error_of({"--nnodes=1:2", "--master_addr=h", "--server_num=1", "w"})
                .find("elastic node counts are for collective jobs"),
            std::string::npos);
}

}  // namespace
}  // namespace ddl::launcher

namespace ddl::launcher {
namespace {

// What Kubeflow's training operator puts in a PyTorchJob pod (worker 0 of a Master + 1 Worker
// job, nprocPerNode 2): MASTER_*/WORLD_SIZE/RANK for plain programs, PET_* for torchrun.
env::EnvMap pytorchjob_pod(int node_rank) {
  return {{"PYTHONUNBUFFERED", "0"},
          {"MASTER_ADDR", "mnist-master-0"},
          {"MASTER_PORT", "23456"},
          {"PET_MASTER_ADDR", "mnist-master-0"},
          {"PET_MASTER_PORT", "23456"},
          {"WORLD_SIZE", "4"},
          {"RANK", std::to_string(node_rank)},
          {"PET_NPROC_PER_NODE", "2"},
          {"PET_NODE_RANK", std::to_string(node_rank)},
          {"PET_NNODES", "2"}};
}

TEST(EnvironmentDefaults, PyTorchJobPodGivesTheNodes) {
  const LaunchOptions o = parse({"train"}, pytorchjob_pod(1));
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "mnist-master-0");
  EXPECT_EQ(o.master_port, 23456);
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(
      o.from_environment,
      (std::vector<std::string>{"PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_ADDR=mnist-master-0",
                                "PET_MASTER_PORT=23456", "PET_NPROC_PER_NODE=2"}));
}

TEST(EnvironmentDefaults, FlagsWinOverVariables) {
  const LaunchOptions o = parse(
      {"--nproc_per_node=1", "--master-port", "7000", "--node_rank=0", "train"}, pytorchjob_pod(1));
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.master_port, 7000);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "mnist-master-0") << "a flag replaces only its own variable";
  EXPECT_EQ(o.nnodes, 2);
  // Paddle's spelling of the nodes on the command line: the PET_ node variables are not used.
  const LaunchOptions p = parse(
      {"--cluster_node_ips=10.0.0.1,10.0.0.2", "--node_ip=10.0.0.2", "train"}, pytorchjob_pod(0));
  EXPECT_EQ(p.node_index(), 1);
  EXPECT_FALSE(p.nnodes);
  // --selected_gpus decides the worker count: PET_NPROC_PER_NODE is not used.
  EXPECT_EQ(parse({"--selected_gpus=0,1,2", "train"}, {{"PET_NPROC_PER_NODE", "2"}}).nproc_per_node,
            3);
}

TEST(EnvironmentDefaults, BadVariableIsNamedWithTheFlagItStandsFor) {
  EXPECT_EQ(error_of({"train"}, {{"PET_NNODES", "two"}}),
            "PET_NNODES='two' (for --nnodes): expected an integer in [1, 65536]");
  EXPECT_EQ(error_of({"train"}, {{"PET_NNODES", "3:1"}}),
            "PET_NNODES='3:1' (for --nnodes): MIN:MAX with MIN <= MAX");
  EXPECT_EQ(error_of({"train"}, {{"PET_RDZV_BACKEND", "etcd"}})
                .rfind("PET_RDZV_BACKEND='etcd' (for --rdzv_backend): needs --rdzv_endpoint", 0),
            0u);
  EXPECT_EQ(error_of({"train"}, {{"PET_RDZV_BACKEND", "zookeeper"}})
                .rfind("PET_RDZV_BACKEND='zookeeper' (for --rdzv_backend): expected c10d, static, "
                       "etcd or etcd-v2",
                       0),
            0u);
  EXPECT_EQ(error_of({"train"}, {{"PET_MAX_RESTARTS", "-1"}})
                .rfind("PET_MAX_RESTARTS='-1' (for --max_restarts): ", 0),
            0u);
  EXPECT_EQ(error_of({"train"}, {{"PADDLE_NNODES", "x"}, {"PADDLE_MASTER", "10.0.0.1:6170"}})
                .rfind("PADDLE_NNODES='x' (for --nnodes): expected an integer", 0),
            0u);
  EXPECT_EQ(error_of({"train"}, {{"PADDLE_MAX_RESTART", "many"}})
                .rfind("PADDLE_MAX_RESTART='many' (for --max_restarts): expected an integer", 0),
            0u);
  // The same value typed on the command line names the flag alone.
  EXPECT_EQ(error_of({"--nnodes=two", "train"}),
            "--nnodes='two': expected an integer in [1, 65536]");
  // A flag given on the command line wins over its variable, and its error names the flag.
  EXPECT_EQ(error_of({"--nnodes=two", "train"}, {{"PET_NNODES", "two"}}),
            "--nnodes='two': expected an integer in [1, 65536]");
}

TEST(EnvironmentDefaults, ElasticPodUsesTheRendezvousEndpoint) {
  const LaunchOptions o = parse({"train"}, {{"PET_RDZV_BACKEND", "c10d"},
                                            {"PET_RDZV_ENDPOINT", "mnist-worker-0:29400"},
                                            {"PET_RDZV_ID", "mnist"},
                                            {"PET_NNODES", "1:3"},
                                            {"PET_NODE_RANK", "0"},
                                            {"PET_MAX_RESTARTS", "3"},
                                            {"PET_NPROC_PER_NODE", "1"}});
  EXPECT_EQ(o.master_addr, "mnist-worker-0");
  EXPECT_EQ(o.master_port, 29400);
  EXPECT_EQ(o.min_nnodes, 1);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.rdzv_id, "mnist");
}

TEST(TorchrunFlags, DashSpellingsAreTheSameFlags) {
  const LaunchOptions o =
      parse({"--nproc-per-node=2", "--max-restarts", "3", "--log-dir", "logs", "--node-rank=1",
             "--nnodes=2", "--master-addr", "10.0.0.1", "--rdzv-id=x", "train", "--not-ours"},
            {});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.log_dir, "logs");
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.rdzv_id, "x");
  EXPECT_EQ(o.worker_args, std::vector<std::string>{"--not-ours"}) << "worker args untouched";
  EXPECT_EQ(error_of({"--nproc-per-nod=2", "train"}, {}),
            "unknown option '--nproc-per-nod=2' (see launch --help)");
}

TEST(TorchrunFlags, RendezvousEndpointAndBackend) {
  LaunchOptions o = parse(
      {"--rdzv_backend=c10d", "--rdzv_endpoint=node0:1234", "--nnodes=2", "--node_rank=1", "train"},
      {});
  EXPECT_EQ(o.master_addr, "node0");
  EXPECT_EQ(o.master_port, 1234);
  o = parse({"--rdzv_endpoint=node0", "--nnodes=2", "--node_rank=1", "train"}, {});
  EXPECT_EQ(o.master_port, kDefaultRendezvousPort);
  EXPECT_TRUE(error_of({"--rdzv_backend=etcd-v2", "train"}, {})
                  .find("--rdzv_backend='etcd-v2': needs --rdzv_endpoint") == 0);
  EXPECT_TRUE(error_of({"--rdzv_backend=zookeeper", "train"}, {})
                  .find("expected c10d, static, etcd or etcd-v2") != std::string::npos);
  EXPECT_TRUE(error_of({"--rdzv_endpoint=a:1", "--master_addr=a", "train"}, {}).find("not both") !=
              std::string::npos);
  EXPECT_TRUE(error_of({"--rdzv_endpoint=a:http", "train"}, {}).find("--rdzv_endpoint") == 0);
}

TEST(TorchrunFlags, NprocPerNodeWords) {
  const MachineCounts cpu_only{8, 0};
  const MachineCounts gpus{8, 4};
  EXPECT_EQ(parse({"--nproc_per_node=auto", "train"}, {}, cpu_only).nproc_per_node, 8);
  EXPECT_TRUE(parse({"--nproc_per_node=auto", "train"}, {}, cpu_only).selected_gpus.empty());
  EXPECT_EQ(parse({"--nproc_per_node=cpu", "train"}, {}, gpus).nproc_per_node, 8);
  const LaunchOptions g = parse({"--nproc_per_node=auto", "train"}, {}, gpus);
  EXPECT_EQ(g.nproc_per_node, 4);
  EXPECT_EQ(g.selected_gpus, (std::vector<int>{0, 1, 2, 3})) << "one GPU per worker";
  EXPECT_EQ(parse({"--nproc_per_node=gpu", "train"}, {}, gpus).nproc_per_node, 4);
  EXPECT_EQ(error_of({"--nproc_per_node=gpu", "train"}, {}, cpu_only),
            "--nproc_per_node='gpu': no GPU is visible here (use cpu, auto or a number)");
  // Kubeflow's default nprocPerNode is "auto".
  EXPECT_EQ(parse({"train"}, {{"PET_NPROC_PER_NODE", "auto"}}, cpu_only).nproc_per_node, 8);
}

TEST(VisibleGpus, CudaVisibleDevicesNarrowsTheDevices) {
  // This machine's /dev decides the device count; with CUDA_VISIBLE_DEVICES empty none is seen.
  EXPECT_EQ(visible_gpu_count({{"CUDA_VISIBLE_DEVICES", ""}}), 0);
  EXPECT_EQ(visible_gpu_count({{"CUDA_VISIBLE_DEVICES", "-1"}}), 0);
  EXPECT_LE(visible_gpu_count({{"CUDA_VISIBLE_DEVICES", "0"}}), 1);
  EXPECT_GE(visible_gpu_count({}), 0);
}

}  // namespace
}  // namespace ddl::launcher

namespace ddl::launcher {
namespace {

LaunchOptions parse_env(std::vector<std::string> args, const env::EnvMap& env) {
  return parse(std::move(args), env, MachineCounts{4, 0});
}

TEST(PaddleEnvironment, PaddleJobPodGivesMasterNodesAndJobId) {
  // What Kubeflow's PaddleJob sets (pkg/controller.v1/paddlepaddle/envvar.go): no node rank.
  const LaunchOptions o =
      parse_env({"--nproc_per_node=2", "train"}, {{"PADDLE_MASTER", "mnist-worker-0:36543"},
                                                  {"PADDLE_NNODES", "2"},
                                                  {"PADDLE_JOB_ID", "mnist"},
                                                  {"PYTHONUNBUFFERED", "1"}});
  EXPECT_EQ(o.master_addr, "mnist-worker-0");
  EXPECT_EQ(o.master_port, 36543);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_FALSE(o.node_rank);
  EXPECT_TRUE(o.auto_node_rank()) << "Paddle's master hands node ranks out";
  EXPECT_EQ(o.job_id, "mnist");
  EXPECT_EQ(o.from_environment,
            (std::vector<std::string>{"PADDLE_MASTER=mnist-worker-0:36543", "PADDLE_NNODES=2",
                                      "PADDLE_JOB_ID=mnist"}));
}

TEST(PaddleEnvironment, FlagsAndOtherSpellingsWin) {
  const env::EnvMap pod{{"PADDLE_MASTER", "m:1234"}, {"PADDLE_NNODES", "2"},
                        {"PADDLE_RANK", "1"},        {"PADDLE_DEVICES", "0,1"},
                        {"PADDLE_LOG_DIR", "plog"},  {"PADDLE_MAX_RESTART", "3"}};
  LaunchOptions o = parse_env({"train"}, pod);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_FALSE(o.auto_node_rank());
  EXPECT_EQ(o.selected_gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(o.log_dir, "plog");
  EXPECT_EQ(o.max_restarts, 3);
  o = parse_env({"--rank=0", "--log_dir=mine", "--devices=3", "--max_restarts=0", "train"}, pod);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.log_dir, "mine");
  EXPECT_EQ(o.selected_gpus, (std::vector<int>{3}));
  EXPECT_EQ(o.max_restarts, 0);
  // torchrun's spelling of node 0 on the command line: PADDLE_MASTER is not read.
  o = parse_env({"--master_addr=10.0.0.9", "--nnodes=2", "--node_rank=1", "train"}, pod);
  EXPECT_EQ(o.master_addr, "10.0.0.9");
  // PET_ variables come first: PET_NNODES wins over PADDLE_NNODES.
  o = parse_env({"train"}, {{"PET_NNODES", "3"}, {"PET_MASTER_ADDR", "a"}, {"PADDLE_NNODES", "2"}});
  EXPECT_EQ(o.nnodes, 3);
}

TEST(AutoNodeRank, OnlyWhereNode0HandsRanksOut) {
  EXPECT_TRUE(parse_env({"--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "--nnodes=2", "train"}, {})
                  .auto_node_rank());
  EXPECT_FALSE(parse_env({"--rdzv_endpoint=h:1", "--nnodes=2", "train"}, {}).auto_node_rank())
      << "static backend: node rank 0 unless given, as torchrun";
  EXPECT_FALSE(parse_env({"--master_addr=h", "--nnodes=2", "train"}, {}).auto_node_rank());
  EXPECT_FALSE(parse_env({"--master=h:1", "--nnodes=2", "--rank=1", "train"}, {}).auto_node_rank());
  EXPECT_TRUE(parse_env({"--master=h:1", "--nnodes=2", "train"}, {}).auto_node_rank());
}

// ---- torchrun's and Paddle 2.x's other flags ----------------------------------------------------

TEST(CommandLines, ScriptsModulesAndNoPython) {
  LaunchOptions o = parse({"-m", "pkg.train", "--lr", "1"});
  EXPECT_TRUE(o.module);
  EXPECT_EQ(o.worker, "pkg.train");
  EXPECT_EQ(o.worker_args, (std::vector<std::string>{"--lr", "1"}));
  o = parse({"--module", "--python=/usr/bin/python3", "pkg"});
  EXPECT_TRUE(o.module);
  EXPECT_EQ(o.python, "/usr/bin/python3");
  o = parse({"--no-python", "./run.py"});
  EXPECT_TRUE(o.no_python);
  EXPECT_EQ(error_of({"-m", "--no_python", "x"}),
            "--module and --no_python were both given: a module needs the interpreter");
  EXPECT_NE(error_of({"--no_python", "--python=python3", "x"}).find("--python='python3'"),
            std::string::npos);
  EXPECT_EQ(error_of({"-x", "w"}), "unknown option '-x' (see launch --help)");
}

TEST(CommandLines, BooleansTakeTheSpaceForm) {
  LaunchOptions o = parse({"--print_config", "False", "train"});
  EXPECT_FALSE(o.print_config);
  EXPECT_EQ(o.worker, "train") << "False is the value, not WORKER";
  o = parse({"--print_config", "train"});
  EXPECT_TRUE(o.print_config);
  EXPECT_EQ(o.worker, "train");
  o = parse({"--report", "0", "--log_overwrite", "false", "train"});
  EXPECT_FALSE(o.report);
  EXPECT_FALSE(o.log_overwrite);
  EXPECT_TRUE(parse({"train"}).log_overwrite) << "truncate, as Paddle 1.8";
}

TEST(CommandLines, TorchrunConsoleAndMonitorFlags) {
  LaunchOptions o = parse({"--tee=3", "-r", "3", "--local-ranks-filter=1,0",
                           "--monitor-interval=0.1", "--start-method=fork", "train"});
  EXPECT_TRUE(o.tee.all);
  EXPECT_TRUE(o.redirects.all);
  ASSERT_TRUE(o.local_ranks_filter);
  EXPECT_EQ(o.local_ranks_filter->ranks, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(*o.monitor_interval, 0.1);
  EXPECT_EQ(o.start_method, "fork");
  o = parse({"-t", "0:3,1:0,2:1", "-r0", "train"});
  EXPECT_FALSE(o.tee.all);
  EXPECT_EQ(o.tee.ranks, (std::vector<int>{0, 2}));
  EXPECT_TRUE(o.redirects.empty());
  EXPECT_NE(error_of({"--tee=4", "w"}).find("--tee='4': expected 0 (none)"), std::string::npos);
  EXPECT_NE(error_of({"--tee=0:1,0:2", "w"}).find("local rank 0 is listed twice"),
            std::string::npos);
  EXPECT_NE(error_of({"--start_method=thread", "w"}).find("expected spawn, fork or forkserver"),
            std::string::npos);
  EXPECT_NE(error_of({"--local_ranks_filter=a", "w"}).find("--local_ranks_filter='a'"),
            std::string::npos);
  EXPECT_NE(error_of({"--monitor_interval=-1", "w"}).find("--monitor_interval='-1'"),
            std::string::npos);
}

// The rest of today's torchrun (torch/distributed/run.py): what launch does the same way is
// accepted, and each flag it does not carry out is one line naming the flag and why.
TEST(CommandLines, TodaysTorchrunFlags) {
  LaunchOptions o = parse({"--local-addr=10.0.0.5", "--shutdown-timeout=3", "--run-path",
                           "--no-python", "--event_log_handler=null",
                           "--signals_to_handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT", "train"});
  EXPECT_EQ(o.node_ip, "10.0.0.5");
  EXPECT_EQ(o.cluster_node_ips, (std::vector<std::string>{"10.0.0.5"}));
  EXPECT_EQ(o.kill_timeout, std::chrono::milliseconds(3000));
  EXPECT_TRUE(o.run_path);
  EXPECT_FALSE(o.no_python) << "torchrun: --run_path takes precedence over --no_python";
  o = parse(
      {"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", "--local_addr=10.0.0.2", "train"});
  EXPECT_EQ(o.node_ip, "10.0.0.2");
  EXPECT_EQ(parse({"train"}, {{"PET_LOCAL_ADDR", "10.0.0.7"}}).node_ip, "10.0.0.7");
  EXPECT_NE(error_of({"--node_ip=10.0.0.1", "--local_addr=10.0.0.2", "w"})
                .find("--node_ip='10.0.0.1' names this node already"),
            std::string::npos);
  EXPECT_NE(error_of({"-m", "--run_path", "w"}).find("--module and --run_path"), std::string::npos);
  EXPECT_NE(error_of({"--event_log_handler=console", "w"}).find("only 'null'"), std::string::npos);
  EXPECT_NE(error_of({"--signals_to_handle=SIGTERM,SIGUSR1", "w"}).find("always forwards"),
            std::string::npos);
  for (const std::string flag : {"--logs-specs=x"}) {
    std::string name = flag.substr(2, flag.find('=') - 2);
    std::replace(name.begin(), name.end(), '-', '_');
    EXPECT_EQ(error_of({flag, "w"}).rfind("--" + name + " (torchrun's): ", 0), 0u)
        << flag << ": " << error_of({flag, "w"});
  }
}

TEST(CommandLines, TorchrunsNumaBinding) {
  EXPECT_EQ(parse({"--numa-binding=core-complex", "w"}).numa_binding, "core-complex");
  EXPECT_EQ(parse({"--numa_binding", "node", "w"}).numa_binding, "node");
  EXPECT_FALSE(parse({"w"}).numa_binding);
  EXPECT_NE(error_of({"--numa-binding=numa", "w"})
                .find("expected node, socket, exclusive or core-complex"),
            std::string::npos);
  EXPECT_NE(error_of({"--numa-binding=node", "--bind=numa", "w"}).find("give one"),
            std::string::npos);
}

TEST(CommandLines, TorchrunsDuplicateFilters) {
  LaunchOptions o = parse({"--log-dir=L", "--duplicate-stdout-filters=loss,,x,acc",
                           "--duplicate_stderr_filters", "warn", "w"});
  EXPECT_EQ(o.duplicate_stdout_filters, (std::vector<std::string>{"loss,x", "acc"}));
  EXPECT_EQ(o.duplicate_stderr_filters, (std::vector<std::string>{"warn"}));
  EXPECT_TRUE(o.warnings.empty());
  EXPECT_EQ(
      parse({"--log_dir=L", "w"}, {{"PET_DUPLICATE_STDOUT_FILTERS", "a"}}).duplicate_stdout_filters,
      (std::vector<std::string>{"a"}));
  EXPECT_TRUE(
      parse({"--log_dir=L", "--duplicate_stdout_filters=", "w"}).duplicate_stdout_filters.empty())
      << "an empty list copies nothing";
  o = parse({"--duplicate_stdout_filters=a", "w"});
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_NE(o.warnings[0].find("without --log_dir nothing is copied"), std::string::npos);
}

TEST(CommandLines, TorchrunsNewestConsoleAndDeviceFlags) {
  // --log-line-prefix-template: the flag, then PET_, then TORCHELASTIC_'s variable.
  EXPECT_EQ(parse({"--log-line-prefix-template=[${rank}]: ", "w"}).log_line_prefix_template,
            "[${rank}]: ");
  const env::EnvMap both{{"PET_LOG_LINE_PREFIX_TEMPLATE", "pet "},
                         {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "te "}};
  EXPECT_EQ(parse({"w"}, both).log_line_prefix_template, "pet ");
  EXPECT_EQ(parse({"w"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "te "}})
                .log_line_prefix_template,
            "te ");
  EXPECT_EQ(parse({"--log_line_prefix_template=cli ", "w"}, both).log_line_prefix_template,
            "cli ");
  EXPECT_FALSE(parse({"w"}).log_line_prefix_template);
  EXPECT_FALSE(parse({"--log_line_prefix_template=", "w"}).log_line_prefix_template)
      << "empty: no template, as torchrun's os.getenv gives it";
  // --virtual-local-rank is a switch of torchrun's.
  EXPECT_TRUE(parse({"--virtual-local-rank", "w"}).virtual_local_rank);
  EXPECT_FALSE(parse({"w"}).virtual_local_rank);
  EXPECT_EQ(parse({"--virtual_local_rank", "w"}).dialect, Dialect::kTorchrun);
  // --shutdown-timeout's variables.
  EXPECT_EQ(parse({"w"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).kill_timeout,
            std::chrono::milliseconds(7000));
  EXPECT_EQ(parse({"w"}, {{"PET_SHUTDOWN_TIMEOUT", "4"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})
                .kill_timeout,
            std::chrono::milliseconds(4000));
  EXPECT_EQ(parse({"--shutdown-timeout=2", "w"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})
                .kill_timeout,
            std::chrono::milliseconds(2000));
}

TEST(CommandLines, StandaloneIsOneNode) {
  const LaunchOptions o = parse({"--standalone", "--nnodes=1", "--nproc-per-node=2", "train"});
  EXPECT_TRUE(described_as<nodes::ControlStore>(o.nodes)) << "--nnodes=1: node 0 of one";
  EXPECT_TRUE(described_as<nodes::OneNode>(parse({"--standalone", "train"}).nodes));
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_NE(error_of({"--standalone", "--nnodes=2", "--master_addr=h", "w"})
                .find("--standalone is a single-node job"),
            std::string::npos);
  // A pod's PET_ node variables do not turn a standalone job into a multi-node one.
  const LaunchOptions pod =
      parse({"--standalone", "train"}, {{"PET_NNODES", "2"}, {"PET_MASTER_ADDR", "m"}});
  EXPECT_FALSE(pod.nnodes);
}

TEST(CommandLines, PaddleSpellings) {
  LaunchOptions o = parse({"--start_port=6170", "--max_restart=2", "--host=127.0.0.1",
                           "--run_mode=collective", "train"});
  EXPECT_EQ(o.started_port, 6170);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.node_ip, "127.0.0.1");
  o = parse({"--run_mode=ps", "--server_num=1", "--worker_num=1", "train"});
  EXPECT_EQ(o.run_mode(), "ps");
  o = parse({"--server_num=1", "--trainer_num=3", "train"});
  EXPECT_EQ(o.worker_num, 3) << "Paddle 2.x's --trainer_num is --worker_num";
  o = parse({"--servers=127.0.0.1:6170", "--trainers=127.0.0.1:6171,127.0.0.1:6172", "train"});
  EXPECT_EQ(o.workers.size(), 2u) << "Paddle 2.x's --trainers is --workers";
  EXPECT_NE(error_of({"--run_mode=rpc", "w"}).find("expected collective, ps or ps-heter"),
            std::string::npos);
}

TEST(CommandLines, RunModePsWithoutCountsIsOneServerAndOneTrainer) {
  // Paddle 2.x's ps controller: server_num or 1, trainer_num or 1.
  LaunchOptions o = parse({"--run_mode=ps", "train"});
  EXPECT_TRUE(o.ps_job());
  EXPECT_EQ(o.server_num, 1);
  EXPECT_EQ(o.worker_num, 1);
  EXPECT_TRUE(o.unused_flags.empty());
  // It ignores --nproc_per_node and --devices: so do we, and say so.
  o = parse({"--run_mode=ps", "--nproc_per_node=2", "--devices=0,1", "--server_num=2", "train"});
  EXPECT_EQ(o.server_num, 2);
  EXPECT_EQ(o.worker_num, 1);
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_TRUE(o.selected_gpus.empty()) << "the trainers get no devices";
  EXPECT_EQ(o.unused_flags, (std::vector<std::string>{"--nproc_per_node=2", "--devices=0,1"}));
  EXPECT_EQ(parse({"--run_mode=ps", "--trainer_num=3", "train"}).worker_num, 3);
  // Without --run_mode the fleet rule stays: --nproc_per_node counts the trainers.
  EXPECT_EQ(parse({"--server_num=1", "--nproc_per_node=3", "train"}).worker_num, 3);
}

TEST(CommandLines, FleetWorkersWithoutPortsGetPaddlesPorts) {
  // test_fleet_launch_ps.sh: --workers="127.0.0.1,127.0.0.1" with two servers.
  const LaunchOptions o =
      parse({"--servers=127.0.0.1:36001,127.0.0.1:36002", "--workers=127.0.0.1,127.0.0.1", "w"});
  EXPECT_EQ(env::join_endpoints(o.workers), "127.0.0.1:6172,127.0.0.1:6173");
}

TEST(CommandLines, HeterWorkers) {
  LaunchOptions o = parse({"--server_num=2", "--worker_num=2", "--heter_worker_num=2", "w"});
  ASSERT_EQ(o.heter.size(), 1u);
  EXPECT_EQ(o.heter[0].count, 2);
  EXPECT_EQ(o.heter[0].device, "gpu") << "the default device of a heter stage";
  EXPECT_EQ(o.run_mode(), "ps-heter");
  o = parse({"--server_num=1", "--heter_worker_num=1;2", "--heter_devices=gpu;xpu", "w"});
  ASSERT_EQ(o.heter.size(), 2u);
  EXPECT_EQ(o.heter[1].count, 2);
  EXPECT_EQ(o.heter[1].device, "xpu");
  EXPECT_EQ(o.heter_per_node(), 3);
  o = parse({"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001",
             "--heter_workers=127.0.0.1:7002;127.0.0.1:7003,127.0.0.1:7004", "w"});
  ASSERT_EQ(o.heter.size(), 2u);
  EXPECT_EQ(o.heter[1].count, 2);
  EXPECT_EQ(env::join_endpoints(o.heter[1].endpoints), "127.0.0.1:7003,127.0.0.1:7004");
  o = parse({"--run_mode=ps-heter", "--heter_worker_num=1", "w"});
  EXPECT_EQ(o.server_num, 1);
  EXPECT_EQ(o.heter_per_node(), 1);
  const std::string config = describe_options(
      parse({"--server_num=1", "--heter_worker_num=1;2", "--heter_devices=gpu;xpu", "w"}));
  EXPECT_NE(config.find("heter_worker_num: 1;2\n"), std::string::npos) << config;
  EXPECT_NE(config.find("heter_devices: gpu;xpu\n"), std::string::npos) << config;
}

INSTANTIATE_TEST_SUITE_P(
    HeterWorkers, BadOptions,
    ::testing::Values(
        BadCase{{"--heter_worker_num=2", "w"},
                {"--heter_worker_num", "needs --server_num or --servers"}},
        BadCase{{"--server_num=1", "--heter_devices=gpu", "w"},
                {"--heter_devices", "needs heter workers"}},
        BadCase{{"--run_mode=ps-heter", "w"}, {"--run_mode", "ps-heter", "--heter_worker_num"}},
        BadCase{{"--server_num=1", "--heter_worker_num=0", "w"}, {"--heter_worker_num", "'0'"}},
        BadCase{{"--server_num=1", "--heter_worker_num=1;x", "w"}, {"--heter_worker_num", "x"}},
        BadCase{{"--server_num=1", "--heter_worker_num=1;1", "--heter_devices=gpu", "w"},
                {"--heter_devices", "one device per heter stage: 2 stage(s)"}},
        BadCase{{"--server_num=1", "--heter_workers=127.0.0.1:7002", "w"},
                {"--heter_workers", "--servers, --workers"}},
        BadCase{
            {"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001", "--heter_worker_num=1", "w"},
            {"--heter_worker_num", "--heter_workers"}},
        BadCase{{"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001",
                 "--heter_workers=127.0.0.1:7002;127.0.0.1:7003", "--heter_worker_num=1", "w"},
                {"--heter_worker_num", "1 stage(s), but --heter_workers lists 2"}},
        BadCase{{"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001",
                 "--heter_workers=127.0.0.1:7002,127.0.0.1:7003", "--heter_worker_num=1", "w"},
                {"--heter_worker_num", "stage 2 has 1 but --heter_workers lists 2"}},
        BadCase{{"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001",
                 "--heter_workers=127.0.0.1:7001", "w"},
                {"--heter_workers", "127.0.0.1:7001", "listed twice"}},
        BadCase{{"--servers=127.0.0.1:7000", "--workers=127.0.0.1:7001",
                 "--heter_workers=127.0.0.1", "w"},
                {"--heter_workers", "ip:port"}}));

TEST(CommandLines, SelectedGpusAreRelativeToCudaVisibleDevices) {
  const env::EnvMap visible{{"CUDA_VISIBLE_DEVICES", "4,5"}};
  const LaunchOptions o = parse({"--selected_gpus=4,5", "train"}, visible);
  EXPECT_EQ(o.selected_gpus, (std::vector<int>{0, 1}));
  EXPECT_NE(describe_options(o).find("selected_gpus: 4,5\n"), std::string::npos)
      << "the block shows what was typed";
  EXPECT_EQ(parse({"--gpus=5", "train"}, visible).selected_gpus, (std::vector<int>{1}));
  EXPECT_EQ(error_of({"--selected_gpus=0", "train"}, visible),
            "--selected_gpus='0': GPU 0 is not in CUDA_VISIBLE_DEVICES='4,5' (the ids are the "
            "machine's; each worker gets the id's position in that list)");
  EXPECT_EQ(parse({"--selected_gpus=0,1", "train"}, {}).selected_gpus, (std::vector<int>{0, 1}));
}

TEST(CommandLines, ConfigurationBlockUsesPaddlesLevelNumbers) {
  const std::string text = describe_options(parse({"--log_level=debug", "train"}));
  EXPECT_NE(text.find("log_level: 10\n"), std::string::npos) << text;
  EXPECT_NE(describe_options(parse({"train"})).find("log_level: 20\n"), std::string::npos);
}

using Endpoints = std::vector<env::Endpoint>;

// torchrun's etcd backends: --rdzv_endpoint lists the etcd members, no node is the master.
TEST(EtcdControlPlane, TorchrunBackendsTakeTheEndpointList) {
  for (const std::string backend : {"etcd", "etcd-v2"}) {
    const LaunchOptions o =
        parse({"--rdzv_backend=" + backend,
               "--rdzv_endpoint=10.0.0.1:2379,etcd-b.example,http://localhost:12379",
               "--nnodes=2:4", "train"});
    ASSERT_TRUE(o.etcd());
    EXPECT_EQ(
        o.etcd()->endpoints,
        (Endpoints{{"10.0.0.1", 2379}, {"etcd-b.example", kDefaultEtcdPort}, {"localhost", 12379}}))
        << backend << ": in order, port default 2379, http:// accepted";
    EXPECT_EQ(o.etcd()->spelling, "--rdzv_backend=" + backend);
    EXPECT_FALSE(o.master_addr);
    EXPECT_FALSE(o.master_port);
    EXPECT_FALSE(o.workers_master());
    EXPECT_TRUE(o.auto_node_rank()) << "no --node_rank: etcd hands the ranks out";
    EXPECT_EQ(o.nnodes, 4);
    EXPECT_EQ(o.min_nnodes, 2);
    EXPECT_TRUE(counted(o.nodes));
    EXPECT_EQ(o.node_ip, kDefaultNodeIp) << "found by routing towards etcd at start";
  }
  const LaunchOptions ranked = parse({"--rdzv_backend=etcd", "--rdzv_endpoint=127.0.0.1:2379",
                                      "--nnodes=3", "--node_rank=2", "train"});
  EXPECT_EQ(ranked.node_rank, 2) << "a given node rank is kept";
  EXPECT_FALSE(ranked.auto_node_rank());
  const std::string described = describe_options(ranked);
  EXPECT_NE(described.find("rdzv_endpoint: 127.0.0.1:2379\n"), std::string::npos) << described;
  EXPECT_NE(described.find("master_addr: None\n"), std::string::npos) << described;
  // Without etcd: node 0's HOST:PORT, as torchrun resolves the endpoint (static: MASTER_PORT).
  EXPECT_NE(describe_options(parse({"--nnodes=2", "--master_addr=a", "train"}))
                .find("rdzv_endpoint: a:29500\n"),
            std::string::npos);
  EXPECT_NE(describe_options(parse({"--nnodes=2", "--rdzv_endpoint=n0", "train"}))
                .find("rdzv_endpoint: n0:29400\n"),
            std::string::npos);
  EXPECT_NE(describe_options(parse({"train"})).find("rdzv_endpoint: None\n"), std::string::npos);
}

// Paddle 2.x: --master=etcd://HOST:PORT[,HOST:PORT...], "etcd://" once at the front.
TEST(EtcdControlPlane, PaddleEtcdMaster) {
  const LaunchOptions o =
      parse({"--master=etcd://10.0.0.1:2379,10.0.0.2:2380,localhost", "--nnodes=2", "train"});
  ASSERT_TRUE(o.etcd());
  EXPECT_EQ(o.etcd()->endpoints,
            (Endpoints{{"10.0.0.1", 2379}, {"10.0.0.2", 2380}, {"localhost", kDefaultEtcdPort}}));
  EXPECT_EQ(o.etcd()->spelling, "--master=etcd://");
  EXPECT_FALSE(o.master_addr);
  EXPECT_FALSE(o.master_port);
  EXPECT_TRUE(o.auto_node_rank()) << "no --rank";
  EXPECT_EQ(o.dialect, Dialect::kPaddle2);

  const LaunchOptions ranked =
      parse({"--master=etcd://10.0.0.1:2379", "--nnodes=2", "--rank=1", "train"});
  EXPECT_EQ(ranked.node_rank, 1);
  EXPECT_FALSE(ranked.auto_node_rank());

  // One node with an etcd master is allowed, as Paddle allows it; --nnodes defaults to 1.
  const LaunchOptions single = parse({"--master=etcd://127.0.0.1:2379", "train"});
  EXPECT_EQ(single.nnodes, std::nullopt);
  ASSERT_TRUE(single.etcd());
  EXPECT_EQ(single.etcd()->endpoints.size(), 1u);
}

TEST(EtcdControlPlane, EnvironmentVariablesStandForTheFlags) {
  const LaunchOptions pet = parse({"train"}, {{"PET_RDZV_BACKEND", "etcd-v2"},
                                              {"PET_RDZV_ENDPOINT", "10.0.0.5:2379,10.0.0.6"},
                                              {"PET_NNODES", "2"}});
  ASSERT_TRUE(pet.etcd());
  EXPECT_EQ(pet.etcd()->endpoints, (Endpoints{{"10.0.0.5", 2379}, {"10.0.0.6", kDefaultEtcdPort}}));
  EXPECT_EQ(pet.etcd()->spelling, "--rdzv_backend=etcd-v2");
  EXPECT_TRUE(pet.auto_node_rank());
  EXPECT_EQ(pet.dialect, Dialect::kTorchrun);

  const LaunchOptions paddle =
      parse({"train"}, {{"PADDLE_MASTER", "etcd://10.0.0.5:2379"}, {"PADDLE_NNODES", "2"}});
  ASSERT_TRUE(paddle.etcd());
  EXPECT_EQ(paddle.etcd()->endpoints, (Endpoints{{"10.0.0.5", 2379}}));
  EXPECT_EQ(paddle.etcd()->spelling, "--master=etcd://");
  EXPECT_TRUE(paddle.auto_node_rank());

  // The command line wins over the variables, as for every flag.
  const LaunchOptions flag_wins =
      parse({"--rdzv_backend=c10d", "--rdzv_endpoint=node0:1234", "--nnodes=2", "train"},
            {{"PET_RDZV_BACKEND", "etcd"}, {"PET_RDZV_ENDPOINT", "10.0.0.5:2379"}});
  EXPECT_FALSE(flag_wins.etcd());
  EXPECT_EQ(flag_wins.master_addr, "node0");

  // A bad value from a variable names the variable.
  EXPECT_EQ(error_of({"train"}, {{"PET_RDZV_BACKEND", "etcd"}, {"PET_RDZV_ENDPOINT", "a:1,,b"}})
                .rfind("PET_RDZV_ENDPOINT='a:1,,b' (for --rdzv_endpoint): an empty entry", 0),
            0u);
  EXPECT_EQ(error_of({"train"}, {{"PADDLE_MASTER", "etcd://a:99999"}})
                .rfind("PADDLE_MASTER='etcd://a:99999' (for --master): 'a:99999': expected a "
                       "port in [1, 65535]",
                       0),
            0u);
}

TEST(EtcdControlPlane, BadInputIsOneClearLine) {
  const auto expect_error = [](std::vector<std::string> args, const std::string& start) {
    args.push_back("train");
    const std::string e = error_of(args);
    EXPECT_EQ(e.rfind(start, 0), 0u) << "got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  expect_error({"--rdzv_backend=etcd"}, "--rdzv_backend='etcd': needs --rdzv_endpoint=");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint="}, "--rdzv_endpoint='': expected etcd");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a:2379,"},
               "--rdzv_endpoint='a:2379,': an empty entry");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a:0"},
               "--rdzv_endpoint='a:0': 'a:0': expected a port in [1, 65535]");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a:x"},
               "--rdzv_endpoint='a:x': 'a:x': expected a port");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=bad host:2379"},
               "--rdzv_endpoint='bad host:2379': 'bad host' is not an IPv4 address or host name");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a:2379,a:2379"},
               "--rdzv_endpoint='a:2379,a:2379': etcd endpoint 'a:2379' is listed twice");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=https://a:2379"},
               "--rdzv_endpoint='https://a:2379': 'https://a:2379': only http://");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a", "--master_addr=b"},
               "--rdzv_endpoint='a': the etcd cluster hands out the node ranks");
  expect_error({"--rdzv_backend=etcd-v2", "--rdzv_endpoint=a", "--master_port=29500"},
               "--rdzv_endpoint='a': the etcd cluster hands out the node ranks");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a", "--master=b:1"},
               "--rdzv_endpoint='a': give either --rdzv_endpoint");
  expect_error({"--master=etcd://"}, "--master='etcd://': expected etcd endpoints");
  expect_error({"--master=etcd://a:1,"}, "--master='etcd://a:1,': an empty entry");
  expect_error({"--master=etcd://a:1,etcd://b:2"},
               "--master='etcd://a:1,etcd://b:2': write etcd:// once");
  expect_error({"--master=etcd://a:1", "--rdzv_endpoint=b:2"},
               "--master='etcd://a:1': give the etcd endpoints once");
  expect_error({"--master=etcd://a:1", "--rdzv_backend=etcd", "--rdzv_endpoint=b:2"},
               "--master='etcd://a:1': an etcd:// master is Paddle's spelling");
  expect_error({"--master=etcd://a:1", "--rdzv_backend=c10d"},
               "--master='etcd://a:1': an etcd:// master is Paddle's spelling");
  expect_error({"--master=etcd://a:1", "--master_port=2"},
               "--master='etcd://a:1': the etcd cluster hands out the node ranks");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a", "--nnodes=2",
                "--cluster_node_ips=10.0.0.1,10.0.0.2"},
               "--rdzv_backend=etcd makes etcd hand out the node ranks; --cluster_node_ips");
  expect_error({"--master=etcd://a", "--nnodes=2", "--ips=10.0.0.1,10.0.0.2"},
               "--master=etcd:// makes etcd hand out the node ranks");
  expect_error({"--master=etcd://a", "--nnodes=2", "--use_paddlecloud"},
               "--use_paddlecloud takes the nodes from PaddleCloud's variables");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a", "--nnodes=2", "--node_rank=2"},
               "--node_rank=2 is not below --nnodes=2");
  expect_error({"--rdzv_backend=etcd", "--rdzv_endpoint=a", "--standalone"},
               "--standalone is a single-node job");
}

// Every flag (and the variable that stands for one) that names a host refuses what is no host,
// naming itself and the value: a host goes into endpoints, log lines and commands unquoted.
TEST(Options, HostFlagsRefuseWhatIsNoHost) {
  const std::string rule = "'$(id)' is not an IPv4 address or host name";
  const auto expect_refused = [&](std::vector<std::string> args, const std::string& start,
                                  const env::EnvMap& env = {}) {
    args.push_back("train");
    const std::string e = error_of(args, env);
    EXPECT_EQ(e.rfind(start, 0), 0u) << "got: " << e;
    EXPECT_NE(e.find(rule), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  expect_refused({"--master_addr=$(id)", "--nnodes=2"}, "--master_addr='$(id)': ");
  expect_refused({"--ips=10.0.0.1,$(id)"}, "--ips='10.0.0.1,$(id)': ");
  expect_refused({"--node_ip=$(id)"}, "--node_ip='$(id)': ");
  expect_refused({"--local_addr=$(id)"}, "--local_addr='$(id)': ");
  expect_refused({"--nnodes=2", "--rdzv_endpoint=$(id):29400"}, "--rdzv_endpoint='$(id):29400': ");
  expect_refused({"--nnodes=2", "--master=$(id):6170"}, "--master='$(id):6170': ");
  expect_refused({"--server_num=1", "--servers=$(id):6170"}, "--servers='$(id):6170': ");
  expect_refused({"--nnodes=2"}, "PET_MASTER_ADDR='$(id)' (for --master_addr): ",
                 {{"PET_MASTER_ADDR", "$(id)"}, {"PET_MASTER_PORT", "29500"}});
  expect_refused({}, "PADDLE_MASTER='$(id):6170' (for --master): ",
                 {{"PADDLE_MASTER", "$(id):6170"}, {"PADDLE_NNODES", "2"}});
}

}  // namespace
}  // namespace ddl::launcher
