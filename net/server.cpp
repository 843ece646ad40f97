#include "net/server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <list>
#include <optional>
#include <thread>
#include <unordered_map>

#include "net/auth.h"
#include "net/conn_limits.h"

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
// Read buffer sizes before and after the handshake (the decoder keeps a partial frame itself, so
// the buffer only sets how much one read takes). An authenticated connection's buffer starts
// small and doubles up to kMaxReadBytes while reads fill it: a store holding 10,000 connections of
// small requests spends 40 MiB on them, not 640.
constexpr std::size_t kHandshakeReadBytes = 512;
constexpr std::size_t kReadyReadBytes = 4 * 1024;
constexpr std::size_t kMaxReadBytes = 64 * 1024;

}  // namespace

class FramedServer::Impl {
 public:
  Impl(const ServerOptions& options, const ServiceFactory& make_service);
  ~Impl();

  std::uint16_t port() const { return port_; }
  std::size_t dropped() const { return dropped_.load(); }
  std::size_t turned_away() const { return turned_away_.load(); }
  std::size_t pending() const { return pending_count_.load(); }

  // --- server thread only ---
  class Session;
  asio::io_context& io() { return io_; }
  const ServerOptions& options() const { return options_; }
  ServiceHandler& handler() { return *handler_; }
  void count_drop() { dropped_.fetch_add(1); }
  void forget(Session* s) { sessions_.erase(s); }
  // A connection turned away before it authenticated: counted for the interval's summary line.
  void reject(Rejection kind, const std::string& address);
  // Connections in their handshake, oldest first (the eviction order).
  using PendingList = std::list<Session*>;
  void pending_done(PendingList::iterator pos, const std::string& address) {
    pending_order_.erase(pos);
    pending_.remove(address);
    pending_count_.store(pending_.total());
  }

 private:
  void run();
  void accept();
  void on_accepted(tcp::socket socket);
  std::optional<Rejection> admission_gate(const tcp::socket& socket, const std::string& address);
  // Over pending cap `over`: closes the oldest pending connection that cap counts (from
  // `address` for the per-address cap) if it has waited options_.eviction_age; true if it did.
  bool evict_for(Rejection over, const std::string& address);
  void pause_accepting(const error_code& ec);
  void log_rejections();
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
  std::atomic<std::size_t> turned_away_{0};
  std::atomic<std::size_t> pending_count_{0};
  PendingCaps caps_ = pending_caps_for(options_.max_pending_connections,
                                       options_.max_pending_per_address, options_.expected_clients);
  PendingLimits pending_{caps_.total, caps_.per_address};
  PendingList pending_order_;
  RejectionTally rejections_;
  asio::steady_timer summary_timer_{io_};
  bool summary_armed_ = false;
  std::chrono::steady_clock::time_point interval_start_;
  std::thread thread_;  // last: started once everything above exists
};

// One accepted connection: handshake, then requests handed to the service handler.
class FramedServer::Impl::Session : public Connection,
                                    public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, tcp::socket socket, std::string peer, std::string address,
          PendingList::iterator pending_pos)
      : server_(server),
        socket_(std::move(socket)),
        peer_(std::move(peer)),
        address_(std::move(address)),
        pending_pos_(pending_pos),
        handshake_timer_(server.io()) {}

  const std::string& address() const { return address_; }
  std::chrono::steady_clock::time_point accepted_at() const { return accepted_at_; }
  // Sent at least a byte: a client in the middle of its hello, not an idle socket.
  bool heard_from() const { return heard_from_; }

  // Still in its handshake, the oldest one under a full pending cap: makes room for a newer one.
  void evict() {
    reject(Rejection::kEvicted, "evicted for a newer connection (a pending cap is full)");
  }

  void start() {
    auto self = shared_from_this();
    handshake_timer_.expires_after(server_.options().handshake_timeout);
    handshake_timer_.async_wait([self](const error_code& ec) {
      if (!ec && self->state_ == State::kHandshake) {
        self->reject(Rejection::kHandshakeTimeout,
                     "no hello within " +
                         std::to_string(self->server_.options().handshake_timeout.count()) + " ms");
      }
    });
    send_challenge();
    read_more();
  }

  void close() {
    if (state_ == State::kClosed) return;
    const bool was_ready = state_ == State::kReady;
    leave_pending();
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
    if (state_ == State::kHandshake) {
      reject(Rejection::kBadFrame, reason);
      return;
    }
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

  // Turned away before authenticating: counted for the server's summary line, logged one by one
  // only at debug level (a flood of strangers must not flood the log).
  void reject(Rejection kind, const std::string& reason) {
    if (state_ == State::kClosed) return;
    server_.count_drop();
    server_.reject(kind, address_);
    spdlog::debug("{}: dropped connection from {}: {}", server_.options().name, peer_, reason);
    close();
  }

  // The connection no longer counts against the pending caps (authenticated or closing).
  void leave_pending() {
    if (!pending_) return;
    pending_ = false;
    server_.pending_done(pending_pos_, address_);
  }

  void read_more() {
    auto self = shared_from_this();
    socket_.async_read_some(asio::buffer(rx_),
                            [self](const error_code& ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (state_ == State::kClosed || state_ == State::kClosing) return;
    if (ec) {
      const std::string what = ec == asio::error::eof ? "closed the connection" : ec.message();
      if (state_ == State::kHandshake) {
        reject(Rejection::kClosedEarly, what + " before completing the handshake");
      } else if (decoder_.mid_frame()) {
        drop(what + " in the middle of a frame");
      } else {
        spdlog::debug("{}: rank {} ({}) disconnected", server_.options().name, rank_, peer_);
        close();
      }
      return;
    }
    heard_from_ = heard_from_ || n > 0;
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
    if (state_ == State::kReady && n == rx_.size() && rx_.size() < kMaxReadBytes) {
      rx_.resize(rx_.size() * 2);  // a large frame or a burst: take more per read
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
    leave_pending();
    decoder_.set_max_payload_bytes(kMaxPayloadBytes);
    rx_.resize(kReadyReadBytes);
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

  // Logs `reason` at debug level (counted in the summary) and answers with kRefusalReason only; an
  // admit hook's reason is passed on (it speaks of the credential the client presented:
  // ServerOptions::admit). The frame names no job id and no service.
  void refuse(std::uint32_t request_id, const std::string& reason) {
    server_.count_drop();
    server_.reject(Rejection::kRefusedHello, address_);  // counted in the interval's summary
    spdlog::debug("{}: refused connection from {} (rank {}): {}", server_.options().name, peer_,
                  rank_, reason);
    leave_pending();
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
  std::string address_;  // the peer's address without the port, for the per-address cap
  bool pending_ = true;  // counted in the server's pending caps
  PendingList::iterator pending_pos_;  // in the server's pending_order_ while pending_
  std::chrono::steady_clock::time_point accepted_at_ = std::chrono::steady_clock::now();
  bool heard_from_ = false;
  State state_ = State::kHandshake;
  int rank_ = -1;
  FrameDecoder decoder_{kMaxHelloPayloadBytes};
  // Small until the hello is accepted: a stranger's connection costs a few KiB, not 64.
  std::vector<char> rx_ = std::vector<char>(kHandshakeReadBytes);
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
    throw NetError("rank " + std::to_string(options.rank) + ": could not host the " + options.name +
                   " on " + where + ": " + e.code().message());
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
  summary_timer_.cancel();
  log_rejections();  // what the last, unfinished interval turned away
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
      pause_accepting(ec);
      return;
    }
    on_accepted(std::move(socket));
    accept();
  });
}

// Accept failed (e.g. EMFILE: out of descriptors): stop accepting for a moment rather than spin;
// pending connections wait in the kernel's backlog meanwhile.
void FramedServer::Impl::pause_accepting(const error_code& ec) {
  spdlog::debug("{}: accept failed on port {}: {}", options_.name, port_, ec.message());
  reject(Rejection::kAcceptFailed, "(not accepted)");
  accept_retry_.expires_after(options_.accept_pause);
  accept_retry_.async_wait([this](const error_code& e) {
    if (!e && !stopping_) accept();
  });
}

// Whether a connection just accepted may start its handshake: the pending caps and the
// descriptor reserve. Only unauthenticated connections meet this gate.
std::optional<Rejection> FramedServer::Impl::admission_gate(const tcp::socket& socket,
                                                            const std::string& address) {
  if (auto over = pending_.check(address)) return over;
  const int fd = const_cast<tcp::socket&>(socket).native_handle();
  if (free_descriptors(fd, options_.descriptor_reserve) < options_.descriptor_reserve) {
    return Rejection::kLowDescriptors;
  }
  return std::nullopt;
}

void FramedServer::Impl::on_accepted(tcp::socket socket) {
  error_code ignored;
  std::string peer = "unknown peer";
  std::string address = "unknown";
  const auto remote = socket.remote_endpoint(ignored);
  if (!ignored) {
    address = remote.address().to_string();
    peer = address + ":" + std::to_string(remote.port());
  }
  std::optional<Rejection> why = admission_gate(socket, address);
  // Over the server's cap and its address's, a newcomer may take two places: one of each.
  for (int tries = 0; tries < 2 && why && evict_for(*why, address); ++tries) {
    why = admission_gate(socket, address);
  }
  if (why) {
    turned_away_.fetch_add(1);
    reject(*why, address);
    socket.close(ignored);
    return;
  }
  socket.set_option(tcp::no_delay(true), ignored);
  pending_.add(address);
  pending_count_.store(pending_.total());
  const PendingList::iterator pos = pending_order_.insert(pending_order_.end(), nullptr);
  auto session =
      std::make_shared<Session>(*this, std::move(socket), std::move(peer), std::move(address), pos);
  *pos = session.get();
  sessions_.emplace(session.get(), session);
  session->start();
}

bool FramedServer::Impl::evict_for(Rejection over, const std::string& address) {
  if (over != Rejection::kServerCap && over != Rejection::kAddressCap) return false;
  const auto now = std::chrono::steady_clock::now();
  for (Session* s : pending_order_) {
    if (over == Rejection::kAddressCap && s->address() != address) continue;
    if (s->heard_from()) continue;  // in the middle of its hello
    // The oldest the cap counts is too young: so is every later one.
    if (now - s->accepted_at() < options_.eviction_age) return false;
    const std::shared_ptr<Session> keep = sessions_.at(s);  // alive through its close
    keep->evict();  // leaves pending_order_: stop iterating it
    return true;
  }
  return false;
}

void FramedServer::Impl::reject(Rejection kind, const std::string& address) {
  rejections_.count(kind, address);
  if (summary_armed_ || stopping_) return;
  // Armed by the first rejection of an interval, so an undisturbed server never wakes for it.
  summary_armed_ = true;
  interval_start_ = std::chrono::steady_clock::now();
  summary_timer_.expires_after(options_.rejection_summary_interval);
  summary_timer_.async_wait([this](const error_code& ec) {
    summary_armed_ = false;
    if (!ec) log_rejections();
  });
}

void FramedServer::Impl::log_rejections() {
  if (rejections_.empty()) return;
  const auto elapsed =
      std::chrono::ceil<milliseconds>(std::chrono::steady_clock::now() - interval_start_);
  spdlog::warn("{} on port {}: {}", options_.name, port_, rejections_.summarize_and_clear(elapsed));
}

FramedServer::FramedServer(const ServerOptions& options, const ServiceFactory& make_service)
    : impl_(std::make_unique<Impl>(options, make_service)) {}
FramedServer::~FramedServer() = default;
FramedServer::FramedServer(FramedServer&&) noexcept = default;
FramedServer& FramedServer::operator=(FramedServer&&) noexcept = default;

std::uint16_t FramedServer::port() const { return impl_ ? impl_->port() : 0; }
std::size_t FramedServer::dropped_connections() const { return impl_ ? impl_->dropped() : 0; }
std::size_t FramedServer::turned_away_connections() const {
  return impl_ ? impl_->turned_away() : 0;
}
std::size_t FramedServer::pending_connections() const { return impl_ ? impl_->pending() : 0; }

}  // namespace ddl::net
