// --bind's CPU assignment (launcher/supervise/cpu_binding.h).
#include "launcher/supervise/cpu_binding.h"

#include <gtest/gtest.h>

namespace ddl::launcher {
namespace {

using Cpus = std::vector<std::vector<int>>;

TEST(CpuBinding, NoneLeavesEveryProcessUnpinned) {
  const CpuTopology t{{0, 1, 2, 3}, {{0, 1, 2, 3}}};
  EXPECT_EQ(assign_cpus(CpuBind::kNone, t, 3), Cpus(3));
}

TEST(CpuBinding, CoreCutsTheAllowedCpusIntoEqualSlices) {
  const CpuTopology t{{0, 1, 2, 3, 4, 5, 6}, {{0, 1, 2, 3, 4, 5, 6}}};
  EXPECT_EQ(assign_cpus(CpuBind::kCore, t, 2), (Cpus{{0, 1, 2, 3}, {4, 5, 6}}));
  EXPECT_EQ(assign_cpus(CpuBind::kCore, t, 3), (Cpus{{0, 1, 2}, {3, 4}, {5, 6}}));
  // Only what launch may use: a taskset around launch narrows it.
  const CpuTopology narrow{{2, 5}, {{0, 1, 2, 3, 4, 5}}};
  EXPECT_EQ(assign_cpus(CpuBind::kCore, narrow, 2), (Cpus{{2}, {5}}));
  EXPECT_EQ(assign_cpus(CpuBind::kCore, narrow, 3), (Cpus{{2}, {5}, {2}}));
}

TEST(CpuBinding, NumaSpreadsProcessesOverTheNodes) {
  const CpuTopology t{{0, 1, 2, 3, 4, 5, 6, 7}, {{0, 1, 2, 3}, {4, 5, 6, 7}}};
  EXPECT_EQ(assign_cpus(CpuBind::kNuma, t, 4),
            (Cpus{{0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6, 7}, {4, 5, 6, 7}}));
  EXPECT_EQ(assign_cpus(CpuBind::kNuma, t, 1), (Cpus{{0, 1, 2, 3}}));
  // A node without allowed CPUs is skipped.
  const CpuTopology half{{4, 5}, {{0, 1, 2, 3}, {4, 5, 6, 7}}};
  EXPECT_EQ(assign_cpus(CpuBind::kNuma, half, 2), (Cpus{{4, 5}, {4, 5}}));
}

TEST(CpuBinding, CpuListsRoundTrip) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_THROW(parse_cpu_list("3-1"), std::invalid_argument);
  EXPECT_THROW(parse_cpu_list("x"), std::invalid_argument);
}

TEST(CpuBinding, ThisMachineHasAllowedCpusInItsNodes) {
  const CpuTopology t = read_cpu_topology();
  ASSERT_FALSE(t.allowed.empty());
  ASSERT_FALSE(t.numa_nodes.empty());
  const Cpus cores = assign_cpus(CpuBind::kCore, t, static_cast<int>(t.allowed.size()));
  for (std::size_t i = 0; i < cores.size(); ++i) EXPECT_EQ(cores[i], std::vector<int>{t.allowed[i]});
}

}  // namespace
}  // namespace ddl::launcher
