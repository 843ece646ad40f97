#include "net/server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <thread>
#include <unordered_map>

#include "net/auth.h"

namespace ddl::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using std::chrono::milliseconds;

// What every refused client reads: nothing about this server (its job id, service or why), so a
// stranger learns nothing by knocking; the server's own log says why.
constexpr const char* kRefusalReason =
    "not admitted: the hello did not prove the job secret for this job id, generation and service";

std::uint8_t op_byte(TransportOp op) { return static_cast<std::uint8_t>(op); }

// The service byte of frames a stranger may read (the challenge, a refusal): they name none.
constexpr Service kNoService = static_cast<Service>(0);

}  // namespace

class FramedServer::Impl {
 public:
  Impl(const ServerOptions& options, const ServiceFactory& make_service);
  ~Impl();

  std::uint16_t port() const { return port_; }
  std::size_t dropped() const { return dropped_.load(); }

  // --- server thread only ---
  class Session;
  asio::io_context& io() { return io_; }
  const ServerOptions& options() const { return options_; }
  ServiceHandler& handler() { return *handler_; }
  void count_drop() { dropped_.fetch_add(1); }
  void forget(Session* s) { sessions_.erase(s); }

 private:
  void run();
  void accept();
  void shutdown();

  ServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer accept_retry_{io_};
  std::unique_ptr<ServiceHandler> handler_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  bool stopping_ = false;
  std::uint16_t port_ = 0;
  std::atomic<std::size_t> dropped_{0};
  std::thread thread_;  // last: started once everything above exists
};

// One accepted connection: handshake, then requests handed to the service handler.
class FramedServer::Impl::Session : public Connection,
                                    public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, tcp::socket socket, std::string peer)
      : server_(server),
        socket_(std::move(socket)),
        peer_(std::move(peer)),
        handshake_timer_(server.io()) {}

  void start() {
    auto self = shared_from_this();
    handshake_timer_.expires_after(server_.options().handshake_timeout);
    handshake_timer_.async_wait([self](const error_code& ec) {
      if (!ec && self->state_ == State::kHandshake) {
        self->drop("no hello within " +
                   std::to_string(self->server_.options().handshake_timeout.count()) + " ms");
      }
    });
    send_challenge();
    read_more();
  }

  void close() {
    if (state_ == State::kClosed) return;
    const bool was_ready = state_ == State::kReady;
    state_ = State::kClosed;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    handshake_timer_.cancel();
    if (was_ready) server_.handler().on_close(*this);
    server_.forget(this);  // may release the last owner but one: the caller's handler holds `self`
  }

  // --- Connection ---
  void reply(std::uint32_t request_id, std::uint8_t op, Bytes payload) override {
    send(Frame{server_.options().service, op, request_id, server_.options().job_id,
               std::move(payload)});
  }

  void drop(const std::string& reason) override {
    if (state_ == State::kClosed) return;
    server_.count_drop();
    spdlog::info("{}: dropped connection from {}{}: {}", server_.options().name, peer_,
                 rank_ >= 0 ? " (rank " + std::to_string(rank_) + ")" : std::string(), reason);
    close();
  }

  bool closed() const override { return state_ == State::kClosed || state_ == State::kClosing; }
  const std::string& peer() const override { return peer_; }
  int rank() const override { return rank_; }

 private:
  enum class State { kHandshake, kReady, kClosing, kClosed };

  void read_more() {
    auto self = shared_from_this();
    socket_.async_read_some(asio::buffer(rx_), [self](const error_code& ec, std::size_t n) {
      self->on_read(ec, n);
    });
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (state_ == State::kClosed || state_ == State::kClosing) return;
    if (ec) {
      const std::string what = ec == asio::error::eof ? "closed the connection" : ec.message();
      if (state_ == State::kHandshake) {
        drop(what + " before completing the handshake");
      } else if (decoder_.mid_frame()) {
        drop(what + " in the middle of a frame");
      } else {
        spdlog::debug("{}: rank {} ({}) disconnected", server_.options().name, rank_, peer_);
        close();
      }
      return;
    }
    std::size_t offset = 0;
    while (offset < n && state_ != State::kClosed && state_ != State::kClosing) {
      DecodeStep step = decoder_.feed(rx_.data() + offset, n - offset);
      offset += step.consumed;
      if (step.error) {
        drop(step.error->what());
        return;
      }
      if (step.frame) {
        try {
          handle(std::move(*step.frame));
        } catch (const ProtocolError& e) {
          drop(e.what());
          return;
        } catch (const std::exception& e) {
          // Nothing may escape into the io loop; a bug here costs this connection only.
          spdlog::error("{}: internal error serving {}: {}", server_.options().name, peer_,
                        e.what());
          drop(std::string("internal error: ") + e.what());
          return;
        }
      }
    }
    if (state_ == State::kHandshake || state_ == State::kReady) read_more();
  }

  void handle(Frame&& f) {
    const ServerOptions& opts = server_.options();
    if (state_ == State::kHandshake) {
      handle_hello(f);
      return;
    }
    if (f.job_id != opts.job_id) {
      drop("frame for job '" + f.job_id + "' on a connection of job '" + opts.job_id + "'");
      return;
    }
    if (f.service != opts.service) {
      drop("frame for the " + service_name(f.service) + " on a connection to the " +
           service_name(opts.service));
      return;
    }
    if (f.op < kFirstServiceOp) {
      drop("unexpected " + transport_op_name(f.op) + " frame after the handshake");
      return;
    }
    server_.handler().on_request(shared_from_this(), std::move(f));
  }

  // The server speaks first: a fresh nonce the hello's proof must cover, so no hello captured on
  // another connection is accepted on this one. The frame carries no job id.
  void send_challenge() {
    nonce_ = random_bytes(kNonceBytes);
    send(Frame{kNoService, op_byte(TransportOp::kChallenge), 0, std::string(),
               PayloadWriter().str(nonce_).take()});
  }

  void handle_hello(const Frame& f) {
    if (f.op != op_byte(TransportOp::kHello)) {
      drop("expected a hello frame first, got " + transport_op_name(f.op));
      return;
    }
    PayloadReader r(f.payload, "hello");
    HelloBinding binding;
    binding.server_nonce = nonce_;
    binding.rank = static_cast<std::int32_t>(r.u32());
    binding.world_size = static_cast<std::int32_t>(r.u32());
    const std::string presented = r.str();
    binding.client_nonce = r.str();
    r.finish();
    binding.job_id = f.job_id;
    binding.service = f.service;
    rank_ = binding.rank;
    const ServerOptions& opts = server_.options();
    if (const std::string why = hello_refusal(binding, presented); !why.empty()) {
      refuse(f.request_id, why);
      return;
    }
    state_ = State::kReady;
    handshake_timer_.cancel();
    decoder_.set_max_payload_bytes(kMaxPayloadBytes);
    spdlog::debug("{}: rank {}/{} joined from {}", opts.name, binding.rank, binding.world_size,
                  peer_);
    const std::string proof =
        opts.secret.empty() ? std::string() : server_proof(opts.secret, binding);
    reply(f.request_id, op_byte(TransportOp::kHelloOk), PayloadWriter().str(proof).take());
  }

  // "" when the hello admits its sender; else why not, for this server's log only.
  std::string hello_refusal(const HelloBinding& binding, const std::string& presented) {
    const ServerOptions& opts = server_.options();
    if (binding.service != opts.service) {
      return "a hello for the " + service_name(binding.service) + " at the " +
             service_name(opts.service);
    }
    if (binding.job_id != opts.job_id) {
      return "a hello for job '" + binding.job_id + "' (a stale generation or another job)";
    }
    if (opts.admit) return admission_refusal(presented, binding.rank);
    if (!opts.secret.empty() &&
        !constant_time_equal(presented, client_proof(opts.secret, binding))) {
      return "the hello's proof does not match the job secret (a wrong secret, or a hello "
             "replayed from another connection)";
    }
    return "";
  }

  // ServerOptions::admit's verdict; an exception it throws is a refusal too.
  std::string admission_refusal(const std::string& presented, int rank) {
    admit_refused_ = true;
    try {
      return server_.options().admit(presented, rank);
    } catch (const std::exception& e) {
      return std::string("admission failed: ") + e.what();
    }
  }

  // Logs `reason` here and answers with kRefusalReason only; an admit hook's reason is passed on
  // (it speaks of the credential the client presented: ServerOptions::admit). The frame names no
  // job id and no service.
  void refuse(std::uint32_t request_id, const std::string& reason) {
    server_.count_drop();
    spdlog::info("{}: refused connection from {} (rank {}): {}", server_.options().name, peer_,
                 rank_, reason);
    const std::string told = server_.options().admit && admit_refused_ ? reason : kRefusalReason;
    send(Frame{kNoService, op_byte(TransportOp::kRefused), request_id, std::string(),
               PayloadWriter().str(told).take()});
    state_ = State::kClosing;  // closed once the refusal is written
    handshake_timer_.cancel();
  }

  void send(const Frame& f) {
    if (state_ == State::kClosed) return;
    tx_.push_back(encode(f));
    if (!writing_) write_next();
  }

  void write_next() {
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(tx_.front()),
                      [self](const error_code& ec, std::size_t) {
                        self->writing_ = false;
                        if (self->state_ == State::kClosed) return;
                        self->tx_.pop_front();
                        if (ec) {
                          spdlog::debug("{}: write to {} failed: {}", self->server_.options().name,
                                        self->peer_, ec.message());
                          self->close();
                        } else if (!self->tx_.empty()) {
                          self->write_next();
                        } else if (self->state_ == State::kClosing) {
                          self->close();
                        }
                      });
  }

  Impl& server_;
  tcp::socket socket_;
  std::string peer_;
  State state_ = State::kHandshake;
  int rank_ = -1;
  FrameDecoder decoder_{kMaxHelloPayloadBytes};
  std::vector<char> rx_ = std::vector<char>(64 * 1024);
  std::deque<Bytes> tx_;
  bool writing_ = false;
  asio::steady_timer handshake_timer_;
  std::string nonce_;           // this connection's challenge
  bool admit_refused_ = false;  // the admit hook gave the refusal's reason
};

FramedServer::Impl::Impl(const ServerOptions& options, const ServiceFactory& make_service)
    : options_(options) {
  const std::string where = options.endpoint.str();
  try {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(options.endpoint.host, std::to_string(options.endpoint.port),
                                    tcp::resolver::numeric_service);
    const tcp::endpoint ep = results.begin()->endpoint();
    acceptor_.open(ep.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    port_ = acceptor_.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    throw NetError("rank " + std::to_string(options.rank) + ": could not host the " +
                   options.name + " on " + where + ": " + e.code().message());
  }
  handler_ = make_service(io_);
  accept();
  spdlog::debug("{}: serving job '{}' on {}:{}", options_.name, options_.job_id,
                options_.endpoint.host, port_);
  thread_ = std::thread([this] { run(); });
}

FramedServer::Impl::~Impl() {
  asio::post(io_, [this] { shutdown(); });
  thread_.join();
}

void FramedServer::Impl::run() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      // Handlers catch their own errors; this is the last line so the thread never dies.
      spdlog::error("{}: server loop error (continuing): {}", options_.name, e.what());
    }
  }
}

void FramedServer::Impl::shutdown() {
  stopping_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  handler_->on_stop();
  std::vector<std::shared_ptr<Session>> sessions;
  for (auto& [ptr, s] : sessions_) sessions.push_back(s);
  for (auto& s : sessions) s->close();
}

void FramedServer::Impl::accept() {
  acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
    if (stopping_) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // E.g. out of file descriptors: pause instead of spinning.
      spdlog::warn("{}: accept failed on port {}: {}", options_.name, port_, ec.message());
      accept_retry_.expires_after(milliseconds(100));
      accept_retry_.async_wait([this](const error_code& e) {
        if (!e && !stopping_) accept();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::string peer = "unknown peer";
    const auto remote = socket.remote_endpoint(ignored);
    if (!ignored) peer = remote.address().to_string() + ":" + std::to_string(remote.port());
    auto session = std::make_shared<Session>(*this, std::move(socket), std::move(peer));
    sessions_.emplace(session.get(), session);
    session->start();
    accept();
  });
}

FramedServer::FramedServer(const ServerOptions& options, const ServiceFactory& make_service)
    : impl_(std::make_unique<Impl>(options, make_service)) {}
FramedServer::~FramedServer() = default;
FramedServer::FramedServer(FramedServer&&) noexcept = default;
FramedServer& FramedServer::operator=(FramedServer&&) noexcept = default;

std::uint16_t FramedServer::port() const { return impl_ ? impl_->port() : 0; }
std::size_t FramedServer::dropped_connections() const { return impl_ ? impl_->dropped() : 0; }

}  // namespace ddl::net
