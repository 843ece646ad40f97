#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "launcher/coord/control_store.h"
#include "launcher/coord/munge_auth.h"
#include "net/ports.h"
#include "store/tcp_store.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

// Whether `host` is an address of this machine (a socket binds there).
bool address_is_here(const std::string& host) {
  try {
    net::pick_free_ports(host, 1);
    return true;
  } catch (const net::PortError&) {
    return false;
  }
}

std::string entry_key(const std::string& roster, RosterCursor ticket) {
  return roster + "/" + std::to_string(ticket);
}

// For a node other than 0 that finds nobody at node 0's address: node 0 is not there yet (it
// starts later than the rendezvous deadline allows) or not any more (it gave up waiting, or the
// job ran and ended without this node).
ControlError no_node_zero(const std::string& node, const std::string& where,
                          milliseconds rendezvous_timeout, const StoreUnreachable& e) {
  return ControlError(
      node + ": cannot join the job: no control store answered at " + where +
      " within the rendezvous deadline (" + seconds_text(rendezvous_timeout) +
      " s, --rendezvous_timeout). Node 0's launcher is not running there: if it was started "
      "earlier, its rendezvous deadline passed before this node arrived, or the job already "
      "started or ended without it; start every node within the deadline of the first one, or "
      "check --master_addr/--master_port. (" +
      e.what() + ")");
}

// Options for a client (and node 0's server) of the control store: the job, its secret or munge
// admission, this node.
TcpStoreOptions store_options(const ControlOptions& o, milliseconds connect_timeout) {
  TcpStoreOptions store;
  store.endpoint = o.endpoint;
  store.job_id = o.job_id;
  store.secret = o.secret;
  if (o.munge) {
    std::shared_ptr<const MungeAdmission> munge = o.munge;
    store.admit = [munge](const std::string& presented, int node) {
      return munge->refusal(presented, node);
    };
    store.credential = [munge, node = o.node_rank] { return munge->credential(node); };
  }
  store.rank = o.node_rank;
  store.world_size = o.nnodes;
  store.connect_timeout = connect_timeout;
  store.io_timeout = o.heartbeat_timeout;
  return store;
}

class TcpControlStore final : public ControlStore {
 public:
  // One connection; `server` is node 0's (shared with its other connections), else null.
  TcpControlStore(const ControlOptions& options, std::shared_ptr<TcpStoreServer> server,
                  std::unique_ptr<TcpStore> store)
      : options_(options), server_(std::move(server)), store_(std::move(store)) {}

  std::unique_ptr<ControlStore> connect() const override {
    return call("connect", [&] {
      return std::make_unique<TcpControlStore>(
          options_, server_,
          std::make_unique<TcpStore>(store_options(options_, options_.heartbeat_timeout)));
    });
  }

  std::optional<RosterCursor> append(const std::string& roster,
                                     const std::string& value) override {
    return call("append", [&] {
      const std::int64_t ticket = store_->add(roster + "/n", 1);
      store_->set(entry_key(roster, ticket), bytes(value));
      return std::optional<RosterCursor>(ticket);
    });
  }

  std::vector<std::string> read(const std::string& roster, RosterCursor& cursor,
                                std::size_t limit) override {
    return call("read", [&] {
      const std::int64_t count = store_->add(roster + "/n", 0);
      std::vector<std::string> keys;
      for (std::int64_t t = cursor + 1; t <= count && keys.size() < limit; ++t) {
        keys.push_back(entry_key(roster, t));
      }
      std::vector<std::string> out;
      if (keys.empty()) return out;
      // An entry still unwritten after the timeout: its writer died between its two requests.
      for (const Bytes& b : store_->multi_get(keys, options_.heartbeat_timeout)) {
        out.push_back(text(b));
      }
      cursor += static_cast<std::int64_t>(keys.size());
      return out;
    });
  }

  bool wait(const std::string& roster, RosterCursor cursor, milliseconds timeout) override {
    return call("wait", [&] { return store_->wait_for({entry_key(roster, cursor + 1)}, timeout); });
  }

  void put(const std::string& key, const std::string& value) override {
    call("put", [&] { store_->set(key, bytes(value)); });
  }

  std::vector<std::optional<std::string>> get(const std::vector<std::string>& keys) override {
    return call("get", [&] {
      std::vector<std::optional<std::string>> out;
      if (keys.empty()) return out;
      if (store_->check(keys)) {  // the usual case: one request
        for (const Bytes& b : store_->multi_get(keys, options_.heartbeat_timeout)) {
          out.emplace_back(text(b));
        }
        return out;
      }
      for (const std::string& key : keys) {
        out.push_back(store_->check({key}) ? std::optional(text(store_->get(key, milliseconds(0))))
                                           : std::nullopt);
      }
      return out;
    });
  }

  bool swap(const std::string& key, const std::optional<std::string>& expected,
            const std::optional<std::string>& desired) override {
    return call("swap", [&] {
      if (!desired) {
        if (!store_->check({key})) return !expected.has_value();
        if (!expected || text(store_->get(key, milliseconds(0))) != *expected) return false;
        return store_->delete_key(key);
      }
      const std::optional<Bytes> want = expected ? std::optional(bytes(*expected)) : std::nullopt;
      const std::optional<Bytes> now = store_->compare_set(key, want, bytes(*desired));
      return now && text(*now) == *desired && want != now;
    });
  }

  void erase(const std::string&) override {}  // the store ends with node 0's launcher
  bool outlives_launchers() const override { return false; }
  int first_free_rank() const override { return 1; }
  bool hosted_here() const override { return server_ != nullptr; }
  std::string where() const override {
    return "node 0's control store at " + options_.endpoint.str();
  }

 private:
  template <typename F>
  auto call(const char* what, F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const StoreError& e) {
      // A connection to node 0's store does not come back: node 0 ended, or the network did.
      throw ControlStoreError(std::string(what) + " at " + where() + ": " + e.what(), true);
    }
  }

  ControlOptions options_;
  std::shared_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
};

}  // namespace

std::unique_ptr<ControlStore> make_tcp_control_store(ControlOptions& options) {
  const std::string where = options.endpoint.str() + " (node 0's launcher)";
  // No node rank given: node 0 is the launcher that hosts the store at that address first.
  const bool elected = options.node_rank == kAutoNodeRank;
  const auto deadline = std::chrono::steady_clock::now() + options.rendezvous_timeout;
  std::shared_ptr<TcpStoreServer> server;
  std::string not_hosted;  // why this launcher could not host it, for the final error
  const auto try_to_host = [&] {
    try {
      options.node_rank = 0;
      server = std::make_shared<TcpStoreServer>(store_options(options, options.rendezvous_timeout));
      spdlog::info(
          "node rank 0: this launcher hosts the control store on {} (first at that "
          "address)",
          options.endpoint.str());
      return true;
    } catch (const StoreError& e) {
      // Not this machine's address, or another launcher here was first.
      options.node_rank = kAutoNodeRank;
      if (not_hosted.empty()) {
        spdlog::debug("not hosting the control store ({}): node 0 is elsewhere", e.what());
      }
      not_hosted = e.what();
      return false;
    }
  };
  if (elected) try_to_host();
  const std::string node = options.node_rank == kAutoNodeRank
                               ? std::string("this node (no node rank given)")
                               : "node " + std::to_string(options.node_rank);
  try {
    if (options.node_rank == 0 && !server) {
      server = std::make_shared<TcpStoreServer>(store_options(options, options.rendezvous_timeout));
      spdlog::info("node 0: hosting the control store of {} node(s) on {}", options.nnodes,
                   options.endpoint.str());
    }
    TcpStoreOptions client = store_options(options, options.rendezvous_timeout);
    // While nobody answers at the address, an elected launcher tries again to host the store
    // there: whatever held the port when it first tried (a socket of another program, a launcher
    // that gave up) may be gone, and otherwise every launcher of the job would wait for nobody.
    if (elected && !server) client.between_attempts = try_to_host;
    std::unique_ptr<TcpStore> store;
    try {
      store = std::make_unique<TcpStore>(client);
    } catch (const StoreUnreachable&) {
      if (!server) throw;
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      store =
          std::make_unique<TcpStore>(store_options(options, std::max(left, milliseconds(1'000))));
    }
    return std::make_unique<TcpControlStore>(options, std::move(server), std::move(store));
  } catch (const StoreUnreachable& e) {
    if (options.node_rank == 0) {
      throw ControlError("node 0: control store at " + where + ": " + e.what());
    }
    ControlError error = no_node_zero(node, where, options.rendezvous_timeout, e);
    if (not_hosted.empty() || !address_is_here(options.endpoint.host)) throw error;
    throw ControlError(std::string(error.what()) +
                       " This launcher could not host the store there either: " + not_hosted);
  } catch (const StoreError& e) {
    throw ControlError(node + ": control store at " + where + ": " + e.what());
  }
}

}  // namespace ddl::launcher
