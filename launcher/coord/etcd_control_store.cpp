#include <algorithm>
#include <thread>

#include "launcher/coord/control_store.h"
#include "launcher/coord/etcd_client.h"
#include "net/auth.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string fresh_writer() { return net::to_hex(net::sha256(net::random_bytes(16))).substr(0, 12); }

class EtcdControlStore final : public ControlStore {
 public:
  EtcdControlStore(const ControlOptions& options, std::unique_ptr<etcd::Client> client)
      : options_(options),
        prefix_("/ddl/" + options.job_id + "/"),
        writer_(fresh_writer()),
        client_(std::move(client)) {}

  std::unique_ptr<ControlStore> connect() const override {
    return std::make_unique<EtcdControlStore>(options_, client_->clone());
  }

  std::optional<RosterCursor> append(const std::string& roster,
                                     const std::string& value) override {
    call("append", [&] {
      client_->put(prefix_ + roster + "/" + writer_ + "." + std::to_string(++appended_), value);
    });
    return std::nullopt;  // its place among the others' is known once the roster is read
  }

  std::vector<std::string> read(const std::string& roster, RosterCursor& cursor,
                                std::size_t limit) override {
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

  bool wait(const std::string& roster, RosterCursor cursor, milliseconds timeout) override {
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

  void put(const std::string& key, const std::string& value) override {
    call("put", [&] { client_->put(prefix_ + key, value); });
  }

  std::vector<std::optional<std::string>> get(const std::vector<std::string>& keys) override {
    return call("get", [&] {
      std::vector<etcd::Op> ops;
      for (const std::string& key : keys) ops.push_back(etcd::Op::get(prefix_ + key));
      std::vector<std::optional<std::string>> out;
      if (ops.empty()) return out;
      const etcd::TxnResult r = client_->txn({}, ops);  // every key in one request
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

  bool swap(const std::string& key, const std::optional<std::string>& expected,
            const std::optional<std::string>& desired) override {
    return call("swap", [&] {
      const std::string k = prefix_ + key;
      const etcd::Compare compare =
          expected ? etcd::Compare::value_is(k, *expected) : etcd::Compare::absent(k);
      const etcd::Op op = desired ? etcd::Op::put(k, *desired) : etcd::Op::erase(k);
      return client_->txn({compare}, {op}).succeeded;
    });
  }

  void erase(const std::string& prefix) override {
    call("erase", [&] { client_->erase_prefix(prefix_ + prefix); });
  }

  bool outlives_launchers() const override { return true; }
  int first_free_rank() const override { return 0; }
  bool hosted_here() const override { return false; }
  std::string where() const override {
    return "etcd at " + client_->endpoints_text() + " (keys " + prefix_ + ")";
  }

 private:
  template <typename F>
  auto call(const char* what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const etcd::EtcdError& e) {
      throw ControlStoreError(std::string(what) + " in " + where() + ": " + e.what());
    }
  }

  ControlOptions options_;
  std::string prefix_;
  std::string writer_;  // this connection's part of its entries' keys
  std::int64_t appended_ = 0;
  std::unique_ptr<etcd::Client> client_;
};

}  // namespace

std::unique_ptr<ControlStore> make_etcd_control_store(const ControlOptions& options) {
  if (options.munge) {
    throw ControlError(
        "the etcd control plane cannot admit launchers with munge credentials: set the same " +
        std::string(env::kJobSecret) + " on every node");
  }
  etcd::ClientOptions o;
  o.endpoints = options.etcd_endpoints;
  o.request_timeout =
      std::clamp(options.heartbeat_timeout / 3, milliseconds(300), milliseconds(2'000));
  const EtcdSecurity& sec = options.etcd_security;
  o.tls = {sec.tls, sec.ca_file, sec.cert_file, sec.key_file};
  o.user = sec.user;
  o.password = sec.password;
  std::unique_ptr<etcd::Client> client;
  try {
    client = std::make_unique<etcd::Client>(o);
  } catch (const etcd::EtcdError& e) {
    throw ControlError(std::string("etcd: ") + e.what());
  }
  // etcd may still be starting: try until the rendezvous deadline, then say which endpoints.
  const auto deadline = Clock::now() + options.rendezvous_timeout;
  while (true) {
    try {
      client->get("/ddl/" + options.job_id + "/run");
      return std::make_unique<EtcdControlStore>(options, std::move(client));
    } catch (const etcd::EtcdUnreachable& e) {
      if (Clock::now() >= deadline) {
        throw ControlError("no etcd member answered at " + client->endpoints_text() +
                           " within the rendezvous deadline (" +
                           seconds_text(options.rendezvous_timeout) +
                           " s, --rendezvous_timeout): " + e.what());
      }
      std::this_thread::sleep_for(kControlPollInterval);
    } catch (const etcd::EtcdError& e) {
      throw ControlError("etcd at " + client->endpoints_text() + ": " + e.what());
    }
  }
}

}  // namespace ddl::launcher
