#include "store/tcp_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "store/frame.h"
#include "store/store_detail.h"

namespace ddl {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using frame::Frame;
using frame::Op;
using frame::PayloadReader;
using frame::PayloadWriter;
using store_detail::describe_keys;

// A connection must complete its hello within this time or it is dropped (a port probe that
// connects and says nothing must not hold a slot forever).
constexpr milliseconds kHandshakeTimeout{30'000};
// First and largest pause between connection attempts.
constexpr milliseconds kFirstBackoff{10};
// Small enough that a rank waiting for rank 0 (which starts its store only after loading
// LibTorch) joins within a few tens of milliseconds of it; a refused connect on loopback costs
// microseconds, so polling this often is cheap.
constexpr milliseconds kMaxBackoff{50};

// Compares without an early exit, so the time taken does not reveal how much of a guessed
// secret was right.
bool secrets_equal(const std::string& a, const std::string& b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::vector<std::string> read_keys(PayloadReader& r) {
  const std::uint32_t n = r.u32();
  std::vector<std::string> keys;
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back(r.str());
  return keys;
}

void write_keys(PayloadWriter& w, const std::vector<std::string>& keys) {
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
}

std::uint64_t timeout_ms_on_wire(milliseconds timeout) {
  return static_cast<std::uint64_t>(store_detail::clamp_timeout(timeout).count());
}

// ================================================================================================
// Server. Everything below runs on the server's one thread, except the constructor, the
// destructor and the atomics read by port() / dropped_connections().
// ================================================================================================

class Server;
class Session;

// A get or wait that could not be answered at once: answered when its keys are all set or when
// its timer fires, whichever comes first.
struct Waiter {
  explicit Waiter(asio::io_context& io) : timer(io) {}
  std::weak_ptr<Session> session;
  Op op = Op::kWait;  // kGet or kWait
  std::vector<std::string> keys;
  std::string registered_key;  // the missing key whose waiter list holds this waiter
  asio::steady_timer timer;
  bool done = false;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server& server, tcp::socket socket, std::string peer);
  void start();
  void close();
  // Counts the connection as dropped, logs why, closes it.
  void drop(const std::string& reason);
  void send(Op op, Bytes payload);
  void waiter_finished() { pending_.reset(); }
  const std::string& peer() const { return peer_; }

 private:
  enum class State { kHandshake, kReady, kClosing, kClosed };

  void read_more();
  void on_read(const error_code& ec, std::size_t n);
  void handle(Frame&& f);
  void handle_hello(const Frame& f);
  void handle_request(Frame&& f);
  void refuse(const std::string& reason);
  void write_next();

  Server& server_;
  tcp::socket socket_;
  std::string peer_;
  State state_ = State::kHandshake;
  int rank_ = -1;
  frame::FrameDecoder decoder_{frame::kMaxHelloPayloadBytes};
  std::vector<char> rx_ = std::vector<char>(64 * 1024);
  std::deque<Bytes> tx_;
  bool writing_ = false;
  asio::steady_timer handshake_timer_;
  std::shared_ptr<Waiter> pending_;
};

class Server {
 public:
  explicit Server(const TcpStoreOptions& options);
  ~Server();

  std::uint16_t port() const { return port_; }
  std::size_t dropped() const { return dropped_.load(); }

  // --- server thread only ---
  asio::io_context& io() { return io_; }
  const TcpStoreOptions& options() const { return options_; }
  void count_drop() { dropped_.fetch_add(1); }
  void forget(Session* s) { sessions_.erase(s); }
  void set(const std::string& key, Bytes value);
  const Bytes* find(const std::string& key) const;
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  // Answers `w` now if its keys are set, else registers it until they are or its timeout.
  void start_wait(const std::shared_ptr<Waiter>& w, milliseconds timeout);
  void cancel_wait(const std::shared_ptr<Waiter>& w);

 private:
  void run();
  void accept();
  void shutdown();
  void finish_wait(const std::shared_ptr<Waiter>& w, bool timed_out);
  void unregister(const std::shared_ptr<Waiter>& w);
  void notify(const std::string& key);

  TcpStoreOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer accept_retry_{io_};
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  std::map<std::string, Bytes> data_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters_;
  bool stopping_ = false;
  std::uint16_t port_ = 0;
  std::atomic<std::size_t> dropped_{0};
  std::thread thread_;  // last: started once everything above exists
};

// --- Session ------------------------------------------------------------------------------------

Session::Session(Server& server, tcp::socket socket, std::string peer)
    : server_(server),
      socket_(std::move(socket)),
      peer_(std::move(peer)),
      handshake_timer_(server.io()) {}

void Session::start() {
  auto self = shared_from_this();
  handshake_timer_.expires_after(kHandshakeTimeout);
  handshake_timer_.async_wait([self](const error_code& ec) {
    if (!ec && self->state_ == State::kHandshake) {
      self->drop("no hello within " + std::to_string(kHandshakeTimeout.count()) + " ms");
    }
  });
  read_more();
}

void Session::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  handshake_timer_.cancel();
  if (pending_) {
    server_.cancel_wait(pending_);
    pending_.reset();
  }
  server_.forget(this);  // may release the last owner but one: the caller's handler holds `self`
}

void Session::drop(const std::string& reason) {
  if (state_ == State::kClosed) return;
  server_.count_drop();
  spdlog::info("store: dropped connection from {}{}: {}", peer_,
               rank_ >= 0 ? " (rank " + std::to_string(rank_) + ")" : std::string(), reason);
  close();
}

void Session::read_more() {
  auto self = shared_from_this();
  socket_.async_read_some(asio::buffer(rx_), [self](const error_code& ec, std::size_t n) {
    self->on_read(ec, n);
  });
}

void Session::on_read(const error_code& ec, std::size_t n) {
  if (state_ == State::kClosed || state_ == State::kClosing) return;
  if (ec) {
    const std::string what = ec == asio::error::eof ? "closed the connection" : ec.message();
    if (state_ == State::kHandshake) {
      drop(what + " before completing the handshake");
    } else if (decoder_.mid_frame()) {
      drop(what + " in the middle of a frame");
    } else {
      spdlog::debug("store: rank {} ({}) disconnected", rank_, peer_);
      close();
    }
    return;
  }
  std::size_t offset = 0;
  while (offset < n && state_ != State::kClosed && state_ != State::kClosing) {
    frame::DecodeStep step = decoder_.feed(rx_.data() + offset, n - offset);
    offset += step.consumed;
    if (step.error) {
      drop(step.error->what());
      return;
    }
    if (step.frame) {
      try {
        handle(std::move(*step.frame));
      } catch (const frame::ProtocolError& e) {
        drop(e.what());
        return;
      } catch (const std::exception& e) {
        // Nothing may escape into the io loop; a bug here costs this connection only.
        spdlog::error("store: internal error serving {}: {}", peer_, e.what());
        drop(std::string("internal error: ") + e.what());
        return;
      }
    }
  }
  if (state_ == State::kHandshake || state_ == State::kReady) read_more();
}

void Session::handle(Frame&& f) {
  if (state_ == State::kHandshake) {
    handle_hello(f);
    return;
  }
  if (f.job_id != server_.options().job_id) {
    drop("frame for job '" + f.job_id + "' on a connection of job '" + server_.options().job_id +
         "'");
    return;
  }
  if (pending_) {
    drop("sent a " + frame::op_name(f.op) + " request while its previous request was waiting");
    return;
  }
  handle_request(std::move(f));
}

void Session::handle_hello(const Frame& f) {
  if (f.op != Op::kHello) {
    drop("expected a hello frame first, got " + frame::op_name(f.op));
    return;
  }
  PayloadReader r(f.payload, "hello");
  const auto rank = static_cast<std::int32_t>(r.u32());
  const auto world_size = static_cast<std::int32_t>(r.u32());
  const std::string secret = r.str();
  r.finish();
  rank_ = rank;
  const auto& opts = server_.options();
  if (f.job_id != opts.job_id) {
    refuse("job id '" + f.job_id + "' refused: this store serves another job (a stale generation?)");
    return;
  }
  if (!opts.secret.empty() && !secrets_equal(secret, opts.secret)) {
    refuse("wrong job secret for job '" + f.job_id + "' (secret refused)");
    return;
  }
  state_ = State::kReady;
  handshake_timer_.cancel();
  decoder_.set_max_payload_bytes(frame::kMaxPayloadBytes);
  spdlog::debug("store: rank {}/{} joined from {}", rank, world_size, peer_);
  send(Op::kHelloOk, {});
}

void Session::refuse(const std::string& reason) {
  server_.count_drop();
  spdlog::info("store: refused connection from {} (rank {}): {}", peer_, rank_, reason);
  send(Op::kRefused, PayloadWriter().str(reason).take());
  state_ = State::kClosing;  // closed once the refusal is written
  handshake_timer_.cancel();
}

void Session::handle_request(Frame&& f) {
  const std::string what = frame::op_name(f.op);
  PayloadReader r(f.payload, what);
  switch (f.op) {
    case Op::kSet: {
      std::string key = r.str();
      Bytes value = r.bytes();
      r.finish();
      server_.set(key, std::move(value));
      send(Op::kOk, {});
      return;
    }
    case Op::kGet:
    case Op::kWait: {
      auto w = std::make_shared<Waiter>(server_.io());
      w->op = f.op;
      if (f.op == Op::kGet) {
        w->keys.push_back(r.str());
      } else {
        w->keys = read_keys(r);
      }
      const milliseconds timeout{
          std::min<std::uint64_t>(r.u64(), store_detail::kMaxTimeout.count())};
      r.finish();
      w->session = weak_from_this();
      pending_ = w;
      server_.start_wait(w, timeout);
      return;
    }
    case Op::kAdd: {
      std::string key = r.str();
      const std::int64_t delta = r.i64();
      r.finish();
      std::int64_t value = 0;
      try {
        value = store_detail::add_to_counter(key, server_.find(key), delta);
      } catch (const StoreError& e) {
        send(Op::kError, PayloadWriter().str(e.what()).take());
        return;
      }
      server_.set(key, store_detail::counter_bytes(value));
      send(Op::kInteger, PayloadWriter().i64(value).take());
      return;
    }
    case Op::kCheck: {
      const auto keys = read_keys(r);
      r.finish();
      send(Op::kBool, PayloadWriter().u8(server_.missing(keys).empty() ? 1 : 0).take());
      return;
    }
    default:
      drop("unexpected " + what + " frame from a client");
      return;
  }
}

void Session::send(Op op, Bytes payload) {
  if (state_ == State::kClosed) return;
  tx_.push_back(frame::encode(op, server_.options().job_id, payload));
  if (!writing_) write_next();
}

void Session::write_next() {
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(tx_.front()),
                    [self](const error_code& ec, std::size_t) {
                      self->writing_ = false;
                      if (self->state_ == State::kClosed) return;
                      self->tx_.pop_front();
                      if (ec) {
                        spdlog::debug("store: write to {} failed: {}", self->peer_, ec.message());
                        self->close();
                      } else if (!self->tx_.empty()) {
                        self->write_next();
                      } else if (self->state_ == State::kClosing) {
                        self->close();
                      }
                    });
}

// --- Server -------------------------------------------------------------------------------------

Server::Server(const TcpStoreOptions& options) : options_(options) {
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
    throw StoreError("rank " + std::to_string(options.rank) + ": could not host the store on " +
                     where + ": " + e.code().message());
  }
  accept();
  spdlog::debug("store: serving job '{}' on {}:{}", options_.job_id, options_.endpoint.host, port_);
  thread_ = std::thread([this] { run(); });
}

Server::~Server() {
  asio::post(io_, [this] { shutdown(); });
  thread_.join();
}

void Server::run() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      // Handlers catch their own errors; this is the last line so the thread never dies.
      spdlog::error("store: server loop error (continuing): {}", e.what());
    }
  }
}

void Server::shutdown() {
  stopping_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  std::vector<std::shared_ptr<Session>> sessions;
  for (auto& [ptr, s] : sessions_) sessions.push_back(s);
  for (auto& s : sessions) s->close();
  for (auto& [key, list] : waiters_) {
    for (auto& w : list) w->timer.cancel();
  }
  waiters_.clear();
}

void Server::accept() {
  acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
    if (stopping_) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // E.g. out of file descriptors: pause instead of spinning.
      spdlog::warn("store: accept failed on port {}: {}", port_, ec.message());
      accept_retry_.expires_after(milliseconds(100));
      accept_retry_.async_wait([this](const error_code& e) {
        if (!e && !stopping_) accept();
      });
      return;
    }
    error_code peer_ec;
    const auto remote = socket.remote_endpoint(peer_ec);
    const std::string peer = peer_ec ? std::string("unknown peer")
                                     : remote.address().to_string() + ":" +
                                           std::to_string(remote.port());
    socket.set_option(tcp::no_delay(true), peer_ec);
    auto session = std::make_shared<Session>(*this, std::move(socket), peer);
    sessions_.emplace(session.get(), session);
    session->start();
    accept();
  });
}

void Server::set(const std::string& key, Bytes value) {
  data_[key] = std::move(value);
  notify(key);
}

const Bytes* Server::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

std::vector<std::string> Server::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (data_.count(k) == 0) out.push_back(k);
  }
  return out;
}

void Server::start_wait(const std::shared_ptr<Waiter>& w, milliseconds timeout) {
  const auto miss = missing(w->keys);
  if (miss.empty() || timeout.count() == 0) {
    finish_wait(w, !miss.empty());
    return;
  }
  w->registered_key = miss.front();
  waiters_[w->registered_key].push_back(w);
  w->timer.expires_after(timeout);
  w->timer.async_wait([this, w](const error_code& ec) {
    if (ec || w->done || stopping_) return;
    unregister(w);
    finish_wait(w, /*timed_out=*/true);
  });
}

void Server::cancel_wait(const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  w->done = true;
  w->timer.cancel();
  unregister(w);
}

void Server::unregister(const std::shared_ptr<Waiter>& w) {
  auto it = waiters_.find(w->registered_key);
  if (it == waiters_.end()) return;
  auto& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), w), list.end());
  if (list.empty()) waiters_.erase(it);
}

void Server::finish_wait(const std::shared_ptr<Waiter>& w, bool timed_out) {
  w->done = true;
  w->timer.cancel();
  auto session = w->session.lock();
  if (!session) return;
  session->waiter_finished();
  if (timed_out) {
    PayloadWriter pw;
    write_keys(pw, missing(w->keys));
    session->send(Op::kTimeout, pw.take());
  } else if (w->op == Op::kGet) {
    session->send(Op::kValue, PayloadWriter().str(*find(w->keys.front())).take());
  } else {
    session->send(Op::kOk, {});
  }
}

void Server::notify(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<std::shared_ptr<Waiter>> list = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : list) {
    if (w->done) continue;
    const auto miss = missing(w->keys);
    if (miss.empty()) {
      finish_wait(w, /*timed_out=*/false);
    } else {
      // Still waiting for another key: park it there.
      w->registered_key = miss.front();
      waiters_[w->registered_key].push_back(w);
    }
  }
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(const TcpStoreOptions& options) : server(options) {}
  Server server;
};

TcpStoreServer::TcpStoreServer(const TcpStoreOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
TcpStoreServer::~TcpStoreServer() = default;
TcpStoreServer::TcpStoreServer(TcpStoreServer&&) noexcept = default;
TcpStoreServer& TcpStoreServer::operator=(TcpStoreServer&&) noexcept = default;

std::uint16_t TcpStoreServer::port() const { return impl_ ? impl_->server.port() : 0; }
std::size_t TcpStoreServer::dropped_connections() const {
  return impl_ ? impl_->server.dropped() : 0;
}

// ================================================================================================
// Client: one blocking connection; every read and write runs on a private io_context with a
// deadline (run_until), so no call can block past its deadline.
// ================================================================================================

class TcpStore::Impl {
 public:
  explicit Impl(const TcpStoreOptions& options);

  // Sends one request and returns its reply, which must have one of the `expected` ops
  // (kError replies are thrown as StoreError). `what` names the operation for messages.
  Frame request(Op op, const Bytes& payload, Clock::time_point reply_deadline,
                std::initializer_list<Op> expected, const std::string& what);

  const TcpStoreOptions& options() const { return options_; }
  // "rank R: " for every message.
  std::string prefix() const { return "rank " + std::to_string(options_.rank) + ": "; }
  const std::string& where() const { return where_; }
  // "rank R: the store at HOST:PORT", for errors about the store's replies.
  std::string context() const { return prefix() + "the store at " + where_; }

 private:
  // Runs the io_context until `done` or `deadline`; on the deadline cancels via `cancel` and
  // returns false.
  template <class Cancel>
  bool run_until(Clock::time_point deadline, const bool& done, Cancel cancel);
  std::optional<std::string> try_connect(Clock::time_point deadline);
  void connect_with_retry();
  void handshake();
  void write_frame(const Bytes& bytes, Clock::time_point deadline, const std::string& what);
  Frame read_frame(Clock::time_point deadline, const std::string& what);
  [[noreturn]] void fail_connection(const std::string& message);

  TcpStoreOptions options_;
  std::string where_;
  std::mutex mutex_;
  asio::io_context io_;
  tcp::socket socket_{io_};
  frame::FrameDecoder decoder_;
  std::vector<char> rx_ = std::vector<char>(64 * 1024);
  std::size_t rx_begin_ = 0;
  std::size_t rx_end_ = 0;
  std::optional<std::string> broken_;  // why the connection is unusable
};

TcpStore::Impl::Impl(const TcpStoreOptions& options)
    : options_(options), where_(options.endpoint.str()) {
  connect_with_retry();
  handshake();
}

template <class Cancel>
bool TcpStore::Impl::run_until(Clock::time_point deadline, const bool& done, Cancel cancel) {
  io_.restart();
  io_.run_until(deadline);
  if (done) return true;
  cancel();
  io_.restart();
  io_.run();  // lets the cancelled operation's handler run, so nothing refers to our locals
  return done;
}

std::optional<std::string> TcpStore::Impl::try_connect(Clock::time_point deadline) {
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
  socket_.set_option(tcp::no_delay(true), ignored);
  return std::nullopt;
}

void TcpStore::Impl::connect_with_retry() {
  const auto deadline = store_detail::deadline_after(options_.connect_timeout);
  milliseconds backoff = kFirstBackoff;
  std::optional<Clock::time_point> last_log;
  for (;;) {
    std::optional<std::string> error = try_connect(deadline);
    if (!error) return;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw StoreError(prefix() + "could not reach the store at " + where_ +
                       " (hosted by rank 0) within " +
                       std::to_string(options_.connect_timeout.count()) + " ms: " + *error);
    }
    if (!last_log || now - *last_log >= kConnectLogInterval) {
      const auto left = std::chrono::ceil<std::chrono::seconds>(deadline - now);
      spdlog::info("rank {}: store at {} not ready yet, retrying ({}s left)", options_.rank,
                   where_, left.count());
      last_log = now;
    }
    const auto pause = std::min<Clock::duration>(backoff, deadline - now);
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void TcpStore::Impl::handshake() {
  const std::string what = "the handshake";
  PayloadWriter w;
  w.u32(static_cast<std::uint32_t>(options_.rank))
      .u32(static_cast<std::uint32_t>(options_.world_size))
      .str(options_.secret);
  Bytes hello;
  try {
    hello = frame::encode(Op::kHello, options_.job_id, w.take());
  } catch (const frame::ProtocolError& e) {
    throw StoreError(prefix() + "cannot join the store at " + where_ + ": " + e.what());
  }
  const auto deadline = store_detail::deadline_after(options_.io_timeout);
  write_frame(hello, deadline, what);
  Frame reply = read_frame(deadline, what);
  if (reply.op == Op::kRefused) {
    std::string reason = "(no reason given)";
    try {
      PayloadReader r(reply.payload, "refused");
      reason = r.str();
    } catch (const frame::ProtocolError&) {
    }
    broken_ = "refused";
    throw StoreError(prefix() + "the store at " + where_ + " refused this client: " + reason +
                     "; check DDL_JOB_ID and DDL_JOB_SECRET");
  }
  if (reply.op != Op::kHelloOk || reply.job_id != options_.job_id) {
    fail_connection(prefix() + "the peer at " + where_ + " answered the hello with " +
                    frame::op_name(reply.op) + " for job '" + reply.job_id +
                    "'; expected hello-ok for job '" + options_.job_id + "'");
  }
}

void TcpStore::Impl::fail_connection(const std::string& message) {
  broken_ = message;
  error_code ignored;
  socket_.close(ignored);
  throw StoreError(message);
}

void TcpStore::Impl::write_frame(const Bytes& bytes, Clock::time_point deadline,
                                 const std::string& what) {
  bool done = false;
  error_code ec;
  asio::async_write(socket_, asio::buffer(bytes), [&](const error_code& e, std::size_t) {
    ec = e;
    done = true;
  });
  error_code ignored;
  if (!run_until(deadline, done, [&] { socket_.close(ignored); })) {
    fail_connection(prefix() + "timed out sending " + what + " to the store at " + where_);
  }
  if (ec) {
    fail_connection(prefix() + "lost the connection to the store at " + where_ + " during " +
                    what + ": " + ec.message());
  }
}

Frame TcpStore::Impl::read_frame(Clock::time_point deadline, const std::string& what) {
  for (;;) {
    while (rx_begin_ < rx_end_) {
      frame::DecodeStep step = decoder_.feed(rx_.data() + rx_begin_, rx_end_ - rx_begin_);
      rx_begin_ += step.consumed;
      if (step.error) {
        fail_connection(prefix() + "the store at " + where_ + " sent a malformed reply to " +
                        what + ": " + step.error->what());
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
      fail_connection(prefix() + "the store at " + where_ + " did not answer " + what +
                      " in time (no reply by the deadline)");
    }
    if (ec) {
      fail_connection(prefix() + "lost the connection to the store at " + where_ + " during " +
                      what + ": " +
                      (ec == asio::error::eof ? std::string("the store closed the connection")
                                              : ec.message()));
    }
    rx_end_ = n;
  }
}

Frame TcpStore::Impl::request(Op op, const Bytes& payload, Clock::time_point reply_deadline,
                              std::initializer_list<Op> expected, const std::string& what) {
  Bytes bytes;
  try {
    bytes = frame::encode(op, options_.job_id, payload);
  } catch (const frame::ProtocolError& e) {
    throw StoreError(prefix() + what + " on the store at " + where_ + ": " + e.what());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) {
    throw StoreError(prefix() + "cannot " + what + ": the connection to the store at " + where_ +
                     " failed earlier (" + *broken_ + ")");
  }
  write_frame(bytes, reply_deadline, what);
  Frame reply = read_frame(reply_deadline, what);
  if (reply.job_id != options_.job_id) {
    fail_connection(prefix() + "the store at " + where_ + " answered " + what + " for job '" +
                    reply.job_id + "', expected job '" + options_.job_id + "'");
  }
  if (reply.op == Op::kError) {
    std::string message;
    try {
      PayloadReader r(reply.payload, "error");
      message = r.str();
    } catch (const frame::ProtocolError& e) {
      fail_connection(prefix() + "the store at " + where_ + ": " + e.what());
    }
    throw StoreError(prefix() + "the store at " + where_ + " refused " + what + ": " + message);
  }
  if (std::find(expected.begin(), expected.end(), reply.op) == expected.end()) {
    fail_connection(prefix() + "the store at " + where_ + " answered " + what + " with a " +
                    frame::op_name(reply.op) + " frame");
  }
  return reply;
}

namespace {

// Parses a reply payload; a malformed one is the store's fault, reported with `context`.
template <class Fn>
auto parse_reply(const std::string& context, const Frame& reply, const std::string& what, Fn fn) {
  try {
    PayloadReader r(reply.payload, frame::op_name(reply.op) + " reply to " + what);
    auto value = fn(r);
    r.finish();
    return value;
  } catch (const frame::ProtocolError& e) {
    throw StoreError(context + ": " + e.what());
  }
}

Clock::time_point reply_deadline(const TcpStoreOptions& o, milliseconds wait) {
  return store_detail::deadline_after(store_detail::clamp_timeout(wait) + o.io_timeout);
}

}  // namespace

TcpStore::TcpStore(const TcpStoreOptions& options) : impl_(std::make_unique<Impl>(options)) {}
TcpStore::~TcpStore() = default;
TcpStore::TcpStore(TcpStore&&) noexcept = default;
TcpStore& TcpStore::operator=(TcpStore&&) noexcept = default;

void TcpStore::set(const std::string& key, const Bytes& value) {
  impl_->request(Op::kSet, PayloadWriter().str(key).str(value).take(),
                 reply_deadline(impl_->options(), milliseconds(0)), {Op::kOk},
                 "set '" + key + "'");
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string what = "get '" + key + "'";
  Frame reply = impl_->request(Op::kGet,
                               PayloadWriter().str(key).u64(timeout_ms_on_wire(timeout)).take(),
                               reply_deadline(impl_->options(), timeout),
                               {Op::kValue, Op::kTimeout}, what);
  if (reply.op == Op::kTimeout) {
    throw StoreTimeout(impl_->prefix() + what + " from the store at " + impl_->where() +
                       " timed out after " + std::to_string(timeout.count()) +
                       " ms: the key was not set");
  }
  return parse_reply(impl_->context(), reply, what, [](PayloadReader& r) { return r.bytes(); });
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  const std::string what = "add '" + key + "'";
  Frame reply = impl_->request(Op::kAdd, PayloadWriter().str(key).i64(delta).take(),
                               reply_deadline(impl_->options(), milliseconds(0)),
                               {Op::kInteger}, what);
  return parse_reply(impl_->context(), reply, what, [](PayloadReader& r) { return r.i64(); });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  const std::string what = "check " + describe_keys(keys);
  PayloadWriter w;
  write_keys(w, keys);
  Frame reply = impl_->request(Op::kCheck, w.take(),
                               reply_deadline(impl_->options(), milliseconds(0)), {Op::kBool},
                               what);
  return parse_reply(impl_->context(), reply, what, [](PayloadReader& r) { return r.u8() != 0; });
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const std::string what = "wait for " + std::to_string(keys.size()) + " key(s)";
  PayloadWriter w;
  write_keys(w, keys);
  w.u64(timeout_ms_on_wire(timeout));
  Frame reply = impl_->request(Op::kWait, w.take(), reply_deadline(impl_->options(), timeout),
                               {Op::kOk, Op::kTimeout}, what);
  if (reply.op == Op::kTimeout) {
    auto missing = parse_reply(impl_->context(), reply, what, [](PayloadReader& r) { return read_keys(r); });
    throw StoreTimeout(impl_->prefix() + what + " at the store at " + impl_->where() +
                       " timed out after " + std::to_string(timeout.count()) +
                       " ms; missing: " + describe_keys(missing));
  }
}

}  // namespace ddl
