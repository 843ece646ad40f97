// TcpStore: the store's client, one FramedClient (net/client.h) connection per TcpStore.
#include "store/tcp_store.h"

#include "net/client.h"
#include "store/protocol.h"
#include "store/store_detail.h"

namespace ddl {
namespace {

using net::Frame;
using net::PayloadReader;
using net::PayloadWriter;
using std::chrono::milliseconds;
using store_detail::describe_keys;
using store_protocol::byte;
using store_protocol::Op;
using store_protocol::read_keys;
using store_protocol::write_keys;

std::uint64_t timeout_ms_on_wire(milliseconds timeout) {
  return static_cast<std::uint64_t>(store_detail::clamp_timeout(timeout).count());
}

net::ClientOptions client_options(const TcpStoreOptions& o) {
  net::ClientOptions c;
  c.endpoint = o.endpoint;
  c.job_id = o.job_id;
  c.secret = o.secret;
  c.credential = o.credential;
  c.service = net::Service::kStore;
  c.server_name = "the store";
  c.server_host_hint = "rank 0";
  c.rank = o.rank;
  c.world_size = o.world_size;
  c.connect_timeout = o.connect_timeout;
  c.between_attempts = o.between_attempts;
  c.io_timeout = o.io_timeout;
  return c;
}

// Runs `fn`, turning the transport's errors into the store's (callers catch StoreError).
template <class Fn>
auto as_store_error(Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const net::UnreachableError& e) {
    throw StoreUnreachable(e.what());
  } catch (const net::NetError& e) {
    throw StoreError(e.what());
  }
}

}  // namespace

class TcpStore::Impl {
 public:
  explicit Impl(const TcpStoreOptions& options)
      : options(options),
        client(as_store_error([&] { return net::FramedClient(client_options(options)); })) {}

  Frame request(Op op, const Bytes& payload, milliseconds wait, std::initializer_list<Op> expected,
                const std::string& what) {
    std::vector<std::uint8_t> ops;
    for (Op e : expected) ops.push_back(byte(e));
    return as_store_error([&] { return client.request(byte(op), payload, wait, ops, what); });
  }

  // Parses a reply payload; a malformed one is the store's fault.
  template <class Fn>
  auto parse(const Frame& reply, const std::string& what, Fn fn) {
    try {
      PayloadReader r(reply.payload, store_protocol::op_name(reply.op) + " reply to " + what);
      auto value = fn(r);
      r.finish();
      return value;
    } catch (const net::ProtocolError& e) {
      throw StoreError(client.context() + ": " + e.what());
    }
  }

  // One wait request: nullopt once every key is set, else the keys the store says are missing.
  std::optional<std::vector<std::string>> wait_request(const std::vector<std::string>& keys,
                                                       milliseconds timeout,
                                                       const std::string& what) {
    PayloadWriter w;
    write_keys(w, keys);
    w.u64(timeout_ms_on_wire(timeout));
    Frame reply = request(Op::kWait, w.take(), timeout, {Op::kOk, Op::kTimeout}, what);
    if (reply.op == byte(Op::kOk)) return std::nullopt;
    return parse(reply, what, [](PayloadReader& r) { return read_keys(r); });
  }

  std::string where() const { return client.options().endpoint.str(); }

  TcpStoreOptions options;  // for clone()
  net::FramedClient client;
};

TcpStore::TcpStore(const TcpStoreOptions& options) : impl_(std::make_unique<Impl>(options)) {}
TcpStore::~TcpStore() = default;
TcpStore::TcpStore(TcpStore&&) noexcept = default;
TcpStore& TcpStore::operator=(TcpStore&&) noexcept = default;

void TcpStore::set(const std::string& key, const Bytes& value) {
  impl_->request(Op::kSet, PayloadWriter().str(key).str(value).take(), milliseconds(0), {Op::kOk},
                 "set '" + key + "'");
}

Bytes TcpStore::get(const std::string& key, milliseconds timeout) {
  const std::string what = "get '" + key + "'";
  Frame reply =
      impl_->request(Op::kGet, PayloadWriter().str(key).u64(timeout_ms_on_wire(timeout)).take(),
                     timeout, {Op::kValue, Op::kTimeout}, what);
  if (reply.op == byte(Op::kTimeout)) {
    throw StoreTimeout(impl_->client.prefix() + what + " from the store at " + impl_->where() +
                       " timed out after " + std::to_string(timeout.count()) +
                       " ms: the key was not set");
  }
  return impl_->parse(reply, what, [](PayloadReader& r) { return r.bytes(); });
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  const std::string what = "add '" + key + "'";
  Frame reply = impl_->request(Op::kAdd, PayloadWriter().str(key).i64(delta).take(),
                               milliseconds(0), {Op::kInteger}, what);
  return impl_->parse(reply, what, [](PayloadReader& r) { return r.i64(); });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  const std::string what = "check " + describe_keys(keys);
  PayloadWriter w;
  write_keys(w, keys);
  Frame reply = impl_->request(Op::kCheck, w.take(), milliseconds(0), {Op::kBool}, what);
  return impl_->parse(reply, what, [](PayloadReader& r) { return r.u8() != 0; });
}

namespace {

std::string wait_what(const std::vector<std::string>& keys) {
  return "wait for " + std::to_string(keys.size()) + " key(s)";
}

}  // namespace

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const std::string what = wait_what(keys);
  if (auto missing = impl_->wait_request(keys, timeout, what)) {
    throw StoreTimeout(impl_->client.prefix() + what + " at the store at " + impl_->where() +
                       " timed out after " + std::to_string(timeout.count()) +
                       " ms; missing: " + describe_keys(*missing));
  }
}

bool TcpStore::wait_for(const std::vector<std::string>& keys, milliseconds timeout) {
  return !impl_->wait_request(keys, timeout, wait_what(keys)).has_value();
}

std::optional<Bytes> TcpStore::compare_set(const std::string& key,
                                           const std::optional<Bytes>& expected,
                                           const Bytes& desired) {
  const std::string what = "compare-set '" + key + "'";
  PayloadWriter w;
  w.str(key).u8(expected ? 1 : 0);
  if (expected) w.str(*expected);
  w.str(desired);
  Frame reply =
      impl_->request(Op::kCompareSet, w.take(), milliseconds(0), {Op::kValue, Op::kAbsent}, what);
  if (reply.op == byte(Op::kAbsent)) {
    impl_->parse(reply, what, [](PayloadReader&) { return 0; });
    return std::nullopt;
  }
  return impl_->parse(reply, what, [](PayloadReader& r) { return r.bytes(); });
}

bool TcpStore::delete_key(const std::string& key) {
  const std::string what = "delete '" + key + "'";
  Frame reply = impl_->request(Op::kDelete, PayloadWriter().str(key).take(), milliseconds(0),
                               {Op::kBool}, what);
  return impl_->parse(reply, what, [](PayloadReader& r) { return r.u8() != 0; });
}

void TcpStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) Store::multi_set(keys, values);  // throws, naming both counts
  PayloadWriter w;
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (std::size_t i = 0; i < keys.size(); ++i) w.str(keys[i]).str(values[i]);
  impl_->request(Op::kMultiSet, w.take(), milliseconds(0), {Op::kOk},
                 "multi-set of " + std::to_string(keys.size()) + " key(s)");
}

std::vector<Bytes> TcpStore::multi_get(const std::vector<std::string>& keys, milliseconds timeout) {
  const std::string what = "multi-get of " + std::to_string(keys.size()) + " key(s)";
  PayloadWriter w;
  write_keys(w, keys);
  w.u64(timeout_ms_on_wire(timeout));
  Frame reply = impl_->request(Op::kMultiGet, w.take(), timeout, {Op::kValues, Op::kTimeout}, what);
  if (reply.op == byte(Op::kTimeout)) {
    const auto missing = impl_->parse(reply, what, [](PayloadReader& r) { return read_keys(r); });
    throw StoreTimeout(impl_->client.prefix() + what + " at the store at " + impl_->where() +
                       " timed out after " + std::to_string(timeout.count()) + " ms; " +
                       std::to_string(missing.size()) + " missing: " + describe_keys(missing));
  }
  auto values = impl_->parse(reply, what, [&reply](PayloadReader& r) {
    const std::uint32_t n = r.u32();
    std::vector<Bytes> out;
    out.reserve(std::min<std::size_t>(n, reply.payload.size() / 4));
    for (std::uint32_t i = 0; i < n; ++i) out.push_back(r.bytes());
    return out;
  });
  if (values.size() != keys.size()) {
    throw StoreError(impl_->client.context() + ": " + what + " answered " +
                     std::to_string(values.size()) + " value(s)");
  }
  return values;
}

std::unique_ptr<Store> TcpStore::clone() { return std::make_unique<TcpStore>(impl_->options); }

}  // namespace ddl
