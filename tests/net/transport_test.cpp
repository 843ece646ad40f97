// The framed server and client with a small service of the test's own (not the store): the
// handshake and secret, replies matched to requests, a service's error reply, a hello for another
// service refused, replies that arrive later than the request, and a silent server bounded by the
// client's deadline.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <map>
#include <memory>
#include <string>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/bytes.h"
#include "net/auth.h"
#include "net/client.h"
#include "net/server.h"
#include "tests/support/poll.h"

namespace ddl::net {
namespace {

using std::chrono::milliseconds;

constexpr std::uint8_t kEcho = kFirstServiceOp;       // replies with the payload
constexpr std::uint8_t kFail = kFirstServiceOp + 1;   // replies with a transport error
constexpr std::uint8_t kLater = kFirstServiceOp + 2;  // replies after u32 ms
constexpr std::uint8_t kSilent = kFirstServiceOp + 3;  // never replies
constexpr std::uint8_t kReply = 64;

using ddl::testing::bytes;

class EchoService : public ServiceHandler {
 public:
  explicit EchoService(boost::asio::io_context& io) : io_(io) {}

  void on_request(const std::shared_ptr<Connection>& c, Frame&& f) override {
    switch (f.op) {
      case kEcho:
        c->reply(f.request_id, kReply, f.payload);
        return;
      case kFail:
        c->reply(f.request_id, static_cast<std::uint8_t>(TransportOp::kError),
                 PayloadWriter().str("no such thing").take());
        return;
      case kLater: {
        PayloadReader r(f.payload, "later");
        const milliseconds delay{r.u32()};
        r.finish();
        auto timer = std::make_shared<boost::asio::steady_timer>(io_, delay);
        std::weak_ptr<Connection> weak = c;
        const std::uint32_t id = f.request_id;
        timer->async_wait([timer, weak, id](const boost::system::error_code& ec) {
          if (auto conn = weak.lock(); !ec && conn) conn->reply(id, kReply, bytes("late"));
        });
        return;
      }
      case kSilent:
        return;
      default:
        throw ProtocolError(ProtocolErrorKind::kUnknownOp, "unknown echo op");
    }
  }
  void on_close(Connection&) override { ++closed; }

  int closed = 0;

 private:
  boost::asio::io_context& io_;
};

ServerOptions server_options(Service service = Service::kParameterServer) {
  ServerOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", 0};
  o.job_id = "job-net";
  o.secret = "sesame";
  o.service = service;
  o.name = "echo server";
  return o;
}

ClientOptions client_options(std::uint16_t port, Service service = Service::kParameterServer) {
  ClientOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "job-net";
  o.secret = "sesame";
  o.service = service;
  o.server_name = "the echo server";
  o.server_host_hint = "the test";
  o.rank = 3;
  o.world_size = 4;
  o.connect_timeout = milliseconds(5000);
  o.io_timeout = milliseconds(500);
  return o;
}

FramedServer start_server(Service service = Service::kParameterServer) {
  return FramedServer(server_options(service), [](boost::asio::io_context& io) {
    return std::make_unique<EchoService>(io);
  });
}

TEST(Transport, RequestsGetTheirOwnRepliesOnOneConnection) {
  FramedServer server = start_server();
  FramedClient client(client_options(server.port()));
  for (int i = 0; i < 50; ++i) {
    const Bytes payload = bytes("ping " + std::to_string(i));
    const Frame reply = client.request(kEcho, payload, milliseconds(0), {kReply}, "echo");
    EXPECT_EQ(reply.payload, payload);
    EXPECT_EQ(reply.service, Service::kParameterServer);
    EXPECT_EQ(reply.request_id, static_cast<std::uint32_t>(i + 1));
  }
}

TEST(Transport, AServiceErrorLeavesTheConnectionUsable) {
  FramedServer server = start_server();
  FramedClient client(client_options(server.port()));
  try {
    client.request(kFail, {}, milliseconds(0), {kReply}, "fail please");
    FAIL() << "an error reply was returned as a value";
  } catch (const RequestFailed& e) {
    EXPECT_NE(std::string(e.what()).find("refused fail please: no such thing"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(client.request(kEcho, bytes("still"), milliseconds(0), {kReply}, "echo").payload,
            bytes("still"));
  EXPECT_EQ(server.dropped_connections(), 0u);
}

TEST(Transport, AReplyMayComeWithinTheRequestsOwnWait) {
  FramedServer server = start_server();
  FramedClient client(client_options(server.port()));
  // 800 ms is beyond io_timeout (500 ms) but within wait + io_timeout.
  const Frame reply = client.request(kLater, PayloadWriter().u32(800).take(), milliseconds(1000),
                                     {kReply}, "later");
  EXPECT_EQ(reply.payload, bytes("late"));
}

TEST(Transport, ASilentServerIsAnErrorByTheDeadlineAndTheClientSaysWhyAfterwards) {
  FramedServer server = start_server();
  FramedClient client(client_options(server.port()));
  const auto start = std::chrono::steady_clock::now();
  try {
    client.request(kSilent, {}, milliseconds(0), {kReply}, "silence");
    FAIL() << "a request nobody answers returned";
  } catch (const NetError& e) {
    EXPECT_NE(std::string(e.what()).find("did not answer silence in time"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(testing::elapsed_ms(start), 3000.0);
  try {
    client.request(kEcho, {}, milliseconds(0), {kReply}, "echo");
    FAIL() << "a broken client sent again";
  } catch (const NetError& e) {
    EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
  }
}

TEST(Transport, AHelloForAnotherServiceIsRefused) {
  FramedServer server = start_server(Service::kParameterServer);
  try {
    FramedClient client(client_options(server.port(), Service::kStore));
    FAIL() << "a store client joined a parameter server";
  } catch (const RefusedError& e) {
    // The refusal says nothing of what the server serves; the client names what it asked for.
    EXPECT_EQ(std::string(e.what()).find("parameter server"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the store): not admitted"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(testing::wait_until([&] { return server.dropped_connections() == 1; },
                                  milliseconds(2000)));
}

TEST(Transport, AWrongSecretIsRefused) {
  FramedServer server = start_server();
  ClientOptions o = client_options(server.port());
  o.secret = "guess";
  EXPECT_THROW(FramedClient client(o), RefusedError);
}

// An admission hook decides instead of the secret, on what each hello presents and the rank it
// names; the client's credential function makes what it presents, once per connection.
TEST(Transport, AnAdmissionHookDecidesOnEachHello) {
  ServerOptions so = server_options();
  std::vector<std::pair<std::string, int>> seen;
  so.admit = [&seen](const std::string& presented, int rank) -> std::string {
    seen.emplace_back(presented, rank);  // the server thread; read after the clients are done
    if (presented == "boom") throw std::runtime_error("cannot decide");
    return presented == "ticket-" + std::to_string(rank) ? "" : "no ticket for rank " +
                                                                    std::to_string(rank);
  };
  FramedServer server(so, [](boost::asio::io_context& io) {
    return std::make_unique<EchoService>(io);
  });
  ClientOptions co = client_options(server.port());
  int made = 0;
  co.credential = [&made] {
    ++made;
    return std::string("ticket-3");
  };
  {
    FramedClient admitted(co);
    EXPECT_EQ(admitted.request(kEcho, bytes("in"), milliseconds(0), {kReply}, "echo").payload,
              bytes("in"));
  }
  EXPECT_EQ(made, 1) << "one credential per connection";
  co.secret = "sesame";
  co.credential = [] { return std::string("ticket-2"); };
  try {
    FramedClient refused(co);
    FAIL() << "a ticket for another rank was admitted";
  } catch (const RefusedError& e) {
    EXPECT_NE(std::string(e.what()).find("no ticket for rank 3"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("DDL_JOB_SECRET"), std::string::npos)
        << "a credential's refusal does not point at the secret: " << e.what();
  }
  co.credential = nullptr;  // the right secret is not what the hook asks for
  EXPECT_THROW(FramedClient plain(co), RefusedError);
  co.credential = [] { return std::string("boom"); };
  try {
    FramedClient failing(co);
    FAIL() << "a hook that threw admitted the client";
  } catch (const RefusedError& e) {
    EXPECT_NE(std::string(e.what()).find("admission failed: cannot decide"), std::string::npos)
        << e.what();
  }
  ASSERT_TRUE(testing::wait_until([&] { return server.dropped_connections() == 3; },
                                  milliseconds(2000)));
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], std::make_pair(std::string("ticket-3"), 3));
  // A plain client presents its proof, never the secret itself.
  EXPECT_EQ(seen[2].first.size(), kDigestBytes);
  EXPECT_EQ(seen[2].first.find("sesame"), std::string::npos);
}

TEST(Transport, AnUnknownServiceOpDropsOnlyThatConnection) {
  FramedServer server = start_server();
  FramedClient bad(client_options(server.port()));
  FramedClient good(client_options(server.port()));
  EXPECT_THROW(bad.request(kFirstServiceOp + 9, {}, milliseconds(0), {kReply}, "nonsense"),
               NetError);
  EXPECT_TRUE(testing::wait_until([&] { return server.dropped_connections() == 1; },
                                  milliseconds(2000)));
  EXPECT_EQ(good.request(kEcho, bytes("ok"), milliseconds(0), {kReply}, "echo").payload,
            bytes("ok"));
}

}  // namespace
}  // namespace ddl::net
