// launcher/fanout: the host file and host list, --include/--exclude/--num_nodes/--num_gpus, each
// node's flags, the remote command ssh runs and the variables file; and the command line's rules
// for --hostfile. The fan-out itself, over real ssh, is tests/e2e/netns/fanout_test.cpp.
#include "launcher/fanout/fanout.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "launcher/fanout/hosts.h"
#include "launcher/options/options.h"

namespace ddl::launcher::fanout {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const OptionsError& e) {
    return e.what();
  }
  return "";
}

std::string describe(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const HostSlots& h : hosts) {
    out += (out.empty() ? "" : " ") + h.host + ":";
    for (std::size_t i = 0; i < h.slots.size(); ++i)
      out += (i ? "," : "") + std::to_string(h.slots[i]);
    if (h.chosen) out += "!";
  }
  return out;
}

TEST(Hostfile, DeepSpeedsFormat) {
  const auto hosts = parse_hostfile(
      "# a comment\nworker-1 slots=4\n\n  worker-2   slots=2  # trailing comment\nworker-3\n",
      "hosts");
  EXPECT_EQ(describe(hosts), "worker-1:0,1,2,3 worker-2:0,1 worker-3:0");
  EXPECT_EQ(error_of([] { parse_hostfile("w1 slots=2\nw2 slot=2\n", "hosts"); }),
            "hosts line 2: 'w2 slot=2': expected 'HOST slots=N' (N >= 1)");
  EXPECT_NE(error_of([] { parse_hostfile("w1 slots=0\n", "hosts"); }).find("line 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("w1 slots=2 x\n", "hosts"); }).find("line 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("$(id) slots=2\n", "hosts"); }).find("is not an IPv4"),
            std::string::npos);
  EXPECT_EQ(error_of([] { parse_hostfile("w1\nw1 slots=2\n", "hosts"); }),
            "hosts line 2: host 'w1' is listed twice");
  EXPECT_EQ(error_of([] { parse_hostfile("# nothing\n\n", "hosts"); }), "hosts: no host in it");
}

TEST(HostList, HorovodrunsSpelling) {
  EXPECT_EQ(describe(parse_host_list("h1:4,h2:4,h3")), "h1:0,1,2,3 h2:0,1,2,3 h3:0");
  EXPECT_NE(error_of([] { parse_host_list("h1:x"); }).find("expected HOST[:SLOTS]"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_host_list("h1,,h2"); }).find("--hosts"), std::string::npos);
}

TEST(Selection, IncludeExcludeAndLimitsAsDeepSpeed) {
  const auto all = parse_host_list("w1:4,w2:4,w3:4");
  EXPECT_EQ(describe(select_hosts(all, {"w1:0,2@w3", {}, {}, {}})), "w1:0,2! w3:0,1,2,3");
  EXPECT_EQ(describe(select_hosts(all, {{}, "w2", {}, {}})), "w1:0,1,2,3 w3:0,1,2,3");
  EXPECT_EQ(describe(select_hosts(all, {{}, "w1:1@w3:0,3", {}, {}})),
            "w1:0,2,3! w2:0,1,2,3 w3:1,2!");
  EXPECT_EQ(describe(select_hosts(all, {{}, {}, 2, 1})), "w1:0 w2:0");
  EXPECT_EQ(error_of([&] {
              select_hosts(all, {"w9", {}, {}, {}});
            }),
            "--include='w9': host 'w9' is not in the host list");
  EXPECT_NE(error_of([&] {
              select_hosts(all, {"w1:4", {}, {}, {}});
            }).find("'4' is not a slot of 'w1' (0..3)"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              select_hosts(all, {{}, "w1@w2@w3", {}, {}});
            }),
            "--include/--exclude left no host to run on");
}

TEST(NodeFlags, EachNodesPlaceAndItsWorkers) {
  FanoutJob job;
  job.hosts =
      select_hosts(parse_host_list("10.0.0.1:2,10.0.0.2:2"), {"10.0.0.1:0,1@10.0.0.2", {}, {}, {}});
  EXPECT_EQ(node_flags(job, 1, 29500),
            (std::vector<std::string>{"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1",
                                      "--master_port=29500", "--local_addr=10.0.0.2",
                                      "--exit_with_stdin", "--nproc_per_node=2"}));
  EXPECT_EQ(node_flags(job, 0, 29500).back(), "--selected_gpus=0,1") << "--include chose them";
}

TEST(RemoteCommand, QuotedAndReadsItsVariablesFirst) {
  const std::string cmd = remote_command("/home/a b", {"/opt/launch", "--x=it's", "train.py"});
  EXPECT_EQ(cmd,
            "cd '/home/a b' || exit 127; while IFS= read -r ddl_v && [ -n \"$ddl_v\" ]; do "
            "export \"$ddl_v\"; done; echo DDL_FANOUT_STARTED; exec '/opt/launch' '--x=it'\\''s' "
            "'train.py'");
  EXPECT_EQ(cmd.find("SECRET"), std::string::npos);
}

TEST(EnvFile, NameValueLines) {
  const auto vars =
      parse_env_file("NCCL_IB_DISABLE=1\n# comment\n\nPYTHONPATH=/a:/b=c\n", ".deepspeed_env");
  EXPECT_EQ(vars.at("NCCL_IB_DISABLE"), "1");
  EXPECT_EQ(vars.at("PYTHONPATH"), "/a:/b=c");
  EXPECT_EQ(error_of([] { parse_env_file("export X=1\n", "e"); }),
            "e line 1: 'export X=1': expected NAME=VALUE");
}

LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "launch");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

TEST(FanoutFlags, TheHostListPlacesTheNodes) {
  const LaunchOptions o = parse({"-H", "h1:2,h2:2", "--include=h1", "--ssh_port=2222", "w"});
  EXPECT_TRUE(o.fanout());
  EXPECT_EQ(o.hosts, "h1:2,h2:2");
  EXPECT_EQ(o.include_hosts, "h1");
  EXPECT_EQ(o.ssh_port, 2222);
  EXPECT_EQ(error_of([] {
              parse({"--hostfile=f", "--nnodes=2", "w"});
            }),
            "--nnodes cannot be given with --hostfile: the host list places the nodes and their "
            "workers");
  EXPECT_EQ(error_of([] {
              parse({"--hostfile=f", "--hosts=h", "w"});
            }),
            "--hostfile and --hosts were both given; give one");
  EXPECT_EQ(error_of([] {
              parse({"--include=h1", "w"});
            }),
            "--include needs --hostfile or --hosts");
}

TEST(FanoutFlags, TheNodesGetTheUsersFlagsWithoutTheFanoutOnes) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("fanout_hosts." + std::to_string(::getpid()));
  std::ofstream(file) << "h1 slots=2\nh2 slots=2\n";
  const std::vector<std::string> args{"launch",
                                      "--hostfile",
                                      file.string(),
                                      "--log_dir=logs",
                                      "--include=h1@h2",
                                      "--print_config",
                                      "False",
                                      "--num_gpus",
                                      "1",
                                      "--",
                                      "train.py",
                                      "--hosts",
                                      "y"};
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  const LaunchOptions o = parse_options(static_cast<int>(argv.size()), argv.data());
  const FanoutJob job =
      make_fanout_job(o, args, {{"DDL_JOB_SECRET", "s3"}, {"HOME", "/nonexistent"}});
  EXPECT_EQ(job.flags, (std::vector<std::string>{"--log_dir=logs", "--print_config", "False"}));
  EXPECT_EQ(job.worker, (std::vector<std::string>{"--", "train.py", "--hosts", "y"}));
  EXPECT_EQ(describe(job.hosts), "h1:0 h2:0");
  EXPECT_EQ(job.forwarded.at("DDL_JOB_SECRET"), "s3");
  const FanoutJob made = make_fanout_job(o, args, {});
  EXPECT_EQ(made.forwarded.at("DDL_JOB_SECRET").size(), 32u) << "made when unset";
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace ddl::launcher::fanout
