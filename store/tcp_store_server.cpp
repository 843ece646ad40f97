// TcpStoreServer: the store as a service of the framed transport (net/server.h). The data, the
// waiters and every reply live on the server's one thread.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <map>
#include <unordered_map>

#include "net/server.h"
#include "store/protocol.h"
#include "store/store_detail.h"
#include "store/tcp_store.h"

namespace ddl {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using net::Connection;
using net::Frame;
using net::PayloadReader;
using net::PayloadWriter;
using std::chrono::milliseconds;
using store_protocol::byte;
using store_protocol::Op;
using store_protocol::read_keys;
using store_protocol::write_keys;

// A get, wait or multi-get that could not be answered at once: answered when its keys are all set
// or when its timer fires, whichever comes first. It is parked on one missing key at a time,
// keys[next]; the keys before `next` were seen set, so over its life a waiter looks at each of its
// keys about once (a wait on N keys costs O(N), not O(N) per wake-up). A key deleted after it was
// seen is caught by the final check before the reply, which parks the waiter on it again.
struct Waiter {
  explicit Waiter(asio::io_context& io) : timer(io) {}
  std::weak_ptr<Connection> connection;
  std::uint32_t request_id = 0;
  Op op = Op::kWait;  // kGet, kWait or kMultiGet
  std::vector<std::string> keys;
  std::size_t next = 0;  // keys[0..next) were set when last looked at
  asio::steady_timer timer;
  bool done = false;
};

class StoreService : public net::ServiceHandler {
 public:
  explicit StoreService(asio::io_context& io) : io_(io) {}

  void on_request(const std::shared_ptr<Connection>& connection, Frame&& f) override;
  void on_close(Connection& connection) override;
  void on_stop() override;

 private:
  void set(const std::string& key, Bytes value);
  const Bytes* find(const std::string& key) const;
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  void start_wait(const std::shared_ptr<Waiter>& w, milliseconds timeout);
  // Moves w->next past the keys now set; true when every key is set (then w->next == size).
  bool advance(Waiter& w) const;
  // Answers `w` when all its keys are set, else parks it on its next missing key.
  bool finish_or_park(const std::shared_ptr<Waiter>& w);
  void cancel_wait(const std::shared_ptr<Waiter>& w);
  void finish_wait(const std::shared_ptr<Waiter>& w, bool timed_out);
  void unregister(const std::shared_ptr<Waiter>& w);
  void notify(const std::string& key);

  asio::io_context& io_;
  bool stopping_ = false;
  std::map<std::string, Bytes> data_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters_;
  // The one waiting request of each connection (a client is sequential).
  std::unordered_map<const Connection*, std::shared_ptr<Waiter>> pending_;
};

void StoreService::on_request(const std::shared_ptr<Connection>& c, Frame&& f) {
  const std::string what = store_protocol::op_name(f.op);
  if (pending_.count(c.get())) {
    c->drop("sent a " + what + " request while its previous request was waiting");
    return;
  }
  PayloadReader r(f.payload, what);
  const std::uint32_t id = f.request_id;
  switch (static_cast<Op>(f.op)) {
    case Op::kSet: {
      std::string key = r.str();
      Bytes value = r.bytes();
      r.finish();
      set(key, std::move(value));
      c->reply(id, byte(Op::kOk), {});
      return;
    }
    case Op::kMultiSet: {
      const std::uint32_t n = r.u32();
      std::vector<std::pair<std::string, Bytes>> entries;
      entries.reserve(std::min<std::size_t>(n, f.payload.size() / 8));
      for (std::uint32_t i = 0; i < n; ++i) {
        std::string key = r.str();
        entries.emplace_back(std::move(key), r.bytes());
      }
      r.finish();
      for (auto& [key, value] : entries) set(key, std::move(value));
      c->reply(id, byte(Op::kOk), {});
      return;
    }
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet: {
      auto w = std::make_shared<Waiter>(io_);
      w->op = static_cast<Op>(f.op);
      w->request_id = id;
      if (w->op == Op::kGet) {
        w->keys.push_back(r.str());
      } else {
        w->keys = read_keys(r);
      }
      const milliseconds timeout{
          std::min<std::uint64_t>(r.u64(), store_detail::kMaxTimeout.count())};
      r.finish();
      w->connection = c;
      pending_[c.get()] = w;
      start_wait(w, timeout);
      return;
    }
    case Op::kAdd: {
      std::string key = r.str();
      const std::int64_t delta = r.i64();
      r.finish();
      std::int64_t value = 0;
      try {
        value = store_detail::add_to_counter(key, find(key), delta);
      } catch (const StoreError& e) {
        c->reply(id, static_cast<std::uint8_t>(net::TransportOp::kError),
                 PayloadWriter().str(e.what()).take());
        return;
      }
      set(key, store_detail::counter_bytes(value));
      c->reply(id, byte(Op::kInteger), PayloadWriter().i64(value).take());
      return;
    }
    case Op::kCheck: {
      const auto keys = read_keys(r);
      r.finish();
      c->reply(id, byte(Op::kBool), PayloadWriter().u8(missing(keys).empty() ? 1 : 0).take());
      return;
    }
    case Op::kCompareSet: {
      std::string key = r.str();
      std::optional<Bytes> expected;
      if (r.u8() != 0) expected = r.bytes();
      Bytes desired = r.bytes();
      r.finish();
      const Bytes* now = find(key);
      const bool matches =
          now == nullptr ? !expected.has_value() : expected.has_value() && *now == *expected;
      if (matches) {
        set(key, desired);
        c->reply(id, byte(Op::kValue), PayloadWriter().str(desired).take());
      } else if (now != nullptr) {
        c->reply(id, byte(Op::kValue), PayloadWriter().str(*now).take());
      } else {
        c->reply(id, byte(Op::kAbsent), {});
      }
      return;
    }
    case Op::kDelete: {
      std::string key = r.str();
      r.finish();
      const bool existed = data_.erase(key) > 0;
      c->reply(id, byte(Op::kBool), PayloadWriter().u8(existed ? 1 : 0).take());
      return;
    }
    default:
      throw net::ProtocolError(net::ProtocolErrorKind::kUnknownOp,
                               "unexpected " + what + " frame from a store client");
  }
}

void StoreService::on_close(Connection& connection) {
  auto it = pending_.find(&connection);
  if (it == pending_.end()) return;
  auto w = it->second;
  pending_.erase(it);
  cancel_wait(w);
}

void StoreService::on_stop() {
  stopping_ = true;
  for (auto& [key, list] : waiters_) {
    for (auto& w : list) w->timer.cancel();
  }
  waiters_.clear();
}

void StoreService::set(const std::string& key, Bytes value) {
  data_[key] = std::move(value);
  notify(key);
}

const Bytes* StoreService::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

std::vector<std::string> StoreService::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (data_.count(k) == 0) out.push_back(k);
  }
  return out;
}

void StoreService::start_wait(const std::shared_ptr<Waiter>& w, milliseconds timeout) {
  if (finish_or_park(w)) return;
  if (timeout.count() == 0) {
    unregister(w);
    finish_wait(w, /*timed_out=*/true);
    return;
  }
  w->timer.expires_after(timeout);
  w->timer.async_wait([this, w](const error_code& ec) {
    if (ec || w->done || stopping_) return;
    unregister(w);
    finish_wait(w, /*timed_out=*/true);
  });
}

bool StoreService::advance(Waiter& w) const {
  while (w.next < w.keys.size() && data_.count(w.keys[w.next]) > 0) ++w.next;
  return w.next == w.keys.size();
}

bool StoreService::finish_or_park(const std::shared_ptr<Waiter>& w) {
  for (;;) {
    if (!advance(*w)) {
      waiters_[w->keys[w->next]].push_back(w);
      return false;
    }
    // Every key was seen set; one check of them all before answering, in case one was deleted
    // since (rare: then wait for it again from there).
    const auto gone = std::find_if(w->keys.begin(), w->keys.end(),
                                   [this](const std::string& k) { return data_.count(k) == 0; });
    if (gone == w->keys.end()) {
      finish_wait(w, /*timed_out=*/false);
      return true;
    }
    w->next = static_cast<std::size_t>(gone - w->keys.begin());
  }
}

void StoreService::cancel_wait(const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  w->done = true;
  w->timer.cancel();
  unregister(w);
}

void StoreService::unregister(const std::shared_ptr<Waiter>& w) {
  if (w->next >= w->keys.size()) return;
  auto it = waiters_.find(w->keys[w->next]);
  if (it == waiters_.end()) return;
  auto& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), w), list.end());
  if (list.empty()) waiters_.erase(it);
}

void StoreService::finish_wait(const std::shared_ptr<Waiter>& w, bool timed_out) {
  w->done = true;
  w->timer.cancel();
  auto connection = w->connection.lock();
  if (!connection) return;
  pending_.erase(connection.get());
  if (timed_out) {
    PayloadWriter pw;
    write_keys(pw, missing(w->keys));
    connection->reply(w->request_id, byte(Op::kTimeout), pw.take());
  } else if (w->op == Op::kGet) {
    connection->reply(w->request_id, byte(Op::kValue),
                      PayloadWriter().str(*find(w->keys.front())).take());
  } else if (w->op == Op::kMultiGet) {
    PayloadWriter pw;
    pw.u32(static_cast<std::uint32_t>(w->keys.size()));
    for (const auto& k : w->keys) pw.str(*find(k));
    connection->reply(w->request_id, byte(Op::kValues), pw.take());
  } else {
    connection->reply(w->request_id, byte(Op::kOk), {});
  }
}

void StoreService::notify(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<std::shared_ptr<Waiter>> list = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : list) {
    if (!w->done) finish_or_park(w);  // parks it on its next missing key, if any
  }
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(const TcpStoreOptions& o) : server(server_options(o), make_service) {}

  static net::ServerOptions server_options(const TcpStoreOptions& o) {
    net::ServerOptions s;
    s.endpoint = o.endpoint;
    s.job_id = o.job_id;
    s.secret = o.secret;
    s.admit = o.admit;
    s.service = net::Service::kStore;
    s.name = "store";
    s.rank = o.rank;
    // Every member may hold two connections at once (a launcher's requests and its watch; a
    // rank's store client and a retry).
    s.expected_clients = 2 * static_cast<std::size_t>(std::max(o.world_size, 0));
    return s;
  }
  static std::unique_ptr<net::ServiceHandler> make_service(asio::io_context& io) {
    return std::make_unique<StoreService>(io);
  }

  net::FramedServer server;
};

TcpStoreServer::TcpStoreServer(const TcpStoreOptions& options) {
  try {
    impl_ = std::make_unique<Impl>(options);
  } catch (const net::NetError& e) {
    throw StoreError(e.what());
  }
}
TcpStoreServer::~TcpStoreServer() = default;
TcpStoreServer::TcpStoreServer(TcpStoreServer&&) noexcept = default;
TcpStoreServer& TcpStoreServer::operator=(TcpStoreServer&&) noexcept = default;

std::uint16_t TcpStoreServer::port() const { return impl_ ? impl_->server.port() : 0; }
std::size_t TcpStoreServer::dropped_connections() const {
  return impl_ ? impl_->server.dropped_connections() : 0;
}

}  // namespace ddl
