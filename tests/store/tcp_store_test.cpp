// What only the TCP store has: the handshake, hostile connections, connecting before the server is
// up, deadlines on connect, and shutting down with clients attached.
#include "store/tcp_store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/auth.h"
#include "net/conn_limits.h"
#include "net/frame.h"
#include "store/protocol.h"
#include "tests/store/test_util.h"
#include "tests/support/bytes.h"
#include "tests/support/text.h"

namespace ddl {
namespace {

using std::chrono::milliseconds;
using testing::elapsed_ms;
using testing::loopback_options;

using testing::bytes;
using testing::contains;
using testing::text;

// Polls `condition` until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& condition, milliseconds timeout = milliseconds(5000)) {
  return testing::wait_until(condition, timeout, milliseconds(5));
}

// A plain blocking socket for speaking (or breaking) the protocol by hand.
using store_protocol::Op;
constexpr std::uint8_t kHelloOp = static_cast<std::uint8_t>(net::TransportOp::kHello);
constexpr std::uint8_t kHelloOkOp = static_cast<std::uint8_t>(net::TransportOp::kHelloOk);

// A store frame as a client would send it, for raw sockets.
Bytes raw_frame(std::uint8_t op, const std::string& job_id, const Bytes& payload) {
  return net::encode(net::Frame{net::Service::kStore, op, 1, job_id, payload});
}
Bytes raw_frame(Op op, const std::string& job_id, const Bytes& payload) {
  return raw_frame(store_protocol::byte(op), job_id, payload);
}

class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("raw connect to port " + std::to_string(port) + " failed");
    }
  }
  ~RawSocket() { close(); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  void send(const Bytes& data) {
    std::size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("raw send failed");
      sent += static_cast<std::size_t>(n);
    }
  }
  void send(const std::string& data) { send(bytes(data)); }

  // True once the server has closed the connection (EOF or reset), within `timeout`; bytes the
  // server sent first (a refusal) are skipped.
  bool closed_by_peer(milliseconds timeout = milliseconds(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    for (;;) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
  }

  // Reads one frame (blocking, for replies the test expects).
  net::Frame read_frame() {
    net::FrameDecoder decoder;
    char c;
    for (;;) {
      if (::recv(fd_, &c, 1, 0) != 1) throw std::runtime_error("raw socket: connection closed");
      auto step = decoder.feed(&c, 1);
      if (step.error) throw *step.error;
      if (step.frame) return *step.frame;
    }
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// The hello a client of `o` sends in answer to the server's challenge `nonce`.
Bytes hello_frame(const TcpStoreOptions& o, const std::string& nonce) {
  net::HelloBinding b;
  b.server_nonce = nonce;
  b.client_nonce = std::string(net::kNonceBytes, 'c');
  b.job_id = o.job_id;
  b.service = net::Service::kStore;
  b.rank = o.rank;
  b.world_size = o.world_size;
  return raw_frame(kHelloOp, o.job_id,
                   net::PayloadWriter()
                       .u32(static_cast<std::uint32_t>(o.rank))
                       .u32(static_cast<std::uint32_t>(o.world_size))
                       .str(net::client_proof(o.secret, b))
                       .str(b.client_nonce)
                       .take());
}

// Reads the server's challenge from `raw` and answers it as a client of `o`.
void say_hello(RawSocket& raw, const TcpStoreOptions& o) {
  const net::Frame challenge = raw.read_frame();
  ASSERT_EQ(challenge.op, static_cast<std::uint8_t>(net::TransportOp::kChallenge));
  net::PayloadReader r(challenge.payload, "challenge");
  raw.send(hello_frame(o, r.str()));
}

// Captures what the store logs, to check messages users will read.
class CaptureSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  bool saw(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& line : lines_) {
      if (contains(line, needle)) return true;
    }
    return false;
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    for (const auto& line : lines_) out += line + "\n";
    return out;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::vector<std::string> lines_;
};

class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()), sink_(std::make_shared<CaptureSink>()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CaptureSink& sink() { return *sink_; }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<CaptureSink> sink_;
};

class TcpStoreTest : public ::testing::Test {
 protected:
  TcpStoreTest() : server_(loopback_options(0)) {}
  TcpStoreOptions client_options(int rank = 0) { return loopback_options(server_.port(), rank, 4); }
  std::string where() { return "127.0.0.1:" + std::to_string(server_.port()); }
  bool dropped_reaches(std::size_t n) {
    return eventually([&] { return server_.dropped_connections() >= n; });
  }

  TcpStoreServer server_;
};

TEST_F(TcpStoreTest, WrongSecretIsRefusedWithAClearError) {
  auto options = client_options(2);
  options.secret = "guess";
  try {
    TcpStore store(options);
    FAIL() << "a client with the wrong secret was admitted";
  } catch (const StoreError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "rank 2")) << msg;
    EXPECT_TRUE(contains(msg, where())) << msg;
    EXPECT_TRUE(contains(msg, "refused")) << msg;
    EXPECT_TRUE(contains(msg, "secret")) << msg;
  }
  EXPECT_TRUE(dropped_reaches(1));
  TcpStore good(client_options());
  good.set("k", bytes("v"));
  EXPECT_EQ(text(good.get("k", milliseconds(1000))), "v");
}

TEST_F(TcpStoreTest, WrongJobIdIsRefused) {
  auto options = client_options(1);
  options.job_id = "job-previous-generation";
  try {
    TcpStore store(options);
    FAIL() << "a client of another job was admitted";
  } catch (const StoreError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "refused")) << msg;
    // The client names its own job id; the server's reply names none.
    EXPECT_TRUE(contains(msg, "job id 'job-previous-generation'")) << msg;
    EXPECT_FALSE(contains(msg, "'job-test'")) << msg;
  }
  EXPECT_TRUE(dropped_reaches(1));
}

TEST(TcpStoreSecretTest, ServerWithoutSecretAdmitsAnyClientOfTheJobButASecretHolderDoesNotTrustIt) {
  auto server_options = loopback_options(0);
  server_options.secret = "";
  TcpStoreServer server(server_options);
  auto options = loopback_options(server.port());
  options.secret = "";
  TcpStore store(options);
  EXPECT_EQ(store.add("n", 3), 3);
  // A client that holds a secret does not trust a server that cannot prove it holds it too.
  options.secret = "whatever";
  try {
    TcpStore doubtful(options);
    FAIL() << "a client with a secret trusted a server without one";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "without proving it holds the job secret")) << e.what();
  }
  EXPECT_EQ(server.dropped_connections(), 0u) << "the server itself admitted the client";
}

TEST_F(TcpStoreTest, GarbageIsDroppedWhileRealClientsKeepWorking) {
  TcpStore real(client_options(0));
  real.set("before", bytes("1"));
  RawSocket probe(server_.port());
  probe.send("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_TRUE(probe.closed_by_peer());
  EXPECT_TRUE(dropped_reaches(1));
  real.set("after", bytes("2"));
  EXPECT_EQ(text(real.get("before", milliseconds(1000))), "1");
  EXPECT_EQ(real.add("n", 1), 1);
}

TEST_F(TcpStoreTest, OversizedFrameBeforeTheHandshakeIsDropped) {
  TcpStore real(client_options(0));
  // A well-formed header that announces 100 MB: refused from the header alone.
  Bytes header = raw_frame(kHelloOp, "job-test", Bytes{});
  const std::uint32_t huge = 100u << 20;
  for (int i = 0; i < 4; ++i)
    header[header.size() - 4 + i] = static_cast<char>(huge >> (24 - 8 * i));
  RawSocket attacker(server_.port());
  attacker.send(header);
  EXPECT_TRUE(attacker.closed_by_peer());
  EXPECT_TRUE(dropped_reaches(1));
  EXPECT_EQ(real.add("n", 1), 1);
}

TEST_F(TcpStoreTest, OversizedFrameAfterTheHandshakeIsDropped) {
  TcpStore real(client_options(0));
  RawSocket raw(server_.port());
  say_hello(raw, client_options(1));
  ASSERT_EQ(raw.read_frame().op, kHelloOkOp);
  Bytes header = raw_frame(Op::kSet, "job-test", Bytes{});
  const auto over = static_cast<std::uint32_t>(net::kMaxPayloadBytes + 1);
  for (int i = 0; i < 4; ++i)
    header[header.size() - 4 + i] = static_cast<char>(over >> (24 - 8 * i));
  raw.send(header);
  EXPECT_TRUE(raw.closed_by_peer());
  EXPECT_TRUE(dropped_reaches(1));
  EXPECT_EQ(real.add("n", 1), 1);
}

TEST_F(TcpStoreTest, HalfAFrameThenCloseIsDropped) {
  TcpStore real(client_options(0));
  {
    RawSocket raw(server_.port());
    Bytes hello = hello_frame(client_options(1), std::string(net::kNonceBytes, 'x'));
    hello.resize(hello.size() / 2);
    raw.send(hello);
  }
  { RawSocket silent(server_.port()); }  // a port probe: connects, says nothing, leaves
  EXPECT_TRUE(dropped_reaches(2));
  EXPECT_EQ(real.add("n", 1), 1);
}

TEST_F(TcpStoreTest, FrameOfAnotherJobAfterTheHandshakeIsDropped) {
  RawSocket raw(server_.port());
  say_hello(raw, client_options(1));
  ASSERT_EQ(raw.read_frame().op, kHelloOkOp);
  raw.send(raw_frame(Op::kSet, "job-other", net::PayloadWriter().str("k").str("v").take()));
  EXPECT_TRUE(raw.closed_by_peer());
  EXPECT_TRUE(dropped_reaches(1));
  TcpStore real(client_options(0));
  EXPECT_FALSE(real.check({"k"}));
}

TEST_F(TcpStoreTest, RequestBeforeHelloIsDropped) {
  RawSocket raw(server_.port());
  raw.send(raw_frame(Op::kSet, "job-test", net::PayloadWriter().str("k").str("v").take()));
  EXPECT_TRUE(raw.closed_by_peer());
  EXPECT_TRUE(dropped_reaches(1));
  TcpStore real(client_options(0));
  EXPECT_FALSE(real.check({"k"}));
}

TEST_F(TcpStoreTest, MalformedPayloadIsDropped) {
  RawSocket raw(server_.port());
  say_hello(raw, client_options(1));
  ASSERT_EQ(raw.read_frame().op, kHelloOkOp);
  raw.send(raw_frame(Op::kGet, "job-test", Bytes{'\0', '\0'}));  // truncated key
  EXPECT_TRUE(raw.closed_by_peer());
  EXPECT_TRUE(dropped_reaches(1));
}

TEST_F(TcpStoreTest, LargeValuesRoundTrip) {
  TcpStore a(client_options(0));
  TcpStore b(client_options(1));
  Bytes big(8 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  a.set("big", big);
  EXPECT_EQ(b.get("big", milliseconds(5000)), big);
}

TEST_F(TcpStoreTest, ValueOverTheFrameLimitFailsLocallyAndTheClientStaysUsable) {
  TcpStore store(client_options(0));
  Bytes too_big(net::kMaxPayloadBytes + 1);
  try {
    store.set("huge", too_big);
    FAIL() << "a value over the frame limit was sent";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "set 'huge'")) << e.what();
  }
  EXPECT_EQ(store.add("n", 1), 1);
  EXPECT_EQ(server_.dropped_connections(), 0u);
}

TEST_F(TcpStoreTest, LostConnectionNamesTheEndpointAndTheOperation) {
  auto options = loopback_options(0);
  auto server = std::make_unique<TcpStoreServer>(options);
  const std::string endpoint = "127.0.0.1:" + std::to_string(server->port());
  TcpStore store(loopback_options(server->port(), 3, 4));
  store.set("k", bytes("v"));
  server.reset();
  try {
    store.set("after", bytes("v"));
    FAIL() << "set succeeded with the store gone";
  } catch (const StoreError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "rank 3")) << msg;
    EXPECT_TRUE(contains(msg, endpoint)) << msg;
    EXPECT_TRUE(contains(msg, "set 'after'")) << msg;
  }
  // The next call fails at once, saying why.
  EXPECT_THROW(store.get("k", milliseconds(10'000)), StoreError);
}

TEST(TcpStoreServerTest, DestructorIsPromptWithClientsWaiting) {
  auto server = std::make_unique<TcpStoreServer>(loopback_options(0));
  const auto port = server->port();
  TcpStore waiter(loopback_options(port, 1, 2));
  TcpStore idle(loopback_options(port, 0, 2));
  RawSocket half_open(port);  // mid-handshake
  std::string error;
  std::thread t([&] {
    try {
      waiter.wait({"never"}, milliseconds(60'000));
    } catch (const StoreError& e) {
      error = e.what();
    }
  });
  // Usually the wait is parked on the server by now; if not, it meets a closed connection. Either
  // way the waiter must fail promptly, naming its operation.
  idle.set("ping", bytes("1"));
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(elapsed_ms(start), 2000.0);
  t.join();
  EXPECT_LT(elapsed_ms(start), 5000.0);
  EXPECT_TRUE(contains(error, "wait for 1 key(s)")) << error;
}

TEST(TcpStoreConnectTest, ClientStartedBeforeTheServerConnectsOnceItIsUp) {
  CapturedLog log;
  const std::uint16_t port = testing::unused_port();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  std::string error;
  std::int64_t value = 0;
  std::thread client([&] {
    try {
      TcpStore store(loopback_options(port, 1, 2));
      value = store.add("joined", 1);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  // Start the server only once the client has been turned away at least once.
  const bool retried = eventually([&] {
    return log.sink().saw("rank 1: the store at " + endpoint + " not ready yet, retrying (");
  });
  std::unique_ptr<TcpStoreServer> server;
  if (retried) server = std::make_unique<TcpStoreServer>(loopback_options(port));
  client.join();
  ASSERT_TRUE(retried) << log.sink().all();
  EXPECT_EQ(error, "");
  EXPECT_EQ(value, 1);
}

TEST(TcpStoreConnectTest, ConnectDeadlineErrorNamesTheEndpoint) {
  const std::uint16_t port = testing::unused_port();
  auto options = loopback_options(port, 2, 4);
  options.connect_timeout = milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStore store(options);
    FAIL() << "connected to a port nobody listens on";
  } catch (const StoreUnreachable& e) {
    const double ms = elapsed_ms(start);
    EXPECT_GE(ms, 300.0);
    EXPECT_LT(ms, 2000.0);
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "rank 2: could not reach the store at 127.0.0.1:" +
                                  std::to_string(port) + " (hosted by rank 0) within 300 ms: "))
        << msg;
    // The reason is the last attempt that ended on its own, not one the deadline cut short.
    EXPECT_TRUE(contains(msg, "Connection refused")) << msg;
    EXPECT_FALSE(contains(msg, "timed out")) << msg;
  }
}

TEST(TcpStoreServerTest, BindFailureNamesTheEndpoint) {
  TcpStoreServer first(loopback_options(0));
  try {
    TcpStoreServer second(loopback_options(first.port()));
    FAIL() << "two servers bound the same port";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(first.port()))) << e.what();
  }
}

TEST(TcpStoreServerTest, MovedServerAndClientKeepWorking) {
  TcpStoreServer server(loopback_options(0));
  TcpStoreServer moved(std::move(server));
  TcpStore client(loopback_options(moved.port()));
  TcpStore moved_client(std::move(client));
  EXPECT_EQ(moved_client.add("n", 2), 2);
}

// The rendezvous pattern at a thousand ranks, each a thread with its own connection, all at once:
// connect, publish (set), barrier, read the ring and log-step peers in one multi_get. Every rank
// must get through (a burst of a thousand connects from one address meets the server's caps on
// connections in their handshake) and read exactly what its peers published.
TEST(TcpStoreScaleTest, AThousandConcurrentClientsRendezvous) {
  constexpr int kWorld = 1024;
  if (const std::string why = net::raise_open_file_limit(3 * kWorld); !why.empty()) {
    GTEST_SKIP() << "needs " << 3 * kWorld << " descriptors: " << why;
  }
  TcpStoreServer server(loopback_options(0));
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto o = loopback_options(server.port(), rank, kWorld);
        o.connect_timeout = milliseconds(60'000);
        o.io_timeout = milliseconds(60'000);
        TcpStore store(o);
        store.set("addr/" + std::to_string(rank), bytes("host-" + std::to_string(rank)));
        barrier(store, "join", rank, kWorld, milliseconds(60'000));
        std::vector<int> peers{(rank + kWorld - 1) % kWorld};
        for (int step = 1; step < kWorld; step *= 2) peers.push_back((rank + step) % kWorld);
        std::vector<std::string> keys;
        for (int p : peers) keys.push_back("addr/" + std::to_string(p));
        const auto values = store.multi_get(keys, milliseconds(10'000));
        for (std::size_t i = 0; i < peers.size(); ++i) {
          if (text(values[i]) != "host-" + std::to_string(peers[i])) {
            throw std::runtime_error("read '" + text(values[i]) + "' for rank " +
                                     std::to_string(peers[i]));
          }
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back("rank " + std::to_string(rank) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(errors.empty()) << errors.size() << " rank(s) failed; first: " << errors.front();
  // Generous for a loaded 2-core CI machine; about a second when it is quiet.
  EXPECT_LT(elapsed_ms(start), 30'000.0);
}

}  // namespace
}  // namespace ddl
