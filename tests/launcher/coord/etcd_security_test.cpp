// etcd as sites secure it: members serving TLS only (https), one asking for client certificates
// (--client-cert-auth), one with etcd's user authentication enabled. The test makes its own CA and
// certificates with the openssl program and enables authentication with etcdctl. The client and
// the control plane reach it with --rdzv_conf's keys (protocol=https, cacert, cert, key,
// username, password); what is missing or wrong is one clear error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <string>

#include "launcher/coord/control_plane.h"
#include "launcher/coord/etcd_client.h"
#include "tests/launcher/coord/control_fixtures.h"
#include "tests/support/poll.h"
#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ddl::launcher {
namespace {

using control_fixtures::description;
using control_fixtures::endpoints;
using std::chrono::milliseconds;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void run(const std::string& command) {
  if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) {
    throw std::runtime_error("failed: " + command);
  }
}

// A CA, a certificate for 127.0.0.1 signed by it, and a client certificate for user "root".
struct Certificates {
  explicit Certificates(const std::filesystem::path& dir) : dir(dir) {
    const std::string d = dir.string();
    run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ddl-test-ca -keyout " + d +
        "/ca.key -out " + d + "/ca.pem");
    for (const std::string name : {"server", "client"}) {
      const std::string cn = name == "server" ? "127.0.0.1" : "root";
      run("openssl req -newkey rsa:2048 -nodes -subj /CN=" + cn + " -keyout " + d + "/" + name +
          ".key -out " + d + "/" + name + ".csr");
      std::ofstream(dir / (name + ".ext"))
          << "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n";
      run("openssl x509 -req -days 2 -in " + d + "/" + name + ".csr -CA " + d + "/ca.pem -CAkey " +
          d + "/ca.key -CAcreateserial -extfile " + d + "/" + name + ".ext -out " + d + "/" + name +
          ".pem");
    }
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  std::filesystem::path dir;
};

// One etcd member serving https only, started with `extra` flags; nullptr (and the log in
// `log`) when it did not answer etcdctl within 20 s.
std::unique_ptr<testing::ChildProcess> start_etcd(const std::filesystem::path& dir,
                                                  const Certificates& certs,
                                                  const std::string& name, std::uint16_t port,
                                                  const std::vector<std::string>& extra,
                                                  const std::string& ctl) {
  const std::string client = "https://127.0.0.1:" + std::to_string(port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(port + 1);
  testing::SpawnOptions o;
  o.argv = {"/usr/bin/etcd",
            "--name=" + name,
            "--data-dir=" + (dir / (name + ".etcd")).string(),
            "--listen-client-urls=" + client,
            "--advertise-client-urls=" + client,
            "--listen-peer-urls=" + peer,
            "--initial-advertise-peer-urls=" + peer,
            "--initial-cluster=" + name + "=" + peer,
            "--cert-file=" + certs.file("server.pem"),
            "--key-file=" + certs.file("server.key"),
            "--logger=zap",
            "--log-outputs=stderr"};
  for (const auto& e : extra) o.argv.push_back(e);
  o.stdout_path = dir / (name + ".log");
  auto etcd = std::make_unique<testing::ChildProcess>(o);
  const bool up = testing::wait_until(
      [&] { return std::system((ctl + " endpoint health >/dev/null 2>&1").c_str()) == 0; },
      milliseconds(20'000));
  if (!up) throw std::runtime_error("etcd " + name + " did not start:\n" + etcd->out());
  return etcd;
}

// Two members as sites run them (ports above the ephemeral range): `certified` asks every client
// for a certificate signed by the CA (--client-cert-auth); `authenticated` serves TLS and has
// etcd's user authentication on. (etcd's gateway refuses requests that carry a client
// certificate when authentication is on, so a site uses one or the other with it.)
class EtcdSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("ddl_etcd_tls");
    certs_ = new Certificates(dir_->path());
    certified_port_ = testing::free_port_block_above_ephemeral();
    authenticated_port_ = testing::free_port_block_above_ephemeral();
    const std::string ca = " --cacert=" + certs_->file("ca.pem");
    const std::string ctl =
        "ETCDCTL_API=3 /usr/bin/etcdctl" + ca + " --endpoints=https://127.0.0.1:";
    const std::string with_cert =
        " --cert=" + certs_->file("client.pem") + " --key=" + certs_->file("client.key");
    certified_ = start_etcd(dir_->path(), *certs_, "certified", certified_port_,
                            {"--trusted-ca-file=" + certs_->file("ca.pem"), "--client-cert-auth"},
                            ctl + std::to_string(certified_port_) + with_cert)
                     .release();
    const std::string auth_ctl = ctl + std::to_string(authenticated_port_);
    authenticated_ =
        start_etcd(dir_->path(), *certs_, "authenticated", authenticated_port_, {}, auth_ctl)
            .release();
    run(auth_ctl + " user add root:rootpw");
    run(auth_ctl + " user grant-role root root");
    run(auth_ctl + " user add trainer:s3cret-pw");
    run(auth_ctl + " role add ddl");
    run(auth_ctl + " role grant-permission ddl --prefix=true readwrite /ddl/");
    run(auth_ctl + " user grant-role trainer ddl");
    run(auth_ctl + " auth enable");
  }
  static void TearDownTestSuite() {
    delete certified_;
    delete authenticated_;
    delete certs_;
    delete dir_;
  }

  // TLS with the test's CA, and a password (towards `authenticated`) or a client certificate.
  static EtcdSecurity security(bool certificate, const std::string& password = "s3cret-pw") {
    EtcdSecurity s;
    s.tls = true;
    s.ca_file = certs_->file("ca.pem");
    if (certificate) {
      s.cert_file = certs_->file("client.pem");
      s.key_file = certs_->file("client.key");
    } else {
      s.user = "trainer";
      s.password = password;
    }
    return s;
  }

  static etcd::ClientOptions client_options(const EtcdSecurity& s) {
    const std::uint16_t port = s.cert_file.empty() ? authenticated_port_ : certified_port_;
    etcd::ClientOptions o({{"127.0.0.1", port}}, milliseconds(2'000));
    o.tls = {s.tls, s.ca_file, s.cert_file, s.key_file};
    o.user = s.user;
    o.password = s.password;
    return o;
  }

  static testing::TempDir* dir_;
  static Certificates* certs_;
  static testing::ChildProcess* certified_;
  static testing::ChildProcess* authenticated_;
  static std::uint16_t certified_port_;
  static std::uint16_t authenticated_port_;
};
testing::TempDir* EtcdSecurityTest::dir_ = nullptr;
Certificates* EtcdSecurityTest::certs_ = nullptr;
testing::ChildProcess* EtcdSecurityTest::certified_ = nullptr;
testing::ChildProcess* EtcdSecurityTest::authenticated_ = nullptr;
std::uint16_t EtcdSecurityTest::certified_port_ = 0;
std::uint16_t EtcdSecurityTest::authenticated_port_ = 0;

TEST_F(EtcdSecurityTest, TheClientSpeaksTlsWithAClientCertificate) {
  etcd::Client client(client_options(security(true)));
  client.put("/ddl/probe", "1");
  EXPECT_EQ(client.get("/ddl/probe")->value, "1");
}

TEST_F(EtcdSecurityTest, TheClientSpeaksTlsAndAuthenticates) {
  etcd::Client client(client_options(security(false)));
  client.put("/ddl/probe", "1");
  EXPECT_EQ(client.get("/ddl/probe")->value, "1");
  // The user's role covers /ddl/ only: elsewhere etcd says no, and the client says so.
  try {
    client.put("/elsewhere", "1");
    FAIL() << "a write outside the user's permission was accepted";
  } catch (const etcd::EtcdError& e) {
    EXPECT_TRUE(has(e.what(), "permission denied")) << e.what();
  }
}

TEST_F(EtcdSecurityTest, AWrongPasswordIsOneErrorNamingTheUser) {
  etcd::Client client(client_options(security(false, "wrong")));
  try {
    client.get("/ddl/probe");
    FAIL() << "a wrong password was accepted";
  } catch (const etcd::EtcdError& e) {
    EXPECT_TRUE(has(e.what(), "authentication failed")) << e.what();
    EXPECT_TRUE(has(e.what(), "etcd user 'trainer'")) << e.what();
  }
}

TEST_F(EtcdSecurityTest, AServerThisClientDoesNotTrustIsRefusedAtOnce) {
  EtcdSecurity s = security(false);
  s.ca_file = certs_->file("client.pem");  // not the CA that signed the server's certificate
  etcd::Client client(client_options(s));
  try {
    client.get("/ddl/probe");
    FAIL() << "an untrusted server was accepted";
  } catch (const etcd::EtcdError& e) {
    EXPECT_TRUE(has(e.what(), "TLS handshake")) << e.what();
    EXPECT_TRUE(has(e.what(), "certificate verify failed")) << e.what();
  }
}

TEST_F(EtcdSecurityTest, WithoutAClientCertificateTheMemberRefuses) {
  etcd::ClientOptions o = client_options(security(true));
  o.tls.cert_file.clear();
  o.tls.key_file.clear();
  etcd::Client client(o);
  EXPECT_THROW(client.get("/ddl/probe"), etcd::EtcdError);
}

// Through either member: the control plane's connections (the watcher's and the watches') all
// speak TLS and carry the token or the certificate.
class EtcdSecuredJob : public EtcdSecurityTest, public ::testing::WithParamInterface<bool> {};

TEST_P(EtcdSecuredJob, TwoNodesFormAJob) {
  const bool certificate = GetParam();
  auto options = [certificate](int node) {
    ControlOptions o;
    o.etcd_endpoints = {{"127.0.0.1", certificate ? certified_port_ : authenticated_port_}};
    o.etcd_security = security(certificate);
    o.job_id = certificate ? "secured-by-certificate" : "secured-by-password";
    o.secret = "job-secret";
    o.node_rank = node;
    o.nnodes = 2;
    o.rendezvous_timeout = milliseconds(10'000);
    o.heartbeat_interval = milliseconds(100);
    o.heartbeat_timeout = milliseconds(1'000);
    return o;
  };
  auto node1 = std::async(std::launch::async, [&] {
    std::unique_ptr<Control> c = make_control(options(1));
    c->rendezvous(description(2), endpoints("127.0.0.2", 7000, 2), "");
    const Membership m = c->join_generation(Generation());
    c->finish();
    return m;
  });
  std::unique_ptr<Control> c0 = make_control(options(0));
  const auto agreement = c0->rendezvous(description(2), endpoints("127.0.0.1", 9000, 2), "job-0");
  const Membership m0 = c0->join_generation(Generation());
  EXPECT_EQ(node1.get().endpoints, m0.endpoints);
  EXPECT_EQ(agreement.job_id, "job-0");
  c0->finish();
}

INSTANTIATE_TEST_SUITE_P(Etcd, EtcdSecuredJob, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ClientCertificate" : "Password";
                         });

}  // namespace
}  // namespace ddl::launcher
