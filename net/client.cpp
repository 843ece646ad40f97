#include "net/client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <mutex>
#include <optional>
#include <thread>

#include "net/auth.h"
#include "net/deadline.h"

namespace ddl::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kFirstBackoff{10};

std::uint8_t op_byte(TransportOp op) { return static_cast<std::uint8_t>(op); }

}  // namespace

// One blocking connection; every read and write runs on a private io_context with a deadline
// (run_until), so no call can block past its deadline.
class FramedClient::Impl {
 public:
  explicit Impl(const ClientOptions& options) : options_(options), where_(options.endpoint.str()) {
    open_with_retry();
  }

  Frame request(std::uint8_t op, const Bytes& payload, milliseconds wait,
                const std::vector<std::uint8_t>& expected, const std::string& what);

  const ClientOptions& options() const { return options_; }
  std::string prefix() const { return "rank " + std::to_string(options_.rank) + ": "; }
  std::string context() const { return prefix() + options_.server_name + " at " + where_; }

 private:
  template <class Cancel>
  bool run_until(Clock::time_point deadline, const bool& done, Cancel cancel);
  std::optional<std::string> try_connect(Clock::time_point deadline);
  void open_with_retry();
  void connect_with_retry(Clock::time_point deadline);
  void handshake();
  std::string read_challenge(Clock::time_point deadline);
  void check_server_proof(const Frame& reply, const HelloBinding& binding);
  void reset_connection();
  void write_frame(const Bytes& bytes, Clock::time_point deadline, const std::string& what);
  Frame read_frame(Clock::time_point deadline, const std::string& what);
  [[noreturn]] void fail_connection(const std::string& message);
  Bytes encode_or_throw(std::uint8_t op, std::uint32_t request_id, const Bytes& payload,
                        const std::string& what) const;

  ClientOptions options_;
  std::string where_;
  std::mutex mutex_;
  asio::io_context io_;
  tcp::socket socket_{io_};
  FrameDecoder decoder_;
  // Grows (doubling, to 64 KiB) while reads fill it: a process with thousands of clients (a
  // benchmark) or a client of small requests keeps 4 KiB.
  std::vector<char> rx_ = std::vector<char>(4 * 1024);
  std::size_t rx_begin_ = 0;
  std::size_t rx_end_ = 0;
  std::uint32_t next_request_id_ = 1;
  std::optional<std::string> broken_;  // why the connection is unusable
  bool peer_closed_ = false;           // the server closed or reset the connection
};

// True when the operation finished by `deadline`; false when the deadline came first (the
// operation is then cancelled, and its handler has run by the time this returns).
template <class Cancel>
bool FramedClient::Impl::run_until(Clock::time_point deadline, const bool& done, Cancel cancel) {
  io_.restart();
  io_.run_until(deadline);
  if (done) return true;
  cancel();
  io_.restart();
  io_.run();  // lets the cancelled operation's handler run, so nothing refers to our locals
  return false;
}

std::optional<std::string> FramedClient::Impl::try_connect(Clock::time_point deadline) {
  tcp::resolver resolver(io_);
  bool done = false;
  error_code ec;
  tcp::resolver::results_type results;
  resolver.async_resolve(options_.endpoint.host, std::to_string(options_.endpoint.port),
                         tcp::resolver::numeric_service,
                         [&](const error_code& e, tcp::resolver::results_type r) {
                           ec = e;
                           results = std::move(r);
                           done = true;
                         });
  if (!run_until(deadline, done, [&] { resolver.cancel(); })) return "name resolution timed out";
  if (ec) return "cannot resolve '" + options_.endpoint.host + "': " + ec.message();

  error_code ignored;
  socket_.close(ignored);
  socket_ = tcp::socket(io_);
  done = false;
  asio::async_connect(socket_, results, [&](const error_code& e, const tcp::endpoint&) {
    ec = e;
    done = true;
  });
  if (!run_until(deadline, done, [&] { socket_.close(ignored); })) return "connect timed out";
  if (ec) return ec.message();
  // Connecting to a port of this host where nothing listens yet can, once in some thousand
  // tries, pick that same port as the source and connect the socket to itself (a TCP
  // simultaneous open). Kept, it would hold the port the server is about to bind: dropped at
  // once with a reset (no TIME_WAIT) and counted as a refusal.
  const tcp::endpoint local = socket_.local_endpoint(ignored);
  if (local == socket_.remote_endpoint(ignored)) {
    socket_.set_option(asio::socket_base::linger(true, 0), ignored);
    socket_.close(ignored);
    return "Connection refused (the connect reached its own source port " +
           std::to_string(local.port()) + ": nothing listens there yet)";
  }
  socket_.set_option(tcp::no_delay(true), ignored);
  return std::nullopt;
}

// A server busy with strangers' connections closes new ones before their hello (over its pending
// caps or its descriptor reserve, net/server.h): such a close is retried like a refused connect,
// until the same connect deadline. A refusal of the hello itself is final.
void FramedClient::Impl::open_with_retry() {
  const auto deadline = deadline_after(options_.connect_timeout);
  milliseconds backoff = kFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    connect_with_retry(deadline);
    try {
      handshake();
      return;
    } catch (const RefusedError&) {
      throw;
    } catch (const NetError& e) {
      if (!peer_closed_ || Clock::now() >= deadline) throw;
      if (attempt == 1 || attempt % 100 == 0) {
        spdlog::info(
            "rank {}: {} at {} closed the connection before the handshake (busy?); "
            "retrying (attempt {})",
            options_.rank, options_.server_name, where_, attempt);
      }
    }
    reset_connection();
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, kMaxConnectBackoff);
  }
}

void FramedClient::Impl::reset_connection() {
  error_code ignored;
  socket_.close(ignored);
  socket_ = tcp::socket(io_);
  decoder_ = FrameDecoder();
  rx_begin_ = rx_end_ = 0;
  broken_.reset();
  peer_closed_ = false;
}

void FramedClient::Impl::connect_with_retry(Clock::time_point deadline) {
  milliseconds backoff = kFirstBackoff;
  std::optional<Clock::time_point> last_log;
  // Why the last attempt that ended on its own failed ("Connection refused"): one cut short by
  // the deadline ("name resolution timed out") says nothing about the server.
  std::string reason;
  for (;;) {
    std::optional<std::string> error = try_connect(deadline);
    if (!error) return;
    auto now = Clock::now();
    if (now < deadline || reason.empty()) reason = *error;
    const auto unreachable = [&] {
      return UnreachableError(prefix() + "could not reach " + options_.server_name + " at " +
                              where_ + " (hosted by " + options_.server_host_hint + ") within " +
                              std::to_string(options_.connect_timeout.count()) + " ms: " + reason);
    };
    if (now >= deadline) throw unreachable();
    if (options_.between_attempts && options_.between_attempts()) {
      throw UnreachableError(prefix() + "stopped waiting for " + options_.server_name + " at " +
                             where_ + ": " + reason);
    }
    if (!last_log || now - *last_log >= kConnectLogInterval) {
      const auto left = std::chrono::ceil<std::chrono::seconds>(deadline - now);
      spdlog::info("rank {}: {} at {} not ready yet, retrying ({}s left)", options_.rank,
                   options_.server_name, where_, left.count());
      last_log = now;
    }
    const auto pause = std::min<Clock::duration>(backoff, deadline - now);
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, kMaxConnectBackoff);
    if (Clock::now() >= deadline) throw unreachable();
  }
}

Bytes FramedClient::Impl::encode_or_throw(std::uint8_t op, std::uint32_t request_id,
                                          const Bytes& payload, const std::string& what) const {
  try {
    return encode(Frame{options_.service, op, request_id, options_.job_id, payload});
  } catch (const ProtocolError& e) {
    throw NetError(prefix() + what + " on " + options_.server_name + " at " + where_ + ": " +
                   e.what());
  }
}

void FramedClient::Impl::handshake() {
  const std::string what = "the handshake";
  const auto deadline = deadline_after(options_.io_timeout);
  HelloBinding binding;
  binding.server_nonce = read_challenge(deadline);
  binding.client_nonce = random_bytes(kNonceBytes);
  binding.job_id = options_.job_id;
  binding.service = options_.service;
  binding.rank = options_.rank;
  binding.world_size = options_.world_size;
  PayloadWriter w;
  w.u32(static_cast<std::uint32_t>(options_.rank))
      .u32(static_cast<std::uint32_t>(options_.world_size))
      .str(options_.credential ? options_.credential() : client_proof(options_.secret, binding))
      .str(binding.client_nonce);
  const Bytes hello = encode_or_throw(op_byte(TransportOp::kHello), 0, w.take(), what);
  write_frame(hello, deadline, what);
  Frame reply = read_frame(deadline, what);
  if (reply.op == op_byte(TransportOp::kRefused)) {
    std::string reason = "(no reason given)";
    try {
      PayloadReader r(reply.payload, "refused");
      reason = r.str();
    } catch (const ProtocolError&) {
    }
    broken_ = "refused";
    throw RefusedError(prefix() + options_.server_name + " at " + where_ +
                       " refused this client (job id '" + options_.job_id + "', the " +
                       service_name(options_.service) + "): " + reason +
                       (options_.credential ? "" : "; check DDL_JOB_ID and DDL_JOB_SECRET"));
  }
  if (reply.op != op_byte(TransportOp::kHelloOk) || reply.job_id != options_.job_id ||
      reply.service != options_.service) {
    fail_connection(prefix() + "the peer at " + where_ + " answered the hello with " +
                    transport_op_name(reply.op) + " of the " + service_name(reply.service) +
                    " for job '" + reply.job_id + "'; expected hello-ok of the " +
                    service_name(options_.service) + " for job '" + options_.job_id + "'");
  }
  check_server_proof(reply, binding);
}

std::string FramedClient::Impl::read_challenge(Clock::time_point deadline) {
  Frame challenge = read_frame(deadline, "the handshake's challenge");
  if (challenge.op != op_byte(TransportOp::kChallenge)) {
    fail_connection(prefix() + "the peer at " + where_ + " opened with a " +
                    transport_op_name(challenge.op) + " frame; expected the challenge of " +
                    options_.server_name);
  }
  std::string nonce;
  try {
    PayloadReader r(challenge.payload, "challenge");
    nonce = r.str();
    r.finish();
  } catch (const ProtocolError& e) {
    fail_connection(context() + ": " + e.what());
  }
  if (nonce.size() != kNonceBytes) {
    fail_connection(context() + ": the challenge's nonce is " + std::to_string(nonce.size()) +
                    " bytes, expected " + std::to_string(kNonceBytes));
  }
  return nonce;
}

// With a secret, the server must prove it holds it too: a stranger listening on the endpoint
// (a port taken first) is not taken for the store.
void FramedClient::Impl::check_server_proof(const Frame& reply, const HelloBinding& binding) {
  std::string proof;
  try {
    PayloadReader r(reply.payload, "hello-ok");
    proof = r.str();
    r.finish();
  } catch (const ProtocolError& e) {
    fail_connection(context() + ": " + e.what());
  }
  if (options_.credential || options_.secret.empty()) return;
  if (!constant_time_equal(proof, server_proof(options_.secret, binding))) {
    fail_connection(prefix() + "the peer at " + where_ + " admitted this client without " +
                    "proving it holds the job secret: not " + options_.server_name +
                    " of this job (check DDL_JOB_SECRET on rank 0, or what listens there)");
  }
}

void FramedClient::Impl::fail_connection(const std::string& message) {
  broken_ = message;
  error_code ignored;
  socket_.close(ignored);
  throw NetError(message);
}

void FramedClient::Impl::write_frame(const Bytes& bytes, Clock::time_point deadline,
                                     const std::string& what) {
  bool done = false;
  error_code ec;
  asio::async_write(socket_, asio::buffer(bytes), [&](const error_code& e, std::size_t) {
    ec = e;
    done = true;
  });
  error_code ignored;
  if (!run_until(deadline, done, [&] { socket_.close(ignored); })) {
    fail_connection(prefix() + "timed out sending " + what + " to " + options_.server_name +
                    " at " + where_);
  }
  if (ec) {
    peer_closed_ = ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
    fail_connection(prefix() + "lost the connection to " + options_.server_name + " at " + where_ +
                    " during " + what + ": " + ec.message());
  }
}

Frame FramedClient::Impl::read_frame(Clock::time_point deadline, const std::string& what) {
  for (;;) {
    while (rx_begin_ < rx_end_) {
      DecodeStep step = decoder_.feed(rx_.data() + rx_begin_, rx_end_ - rx_begin_);
      rx_begin_ += step.consumed;
      if (step.error) {
        fail_connection(prefix() + options_.server_name + " at " + where_ +
                        " sent a malformed reply to " + what + ": " + step.error->what());
      }
      if (step.frame) return std::move(*step.frame);
    }
    rx_begin_ = rx_end_ = 0;
    bool done = false;
    error_code ec;
    std::size_t n = 0;
    socket_.async_read_some(asio::buffer(rx_), [&](const error_code& e, std::size_t count) {
      ec = e;
      n = count;
      done = true;
    });
    error_code ignored;
    if (!run_until(deadline, done, [&] { socket_.close(ignored); })) {
      fail_connection(prefix() + options_.server_name + " at " + where_ + " did not answer " +
                      what + " in time (no reply by the deadline)");
    }
    if (ec) {
      peer_closed_ = ec == asio::error::eof || ec == asio::error::connection_reset ||
                     ec == asio::error::broken_pipe;
      fail_connection(prefix() + "lost the connection to " + options_.server_name + " at " +
                      where_ + " during " + what + ": " +
                      (ec == asio::error::eof ? std::string("the server closed the connection")
                                              : ec.message()));
    }
    rx_end_ = n;
    if (n == rx_.size() && rx_.size() < 64 * 1024) rx_.resize(rx_.size() * 2);
  }
}

Frame FramedClient::Impl::request(std::uint8_t op, const Bytes& payload, milliseconds wait,
                                  const std::vector<std::uint8_t>& expected,
                                  const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) {
    throw NetError(prefix() + "cannot " + what + ": the connection to " + options_.server_name +
                   " at " + where_ + " failed earlier (" + *broken_ + ")");
  }
  const std::uint32_t id = next_request_id_++;
  if (next_request_id_ == 0) next_request_id_ = 1;  // 0 belongs to the handshake
  const Bytes bytes = encode_or_throw(op, id, payload, what);
  const auto reply_deadline = deadline_after(clamp_timeout(wait) + options_.io_timeout);
  write_frame(bytes, reply_deadline, what);
  Frame reply = read_frame(reply_deadline, what);
  if (reply.job_id != options_.job_id || reply.service != options_.service) {
    fail_connection(prefix() + options_.server_name + " at " + where_ + " answered " + what +
                    " for job '" + reply.job_id + "' of the " + service_name(reply.service) +
                    ", expected job '" + options_.job_id + "'");
  }
  if (reply.request_id != id) {
    fail_connection(prefix() + options_.server_name + " at " + where_ + " answered request " +
                    std::to_string(reply.request_id) + " while " + what + " (request " +
                    std::to_string(id) + ") was waiting");
  }
  if (reply.op == op_byte(TransportOp::kError)) {
    std::string message;
    try {
      PayloadReader r(reply.payload, "error");
      message = r.str();
    } catch (const ProtocolError& e) {
      fail_connection(context() + ": " + e.what());
    }
    throw RequestFailed(prefix() + options_.server_name + " at " + where_ + " refused " + what +
                        ": " + message);
  }
  if (std::find(expected.begin(), expected.end(), reply.op) == expected.end()) {
    fail_connection(prefix() + options_.server_name + " at " + where_ + " answered " + what +
                    " with a " + transport_op_name(reply.op) + " frame");
  }
  return reply;
}

FramedClient::FramedClient(const ClientOptions& options) : impl_(std::make_unique<Impl>(options)) {}
FramedClient::~FramedClient() = default;
FramedClient::FramedClient(FramedClient&&) noexcept = default;
FramedClient& FramedClient::operator=(FramedClient&&) noexcept = default;

Frame FramedClient::request(std::uint8_t op, const Bytes& payload, milliseconds wait,
                            const std::vector<std::uint8_t>& expected, const std::string& what) {
  return impl_->request(op, payload, wait, expected, what);
}
std::string FramedClient::prefix() const { return impl_->prefix(); }
std::string FramedClient::context() const { return impl_->context(); }
const ClientOptions& FramedClient::options() const { return impl_->options(); }

}  // namespace ddl::net
