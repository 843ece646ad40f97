// --numa-binding's CPUs on a made-up machine (a sysfs tree the test writes): two sockets, three
// NUMA nodes, hyperthreads, two L3 groups on node 0, four GPUs; and the GPUs' order from
// nvidia-smi and CUDA_VISIBLE_DEVICES.
#include "launcher/supervise/numa_binding.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "env/error.h"
#include "tests/support/temp_dir.h"

namespace ddl::launcher {
namespace {

namespace fs = std::filesystem;

// Node 0: CPUs 0-7 (cores {0,4} {1,5} {2,6} {3,7}; L3 {0,1,4,5} and {2,3,6,7}), socket 0.
// Node 1: CPUs 8-11 (cores {8,10} {9,11}), socket 0. Node 2: CPUs 12-15, socket 1.
// GPUs: 0000:1a:00.0 and 0000:1b:00.0 on node 0, 0000:5e:00.0 on node 1, 0000:9a:00.0 on node 2.
class FakeMachine {
 public:
  FakeMachine() {
    put("/sys/devices/system/node/possible", "0-2\n");
    put("/sys/devices/system/node/node0/cpulist", "0-7\n");
    put("/sys/devices/system/node/node1/cpulist", "8-11\n");
    put("/sys/devices/system/node/node2/cpulist", "12-15\n");
    for (int c = 0; c < 16; ++c) {
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c);
      put(dir + "/topology/physical_package_id", c < 12 ? "0\n" : "1\n");
      std::string siblings;
      if (c < 8)
        siblings = std::to_string(c % 4) + "," + std::to_string(c % 4 + 4);
      else if (c < 12)
        siblings = std::to_string(8 + (c - 8) % 2) + "," + std::to_string(10 + (c - 8) % 2);
      else
        siblings = std::to_string(c);
      put(dir + "/topology/thread_siblings_list", siblings + "\n");
      put(dir + "/cache/index0/type", "Data\n");
      put(dir + "/cache/index0/level", "1\n");
      put(dir + "/cache/index0/shared_cpu_list", siblings + "\n");
      put(dir + "/cache/index1/type", "Instruction\n");
      put(dir + "/cache/index1/level", "1\n");
      put(dir + "/cache/index1/shared_cpu_list", siblings + "\n");
      put(dir + "/cache/index2/type", "Unified\n");
      put(dir + "/cache/index2/level", "3\n");
      std::string l3 = c < 8 ? ((c % 4) < 2 ? "0-1,4-5" : "2-3,6-7") : c < 12 ? "8-11" : "12-15";
      put(dir + "/cache/index2/shared_cpu_list", l3 + "\n");
    }
    put("/sys/bus/pci/devices/0000:1a:00.0/numa_node", "0\n");
    put("/sys/bus/pci/devices/0000:1b:00.0/numa_node", "0\n");
    put("/sys/bus/pci/devices/0000:5e:00.0/numa_node", "1\n");
    put("/sys/bus/pci/devices/0000:9a:00.0/numa_node", "2\n");
  }
  Sysfs sysfs() const { return Sysfs(dir_.path().string()); }

 private:
  void put(const std::string& path, const std::string& text) {
    const fs::path p = dir_.path().string() + path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  testing::TempDir dir_;
};

const std::vector<int> kAll = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
const std::string kSmi =
    "0, GPU-aaaa-1111, 00000000:1A:00.0\n"
    "1, GPU-bbbb-2222, 00000000:1B:00.0\n"
    "2, GPU-cccc-3333, 00000000:5E:00.0\n"
    "3, GPU-dddd-4444, 00000000:9A:00.0\n";

std::vector<int> nodes(const FakeMachine& m) {
  return gpu_numa_nodes(m.sysfs(), visible_gpu_addresses(kSmi, std::nullopt));
}

TEST(NumaBinding, GpusAreFoundThroughNvidiaSmiAndCudaVisibleDevices) {
  EXPECT_EQ(
      visible_gpu_addresses(kSmi, std::nullopt),
      (std::vector<std::string>{"0000:1a:00.0", "0000:1b:00.0", "0000:5e:00.0", "0000:9a:00.0"}));
  EXPECT_EQ(visible_gpu_addresses(kSmi, std::string("3,GPU-bbbb")),
            (std::vector<std::string>{"0000:9a:00.0", "0000:1b:00.0"}));
  EXPECT_THROW(visible_gpu_addresses(kSmi, std::string("7")), Error);
  EXPECT_THROW(visible_gpu_addresses("garbage\n", std::nullopt), Error);
  FakeMachine m;
  EXPECT_EQ(nodes(m), (std::vector<int>{0, 0, 1, 2}));
}

TEST(NumaBinding, NodeIsTheGpusNumaNode) {
  FakeMachine m;
  const auto n = nodes(m);
  EXPECT_EQ(numa_cpus(NumaAffinity::kNode, 0, n, kAll, m.sysfs()),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(numa_cpus(NumaAffinity::kNode, 2, n, kAll, m.sysfs()),
            (std::vector<int>{8, 9, 10, 11}));
  // Only the CPUs launch may use.
  EXPECT_EQ(numa_cpus(NumaAffinity::kNode, 3, n, {0, 1, 13}, m.sysfs()), (std::vector<int>{13}));
  EXPECT_THROW(numa_cpus(NumaAffinity::kNode, 3, n, {0, 1}, m.sysfs()), Error);
  EXPECT_THROW(numa_cpus(NumaAffinity::kNode, 4, n, kAll, m.sysfs()), Error);
}

TEST(NumaBinding, SocketIsEveryNodeOfTheGpusSocket) {
  FakeMachine m;
  const auto n = nodes(m);
  EXPECT_EQ(numa_cpus(NumaAffinity::kSocket, 2, n, kAll, m.sysfs()),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(numa_cpus(NumaAffinity::kSocket, 3, n, kAll, m.sysfs()),
            (std::vector<int>{12, 13, 14, 15}));
}

TEST(NumaBinding, ExclusiveSplitsTheNodesCoresAmongItsGpus) {
  FakeMachine m;
  const auto n = nodes(m);
  // Node 0 has four cores (with their hyperthreads) for GPUs 0 and 1.
  EXPECT_EQ(numa_cpus(NumaAffinity::kExclusive, 0, n, kAll, m.sysfs()),
            (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(numa_cpus(NumaAffinity::kExclusive, 1, n, kAll, m.sysfs()),
            (std::vector<int>{2, 3, 6, 7}));
  // Three cores left for two GPUs: the lower GPU gets the extra one.
  EXPECT_EQ(numa_cpus(NumaAffinity::kExclusive, 0, n, {0, 1, 2, 4, 5, 6}, m.sysfs()),
            (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(numa_cpus(NumaAffinity::kExclusive, 1, n, {0, 1, 2, 4, 5, 6}, m.sysfs()),
            (std::vector<int>{2, 6}));
  // Fewer cores than GPUs on the node.
  EXPECT_THROW(numa_cpus(NumaAffinity::kExclusive, 1, n, {0, 4}, m.sysfs()), Error);
}

TEST(NumaBinding, CoreComplexIsOneL3GroupOfTheNode) {
  FakeMachine m;
  const auto n = nodes(m);
  EXPECT_EQ(numa_cpus(NumaAffinity::kCoreComplex, 0, n, kAll, m.sysfs()),
            (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(numa_cpus(NumaAffinity::kCoreComplex, 1, n, kAll, m.sysfs()),
            (std::vector<int>{2, 3, 6, 7}));
  // The larger group first when they differ.
  EXPECT_EQ(numa_cpus(NumaAffinity::kCoreComplex, 0, n, {0, 2, 3, 6}, m.sysfs()),
            (std::vector<int>{2, 3, 6}));
}

TEST(NumaBinding, ModesByTorchrunsNames) {
  for (const char* name : {"node", "socket", "exclusive", "core-complex"}) {
    ASSERT_TRUE(numa_affinity_named(name));
    EXPECT_STREQ(numa_affinity_name(*numa_affinity_named(name)), name);
  }
  EXPECT_FALSE(numa_affinity_named("core_complex"));
}

}  // namespace
}  // namespace ddl::launcher
