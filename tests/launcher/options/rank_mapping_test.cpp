// The rank mapping file (launcher/options/rank_mapping.h) and the command-line step that reads it
// (--rank_mapping_file with --enable_auto_mapping).
#include "launcher/options/rank_mapping.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "tests/launcher/options/parse_args.h"
#include "tests/support/fifo.h"
#include "tests/support/temp_dir.h"

namespace ddl::launcher {
namespace {

// The error message of parsing `text`, or "" when it parses.
std::string mapping_error(const std::string& text) {
  try {
    parse_rank_mapping(text, "map.json");
  } catch (const RankMappingError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    return e.what();
  }
  return "";
}

TEST(RankMapping, ParsesPaddlesFormat) {
  const RankMapping m = parse_rank_mapping(
      R"({"ip_ranks": [{"ip": "10.0.0.1", "ranks": [0, 1]},
                       {"ip": "10.0.0.2", "ranks": [4, 2, 3]}], "note": "ignored"})",
      "map.json");
  ASSERT_EQ(m.nodes.size(), 2u);
  EXPECT_EQ(m.nodes[1].host, "10.0.0.2");
  EXPECT_EQ(m.nodes[1].ranks, (std::vector<int>{4, 2, 3}));  // file order = local rank order
  EXPECT_EQ(m.world_size(), 5);
  EXPECT_EQ(m.max_ranks_per_node(), 3);
  EXPECT_EQ(m.node_index("10.0.0.2"), 1);
  EXPECT_EQ(m.node_index("10.0.0.9"), 2);
  EXPECT_EQ(m.str(), "10.0.0.1:0,1;10.0.0.2:4,2,3");
}

TEST(RankMapping, BadFilesNameTheFileAndTheFault) {
  EXPECT_NE(mapping_error("{").find("map.json: not valid JSON"), std::string::npos);
  EXPECT_NE(mapping_error("[]").find("top level is array"), std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": []})").find("no \"ip_ranks\" list"), std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": [{"ranks": [0]}]})").find("ip_ranks[0] has no \"ip\""),
            std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": [{"ip": "a b", "ranks": [0]}]})")
                .find("'a b' is not an IPv4 address or host name"),
            std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": [{"ip": "h", "ranks": []}]})").find("no \"ranks\" list"),
            std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": [{"ip": "h", "ranks": [0, -1]}]})")
                .find("ip_ranks[0].ranks has -1, not a rank"),
            std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": [{"ip": "h", "ranks": ["0"]}]})").find("has \"0\""),
            std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": [{"ip": "h", "ranks": [0]}, {"ip": "h", "ranks": [1]}]})")
                .find("ip 'h' is listed twice"),
            std::string::npos);
  EXPECT_NE(
      mapping_error(R"({"ip_ranks": [{"ip": "a", "ranks": [0, 1]}, {"ip": "b", "ranks": [1]}]})")
          .find("rank 1 is mapped twice (on a and on b)"),
      std::string::npos);
  EXPECT_NE(mapping_error(R"({"ip_ranks": [{"ip": "a", "ranks": [0, 2]}]})")
                .find("must be 0..1, but rank 1 is missing"),
            std::string::npos);
  EXPECT_EQ(mapping_error(R"({"ip_ranks": [{"ip": "a", "ranks": [1, 0]}]})"), "");
}

TEST(RankMapping, UnreadableFileIsAUsageError) {
  try {
    read_rank_mapping("/nonexistent/map.json");
    FAIL() << "expected RankMappingError";
  } catch (const RankMappingError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(
        std::string(e.what()).find("--rank_mapping_file='/nonexistent/map.json': cannot be read"),
        std::string::npos)
        << e.what();
  }
}

// The RankMappingError message of --rank_mapping_file=`file`, or "" when it is read.
std::string flag_error(const std::string& file) {
  try {
    parse({"--rank_mapping_file", file, "--enable_auto_mapping", "w.py"});
  } catch (const RankMappingError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    return e.what();
  }
  return "";
}

TEST(RankMapping, DevZeroIsRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const std::string error = flag_error("/dev/zero");
  EXPECT_NE(error.find("--rank_mapping_file='/dev/zero': is a character device; expected a "
                       "regular file of at most 1 MiB"),
            std::string::npos)
      << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1))
      << "the device is not read";
}

TEST(RankMapping, AFifoIsRefusedWithoutHanging) {
  testing::TempDir dir;
  const std::string fifo = dir.file("map.json");
  testing::make_fifo(fifo);
  std::string error;
  EXPECT_TRUE(testing::returns_within(fifo, std::chrono::milliseconds(5000), [&] {
    error = flag_error(fifo);
  })) << "--rank_mapping_file=FIFO blocked";
  EXPECT_NE(error.find("--rank_mapping_file='" + fifo + "': is a FIFO"), std::string::npos)
      << error;
}

TEST(RankMapping, AFileOverTheCapIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("map.json");
  // Valid JSON that only its size makes unusable.
  std::ofstream(path) << R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [0]}]})"
                      << std::string(kMaxRankMappingBytes, ' ');
  const std::string error = flag_error(path);
  EXPECT_NE(error.find("--rank_mapping_file='" + path + "': is " +
                       std::to_string(kMaxRankMappingBytes + 49) + " bytes, over the cap"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("at most 1 MiB"), std::string::npos) << error;
}

TEST(RankMapping, AHostThatIsNoHostIsRefused) {
  const std::string error = mapping_error(R"js({"ip_ranks": [{"ip": "$(id)", "ranks": [0]}]})js");
  EXPECT_NE(error.find("ip_ranks[0].ip '$(id)' is not an IPv4 address or host name"),
            std::string::npos)
      << error;
}

class RankMappingFlags : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const std::string path = (dir_.path() / "map.json").string();
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(RankMappingFlags, OneNodeMappingIsThisNode) {
  const std::string file = write(R"({"ip_ranks": [{"ip": "127.0.0.2", "ranks": [1, 0, 2]}]})");
  const LaunchOptions o =
      parse({"--rank_mapping_file", file, "--enable_auto_mapping", "true", "w.py"});
  ASSERT_TRUE(o.rank_mapping);
  EXPECT_EQ(o.node_ip, "127.0.0.2");
  EXPECT_EQ(o.cluster_node_ips, (std::vector<std::string>{"127.0.0.2"}));
  EXPECT_EQ(o.nproc_per_node, 3);
}

TEST_F(RankMappingFlags, SeveralNodesTakeNodeIpAndGiveTheirHosts) {
  const std::string file = write(
      R"({"ip_ranks": [{"ip": "10.0.0.1", "ranks": [0]}, {"ip": "10.0.0.2", "ranks": [1, 2]}]})");
  const LaunchOptions o = parse({"--rank_mapping_file=" + file, "--enable_auto_mapping",
                                 "--node_ip=10.0.0.2", "--ips=9.9.9.9", "w.py"});
  EXPECT_EQ(o.cluster_node_ips, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_NE(error_of({"--rank_mapping_file=" + file, "--enable_auto_mapping", "w.py"})
                .find("--node_ip='127.0.0.1' is not one of the nodes of " + file),
            std::string::npos);
}

TEST_F(RankMappingFlags, OffUnlessEnabled) {
  const std::string file = write("not json");  // not read while the mapping is off
  const LaunchOptions o =
      parse({"--rank_mapping_file", file, "--enable_auto_mapping=false", "w.py"});
  EXPECT_FALSE(o.rank_mapping);
  EXPECT_EQ(o.rank_mapping_file, file);
  EXPECT_THROW(parse({"--rank_mapping_file", file, "--enable_auto_mapping", "w.py"}),
               RankMappingError);
  EXPECT_NE(error_of({"--enable_auto_mapping", "w.py"}).find("needs --rank_mapping_file"),
            std::string::npos);
}

TEST_F(RankMappingFlags, ChecksAgainstDevicesAndOtherNodeSpellings) {
  const std::string file = write(R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [0, 1, 2]}]})");
  const std::vector<std::string> on = {"--rank_mapping_file", file, "--enable_auto_mapping"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = on;
    args.insert(args.end(), more.begin(), more.end());
    args.push_back("w.py");
    return args;
  };
  EXPECT_NE(error_of(with({}), {}, MachineCounts{8, 2}).find("only 2 GPU(s) are visible"),
            std::string::npos);
  EXPECT_NE(error_of(with({"--selected_gpus=0,1"})).find("list at least that many GPUs"),
            std::string::npos);
  EXPECT_EQ(parse(with({"--selected_gpus=4,5,6,7"})).selected_gpus, (std::vector<int>{4, 5, 6}));
  EXPECT_NE(error_of(with({"--server_num=1"})).find("cannot be combined with --server_num"),
            std::string::npos);
  EXPECT_NE(error_of(with({"--nnodes=2", "--master_addr=127.0.0.1"})).find("names the nodes"),
            std::string::npos);
}

TEST(CpuBindFlag, ParsesModes) {
  EXPECT_EQ(parse({"w.py"}).bind, CpuBind::kNone);
  EXPECT_EQ(parse({"--bind=core", "w.py"}).bind, CpuBind::kCore);
  EXPECT_EQ(parse({"--bind", "numa", "w.py"}).bind, CpuBind::kNuma);
  EXPECT_NE(error_of({"--bind=cores", "w.py"}).find("--bind='cores': expected none, core or numa"),
            std::string::npos);
}

}  // namespace
}  // namespace ddl::launcher
