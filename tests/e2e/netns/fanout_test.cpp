// One terminal, many hosts (launcher/fanout/fanout.h), for real: every host is a network
// namespace of the lab (tests/support/netns.h) running its own OpenSSH server, with keys the test
// makes; `launch --hostfile` runs in host 0's namespace and reaches the others over ssh. A
// four-host job, a host that is down, Ctrl-C in the middle, a failing rank on the third host; and
// after each, nothing of the job left in any namespace. Needs root and openssh-server.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/launch/launch_helpers.h"
#include "tests/support/netns.h"

namespace {

using namespace ddl::launch_test;
using ddl::testing::NetnsLab;

constexpr int kHosts = 4;
constexpr milliseconds kJobTimeout{90'000};

// The lab, with sshd on hosts 1..kHosts-1 (not on `down`), keys, and an ssh configuration the
// launcher is pointed to through DDL_SSH_ARGS.
class SshLab {
 public:
  explicit SshLab(int down = -1) : lab_(kHosts) {
    const fs::path d = dir_.path();
    ddl::testing::must_run(
        {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (d / "id_key").string()});
    ddl::testing::must_run(
        {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (d / "host_key").string()});
    fs::copy_file(d / "id_key.pub", d / "authorized_keys");
    std::ofstream(d / "ssh_config") << "Host *\n  IdentityFile " << (d / "id_key").string()
                                    << "\n  StrictHostKeyChecking no\n"
                                       "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n";
    fs::create_directories("/run/sshd");  // sshd's privilege separation folder
    for (int i = 1; i < kHosts; ++i) {
      if (i == down) continue;
      const fs::path config = d / ("sshd_config." + std::to_string(i));
      std::ofstream(config) << "Port 22\nListenAddress " << lab_.node_address(i) << "\nHostKey "
                            << (d / "host_key").string() << "\nAuthorizedKeysFile "
                            << (d / "authorized_keys").string()
                            << "\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                               "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                               "PidFile none\nLogLevel ERROR\n";
      ddl::testing::SpawnOptions o;
      o.argv = lab_.exec_prefix(i);
      o.argv.insert(o.argv.end(), {"/usr/sbin/sshd", "-D", "-e", "-f", config.string()});
      o.stdout_path = d / ("sshd." + std::to_string(i) + ".log");
      sshd_.push_back(std::make_unique<ddl::testing::ChildProcess>(o));
      wait_for_ssh(i);
    }
  }

  NetnsLab& lab() { return lab_; }
  const NetnsLab& lab() const { return lab_; }
  const fs::path& dir() const { return dir_.path(); }
  ddl::env::EnvMap env() const {
    return {{"DDL_SSH_ARGS", "-F " + (dir_.path() / "ssh_config").string()}};
  }
  // The host file of every host, `slots` each.
  fs::path hostfile(int slots) const {
    const fs::path p = dir_.path() / "hostfile";
    std::ofstream f(p);
    f << "# the lab's hosts\n";
    for (int i = 0; i < kHosts; ++i) f << lab_.node_address(i) << " slots=" << slots << "\n\n";
    return p;
  }
  // Processes in host i's namespace other than its sshd.
  std::vector<pid_t> job_pids(int i) const {
    std::vector<pid_t> out;
    for (pid_t p : lab_.pids_in(i)) {
      bool is_sshd = false;
      for (const auto& s : sshd_) is_sshd = is_sshd || s->pid() == p;
      if (!is_sshd) out.push_back(p);
    }
    return out;
  }
  bool nothing_left() const {
    for (int i = 0; i < kHosts; ++i) {
      if (!job_pids(i).empty()) return false;
    }
    return true;
  }
  // True once nothing of the job is left anywhere, within `timeout`.
  bool nothing_left_within(milliseconds timeout) const {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (nothing_left()) return true;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return nothing_left();
  }

 private:
  void wait_for_ssh(int i) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::vector<std::string> argv = lab_.exec_prefix(0);
      argv.insert(argv.end(), {"ssh", "-F", (dir_.path() / "ssh_config").string(), "-o",
                               "BatchMode=yes", lab_.node_address(i), "true"});
      if (ddl::testing::run_command(argv).exit_code == 0) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
    throw std::runtime_error("sshd in host " + std::to_string(i) + " never answered");
  }

  TempDir dir_;
  NetnsLab lab_;
  std::vector<std::unique_ptr<ddl::testing::ChildProcess>> sshd_;
};

// The four hosts are namespaces of one 2-core machine with addresses of their own, so
// --preflight=auto would check them, and their matmuls, run at once on 2 cores, measure the
// scheduler (a node once came out at a third of the median and stopped the job): off here; the
// check has its own tests (preflight_test, netns_test).
LaunchRun start_job(const TempDir& out, SshLab& lab, std::vector<std::string> args) {
  args.insert(args.begin(), "--preflight=off");
  return LaunchRun(out, args, lab.env(), lab.lab().exec_prefix(0));
}

TEST(Fanout, FourHostsFromOneCommand) {
  SshLab lab;
  TempDir out;
  LaunchRun run = start_job(out, lab,
                            {"--hostfile", lab.hostfile(2).string(), "--print_config=false",
                             "--kill_timeout=3", "hello_worker", "--lines", "1"});
  ASSERT_EQ(run.wait(kJobTimeout), 0) << run.err() << run.out();
  const std::string text = run.out();
  for (int r = 0; r < 2 * kHosts; ++r) {
    const std::string host = lab.lab().node_address(r / 2);
    EXPECT_TRUE(contains(text, host + ": [rank " + std::to_string(r) + "] hello from rank " +
                                   std::to_string(r) + " of " + std::to_string(2 * kHosts)))
        << "rank " << r << " on " << host << "\n"
        << text;
  }
  EXPECT_FALSE(contains(text, "DDL_FANOUT_STARTED")) << "the start marker is not shown";
  EXPECT_TRUE(lab.nothing_left_within(milliseconds(5'000)));
}

TEST(Fanout, AHostThatIsDownIsOneLineNamingIt) {
  SshLab lab(/*down=*/2);
  TempDir out;
  LaunchRun run = start_job(out, lab,
                            {"--hostfile", lab.hostfile(1).string(), "--print_config=false",
                             "--kill_timeout=3", "hello_worker", "--sleep_ms", "60000"});
  const auto code = run.wait(milliseconds(60'000));
  ASSERT_TRUE(code) << run.err();
  EXPECT_EQ(*code, 1);
  const std::string host = lab.lab().node_address(2);
  EXPECT_TRUE(contains(run.err(), "host " + host +
                                      " (node 2): its launcher could not be started over ssh: "
                                      "ssh: connect to host " +
                                      host + " port 22"))
      << run.err();
  EXPECT_TRUE(lab.nothing_left_within(milliseconds(5'000)));
}

// Every argv of the job's processes in the lab (what `ps` would show anyone on the hosts).
std::string command_lines(const SshLab& lab) {
  std::string all;
  for (int i = 0; i < kHosts; ++i) {
    for (pid_t p : lab.lab().pids_in(i)) {
      std::ifstream in("/proc/" + std::to_string(p) + "/cmdline");
      all += std::string(std::istreambuf_iterator<char>(in), {}) + "\n";
    }
  }
  return all;
}

TEST(Fanout, CtrlCStopsEveryHostWithinFiveSeconds) {
  SshLab lab;
  TempDir out;
  ddl::env::EnvMap env = lab.env();
  env["DDL_JOB_SECRET"] = "fanout-secret-never-on-a-command-line";
  LaunchRun run(out,
                {"--preflight=off", "--hostfile", lab.hostfile(1).string(), "--print_config=false",
                 "--kill_timeout=3", "hello_worker", "--sleep_ms", "120000"},
                env, lab.lab().exec_prefix(0));
  // Every rank is up (its READY line), then Ctrl-C reaches launch.
  const auto ready_by = std::chrono::steady_clock::now() + milliseconds(60'000);
  int ready = 0;
  while (std::chrono::steady_clock::now() < ready_by) {
    const std::string text = run.out();
    ready = 0;
    for (std::size_t at = text.find("READY pid"); at != std::string::npos;
         at = text.find("READY pid", at + 1)) {
      ++ready;
    }
    if (ready == kHosts) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_EQ(ready, kHosts) << run.out() << run.err();
  const std::string argvs = command_lines(lab);
  EXPECT_TRUE(contains(argvs, "--exit_with_stdin")) << "the nodes' launchers are seen";
  EXPECT_FALSE(contains(argvs, "fanout-secret")) << argvs;
  const auto sent = std::chrono::steady_clock::now();
  ::kill(run.pid(), SIGINT);
  EXPECT_TRUE(lab.nothing_left_within(milliseconds(5'000)))
      << "still running after 5 s: host 1 " << lab.job_pids(1).size() << ", host 3 "
      << lab.job_pids(3).size();
  const auto code = run.wait(milliseconds(10'000));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 128 + SIGINT);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, milliseconds(10'000));
}

TEST(Fanout, AFailingRankOnTheThirdHostEndsTheJobWithItsCode) {
  SshLab lab;
  TempDir out;
  LaunchRun run =
      start_job(out, lab,
                {"--hostfile", lab.hostfile(1).string(), "--print_config=false", "--kill_timeout=3",
                 "hello_worker", "--sleep_ms", "60000", "--fail_rank", "2", "--exit_code", "7"});
  const auto code = run.wait(kJobTimeout);
  ASSERT_TRUE(code) << run.err();
  EXPECT_EQ(*code, 7) << run.err();
  EXPECT_TRUE(contains(run.err(), lab.lab().node_address(2) + ": ")) << run.err();
  EXPECT_TRUE(contains(run.err(), "rank 2 exited with code 7")) << run.err();
  EXPECT_TRUE(lab.nothing_left_within(milliseconds(5'000)));
}

}  // namespace
