#include "launcher/coord/etcd_control_store.h"

#include <algorithm>
#include <thread>

#include "launcher/coord/etcd_client.h"
#include "net/auth.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds request_timeout(milliseconds heartbeat_timeout) {
  return std::clamp(heartbeat_timeout / 3, milliseconds(300), milliseconds(2'000));
}

std::string fresh_writer() { return net::to_hex(net::sha256(net::random_bytes(16))).substr(0, 12); }

}  // namespace

EtcdControlStore::EtcdControlStore(const ControlOptions& options)
    : options_(options), prefix_("/ddl/" + options.job_id + "/"), writer_(fresh_writer()) {
  if (options_.munge) {
    throw ControlError(
        "the etcd control plane cannot admit launchers with munge credentials: set the same " +
        std::string(env::kJobSecret) + " on every node");
  }
  etcd::ClientOptions client_options;
  client_options.endpoints = options_.etcd_endpoints;
  client_options.request_timeout = request_timeout(options_.heartbeat_timeout);
  const EtcdSecurity& sec = options_.etcd_security;
  client_options.tls = {sec.tls, sec.ca_file, sec.cert_file, sec.key_file};
  client_options.user = sec.user;
  client_options.password = sec.password;
  try {
    client_ = std::make_unique<etcd::Client>(client_options);
  } catch (const etcd::EtcdError& e) {
    throw ControlError(std::string("etcd: ") + e.what());
  }
  // etcd may still be starting: try until the rendezvous deadline, then say which endpoints.
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  while (true) {
    try {
      client_->get(prefix_ + "run");
      return;
    } catch (const etcd::EtcdUnreachable& e) {
      if (Clock::now() >= deadline) {
        throw ControlError("no etcd member answered at " + client_->endpoints_text() +
                           " within the rendezvous deadline (" +
                           seconds_text(options_.rendezvous_timeout) +
                           " s, --rendezvous_timeout): " + e.what());
      }
      std::this_thread::sleep_for(kControlPollInterval);
    } catch (const etcd::EtcdError& e) {
      throw ControlError("etcd at " + client_->endpoints_text() + ": " + e.what());
    }
  }
}

EtcdControlStore::EtcdControlStore(const EtcdControlStore& other)
    : options_(other.options_),
      prefix_(other.prefix_),
      writer_(fresh_writer()),
      client_(other.client_->clone()) {}

EtcdControlStore::~EtcdControlStore() = default;

std::unique_ptr<ControlStore> EtcdControlStore::connect() const {
  return std::unique_ptr<ControlStore>(new EtcdControlStore(*this));
}

std::string EtcdControlStore::where() const {
  return "etcd at " + client_->endpoints_text() + " (keys " + prefix_ + ")";
}

template <typename F>
auto EtcdControlStore::call(const char* what, F&& f) {
  try {
    return f();
  } catch (const etcd::EtcdError& e) {
    throw ControlStoreError(std::string(what) + " in " + where() + ": " + e.what());
  }
}

void EtcdControlStore::append(const std::string& roster, const std::string& value) {
  call("append", [&] {
    client_->put(prefix_ + roster + "/" + writer_ + "." + std::to_string(++appended_), value);
  });
}

std::vector<std::string> EtcdControlStore::read(const std::string& roster, RosterCursor& cursor,
                                                std::size_t limit) {
  return call("read", [&] {
    std::vector<etcd::KeyValue> kvs = client_->get_prefix(prefix_ + roster + "/").kvs;
    std::sort(kvs.begin(), kvs.end(), [](const etcd::KeyValue& a, const etcd::KeyValue& b) {
      return a.create_revision < b.create_revision;
    });
    std::vector<std::string> out;
    for (const etcd::KeyValue& kv : kvs) {
      if (kv.create_revision <= cursor) continue;
      if (out.size() >= limit) break;
      out.push_back(kv.value);
      cursor = kv.create_revision;
    }
    return out;
  });
}

bool EtcdControlStore::wait(const std::string& roster, RosterCursor cursor, milliseconds timeout) {
  return call("wait", [&] {
    if (timeout <= milliseconds(0)) return false;
    try {
      return !client_->watch(prefix_ + roster + "/", true, cursor + 1, timeout).events.empty();
    } catch (const etcd::EtcdUnreachable&) {
      throw;
    } catch (const etcd::EtcdError&) {
      return true;  // compacted past the cursor: the caller reads again
    }
  });
}

void EtcdControlStore::put(const std::string& key, const std::string& value) {
  call("put", [&] { client_->put(prefix_ + key, value); });
}

std::vector<std::optional<std::string>> EtcdControlStore::get(
    const std::vector<std::string>& keys) {
  return call("get", [&] {
    std::vector<etcd::Op> ops;
    for (const std::string& key : keys) ops.push_back(etcd::Op::get(prefix_ + key));
    std::vector<std::optional<std::string>> out;
    if (ops.empty()) return out;
    const etcd::TxnResult r = client_->txn({}, ops);
    if (r.ranges.size() != ops.size()) {
      throw etcd::EtcdError("a read of " + std::to_string(ops.size()) + " keys returned " +
                            std::to_string(r.ranges.size()));
    }
    for (const auto& range : r.ranges) {
      out.push_back(range.empty() ? std::nullopt : std::optional(range.front().value));
    }
    return out;
  });
}

bool EtcdControlStore::swap(const std::string& key, const std::optional<std::string>& expected,
                            const std::optional<std::string>& desired) {
  return call("swap", [&] {
    const std::string k = prefix_ + key;
    const etcd::Compare compare =
        expected ? etcd::Compare::value_is(k, *expected) : etcd::Compare::absent(k);
    const etcd::Op op = desired ? etcd::Op::put(k, *desired) : etcd::Op::erase(k);
    return client_->txn({compare}, {op}).succeeded;
  });
}

void EtcdControlStore::erase(const std::string& prefix) {
  call("erase", [&] { client_->erase_prefix(prefix_ + prefix); });
}

}  // namespace ddl::launcher
