// --bind: which CPUs each of this node's processes is pinned to (sched_setaffinity in the child
// before exec, launcher/supervise/worker_group.cpp).
//
// assign_cpus() is a pure function of the mode, the machine's CPUs (CpuTopology) and the number
// of processes; read_cpu_topology() reads the machine: the CPUs launch itself may run on
// (sched_getaffinity, so a cgroup or taskset around launch narrows them) and the NUMA nodes of
// /sys/devices/system/node (one node holding every CPU when the machine shows none).
#pragma once

#include <string>
#include <vector>

#include "env/error.h"
#include "launcher/options/options.h"

namespace ddl::launcher {

struct CpuTopology {
  std::vector<int> allowed;                 // CPUs launch may use, ascending; not empty
  std::vector<std::vector<int>> numa_nodes;  // each NUMA node's CPUs, ascending, node order
};

// The CPUs each of `processes` processes gets, in order; empty lists for CpuBind::kNone.
// - kCore: `allowed` cut into `processes` contiguous slices, as equal as can be (the first
//   slices one CPU larger); with more processes than CPUs process i gets CPU allowed[i % n].
// - kNuma: the NUMA nodes holding allowed CPUs, each process one node (process i of P takes node
//   i * nodes / P, so neighbours share a node), bound to that node's allowed CPUs.
std::vector<std::vector<int>> assign_cpus(CpuBind mode, const CpuTopology& topology,
                                          int processes);

// This machine's CpuTopology. Throws Error (exit 1) when the affinity cannot be read.
CpuTopology read_cpu_topology();

// "0-3,8" for {0, 1, 2, 3, 8}, as taskset and /sys print CPU lists.
std::string cpu_list_text(const std::vector<int>& cpus);
// The CPUs of "0-3,8" (the kernel's cpulist format); throws std::invalid_argument.
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace ddl::launcher
