#include "launcher/coord/tcp_control_store.h"

#include <spdlog/spdlog.h>

#include "launcher/coord/munge_auth.h"
#include "store/tcp_store.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

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

}  // namespace

TcpStoreOptions TcpControlStore::store_options(milliseconds connect_timeout) const {
  TcpStoreOptions store;
  store.endpoint = options_.endpoint;
  store.job_id = options_.job_id;
  store.secret = options_.secret;
  if (options_.munge) {
    std::shared_ptr<const MungeAdmission> munge = options_.munge;
    store.admit = [munge](const std::string& presented, int node) {
      return munge->refusal(presented, node);
    };
    store.credential = [munge, node = options_.node_rank] { return munge->credential(node); };
  }
  store.rank = options_.node_rank;
  store.world_size = options_.nnodes;
  store.connect_timeout = connect_timeout;
  store.io_timeout = options_.heartbeat_timeout;
  return store;
}

TcpControlStore::TcpControlStore(ControlOptions& options) : options_(options) {
  if (options_.node_rank == kAutoNodeRank) {
    try {
      options_.node_rank = 0;
      server_ = std::make_shared<TcpStoreServer>(store_options(options_.rendezvous_timeout));
      spdlog::info(
          "node rank 0: this launcher hosts the control store on {} (first at that "
          "address)",
          options_.endpoint.str());
    } catch (const StoreError& e) {
      // Not this machine's address, or another launcher here was first.
      options_.node_rank = kAutoNodeRank;
      spdlog::debug("not hosting the control store ({}): node 0 is elsewhere", e.what());
    }
    options.node_rank = options_.node_rank;
  }
  const std::string node = options_.node_rank == kAutoNodeRank
                               ? std::string("this node (no node rank given)")
                               : "node " + std::to_string(options_.node_rank);
  try {
    if (options_.node_rank == 0 && !server_) {
      server_ = std::make_shared<TcpStoreServer>(store_options(options_.rendezvous_timeout));
      spdlog::info("node 0: hosting the control store of {} node(s) on {}", options_.nnodes,
                   options_.endpoint.str());
    }
    store_ = std::make_unique<TcpStore>(store_options(options_.rendezvous_timeout));
  } catch (const StoreUnreachable& e) {
    if (options_.node_rank != 0) {
      throw no_node_zero(node, where(), options_.rendezvous_timeout, e);
    }
    throw ControlError("node 0: control store at " + where() + ": " + e.what());
  } catch (const StoreError& e) {
    throw ControlError(node + ": control store at " + where() + ": " + e.what());
  }
}

TcpControlStore::TcpControlStore(const ControlOptions& options,
                                 std::shared_ptr<TcpStoreServer> server,
                                 milliseconds connect_timeout)
    : options_(options), server_(std::move(server)) {
  try {
    store_ = std::make_unique<TcpStore>(store_options(connect_timeout));
  } catch (const StoreError& e) {
    throw ControlStoreError("cannot open another connection to the control store at " + where() +
                            ": " + e.what());
  }
}

TcpControlStore::~TcpControlStore() = default;

std::unique_ptr<ControlStore> TcpControlStore::connect() const {
  return std::unique_ptr<ControlStore>(
      new TcpControlStore(options_, server_, options_.heartbeat_timeout));
}

std::string TcpControlStore::where() const {
  return options_.endpoint.str() + " (node 0's launcher)";
}

template <typename F>
auto TcpControlStore::call(const char* what, F&& f) {
  try {
    return f();
  } catch (const StoreError& e) {
    throw ControlStoreError(std::string(what) + " at the control store at " + where() + ": " +
                            e.what());
  }
}

void TcpControlStore::append(const std::string& roster, const std::string& value) {
  call("append", [&] {
    const std::int64_t ticket = store_->add(roster + "/n", 1);
    store_->set(entry_key(roster, ticket), bytes(value));
  });
}

std::vector<std::string> TcpControlStore::read(const std::string& roster, RosterCursor& cursor,
                                               std::size_t limit) {
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

bool TcpControlStore::wait(const std::string& roster, RosterCursor cursor, milliseconds timeout) {
  return call("wait", [&] { return store_->wait_for({entry_key(roster, cursor + 1)}, timeout); });
}

void TcpControlStore::put(const std::string& key, const std::string& value) {
  call("put", [&] { store_->set(key, bytes(value)); });
}

std::vector<std::optional<std::string>> TcpControlStore::get(const std::vector<std::string>& keys) {
  return call("get", [&] {
    std::vector<std::optional<std::string>> out;
    if (keys.empty()) return out;
    if (store_->check(keys)) {
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

bool TcpControlStore::swap(const std::string& key, const std::optional<std::string>& expected,
                           const std::optional<std::string>& desired) {
  return call("swap", [&] {
    const std::optional<Bytes> want = expected ? std::optional(bytes(*expected)) : std::nullopt;
    if (!desired) {
      // Only a store that outlives its launchers removes records; this one does not need to.
      if (!store_->check({key})) return !expected.has_value();
      if (!expected || text(store_->get(key, milliseconds(0))) != *expected) return false;
      return store_->delete_key(key);
    }
    const std::optional<Bytes> now = store_->compare_set(key, want, bytes(*desired));
    return now && text(*now) == *desired && want != now;
  });
}

}  // namespace ddl::launcher
