// A small network lab for multi-node tests: every node is its own network namespace, so each has
// its own address, its own ports and its own link, and the test can break that link for real.
//
//   hub namespace "dl<pid>h": bridge br0 (address 10.B.C.254/24), one veth end per node
//     (v<i>, enslaved to br0)
//   node namespace "dl<pid>n<i>": the other veth end, eth0, address 10.B.C.<i+1>/24, lo up
//
// Nothing is routed outside the lab: no link into the test's own namespace and no default route,
// so the lab's addresses only mean something inside it (B.C come from the pid, so labs of tests
// running in parallel do not even look alike). One lab per test process at a time: the names are
// made from the pid.
//
// Faults map to what this kernel has (it has no netem):
//   partition(i)           both ends of node i's veth down: nothing in or out, like a pulled cable
//   drop_random(i, p)      nftables in node i's namespace (table inet ddl_fault): drops p% of the
//                          packets on eth0, chosen at random (`numgen random mod 100`), in and out;
//                          dropped_packets(i) reads the rules' counters
//   limit(i, rate, lat[, burst])  tc tbf on node i's eth0: outgoing rate, burst and queueing
//                          latency ("20mbit", "50ms", burst "32kbit" unless given)
//   clear_faults(i)        undoes all three
//
// Addresses: node_address(i), hub_address(); namespace names: ns_name(i), hub_ns_name(); what
// still runs: pids_in(i), hub_pids() (live processes, zombies left out).
//
// Processes are started in a namespace with exec_prefix(i) (or hub_exec_prefix()) in front of
// their argv; the first element is the full path of `ip`, so it suits ChildProcess, which does no
// PATH lookup.
//
// The destructor SIGKILLs every process still in the lab's namespaces and deletes the
// namespaces (which removes the veths and the bridge), whether or not the test passed. The
// constructor first removes namespaces of this naming scheme left by test processes that no
// longer exist. Anything that cannot be created (not root, no CAP_NET_ADMIN, `ip` missing)
// throws std::runtime_error naming the command and its output: tests fail with the reason,
// never skip.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/poll.h"
#include "tests/support/process.h"

namespace ddl::testing {

// What a command printed (stdout and stderr together) and how it ended.
struct CommandResult {
  int exit_code = -1;  // 128+signal when killed
  std::string output;
};

// Runs argv (argv[0] looked up in PATH) and waits for it; output captured through a pipe.
inline CommandResult run_command(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed running " + argv.at(0));
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed running " + argv.at(0));
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execvp(args[0], args.data());
    const std::string msg = "cannot execute " + copy[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  CommandResult result;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    result.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline std::string join_words(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& a : argv) text += (text.empty() ? "" : " ") + a;
  return text;
}

// Runs argv and throws, naming the command and its output, unless it exits 0. Returns the output.
inline std::string must_run(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv);
  if (r.exit_code != 0) {
    throw std::runtime_error("`" + join_words(argv) + "` exited " + std::to_string(r.exit_code) +
                             ": " + r.output);
  }
  return r.output;
}

// The full path of `program` found in PATH (plus the sbin folders root's PATH usually has).
inline std::string find_program(const std::string& program) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  throw std::runtime_error("`" + program + "` is not installed (not in PATH: " + path +
                           "); the network namespace tests need iproute2, nftables and root");
}

class NetnsLab {
 public:
  // Builds the hub and `nodes` node namespaces (1 to 200) linked through the hub's bridge.
  explicit NetnsLab(int nodes) : nodes_(nodes), pid_(::getpid()) {
    if (nodes < 1 || nodes > 200) {
      throw std::invalid_argument("NetnsLab: " + std::to_string(nodes) + " nodes (1 to 200)");
    }
    ip_ = find_program("ip");
    const std::string prefix = "dl" + std::to_string(pid_);
    hub_ = prefix + "h";
    for (int i = 0; i < nodes; ++i) names_.push_back(prefix + "n" + std::to_string(i));
    // 10.B.C.0/24 from the pid; a /24 the test's own namespace already uses is passed over.
    const std::string used = must_run({ip_, "-4", "-o", "addr", "show"});
    for (int k = 0;; ++k) {
      const int v = (pid_ + k * 7919) % (128 * 256);
      subnet_ = "10." + std::to_string(64 + v / 256) + "." + std::to_string(v % 256) + ".";
      if (used.find(" " + subnet_) == std::string::npos) break;
    }
    remove_stale();
    try {
      build();
    } catch (...) {
      teardown();
      throw;
    }
  }
  ~NetnsLab() { teardown(); }
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  int nodes() const { return nodes_; }
  const std::string& ns_name(int i) const { return names_.at(static_cast<std::size_t>(i)); }
  const std::string& hub_ns_name() const { return hub_; }

  std::string node_address(int i) const {
    check(i);
    return subnet_ + std::to_string(i + 1);
  }
  std::string hub_address() const { return subnet_ + "254"; }

  // argv prefix that runs a program in node i's namespace: {"/usr/sbin/ip", "netns", "exec", NAME}.
  std::vector<std::string> exec_prefix(int i) const { return {ip_, "netns", "exec", ns_name(i)}; }
  std::vector<std::string> hub_exec_prefix() const { return {ip_, "netns", "exec", hub_}; }

  // Cuts node i off: both ends of its veth down. heal() brings them back up.
  void partition(int i) {
    check(i);
    must_run({ip_, "-n", ns_name(i), "link", "set", "eth0", "down"});
    must_run({ip_, "-n", hub_, "link", "set", veth_hub_end(i), "down"});
  }
  void heal(int i) {
    check(i);
    must_run({ip_, "-n", hub_, "link", "set", veth_hub_end(i), "up"});
    must_run({ip_, "-n", ns_name(i), "link", "set", "eth0", "up"});
  }

  // Drops `percent` (0..100) of node i's packets on eth0 at random, both directions. Replaces an
  // earlier drop_random on the same node.
  void drop_random(int i, int percent) {
    check(i);
    if (percent < 0 || percent > 100) {
      throw std::invalid_argument("drop_random: " + std::to_string(percent) + "% (0 to 100)");
    }
    remove_drop_table(i);
    if (percent == 0) return;
    // numgen's values are 0..99: "< 100" is out of its range, so all is a plain drop.
    const std::string share =
        percent == 100 ? "" : "numgen random mod 100 < " + std::to_string(percent) + " ";
    const std::string rules =
        "table inet ddl_fault {\n"
        "  chain input { type filter hook input priority 0; policy accept;\n"
        "    iifname \"eth0\" " +
        share +
        "counter drop\n  }\n"
        "  chain output { type filter hook output priority 0; policy accept;\n"
        "    oifname \"eth0\" " +
        share +
        "counter drop\n  }\n"
        "}\n";
    std::vector<std::string> cmd = exec_prefix(i);
    // nft reads the ruleset from its -f argument; a file in /dev/shm keeps it off the disk.
    const std::string file = "/dev/shm/" + ns_name(i) + ".nft";
    {
      std::ofstream out(file);
      out << rules;
      if (!out) throw std::runtime_error("cannot write " + file);
    }
    cmd.insert(cmd.end(), {"nft", "-f", file});
    CommandResult r = run_command(cmd);
    std::filesystem::remove(file);
    if (r.exit_code != 0) {
      throw std::runtime_error("`" + join_words(cmd) + "` exited " + std::to_string(r.exit_code) +
                               ": " + r.output + "\nruleset:\n" + rules);
    }
  }

  // Packets drop_random has dropped on node i so far (both directions); 0 without it.
  long dropped_packets(int i) const {
    check(i);
    const std::string tables =
        must_run({ip_, "netns", "exec", ns_name(i), "nft", "list", "tables"});
    if (tables.find("ddl_fault") == std::string::npos) return 0;
    const std::string rules =
        must_run({ip_, "netns", "exec", ns_name(i), "nft", "list", "table", "inet", "ddl_fault"});
    long total = 0;
    const std::regex counter(R"(counter packets (\d+))");
    for (std::sregex_iterator it(rules.begin(), rules.end(), counter), end; it != end; ++it) {
      total += std::stol((*it)[1]);
    }
    return total;
  }

  // Shapes node i's outgoing traffic with a token bucket: `rate` and `burst` in tc's units
  // ("20mbit", "32kbit"), `latency` the longest a packet may wait in the queue ("50ms").
  void limit(int i, const std::string& rate, const std::string& latency,
             const std::string& burst = "32kbit") {
    check(i);
    must_run({ip_, "netns", "exec", ns_name(i), "tc", "qdisc", "replace", "dev", "eth0", "root",
              "tbf", "rate", rate, "burst", burst, "latency", latency});
  }

  // Undoes partition, drop_random and limit on node i.
  void clear_faults(int i) {
    check(i);
    heal(i);
    remove_drop_table(i);
    const std::string qdiscs =
        must_run({ip_, "netns", "exec", ns_name(i), "tc", "qdisc", "show", "dev", "eth0"});
    if (qdiscs.find("qdisc tbf") != std::string::npos) {
      must_run({ip_, "netns", "exec", ns_name(i), "tc", "qdisc", "del", "dev", "eth0", "root"});
    }
  }

  // Live processes (zombies excluded) in node i's namespace.
  std::vector<pid_t> pids_in(int i) const {
    check(i);
    return live_pids(ns_name(i));
  }
  std::vector<pid_t> hub_pids() const { return live_pids(hub_); }

 private:
  void check(int i) const {
    if (i < 0 || i >= nodes_) {
      throw std::out_of_range("NetnsLab: node " + std::to_string(i) + " of " +
                              std::to_string(nodes_));
    }
  }
  static std::string veth_hub_end(int i) { return "v" + std::to_string(i); }

  void build() {
    must_run({ip_, "netns", "add", hub_});
    created_.push_back(hub_);
    must_run({ip_, "-n", hub_, "link", "set", "lo", "up"});
    must_run({ip_, "-n", hub_, "link", "add", "br0", "type", "bridge"});
    must_run({ip_, "-n", hub_, "addr", "add", hub_address() + "/24", "dev", "br0"});
    must_run({ip_, "-n", hub_, "link", "set", "br0", "up"});
    for (int i = 0; i < nodes_; ++i) {
      const std::string& name = names_[static_cast<std::size_t>(i)];
      must_run({ip_, "netns", "add", name});
      created_.push_back(name);
      must_run({ip_, "-n", name, "link", "set", "lo", "up"});
      // Created inside the hub, the node's end moved straight into its namespace: no name in the
      // test's own namespace, so nothing there to collide with or leak.
      must_run({ip_, "-n", hub_, "link", "add", veth_hub_end(i), "type", "veth", "peer", "name",
                "eth0", "netns", name});
      must_run({ip_, "-n", hub_, "link", "set", veth_hub_end(i), "master", "br0", "up"});
      must_run({ip_, "-n", name, "addr", "add", node_address(i) + "/24", "dev", "eth0"});
      must_run({ip_, "-n", name, "link", "set", "eth0", "up"});
    }
  }

  void remove_drop_table(int i) {
    const std::string tables =
        must_run({ip_, "netns", "exec", ns_name(i), "nft", "list", "tables"});
    if (tables.find("ddl_fault") != std::string::npos) {
      must_run({ip_, "netns", "exec", ns_name(i), "nft", "delete", "table", "inet", "ddl_fault"});
    }
  }

  std::vector<pid_t> live_pids(const std::string& ns) const {
    std::vector<pid_t> found;
    CommandResult r = run_command({ip_, "netns", "pids", ns});
    if (r.exit_code != 0) return found;  // the namespace is gone: nothing can be in it
    std::istringstream in(r.output);
    for (pid_t pid; in >> pid;) {
      if (alive(pid)) found.push_back(pid);
    }
    return found;
  }

  // SIGKILLs what runs in `ns`, waits (bounded) for it to die, deletes the namespace. Never
  // throws: it runs from the destructor.
  void remove_namespace(const std::string& ns) const {
    for (int round = 0; round < 3; ++round) {
      const std::vector<pid_t> pids = live_pids(ns);
      if (pids.empty()) break;
      for (pid_t pid : pids) ::kill(pid, SIGKILL);
      wait_until([&] { return live_pids(ns).empty(); }, std::chrono::milliseconds(2000),
                 std::chrono::milliseconds(20));
    }
    run_command({ip_, "netns", "del", ns});
  }

  void teardown() noexcept {
    try {
      // Nodes first, the hub last; a namespace the constructor never made is not touched.
      for (auto it = created_.rbegin(); it != created_.rend(); ++it) remove_namespace(*it);
      created_.clear();
    } catch (...) {
    }
  }

  // Namespaces "dl<pid>h" / "dl<pid>n<i>" whose pid no longer runs: left by a test that was
  // killed before its destructor ran.
  void remove_stale() const {
    const std::string list = must_run({ip_, "netns", "list"});
    const std::regex scheme(R"(^dl(\d+)(h|n\d+)\b)");
    std::istringstream in(list);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, scheme)) continue;
      const long owner = std::stol(m[1]);
      if (owner == pid_ || ::kill(static_cast<pid_t>(owner), 0) == 0 || errno != ESRCH) continue;
      remove_namespace("dl" + m[1].str() + m[2].str());
    }
  }

  int nodes_;
  pid_t pid_;
  std::string ip_;
  std::string hub_;
  std::vector<std::string> names_;
  std::string subnet_;                // "10.B.C."
  std::vector<std::string> created_;  // namespaces made so far, in order
};

}  // namespace ddl::testing
