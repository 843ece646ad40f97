// The handshake's proof of the secret (net/auth.h): SHA-256 and HMAC-SHA-256 against the FIPS
// 180-4 and RFC 4231 vectors, then attacks on a real server over real sockets: a captured hello
// replayed on a new connection, a hello edited from one generation to the next, a wrong secret,
// a refusal read for what it gives away, and a stranger posing as the server.
#include "net/auth.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <memory>
#include <string>
#include <thread>

#include "net/client.h"
#include "net/server.h"
#include "tests/support/poll.h"

namespace ddl::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

TEST(Sha256, MatchesTheFipsVectors) {
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Two blocks: the padding spills into a second one.
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(sha256(std::string(1'000'000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HmacSha256, MatchesTheRfc4231Vectors) {
  // Test cases 1, 2, 3 and 6 (a key longer than the block, hashed first).
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(to_hex(hmac_sha256(std::string(131, '\xaa'),
                               "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HelloProof, BindsEveryField) {
  HelloBinding b;
  b.server_nonce = std::string(kNonceBytes, 's');
  b.client_nonce = std::string(kNonceBytes, 'c');
  b.job_id = "job-g0";
  b.rank = 1;
  b.world_size = 2;
  const std::string proof = client_proof("sesame", b);
  EXPECT_EQ(proof.size(), kDigestBytes);
  EXPECT_EQ(proof, client_proof("sesame", b));
  auto differs = [&](HelloBinding other) { return client_proof("sesame", other) != proof; };
  HelloBinding x = b;
  x.server_nonce[0] = 't';
  EXPECT_TRUE(differs(x));
  x = b;
  x.client_nonce[5] = 'd';
  EXPECT_TRUE(differs(x));
  x = b;
  x.job_id = "job-g1";
  EXPECT_TRUE(differs(x));
  x = b;
  x.service = Service::kParameterServer;
  EXPECT_TRUE(differs(x));
  x = b;
  x.rank = 0;
  EXPECT_TRUE(differs(x));
  x = b;
  x.world_size = 3;
  EXPECT_TRUE(differs(x));
  EXPECT_NE(client_proof("sesamf", b), proof);
  EXPECT_NE(server_proof("sesame", b), proof) << "the server's proof is not the client's echoed";
  EXPECT_NE(random_bytes(kNonceBytes), random_bytes(kNonceBytes));
}

class Silent : public ServiceHandler {
 public:
  void on_request(const std::shared_ptr<Connection>& c, Frame&& f) override {
    c->reply(f.request_id, kFirstServiceOp, f.payload);
  }
  void on_close(Connection&) override {}
};

FramedServer start(const std::string& job_id, const std::string& secret = "sesame") {
  ServerOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", 0};
  o.job_id = job_id;
  o.secret = secret;
  o.service = Service::kStore;
  o.name = "auth test server";
  return FramedServer(o, [](asio::io_context&) { return std::make_unique<Silent>(); });
}

// A hand-driven connection: reads frames and keeps every byte the server sent.
class Raw {
 public:
  explicit Raw(std::uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  Frame read() {
    for (;;) {
      while (begin_ < received_.size()) {
        DecodeStep step = decoder_.feed(received_.data() + begin_, received_.size() - begin_);
        begin_ += step.consumed;
        if (step.error) throw *step.error;
        if (step.frame) return std::move(*step.frame);
      }
      char buf[4096];
      const std::size_t n = socket_.read_some(asio::buffer(buf));
      received_.append(buf, n);
    }
  }
  std::string challenge() {
    const Frame f = read();
    EXPECT_EQ(f.op, static_cast<std::uint8_t>(TransportOp::kChallenge));
    EXPECT_TRUE(f.job_id.empty()) << "the challenge names the job";
    EXPECT_EQ(static_cast<int>(f.service), 0) << "the challenge names the service";
    PayloadReader r(f.payload, "challenge");
    return r.str();
  }
  void send(const Bytes& b) { asio::write(socket_, asio::buffer(b)); }
  const std::string& received() const { return received_; }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  FrameDecoder decoder_;
  std::string received_;
  std::size_t begin_ = 0;
};

// The hello a client of `binding.job_id` holding `secret` sends; its bytes, for replaying.
Bytes hello(const std::string& secret, const HelloBinding& binding) {
  return encode(Frame{binding.service, static_cast<std::uint8_t>(TransportOp::kHello), 0,
                      binding.job_id,
                      PayloadWriter()
                          .u32(static_cast<std::uint32_t>(binding.rank))
                          .u32(static_cast<std::uint32_t>(binding.world_size))
                          .str(client_proof(secret, binding))
                          .str(binding.client_nonce)
                          .take()});
}

HelloBinding binding_for(const std::string& server_nonce, const std::string& job_id) {
  HelloBinding b;
  b.server_nonce = server_nonce;
  b.client_nonce = std::string(kNonceBytes, 'n');
  b.job_id = job_id;
  b.rank = 1;
  b.world_size = 2;
  return b;
}

constexpr std::uint8_t kOk = static_cast<std::uint8_t>(TransportOp::kHelloOk);
constexpr std::uint8_t kRefused = static_cast<std::uint8_t>(TransportOp::kRefused);

TEST(Handshake, TheSecretNeverCrossesTheWire) {
  FramedServer server = start("job-auth-g0", "sesame-0123456789");
  Raw raw(server.port());
  const HelloBinding b = binding_for(raw.challenge(), "job-auth-g0");
  const Bytes h = hello("sesame-0123456789", b);
  EXPECT_EQ(std::string(h.begin(), h.end()).find("sesame"), std::string::npos);
  raw.send(h);
  const Frame ok = raw.read();
  EXPECT_EQ(ok.op, kOk);
  PayloadReader r(ok.payload, "hello-ok");
  EXPECT_EQ(r.str(), server_proof("sesame-0123456789", b));
  EXPECT_EQ(raw.received().find("sesame"), std::string::npos);
}

TEST(Handshake, ACapturedHelloReplayedOnANewConnectionIsRefused) {
  FramedServer server = start("job-auth-g0");
  Raw first(server.port());
  const Bytes captured = hello("sesame", binding_for(first.challenge(), "job-auth-g0"));
  first.send(captured);
  ASSERT_EQ(first.read().op, kOk);
  Raw replay(server.port());
  EXPECT_NE(replay.challenge(), "") << "every connection gets its own nonce";
  replay.send(captured);
  EXPECT_EQ(replay.read().op, kRefused);
  EXPECT_TRUE(
      testing::wait_until([&] { return server.dropped_connections() == 1; }, milliseconds(2000)));
}

TEST(Handshake, AHelloEditedToTheNextGenerationIsRefused) {
  FramedServer next = start("job-auth-g1");
  Raw raw(next.port());
  // A client of generation 0 answers generation 1's challenge; the attacker edits the job id in
  // the frame from -g0 to -g1 and leaves the proof.
  Bytes edited = hello("sesame", binding_for(raw.challenge(), "job-auth-g0"));
  const std::string text(edited.begin(), edited.end());
  const std::size_t at = text.find("job-auth-g0");
  ASSERT_NE(at, std::string::npos);
  edited[at + 10] = '1';
  raw.send(edited);
  EXPECT_EQ(raw.read().op, kRefused);
  // An honest client of the old generation with the right secret is refused too.
  ClientOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", next.port()};
  o.job_id = "job-auth-g0";
  o.secret = "sesame";
  o.rank = 1;
  o.world_size = 2;
  o.connect_timeout = milliseconds(2000);
  o.io_timeout = milliseconds(2000);
  EXPECT_THROW(FramedClient stale(o), RefusedError);
  o.job_id = "job-auth-g1";
  FramedClient current(o);
  EXPECT_EQ(current.request(kFirstServiceOp, Bytes{'x'}, milliseconds(0), {kFirstServiceOp}, "echo")
                .payload,
            Bytes{'x'});
}

TEST(Handshake, AWrongSecretIsRefusedAndTheRefusalGivesNothingAway) {
  FramedServer server = start("job-auth-secretive-g4");
  Raw raw(server.port());
  raw.send(hello("guess", binding_for(raw.challenge(), "job-auth-secretive-g4")));
  const Frame refused = raw.read();
  ASSERT_EQ(refused.op, kRefused);
  EXPECT_TRUE(refused.job_id.empty());
  EXPECT_EQ(static_cast<int>(refused.service), 0) << "the refusal names the service served";
  // Every byte the server sent on this connection, challenge and refusal together.
  const std::string seen = raw.received();
  EXPECT_EQ(seen.find("secretive"), std::string::npos) << "the job id leaked";
  EXPECT_EQ(seen.find("g4"), std::string::npos) << "the generation leaked";
  EXPECT_EQ(seen.find("auth test server"), std::string::npos);
  EXPECT_EQ(seen.find("sesame"), std::string::npos);
  // A stranger guessing the job id gets the very same answer.
  Raw guesser(server.port());
  guesser.send(hello("guess", binding_for(guesser.challenge(), "job-other")));
  const Frame other = guesser.read();
  EXPECT_EQ(other.payload, refused.payload) << "refusals differ by what was wrong";
  EXPECT_TRUE(
      testing::wait_until([&] { return server.dropped_connections() == 2; }, milliseconds(2000)));
}

TEST(Handshake, AClientWithTheSecretRefusesAServerWithoutIt) {
  // A stranger listening where the store should be: it sends a challenge and admits anyone.
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const std::uint16_t port = acceptor.local_endpoint().port();
  std::thread impostor([&] {
    tcp::socket s(io);
    acceptor.accept(s);
    asio::write(s, asio::buffer(encode(
                       Frame{Service::kStore, static_cast<std::uint8_t>(TransportOp::kChallenge), 0,
                             "", PayloadWriter().str(std::string(kNonceBytes, 'z')).take()})));
    FrameDecoder d;
    char buf[4096];
    for (;;) {
      const std::size_t n = s.read_some(asio::buffer(buf));
      DecodeStep step = d.feed(buf, n);
      if (step.frame) {
        asio::write(s, asio::buffer(encode(Frame{Service::kStore, kOk, 0, "job-auth-g0",
                                                 PayloadWriter().str("trust me").take()})));
        break;
      }
    }
    boost::system::error_code ignored;
    s.read_some(asio::buffer(buf), ignored);  // until the client hangs up
  });
  ClientOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "job-auth-g0";
  o.secret = "sesame";
  o.connect_timeout = milliseconds(2000);
  o.io_timeout = milliseconds(2000);
  try {
    FramedClient fooled(o);
    ADD_FAILURE() << "a server without the secret was trusted";
  } catch (const RefusedError&) {
    ADD_FAILURE() << "the impostor admitted the client; it should be the client that refuses";
  } catch (const NetError& e) {
    EXPECT_NE(std::string(e.what()).find("without proving it holds the job secret"),
              std::string::npos)
        << e.what();
  }
  impostor.join();
}

}  // namespace
}  // namespace ddl::net
