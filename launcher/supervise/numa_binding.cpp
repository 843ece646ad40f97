#include "launcher/supervise/numa_binding.h"

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "env/error.h"
#include "env/exit_codes.h"
#include "env/text.h"
#include "launcher/diagnose/tool_runner.h"
#include "launcher/supervise/cpu_binding.h"

namespace ddl::launcher {
namespace {

constexpr const char* kWhere = "--numa-binding";

[[noreturn]] void fail(const std::string& what) { throw Error(kExitError, kWhere, what); }

std::set<int> cpu_set(const Sysfs& sys, const std::string& path) {
  const std::string text = sys.read(path);
  try {
    const std::vector<int> cpus = parse_cpu_list(std::string(env::trim(text)));
    return {cpus.begin(), cpus.end()};
  } catch (const std::invalid_argument& e) {
    fail(path + ": " + e.what());
  }
}

int read_int(const Sysfs& sys, const std::string& path) {
  const std::string text(env::trim(sys.read(path)));
  try {
    std::size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  fail(path + ": expected an integer, read '" + text + "'");
}

std::string cpu_dir(int cpu) { return "/sys/devices/system/cpu/cpu" + std::to_string(cpu); }

// The allowed CPUs of NUMA node `node`.
std::set<int> node_cpus(const Sysfs& sys, int node, const std::set<int>& allowed) {
  std::set<int> out;
  for (int c : cpu_set(sys, "/sys/devices/system/node/node" + std::to_string(node) + "/cpulist")) {
    if (allowed.count(c)) out.insert(c);
  }
  return out;
}

// The CPUs sharing the largest data or unified cache with `cpu`.
std::set<int> largest_cache_group(const Sysfs& sys, int cpu) {
  int best = -1;
  std::set<int> group{cpu};
  for (int i = 0; sys.exists(cpu_dir(cpu) + "/cache/index" + std::to_string(i)); ++i) {
    const std::string dir = cpu_dir(cpu) + "/cache/index" + std::to_string(i);
    const std::string type(env::trim(sys.read(dir + "/type")));
    if (type != "Unified" && type != "Data") continue;
    const int level = read_int(sys, dir + "/level");
    if (level <= best) continue;
    best = level;
    group = cpu_set(sys, dir + "/shared_cpu_list");
  }
  return group;
}

// `cpus` grouped by key(cpu) (the lowest CPU of a group standing for it), keys ascending.
template <typename Key>
std::map<int, std::set<int>> group_by(const std::set<int>& cpus, Key key) {
  std::map<int, std::set<int>> groups;
  for (int c : cpus) groups[key(c)].insert(c);
  return groups;
}

}  // namespace

std::optional<NumaAffinity> numa_affinity_named(const std::string& name) {
  if (name == "node") return NumaAffinity::kNode;
  if (name == "socket") return NumaAffinity::kSocket;
  if (name == "exclusive") return NumaAffinity::kExclusive;
  if (name == "core-complex") return NumaAffinity::kCoreComplex;
  return std::nullopt;
}

const char* numa_affinity_name(NumaAffinity mode) {
  switch (mode) {
    case NumaAffinity::kNode:
      return "node";
    case NumaAffinity::kSocket:
      return "socket";
    case NumaAffinity::kExclusive:
      return "exclusive";
    case NumaAffinity::kCoreComplex:
      return "core-complex";
  }
  return "node";
}

std::string Sysfs::read(const std::string& path) const {
  std::ifstream in(root_ + path);
  if (!in) fail("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Sysfs::exists(const std::string& path) const {
  std::error_code ec;
  return std::filesystem::exists(root_ + path, ec);
}

std::vector<std::string> visible_gpu_addresses(const std::string& nvidia_smi_csv,
                                               const std::optional<std::string>& visible) {
  struct Gpu {
    std::string index, uuid, address;
  };
  std::vector<Gpu> gpus;
  std::istringstream lines(nvidia_smi_csv);
  for (std::string line; std::getline(lines, line);) {
    if (env::trim(line).empty()) continue;
    const std::vector<std::string> f = env::split(line, ',');
    if (f.size() != 3) fail("nvidia-smi: expected 'index, uuid, pci.bus_id', read '" + line + "'");
    std::string bus(env::trim(f[2]));
    // "00000000:3B:00.0" -> "0000:3b:00.0": sysfs writes a 4-digit domain in lower case.
    std::transform(bus.begin(), bus.end(), bus.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto colon = bus.find(':');
    if (colon == std::string::npos || colon < 4) fail("nvidia-smi: bad PCI address '" + bus + "'");
    gpus.push_back(
        {std::string(env::trim(f[0])), std::string(env::trim(f[1])), bus.substr(colon - 4)});
  }
  std::vector<std::string> out;
  if (!visible) {
    for (const Gpu& g : gpus) out.push_back(g.address);
    return out;
  }
  for (const std::string& raw : env::split(*visible, ',')) {
    const std::string entry(env::trim(raw));
    if (entry.empty()) break;  // CUDA stops at an empty entry
    const auto it = std::find_if(gpus.begin(), gpus.end(), [&](const Gpu& g) {
      return g.index == entry || (!g.uuid.empty() && g.uuid.rfind(entry, 0) == 0);
    });
    if (it == gpus.end()) {
      fail("CUDA_VISIBLE_DEVICES entry '" + entry + "' names none of the GPUs nvidia-smi lists");
    }
    out.push_back(it->address);
  }
  return out;
}

std::vector<int> gpu_numa_nodes(const Sysfs& sys, const std::vector<std::string>& addresses) {
  std::vector<int> nodes;
  for (const std::string& a : addresses) {
    nodes.push_back(std::max(read_int(sys, "/sys/bus/pci/devices/" + a + "/numa_node"), 0));
  }
  return nodes;
}

std::vector<int> numa_cpus(NumaAffinity mode, int gpu, const std::vector<int>& gpu_nodes,
                           const std::vector<int>& allowed_list, const Sysfs& sys) {
  if (gpu < 0 || gpu >= static_cast<int>(gpu_nodes.size())) {
    fail("GPU " + std::to_string(gpu) + " is not one of the " + std::to_string(gpu_nodes.size()) +
         " visible GPUs");
  }
  const std::set<int> allowed(allowed_list.begin(), allowed_list.end());
  const int node = gpu_nodes[static_cast<std::size_t>(gpu)];
  std::vector<int> node_gpus;  // the GPUs of that node, ascending
  for (std::size_t g = 0; g < gpu_nodes.size(); ++g) {
    if (gpu_nodes[g] == node) node_gpus.push_back(static_cast<int>(g));
  }
  const int relative =
      static_cast<int>(std::find(node_gpus.begin(), node_gpus.end(), gpu) - node_gpus.begin());
  const std::string where =
      "GPU " + std::to_string(gpu) + " (NUMA node " + std::to_string(node) + ")";
  std::set<int> cpus;
  switch (mode) {
    case NumaAffinity::kNode:
      cpus = node_cpus(sys, node, allowed);
      break;
    case NumaAffinity::kSocket: {
      const std::set<int> own = node_cpus(sys, node, allowed);
      if (own.empty()) break;
      const std::string package = "/topology/physical_package_id";
      const int socket = read_int(sys, cpu_dir(*own.begin()) + package);
      for (int n : cpu_set(sys, "/sys/devices/system/node/possible")) {
        const std::set<int> theirs = node_cpus(sys, n, allowed);
        if (!theirs.empty() && read_int(sys, cpu_dir(*theirs.begin()) + package) == socket) {
          cpus.insert(theirs.begin(), theirs.end());
        }
      }
      break;
    }
    case NumaAffinity::kExclusive: {
      const auto cores = group_by(node_cpus(sys, node, allowed), [&](int c) {
        return *cpu_set(sys, cpu_dir(c) + "/topology/thread_siblings_list").begin();
      });
      const int n = static_cast<int>(node_gpus.size());
      const int per = static_cast<int>(cores.size()) / n;
      const int extra = static_cast<int>(cores.size()) % n;
      if (per < 1) {
        fail(where + ": its node has " + std::to_string(cores.size()) + " physical core(s) for " +
             std::to_string(n) + " GPUs");
      }
      const int start = relative * per + std::min(relative, extra);
      const int end = start + per + (relative < extra ? 1 : 0);
      int i = 0;
      for (const auto& [core, threads] : cores) {
        if (i >= start && i < end) cpus.insert(threads.begin(), threads.end());
        ++i;
      }
      break;
    }
    case NumaAffinity::kCoreComplex: {
      const auto groups = group_by(node_cpus(sys, node, allowed),
                                   [&](int c) { return *largest_cache_group(sys, c).begin(); });
      std::vector<std::pair<int, std::set<int>>> ordered(groups.begin(), groups.end());
      std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
        return a.second.size() > b.second.size();
      });
      if (!ordered.empty()) {
        cpus = ordered[static_cast<std::size_t>(relative) % ordered.size()].second;
      }
      break;
    }
  }
  if (cpus.empty()) fail(where + ": none of its CPUs is one launch may use");
  return {cpus.begin(), cpus.end()};
}

std::vector<std::vector<int>> numa_pins(NumaAffinity mode,
                                        const std::vector<std::optional<int>>& gpus,
                                        const env::EnvMap& env) {
  std::vector<std::vector<int>> pins(gpus.size());
  if (std::none_of(gpus.begin(), gpus.end(), [](const auto& g) { return g.has_value(); })) {
    fail(
        "it pins each worker near its GPU, and this job's workers have none (--bind numa "
        "spreads them over the NUMA nodes)");
  }
  const std::optional<std::string> smi =
      find_on_path("nvidia-smi", env::lookup(env, "PATH").value_or(""));
  if (!smi) fail("nvidia-smi is not on PATH; it names the GPUs' PCI addresses");
  const ToolResult r =
      run_tools({ToolCommand{{*smi, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"}}},
                env, std::chrono::steady_clock::now() + std::chrono::seconds(10))
          .front();
  if (!r.start_error.empty()) fail("nvidia-smi could not be started: " + r.start_error);
  if (r.timed_out || !r.reaped || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
    fail("nvidia-smi " +
         (r.timed_out ? std::string("did not answer in 10 s") : describe_exit(r.status)) + ": " +
         std::string(env::trim(r.err)));
  }
  const Sysfs sys;
  const std::vector<int> nodes =
      gpu_numa_nodes(sys, visible_gpu_addresses(r.out, env::lookup(env, "CUDA_VISIBLE_DEVICES")));
  const std::vector<int> allowed = read_cpu_topology().allowed;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i]) pins[i] = numa_cpus(mode, *gpus[i], nodes, allowed, sys);
  }
  return pins;
}

}  // namespace ddl::launcher
