#include "launcher/supervise/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace ddl::launcher {
namespace {

std::vector<std::vector<int>> by_core(const std::vector<int>& cpus, int processes) {
  std::vector<std::vector<int>> out(processes);
  const int n = static_cast<int>(cpus.size());
  if (processes > n) {
    for (int i = 0; i < processes; ++i) out[i] = {cpus[i % n]};
    return out;
  }
  const int base = n / processes;
  const int larger = n % processes;  // the first `larger` slices take one CPU more
  int next = 0;
  for (int i = 0; i < processes; ++i) {
    const int size = base + (i < larger ? 1 : 0);
    out[i].assign(cpus.begin() + next, cpus.begin() + next + size);
    next += size;
  }
  return out;
}

std::vector<std::vector<int>> by_numa(const CpuTopology& t, int processes) {
  const std::set<int> allowed(t.allowed.begin(), t.allowed.end());
  std::vector<std::vector<int>> nodes;  // the nodes' allowed CPUs, nodes without any left out
  for (const auto& node : t.numa_nodes) {
    std::vector<int> mine;
    for (int c : node) {
      if (allowed.count(c)) mine.push_back(c);
    }
    if (!mine.empty()) nodes.push_back(std::move(mine));
  }
  if (nodes.empty()) nodes.push_back(t.allowed);
  std::vector<std::vector<int>> out;
  const long long count = static_cast<long long>(nodes.size());
  for (int i = 0; i < processes; ++i) out.push_back(nodes[i * count / processes]);
  return out;
}

}  // namespace

std::vector<std::vector<int>> assign_cpus(CpuBind mode, const CpuTopology& topology,
                                          int processes) {
  if (processes <= 0) return {};
  if (mode == CpuBind::kNone || topology.allowed.empty()) {
    return std::vector<std::vector<int>>(processes);
  }
  return mode == CpuBind::kCore ? by_core(topology.allowed, processes)
                                : by_numa(topology, processes);
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string part = text.substr(start, comma - start);
    const std::size_t dash = part.find('-');
    const int lo = std::stoi(part);
    const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    if (hi < lo || lo < 0) throw std::invalid_argument("bad CPU range '" + part + "'");
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    start = comma + 1;
  }
  return cpus;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

CpuTopology read_cpu_topology() {
  CpuTopology t;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    throw Error(kExitError, "--bind", std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) t.allowed.push_back(c);
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  for (int node = 0;; ++node) {
    const fs::path list = "/sys/devices/system/node/node" + std::to_string(node) + "/cpulist";
    std::ifstream in(list);
    if (!in) break;
    std::string text;
    std::getline(in, text);
    try {
      t.numa_nodes.push_back(parse_cpu_list(text));
    } catch (const std::exception&) {
      break;  // an unreadable node list: bind as if the machine had one node
    }
  }
  if (t.numa_nodes.empty()) t.numa_nodes.push_back(t.allowed);
  return t;
}

}  // namespace ddl::launcher
