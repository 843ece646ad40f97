// Two nodes on one machine (127.0.0.1 and 127.0.0.2), two CPU workers each, running a short
// train_mnist: the four ranks of the job end with one parameter checksum, and each node's log
// folder holds its own ranks' logs.
#include <nlohmann/json.hpp>

#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

const std::string kData = std::string(DDL_SOURCE_DIR) + "/data/mnist";


std::string checksum(const fs::path& logs, int rank) {
  std::istringstream in(worker_log(logs, rank));
  std::string sum;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("param_checksum")) sum = j["param_checksum"];
  }
  return sum;
}

TEST(MultiNodeTraining, FourRanksOnTwoNodesEndWithOneChecksum) {
  if (!fs::exists(kData + "/train-images-idx3-ubyte")) GTEST_SKIP() << kData << " is missing";
  TempDir dir;
  const fs::path logs0 = dir.path() / "node0", logs1 = dir.path() / "node1";
  const int control_port = free_loopback_port();
  auto args = [&](const std::string& ip, const fs::path& logs) {
    return std::vector<std::string>{"--cluster_node_ips=127.0.0.1,127.0.0.2",
                                    "--node_ip=" + ip,
                                    "--nproc_per_node=2",
                                    "--master_port=" + std::to_string(control_port),
                                    "--log_dir",
                                    logs.string(),
                                    "--print_config=false",
                                    "--rendezvous_timeout=60",
                                    "train_mnist",
                                    "--data_dir",
                                    kData,
                                    "--max_steps",
                                    "20",
                                    "--epochs",
                                    "1",
                                    "--log_interval",
                                    "5",
                                    "--save",
                                    "",
                                    "--threads",
                                    "1"};
  };
  const ddl::env::EnvMap secret{{ddl::env::kJobSecret, "two-node-training-test"}};
  LaunchRun node0(dir, args("127.0.0.1", logs0), secret);
  TempDir dir1;  // node 1's launcher output goes to its own files
  LaunchRun node1(dir1, args("127.0.0.2", logs1), secret);
  ASSERT_EQ(node0.wait(milliseconds(240'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();

  const std::string sum = checksum(logs0, 0);
  ASSERT_FALSE(sum.empty()) << worker_log(logs0, 0);
  for (int r = 0; r < 4; ++r) {
    const fs::path& mine = r < 2 ? logs0 : logs1;
    const fs::path& other = r < 2 ? logs1 : logs0;
    EXPECT_FALSE(fs::exists(other / ("workerlog." + std::to_string(r))));
    EXPECT_EQ(checksum(mine, r), sum) << "rank " << r << ":\n" << worker_log(mine, r);
    EXPECT_TRUE(contains(worker_log(mine, r), "rank " + std::to_string(r) + " of 4"))
        << worker_log(mine, r);
  }
}

}  // namespace
