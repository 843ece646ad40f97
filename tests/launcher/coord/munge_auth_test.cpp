// Munge credentials against a real munged the test starts (tests/support/munged.h; skipped
// without root or munged): the wrapper (encode, decode, each failure named), the socket Slurm
// names, the admission of the control store's clients, and a two-node control plane (node 0's TCP
// store) whose launchers are admitted by munge and agree on node 0's workers' secret.
#include "launcher/coord/munge_auth.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <memory>

#include "env/slurm.h"
#include "launcher/coord/control_plane.h"
#include "store/tcp_store.h"
#include "tests/support/munged.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using testing::TempDir;
using testing::TestMunged;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

#define SKIP_WITHOUT(munged) \
  if (!(munged).skip_reason().empty()) GTEST_SKIP() << (munged).skip_reason()

MungeClient client_of(const TestMunged& munged) { return MungeClient({munged.socket(), "test"}); }

// The MungeError `fn` throws (fails the test when it throws none).
template <typename Fn>
std::optional<MungeError> munge_error(Fn fn) {
  try {
    fn();
  } catch (const MungeError& e) {
    return e;
  }
  ADD_FAILURE() << "no MungeError";
  return std::nullopt;
}

TEST(MungeSocketChoice, VariableThenSlurmConfThenDefault) {
  TempDir dir;
  const std::string conf = dir.file("slurm.conf");
  std::ofstream(conf) << "# AuthInfo=socket=/commented/out\n"
                      << "ClusterName=x\n"
                      << "authinfo=cred_expire=120,socket=/run/slurm-munge.sock  # ours\n";
  const MungeSocket from_conf = find_munge_socket({{env::kSlurmConf, conf}});
  EXPECT_EQ(from_conf.path, "/run/slurm-munge.sock");
  EXPECT_EQ(from_conf.source, "AuthInfo in " + conf);

  const MungeSocket from_var =
      find_munge_socket({{env::kSlurmConf, conf}, {env::kMungeSocket, "/x/munge.sock"}});
  EXPECT_EQ(from_var.path, "/x/munge.sock");
  EXPECT_EQ(from_var.source, env::kMungeSocket);

  std::ofstream(dir.file("plain.conf")) << "AuthType=auth/munge\nAuthInfo=cred_expire=60\n";
  EXPECT_EQ(find_munge_socket({{env::kSlurmConf, dir.file("plain.conf")}}).path,
            kMungeDefaultSocket)
      << "AuthInfo without socket=";
  EXPECT_EQ(find_munge_socket({{env::kSlurmConf, dir.file("missing.conf")}}).path,
            kMungeDefaultSocket);
}

TEST(MungeClient, UnreachableDaemonIsNamedWithItsSocket) {
  TempDir dir;
  const MungeClient client({dir.file("no.socket"), "test"});
  const auto e = munge_error([&] { client.encode("x"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->failure(), MungeFailure::kUnreachable) << e->what();
  EXPECT_TRUE(has(e->what(), dir.file("no.socket"))) << e->what();
  EXPECT_TRUE(has(e->what(), "is munged running there?")) << e->what();
}

TEST(MungeClient, RoundTripsAndRefusesReplaysGarbageAndAnotherKey) {
  TestMunged munged;
  SKIP_WITHOUT(munged);
  const MungeClient client = client_of(munged);
  const std::string credential = client.encode("payload\nwith lines");
  EXPECT_EQ(credential.rfind("MUNGE:", 0), 0u) << credential;
  const MungeClient::Decoded d = client.decode(credential);
  EXPECT_EQ(d.uid, ::geteuid());
  EXPECT_EQ(d.gid, ::getegid());
  EXPECT_EQ(d.payload, "payload\nwith lines");

  auto e = munge_error([&] { client.decode(credential); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->failure(), MungeFailure::kReplayed) << e->what();

  e = munge_error([&] { client.decode("MUNGE:not-a-credential:"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->failure(), MungeFailure::kInvalid) << e->what();

  TestMunged other;  // another cluster: another key
  SKIP_WITHOUT(other);
  e = munge_error([&] { client_of(other).decode(client.encode("x")); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->failure(), MungeFailure::kInvalid) << e->what();
  EXPECT_TRUE(has(e->what(), other.socket())) << e->what();
}

// A credential made by another uid (a forked child that became `nobody`).
std::string credential_of_nobody(const MungeAdmission& admission, int node) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    try {
      const std::string c = admission.credential(node);
      if (::write(fds[1], c.data(), c.size()) != static_cast<ssize_t>(c.size())) ::_exit(4);
    } catch (...) {
      ::_exit(5);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : "";
}

TEST(MungeAdmission, AdmitsOnlyAFreshCredentialOfThisScopeNodeAndUid) {
  TestMunged munged;
  SKIP_WITHOUT(munged);
  const MungeAdmission admission(client_of(munged), "slurm job 7, control store 'c'");
  const std::string good = admission.credential(1);
  EXPECT_EQ(admission.refusal(good, 1), "");

  const std::string replayed = admission.refusal(good, 1);
  EXPECT_TRUE(has(replayed, "Replayed")) << replayed;
  EXPECT_TRUE(has(admission.refusal("", 1), "munge credential refused"));
  EXPECT_TRUE(has(admission.refusal("s3cret", 1), "munge credential refused"));

  const std::string other_node = admission.refusal(admission.credential(2), 1);
  EXPECT_TRUE(has(other_node, "for another job or node")) << other_node;
  const MungeAdmission other_job(client_of(munged), "slurm job 8, control store 'c'");
  const std::string other_scope = admission.refusal(other_job.credential(1), 1);
  EXPECT_TRUE(has(other_scope, "slurm job 8")) << other_scope;

  const std::string nobodys = credential_of_nobody(admission, 1);
  ASSERT_FALSE(nobodys.empty()) << "the child (uid 65534) could not make a credential";
  const std::string why = admission.refusal(nobodys, 1);
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(has(why, "uid 65534") || has(why, "Unauthorized")) << why;
}

ControlOptions munge_options(std::uint16_t port, int node,
                             std::shared_ptr<const MungeAdmission> munge) {
  ControlOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "ddl-control";
  o.munge = std::move(munge);
  o.node_rank = node;
  o.nnodes = 2;
  o.rendezvous_timeout = milliseconds(5000);
  o.heartbeat_interval = milliseconds(100);
  o.heartbeat_timeout = milliseconds(1000);
  o.linger_timeout = milliseconds(2000);
  return o;
}

TcpStoreOptions intruder(std::uint16_t port, std::function<std::string()> credential) {
  TcpStoreOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "ddl-control";
  o.rank = 1;
  o.credential = std::move(credential);
  o.connect_timeout = milliseconds(2000);
  o.io_timeout = milliseconds(2000);
  return o;
}

// The StoreError message of connecting with `o` ("" when it was admitted).
std::string refusal_of(const TcpStoreOptions& o) {
  try {
    TcpStore client(o);
  } catch (const StoreError& e) {
    return e.what();
  }
  return "";
}

TEST(MungeControlPlane, LaunchersAdmittedByMungeAgreeOnNodeZerosSecret) {
  TestMunged munged;
  SKIP_WITHOUT(munged);
  const auto admission =
      std::make_shared<const MungeAdmission>(client_of(munged), "slurm job 9, control store");
  const std::uint16_t port = testing::free_port();
  const JobDescription d = {{"nnodes", "2"}, {"worker program", "w"}};
  const std::unique_ptr<Control> c0 = make_control(munge_options(port, 0, admission));

  // Before node 1 joins: what a stranger presents is refused.
  std::string why = refusal_of(intruder(port, [] { return std::string("s3cret"); }));
  EXPECT_TRUE(has(why, "munge credential refused")) << why;
  const MungeAdmission other_job(client_of(munged), "slurm job 10, control store");
  why = refusal_of(intruder(port, [&] { return other_job.credential(1); }));
  EXPECT_TRUE(has(why, "for another job or node")) << why;
  const std::string once = admission->credential(1);
  EXPECT_EQ(refusal_of(intruder(port, [&] { return once; })), "") << "a fresh credential";
  why = refusal_of(intruder(port, [&] { return once; }));
  EXPECT_TRUE(has(why, "Replayed")) << why;

  auto node1 = std::async(std::launch::async, [&] {
    const std::unique_ptr<Control> c1 = make_control(munge_options(port, 1, admission));
    const auto a = c1->rendezvous(d, {{"127.0.0.2", 7000}}, "", "node-1-secret");
    c1->finish();
    return a;
  });
  const auto a0 = c0->rendezvous(d, {{"127.0.0.1", 7000}}, "job-0", "node-0-secret");
  const auto a1 = node1.get();
  c0->finish();
  EXPECT_EQ(a0.job_secret, "node-0-secret");
  EXPECT_EQ(a1.job_secret, "node-0-secret") << "node 1 takes node 0's workers' secret";
  EXPECT_EQ(a1.job_id, "job-0");
}

}  // namespace
}  // namespace ddl::launcher
