// --numa-binding (torchrun's): each worker pinned to CPUs near its GPU, read from sysfs as torch's
// torch/numa/binding.py reads it. The modes:
// - node: every allowed CPU of the NUMA node the GPU hangs off (its PCI device's numa_node; -1,
//   a machine with one node, is node 0);
// - socket: every allowed CPU of every NUMA node on that node's socket (physical_package_id);
// - exclusive: the node's physical cores (thread siblings together) split evenly, in order,
//   among the node's GPUs (the lowest GPUs get one more when they do not divide); an error when
//   a node has fewer cores than GPUs;
// - core-complex: one group of CPUs sharing the largest cache (L3) on that node, the largest
//   groups first, GPU i of the node the group i modulo their number.
// "Allowed" is the CPUs launch may run on (sched_getaffinity). The pure parts take a sysfs root
// so that tests can give a made-up machine.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"

namespace ddl::launcher {

enum class NumaAffinity { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive", "core-complex" (torchrun's names); nullopt for anything else.
std::optional<NumaAffinity> numa_affinity_named(const std::string& name);
const char* numa_affinity_name(NumaAffinity mode);

// Reads files under a root ("" for this machine's /sys); throws Error (exit 1) naming the file.
class Sysfs {
 public:
  explicit Sysfs(std::string root = "") : root_(std::move(root)) {}
  std::string read(const std::string& path) const;  // path starts with "/sys/"
  bool exists(const std::string& path) const;

 private:
  std::string root_;
};

// The visible GPUs' PCI addresses as sysfs names them ("0000:3b:00.0"), in CUDA device order:
// from `nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader`, narrowed and ordered
// by CUDA_VISIBLE_DEVICES (indexes or UUIDs, or their prefixes) when set. Throws Error naming
// an entry that names no GPU, or a line it cannot read.
std::vector<std::string> visible_gpu_addresses(const std::string& nvidia_smi_csv,
                                               const std::optional<std::string>& visible);

// Each visible GPU's NUMA node, device order.
std::vector<int> gpu_numa_nodes(const Sysfs& sys, const std::vector<std::string>& addresses);

// The CPUs for the worker of visible GPU `gpu` (an index into `gpu_nodes`), ascending; `allowed`
// are the CPUs launch may use. Throws Error when there are none, or (exclusive) too few cores.
std::vector<int> numa_cpus(NumaAffinity mode, int gpu, const std::vector<int>& gpu_nodes,
                           const std::vector<int>& allowed, const Sysfs& sys);

// This machine's pins for processes using `gpus` (each a visible GPU index, or none: that process
// is not pinned): nvidia-smi (found on `env`'s PATH, given 10 s) names the GPUs' PCI addresses,
// CUDA_VISIBLE_DEVICES of `env` orders them, /sys does the rest. Throws Error saying what is
// missing (no GPU at all, no nvidia-smi, a GPU sysfs does not know).
std::vector<std::vector<int>> numa_pins(NumaAffinity mode,
                                        const std::vector<std::optional<int>>& gpus,
                                        const env::EnvMap& env);

}  // namespace ddl::launcher
