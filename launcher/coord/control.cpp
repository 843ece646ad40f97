#include "launcher/coord/control.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "store/prefix_store.h"
#include "store/tcp_store.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kFailedKey = "failed";
constexpr const char* kJobIdKey = "job_id";

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::string seconds_text(milliseconds ms) {
  std::ostringstream os;
  os << static_cast<double>(ms.count()) / 1000.0;
  return os.str();
}

std::string list_nodes(const std::vector<int>& nodes) {
  std::string out;
  for (int n : nodes) out += (out.empty() ? "" : ", ") + std::to_string(n);
  return out;
}

// The control store's per-node keys over one connection: a view per family, each key being the
// node's number ("desc/3" in the store).
struct NodeKeys {
  explicit NodeKeys(Store& store)
      : claims(store, "claim"),
        descriptions(store, "desc"),
        endpoints(store, "endpoints"),
        heartbeats(store, "hb"),
        goodbyes(store, "bye") {}

  static std::string of(int node) { return std::to_string(node); }

  PrefixStore claims;        // how many launchers claimed the node (more than 1: a duplicate)
  PrefixStore descriptions;  // the node's JobDescription record
  PrefixStore endpoints;     // the node's endpoints record
  PrefixStore heartbeats;    // a counter the node's watcher adds to
  PrefixStore goodbyes;      // set when the node's launcher is done
};

}  // namespace

// --- ControlChannel -----------------------------------------------------------------------------

TcpStoreOptions ControlChannel::store_options(std::chrono::milliseconds connect_timeout) const {
  TcpStoreOptions store;
  store.endpoint = options_.endpoint;
  store.job_id = options_.job_id;
  store.secret = options_.secret;
  store.rank = options_.node_rank;
  store.world_size = options_.nnodes;
  store.connect_timeout = connect_timeout;
  store.io_timeout = options_.heartbeat_timeout;
  return store;
}

ControlChannel::ControlChannel(const ControlOptions& options) : options_(options) {
  const TcpStoreOptions store = store_options(options.rendezvous_timeout);
  try {
    if (options.node_rank == 0) {
      server_ = std::make_unique<TcpStoreServer>(store);
      spdlog::info("node 0: hosting the control store of {} node(s) on {}", options.nnodes,
                   options.endpoint.str());
    }
    store_ = std::make_unique<TcpStore>(store);
  } catch (const StoreError& e) {
    throw ControlError("node " + std::to_string(options.node_rank) + ": control store at " +
                       where() + ": " + e.what());
  }
}

ControlChannel::~ControlChannel() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
}

std::string ControlChannel::where() const {
  return options_.endpoint.str() + " (node 0's launcher)";
}

ControlChannel::Agreement ControlChannel::rendezvous(const JobDescription& mine,
                                                     const std::vector<env::Endpoint>& local,
                                                     const std::string& proposed_job_id) {
  const int me = options_.node_rank;
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  NodeKeys keys(*store_);
  auto duplicate = [&] {
    return ControlError("another launcher has already joined the job as node " +
                        std::to_string(me) + " (check --node_rank / --node_ip / SLURM_NODEID)");
  };
  auto source = [&](const PrefixStore& view, int node) {
    return "key '" + view.full_key(NodeKeys::of(node)) + "' of the control store at " + where();
  };
  try {
    if (keys.claims.add(NodeKeys::of(me), 1) > 1) throw duplicate();
    if (me == 0) store_->set(kJobIdKey, bytes(encode_job_id(proposed_job_id)));
    keys.endpoints.set(NodeKeys::of(me), bytes(encode_endpoints(local)));
    keys.descriptions.set(NodeKeys::of(me), bytes(encode_description(mine)));

    std::vector<int> pending;
    for (int n = 0; n < options_.nnodes; ++n) {
      if (n != me) pending.push_back(n);
    }
    while (true) {
      for (auto it = pending.begin(); it != pending.end();) {
        if (!keys.descriptions.check({NodeKeys::of(*it)})) {
          ++it;
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          joined_.insert(*it);
        }
        const JobDescription theirs = decode_description(
            text(keys.descriptions.get(NodeKeys::of(*it), milliseconds(0))),
            source(keys.descriptions, *it));
        if (auto why = description_mismatch(mine, me, theirs, *it)) throw ControlError(*why);
        it = pending.erase(it);
      }
      if (pending.empty()) break;
      if (keys.claims.add(NodeKeys::of(me), 0) > 1) throw duplicate();
      const auto now = Clock::now();
      if (now >= deadline) {
        throw ControlError("node(s) " + list_nodes(pending) + " of " +
                           std::to_string(options_.nnodes) + " did not join the control store at " +
                           where() + " within the rendezvous deadline (" +
                           seconds_text(options_.rendezvous_timeout) +
                           " s, --rendezvous_timeout); is launch running there with the same "
                           "node list, ports and DDL_JOB_SECRET?");
      }
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - now);
      // Woken early by the first pending node's description; the others are checked each round.
      keys.descriptions.wait_for({NodeKeys::of(pending.front())},
                                 std::min(kControlPollInterval, left));
    }

    Agreement agreement;
    for (int n = 0; n < options_.nnodes; ++n) {
      const std::vector<env::Endpoint> theirs =
          n == me ? local
                  : decode_endpoints(
                        text(keys.endpoints.get(NodeKeys::of(n), options_.heartbeat_timeout)),
                        source(keys.endpoints, n));
      if (theirs.size() != local.size()) {
        throw ControlError("node " + std::to_string(n) + " published " +
                           std::to_string(theirs.size()) + " endpoint(s), this node " +
                           std::to_string(local.size()));
      }
      agreement.endpoints.insert(agreement.endpoints.end(), theirs.begin(), theirs.end());
    }
    agreement.job_id =
        me == 0 ? proposed_job_id
                : decode_job_id(text(store_->get(kJobIdKey, options_.heartbeat_timeout)),
                                "key '" + std::string(kJobIdKey) + "' of the control store at " +
                                    where());
    return agreement;
  } catch (const StoreError& e) {
    throw ControlError("node " + std::to_string(me) + ": control store at " + where() + ": " +
                       e.what());
  }
}

void ControlChannel::watch(std::shared_ptr<ExternalStop> stop) {
  const TcpStoreOptions store = store_options(options_.heartbeat_timeout);
  try {
    watch_store_ = std::make_unique<TcpStore>(store);
  } catch (const StoreError& e) {
    throw ControlError("node " + std::to_string(options_.node_rank) +
                       ": cannot open the watch connection to the control store at " + where() +
                       ": " + e.what());
  }
  watcher_ = std::thread([this, stop = std::move(stop)] { watch_loop(stop); });
}

std::optional<FailureRecord> ControlChannel::read_failure(Store& store) {
  if (!store.check({kFailedKey})) return std::nullopt;
  const std::string value = text(store.get(kFailedKey, milliseconds(0)));
  try {
    return decode_failure(value, "key '" + std::string(kFailedKey) + "' of the control store at " +
                                     where());
  } catch (const RecordError& e) {
    spdlog::error("{}", e.what());
    return FailureRecord{-1, std::nullopt, 1, e.what()};
  }
}

bool ControlChannel::publish_failure(Store& store, const FailureRecord& record) {
  const Bytes mine = bytes(encode_failure(record));
  const std::optional<Bytes> now = store.compare_set(kFailedKey, std::nullopt, mine);
  return now && *now == mine;  // another failure was first otherwise
}

void ControlChannel::watch_loop(std::shared_ptr<ExternalStop> stop) {
  const int me = options_.node_rank;
  auto next_beat = Clock::now();
  bool delivered = false;
  struct Beat {
    std::int64_t value = -1;
    Clock::time_point changed;
  };
  std::map<int, Beat> beats;
  std::set<int> gone;  // said goodbye or declared lost
  NodeKeys watch_keys(*watch_store_);
  while (!stopping_) {
    try {
      auto now = Clock::now();
      if (now >= next_beat) {
        watch_keys.heartbeats.add(NodeKeys::of(me), 1);
        next_beat = now + options_.heartbeat_interval;
      }
      if (!delivered) {
        if (watch_store_->wait_for({kFailedKey}, kControlPollInterval)) {
          const auto record = read_failure(*watch_store_);
          delivered = true;
          {
            std::lock_guard<std::mutex> lock(mutex_);
            seen_failure_ = record;
          }
          if (record && record->node != me) {
            stop->request(record->exit_code, "node " + std::to_string(record->node) +
                                                 " failed first (" + record->str() + ")");
          }
        }
      } else {
        std::this_thread::sleep_for(kControlPollInterval);
      }
      if (me != 0) continue;
      now = Clock::now();
      for (int n = 1; n < options_.nnodes; ++n) {
        if (gone.count(n)) continue;
        if (watch_keys.goodbyes.check({NodeKeys::of(n)})) {
          gone.insert(n);
          continue;
        }
        const std::int64_t value = watch_keys.heartbeats.add(NodeKeys::of(n), 0);
        Beat& beat = beats[n];
        if (value != beat.value) {
          beat.value = value;
          beat.changed = now;
          continue;
        }
        if (now - beat.changed < options_.heartbeat_timeout) continue;
        gone.insert(n);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          lost_nodes_.insert(n);
        }
        const FailureRecord lost{n, std::nullopt, 1,
                                 "node " + std::to_string(n) +
                                     "'s launcher stopped answering (no heartbeat for " +
                                     seconds_text(options_.heartbeat_timeout) + " s)"};
        spdlog::error("{}", lost.what);
        publish_failure(*watch_store_, lost);  // seen by every watcher, this one included
      }
    } catch (const StoreError& e) {
      if (stopping_) return;
      const FailureRecord lost{0, std::nullopt, 1,
                               "lost the control connection to " + where() + ": " + e.what()};
      spdlog::error("{}", lost.what);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!seen_failure_) seen_failure_ = lost;
      }
      if (!delivered) stop->request(lost.exit_code, lost.what);
      return;
    }
  }
}

void ControlChannel::report_failure(const FailureNotice& notice) {
  const FailureRecord record{options_.node_rank, notice.rank, notice.exit_code, notice.what};
  try {
    if (publish_failure(*store_, record)) {
      spdlog::info("told the other nodes: {}", record.str());
    }
  } catch (const StoreError& e) {
    spdlog::error("could not tell the other nodes that {}: {}", record.str(), e.what());
  }
}

std::optional<FailureRecord> ControlChannel::finish() {
  const int me = options_.node_rank;
  NodeKeys keys(*store_);
  if (me != 0) {
    try {
      keys.goodbyes.set(NodeKeys::of(me), bytes("1"));
    } catch (const StoreError& e) {
      spdlog::debug("could not say goodbye to node 0: {}", e.what());
    }
  } else {
    std::optional<Clock::time_point> linger_deadline;
    while (true) {
      std::vector<int> pending;
      try {
        std::set<int> lost;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          lost = lost_nodes_;
        }
        for (int n = 1; n < options_.nnodes; ++n) {
          if (!lost.count(n) && !keys.goodbyes.check({NodeKeys::of(n)})) pending.push_back(n);
        }
        if (pending.empty()) break;
        if (!linger_deadline && (store_->check({kFailedKey}) || !watcher_.joinable())) {
          linger_deadline = Clock::now() + options_.linger_timeout;
        }
        if (linger_deadline && Clock::now() >= *linger_deadline) {
          spdlog::warn("node(s) {} did not finish within {} s after the failure; leaving",
                       list_nodes(pending), seconds_text(options_.linger_timeout));
          break;
        }
        keys.goodbyes.wait_for({NodeKeys::of(pending.front())}, kControlPollInterval);
      } catch (const StoreError& e) {
        spdlog::error("control store: {}", e.what());
        break;
      }
    }
  }
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  std::optional<FailureRecord> failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure = seen_failure_;
  }
  if (!failure) {
    try {
      failure = read_failure(*store_);
    } catch (const StoreError&) {
    }
  }
  return failure;
}

void ControlChannel::abandon() {
  const int me = options_.node_rank;
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  NodeKeys keys(*store_);
  try {
    if (me != 0) {
      keys.goodbyes.set(NodeKeys::of(me), bytes("1"));
      return;
    }
    const auto deadline = Clock::now() + options_.linger_timeout;
    while (Clock::now() < deadline) {
      std::vector<std::string> pending;
      for (int n = 1; n < options_.nnodes; ++n) {
        if (keys.claims.add(NodeKeys::of(n), 0) > 0 && !keys.goodbyes.check({NodeKeys::of(n)})) {
          pending.push_back(NodeKeys::of(n));
        }
      }
      if (pending.empty()) return;
      keys.goodbyes.wait_for({pending.front()}, kControlPollInterval);
    }
  } catch (const StoreError& e) {
    spdlog::debug("control store while giving up: {}", e.what());
  }
}

}  // namespace ddl::launcher
