// A real etcd cluster of a test's own: N members of /usr/bin/etcd (Debian's etcd-server) as one
// cluster, each with its client and peer port, data dir and log in a temp folder, children of the
// test and killed with the object. The members listen on `address` (127.0.0.1 unless a test runs
// them in a network namespace of its own, where `command_prefix` is e.g.
// {"ip", "netns", "exec", "NAME"}). Ports are picked free on the loopback interface, which a fresh
// namespace leaves unused as well; they lie above the ephemeral range, so that no connection takes
// one before (or while a killed member is down, after) its member binds it.
//
//   EtcdCluster etcd(3);
//   etcd::Client client({etcd.endpoints()});
//   etcd.kill(0);     // SIGKILL member 0; the other two keep the quorum
//   etcd.restart(0);  // the same data dir: it rejoins
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "env/contract.h"
#include "launcher/coord/etcd_client.h"
#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace ddl::testing {

class EtcdCluster {
 public:
  static constexpr const char* kEtcd = "/usr/bin/etcd";

  // Starts the members and waits (at most `ready_timeout`) until the cluster takes a write.
  // Throws std::runtime_error with the members' logs when it does not.
  explicit EtcdCluster(int members = 3, std::string address = "127.0.0.1",
                       std::vector<std::string> command_prefix = {},
                       std::chrono::milliseconds ready_timeout = std::chrono::seconds(30))
      : address_(std::move(address)), prefix_(std::move(command_prefix)) {
    if (members < 1) throw std::invalid_argument("an etcd cluster needs at least one member");
    if (::access(kEtcd, X_OK) != 0) {
      throw std::runtime_error(std::string(kEtcd) + " not found (Debian package: etcd-server)");
    }
    const auto ports = free_ports_above_ephemeral(2 * members);
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = ports[2 * i];
      m.peer_port = ports[2 * i + 1];
      members_.push_back(std::move(m));
    }
    for (const auto& m : members_) {
      initial_cluster_ += (initial_cluster_.empty() ? "" : ",") + m.name + "=" + peer_url(m);
    }
    for (int i = 0; i < members; ++i) start(i);
    wait_ready(endpoints(), ready_timeout);
  }
  ~EtcdCluster() {
    for (auto& m : members_) m.process.reset();  // SIGKILL and reap
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }

  // The members' client endpoints, member 0 first.
  std::vector<env::Endpoint> endpoints() const {
    std::vector<env::Endpoint> out;
    for (const auto& m : members_) out.push_back(endpoint(m));
    return out;
  }
  env::Endpoint endpoint(int i) const { return endpoint(members_.at(i)); }
  // "H:P,H:P,H:P", as --rdzv_endpoint takes them.
  std::string endpoints_text() const { return env::join_endpoints(endpoints()); }

  // The member's pid (-1 once killed).
  pid_t pid(int i) const {
    const auto& p = members_.at(i).process;
    return p ? p->pid() : -1;
  }
  bool running(int i) const { return members_.at(i).process != nullptr; }

  // SIGKILLs member `i` and reaps it.
  void kill(int i) { members_.at(i).process.reset(); }

  // Starts member `i` again on its data dir (it rejoins the cluster) and waits until it serves a
  // linearizable read.
  void restart(int i, std::chrono::milliseconds ready_timeout = std::chrono::seconds(30)) {
    kill(i);
    start(i);
    wait_ready({endpoint(i)}, ready_timeout, /*write=*/false);
  }

  // What member `i` logged (all its runs' output is in one file per run; this is the latest).
  std::string log_of(int i) const { return read_file(log_path(i)); }
  std::string logs() const {
    std::string out;
    for (int i = 0; i < size(); ++i) {
      out += "--- etcd member " + std::to_string(i) + " (" + endpoint(i).str() + ") ---\n" +
             tail(log_of(i), 3000) + "\n";
    }
    return out;
  }
  const TempDir& dir() const { return dir_; }

 private:
  struct Member {
    std::string name;
    std::uint16_t client_port = 0;
    std::uint16_t peer_port = 0;
    std::unique_ptr<ChildProcess> process;
  };

  env::Endpoint endpoint(const Member& m) const { return {address_, m.client_port}; }
  std::string client_url(const Member& m) const {
    return "http://" + address_ + ":" + std::to_string(m.client_port);
  }
  std::string peer_url(const Member& m) const {
    return "http://" + address_ + ":" + std::to_string(m.peer_port);
  }
  std::filesystem::path log_path(int i) const {
    return dir_.path() / (members_.at(i).name + ".log");
  }

  static std::string tail(const std::string& text, std::size_t n) {
    return text.size() <= n ? text : "..." + text.substr(text.size() - n);
  }

  // `count` (up to 16) ports free on 127.0.0.1, above Linux's default ephemeral range: the
  // members connect to each other's peer ports before all are bound, and a port from that range
  // could be taken by such a connect (or anyone's) before its member binds it, also while a killed
  // member is down (tests/support/ports.h).
  static std::vector<std::uint16_t> free_ports_above_ephemeral(int count) {
    if (count > 16) throw std::runtime_error("an etcd test cluster takes at most 16 ports");
    const int first = free_port_block_above_ephemeral() - 1;
    std::vector<std::uint16_t> out;
    for (int k = 0; k < count; ++k) out.push_back(static_cast<std::uint16_t>(first + k));
    return out;
  }

  // A program of the command prefix by its path (ChildProcess does no PATH lookup).
  static std::string program_path(const std::string& name) {
    if (name.find('/') != std::string::npos) return name;
    for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"}) {
      const std::string p = std::string(dir) + "/" + name;
      if (::access(p.c_str(), X_OK) == 0) return p;
    }
    return name;
  }

  void start(int i) {
    Member& m = members_.at(i);
    SpawnOptions o;
    for (const auto& part : prefix_) o.argv.push_back(part);
    if (!o.argv.empty()) o.argv[0] = program_path(o.argv[0]);
    const std::vector<std::string> etcd_args = {
        kEtcd,
        "--name=" + m.name,
        "--data-dir=" + (dir_.path() / (m.name + ".etcd")).string(),
        "--listen-client-urls=" + client_url(m),
        "--advertise-client-urls=" + client_url(m),
        "--listen-peer-urls=" + peer_url(m),
        "--initial-advertise-peer-urls=" + peer_url(m),
        "--initial-cluster=" + initial_cluster_,
        "--initial-cluster-state=new",  // ignored once the data dir exists (a restart)
        "--initial-cluster-token=ddl-test-" + std::to_string(::getpid()),
        // Fast elections for tests (the defaults are 100 ms and 1 s), still well above the time
        // a loaded 2-core machine takes to answer a heartbeat.
        "--heartbeat-interval=50",
        "--election-timeout=500",
        "--logger=zap",
        "--log-outputs=stderr",
    };
    for (const auto& part : etcd_args) o.argv.push_back(part);
    o.stdout_path = log_path(i);
    o.own_process_group = true;
    m.process = std::make_unique<ChildProcess>(o);
  }

  // One write (or, for one restarted member, a read) through `endpoints`: with the client from
  // here, or, under a command prefix (another network namespace, which this process may have no
  // route into), with etcdctl under the prefix. Returns why it failed, empty when it worked.
  std::string try_request(const std::vector<env::Endpoint>& endpoints, bool write) {
    if (prefix_.empty()) {
      try {
        etcd::Client client({endpoints, std::chrono::milliseconds(1'000)});
        if (write) {
          client.put("ddl-test/ready", "1");
        } else {
          client.get("ddl-test/ready");
        }
        return "";
      } catch (const etcd::EtcdError& e) {
        return e.what();
      }
    }
    SpawnOptions o;
    o.argv = prefix_;
    o.argv[0] = program_path(o.argv[0]);
    for (const std::string& part :
         {std::string("/usr/bin/etcdctl"), "--endpoints=" + env::join_endpoints(endpoints),
          std::string("--command-timeout=1s"), std::string(write ? "put" : "get"),
          std::string("ddl-test/ready")}) {
      o.argv.push_back(part);
    }
    if (write) o.argv.push_back("1");
    o.stdout_path = dir_.path() / "etcdctl.out";
    ChildProcess etcdctl(o);
    const auto code = etcdctl.wait(std::chrono::seconds(5));
    if (code && *code == 0) return "";
    return "etcdctl: " + (code ? "exit " + std::to_string(*code) : std::string("no exit in 5 s")) +
           ": " + tail(etcdctl.out(), 500);
  }

  // Waits until a write (or, for one restarted member, a read) through `endpoints` succeeds.
  void wait_ready(const std::vector<env::Endpoint>& endpoints, std::chrono::milliseconds timeout,
                  bool write = true) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < size(); ++i) {
        auto& p = members_[i].process;
        if (p && p->wait(std::chrono::milliseconds(0))) {
          throw std::runtime_error("etcd member " + std::to_string(i) + " exited:\n" + logs());
        }
      }
      last = try_request(endpoints, write);
      if (last.empty()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("the etcd cluster at " + env::join_endpoints(endpoints) +
                             " did not answer within " + std::to_string(timeout.count()) +
                             " ms: " + last + "\n" + logs());
  }

  TempDir dir_{"ddl_etcd"};
  std::string address_;
  std::vector<std::string> prefix_;
  std::vector<Member> members_;
  std::string initial_cluster_;
};

}  // namespace ddl::testing
