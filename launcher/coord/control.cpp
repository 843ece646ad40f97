#include "launcher/coord/control.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "launcher/coord/munge_auth.h"
#include "store/prefix_store.h"
#include "store/tcp_store.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kFailedKey = "failed";
constexpr const char* kJobIdKey = "job_id";
constexpr const char* kJobSecretKey = "job_secret";  // node 0's proposal, when it made one
constexpr const char* kAutoRankKey = "auto_rank";    // kAutoNodeRank: node ranks handed out after 0
constexpr const char* kOverKey = "over";             // node 0 finished: nobody is admitted any more
constexpr const char* kCurrentKey = "current";  // the newest generation whose members are known

// Rosters (below): who claimed a node rank, who published its description, who said goodbye,
// who waits to be admitted (elastic), and who joined generation K ("join/K").
constexpr const char* kClaimedRoster = "claimed";
constexpr const char* kDescribedRoster = "described";
constexpr const char* kByeRoster = "bye";
constexpr const char* kWaitingRoster = "waiting";
// "gend/K": how generation K ended (records.h: a failure record, or its success record), set
// once (compare-and-set); "done/K" counts the members whose processes all exited 0.
constexpr const char* kGenerationEnd = "gend";

std::string gen_key(const char* family, int generation) {
  return std::string(family) + "/" + std::to_string(generation);
}

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

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

std::string list_nodes(const std::vector<int>& nodes) {
  return node_list(std::set<int>(nodes.begin(), nodes.end()));
}

// The control store's per-node keys over one connection: a view per family, each key being the
// node's number ("desc/3" in the store).
struct NodeKeys {
  explicit NodeKeys(Store& store)
      : claims(store, "claim"),
        descriptions(store, "desc"),
        endpoints(store, "endpoints"),
        heartbeats(store, "hb") {}

  static std::string of(int node) { return std::to_string(node); }
  static std::vector<std::string> of(const std::vector<int>& nodes) {
    std::vector<std::string> keys;
    keys.reserve(nodes.size());
    for (int n : nodes) keys.push_back(of(n));
    return keys;
  }

  PrefixStore claims;        // how many launchers claimed the node (more than 1: a duplicate)
  PrefixStore descriptions;  // the node's JobDescription record
  PrefixStore endpoints;     // the node's endpoints record
  PrefixStore heartbeats;    // a counter the node's watcher adds to (set to 0 at the claim)
};

// A list of nodes that only grows, read incrementally. An entrant takes a ticket from the counter
// "<name>/n" and writes its node number under "<name>/<ticket>"; a reader keeps a cursor and
// fetches only the entries it has not seen: one add, and one multi_get when there are new ones.
// Following who arrived costs node 0 one or two requests per look and O(nodes) requests in all,
// where asking each node's own key on every look cost O(nodes) per look (O(nodes^2) per
// rendezvous, generation and finish).
class Roster {
 public:
  explicit Roster(std::string name) : name_(std::move(name)) {}

  static void enter(Store& store, const std::string& name, int node) {
    const std::int64_t ticket = store.add(name + "/n", 1);
    store.set(name + "/" + std::to_string(ticket), bytes(std::to_string(node)));
  }

  // The nodes that entered since the last call, each once, in order of arrival. Throws StoreError
  // for an entry still unwritten after `timeout` (its entrant died between its two requests) or
  // one that is not a node number.
  std::vector<int> read_new(Store& store, milliseconds timeout) {
    const std::int64_t count = store.add(name_ + "/n", 0);
    std::vector<std::string> keys;
    for (std::int64_t t = seen_ + 1; t <= count; ++t) keys.push_back(entry_key(t));
    if (keys.empty()) return {};
    const std::vector<Bytes> values = store.multi_get(keys, timeout);
    std::vector<int> nodes;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::string value = text(values[i]);
      int node = -1;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), node);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size() || node < 0) {
        throw StoreError("key '" + keys[i] + "' of the control store holds '" +
                         value.substr(0, 32) + "', not a node number");
      }
      if (all_.insert(node).second) nodes.push_back(node);
    }
    seen_ = count;
    return nodes;
  }

  const std::set<int>& all() const { return all_; }
  // Where the next entry will be written: a wait on it ends at the next arrival.
  std::string next_key() const { return entry_key(seen_ + 1); }

 private:
  std::string entry_key(std::int64_t ticket) const { return name_ + "/" + std::to_string(ticket); }

  std::string name_;
  std::int64_t seen_ = 0;
  std::set<int> all_;
};

// Node 0: the nodes that claimed a node rank and neither said goodbye nor were declared lost.
std::vector<int> pending_goodbyes(Store& store, Roster& claimed, Roster& goodbyes,
                                  const std::set<int>& lost, milliseconds timeout) {
  claimed.read_new(store, timeout);
  goodbyes.read_new(store, timeout);
  std::vector<int> pending;
  for (int n : claimed.all()) {
    if (n != 0 && !lost.count(n) && !goodbyes.all().count(n)) pending.push_back(n);
  }
  return pending;
}

}  // namespace

// --- ControlChannel -----------------------------------------------------------------------------

TcpStoreOptions ControlChannel::store_options(std::chrono::milliseconds connect_timeout) const {
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

void ControlChannel::assign_node_rank() {
  TcpStoreOptions store = store_options(options_.rendezvous_timeout);
  try {
    server_ = std::make_unique<TcpStoreServer>(store);
    options_.node_rank = 0;
    spdlog::info("node rank 0: this launcher hosts the control store on {} (first at that address)",
                 options_.endpoint.str());
    return;
  } catch (const StoreError& e) {
    // Not this machine's address, or another launcher here was first.
    spdlog::debug("not hosting the control store ({}): asking node 0 for a node rank", e.what());
  }
  std::int64_t claimed = 0;
  try {
    TcpStore client(store);
    claimed = client.add(kAutoRankKey, 1);
  } catch (const StoreUnreachable& e) {
    throw no_node_zero("this node (no node rank given)", where(), options_.rendezvous_timeout, e);
  } catch (const StoreError& e) {
    throw ControlError("no node rank given: cannot get one from node 0's control store at " +
                       where() + ": " + e.what());
  }
  if (claimed >= options_.nnodes) {
    throw ControlError("no node rank given, and node 0's control store at " + where() +
                       " has handed out all " + std::to_string(options_.nnodes - 1) +
                       " ranks after its own: more launchers than --nnodes=" +
                       std::to_string(options_.nnodes) + " joined");
  }
  options_.node_rank = static_cast<int>(claimed);
  spdlog::info("node rank {} assigned by node 0's control store at {}", options_.node_rank,
               options_.endpoint.str());
}

ControlChannel::ControlChannel(const ControlOptions& options) : options_(options) {
  if (options_.node_rank == kAutoNodeRank) assign_node_rank();
  const TcpStoreOptions store = store_options(options_.rendezvous_timeout);
  try {
    if (options_.node_rank == 0 && !server_) {
      server_ = std::make_unique<TcpStoreServer>(store);
      spdlog::info("node 0: hosting the control store of {} node(s) on {}", options.nnodes,
                   options.endpoint.str());
    }
    store_ = std::make_unique<TcpStore>(store);
  } catch (const StoreUnreachable& e) {
    if (options_.node_rank != 0) {
      throw no_node_zero("node " + std::to_string(options_.node_rank), where(),
                         options_.rendezvous_timeout, e);
    }
    throw ControlError("node 0: control store at " + where() + ": " + e.what());
  } catch (const StoreError& e) {
    throw ControlError("node " + std::to_string(options_.node_rank) + ": control store at " +
                       where() + ": " + e.what());
  }
}

ControlChannel::~ControlChannel() { stop_watcher(); }

void ControlChannel::stop_watcher() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void ControlChannel::pause(milliseconds period) {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  stop_cv_.wait_for(lock, period, [this] { return stopping_.load(); });
}

std::string ControlChannel::where() const {
  return options_.endpoint.str() + " (node 0's launcher)";
}

ControlChannel::Agreement ControlChannel::rendezvous(const JobDescription& mine,
                                                     const std::vector<env::Endpoint>& local,
                                                     const std::string& proposed_job_id,
                                                     const std::string& proposed_job_secret) {
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
  auto missing_at_deadline = [&](const std::vector<int>& pending) {
    return ControlError("node(s) " + list_nodes(pending) + " of " +
                        std::to_string(options_.nnodes) + " did not join the control store at " +
                        where() + " within the rendezvous deadline (" +
                        seconds_text(options_.rendezvous_timeout) +
                        " s, --rendezvous_timeout); is launch running there with the same "
                        "node list, ports and DDL_JOB_SECRET?");
  };
  description_ = mine;
  try {
    if (keys.claims.add(NodeKeys::of(me), 1) > 1) throw duplicate();
    // The heartbeat counter exists from the claim on, so node 0 reads every claimed node's in
    // one request (watch_peers).
    keys.heartbeats.add(NodeKeys::of(me), 0);
    Roster::enter(*store_, kClaimedRoster, me);
    // Before node 0's description: whoever has read that can read these.
    if (me == 0) store_->set(kJobIdKey, bytes(encode_job_id(proposed_job_id)));
    if (me == 0 && !proposed_job_secret.empty()) {
      store_->set(kJobSecretKey, bytes(encode_job_secret(proposed_job_secret)));
    }
    keys.endpoints.set(NodeKeys::of(me), bytes(encode_endpoints(local)));
    keys.descriptions.set(NodeKeys::of(me), bytes(encode_description(mine)));
    Roster::enter(*store_, kDescribedRoster, me);

    // Every node compares itself with node 0 only (agreeing with node 0 is agreeing with every
    // node); node 0 compares each node as it arrives, here with a fixed count (every node must
    // come), in decide_members when elastic (nobody knows which nodes will come). A mismatch
    // thus fails on both sides of it, and each node reads one description, node 0 n - 1.
    auto compare = [&](int node, const Bytes& value) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        joined_.insert(node);
        checked_.insert(node);
      }
      const JobDescription theirs =
          decode_description(text(value), source(keys.descriptions, node));
      if (auto why = description_mismatch(mine, me, theirs, node)) throw ControlError(*why);
    };
    if (me != 0) {
      while (!keys.descriptions.check({NodeKeys::of(0)})) {
        if (keys.claims.add(NodeKeys::of(me), 0) > 1) throw duplicate();
        const auto now = Clock::now();
        if (now >= deadline) throw missing_at_deadline({0});
        keys.descriptions.wait_for(
            {NodeKeys::of(0)}, std::min(kControlPollInterval,
                                        std::chrono::duration_cast<milliseconds>(deadline - now)));
      }
      compare(0, keys.descriptions.get(NodeKeys::of(0), milliseconds(0)));
    } else if (!elastic()) {
      std::set<int> pending;
      for (int n = 1; n < options_.nnodes; ++n) pending.insert(n);
      Roster described(kDescribedRoster);
      while (true) {
        std::vector<int> arrived;
        for (int n : described.read_new(*store_, options_.heartbeat_timeout)) {
          if (pending.count(n)) arrived.push_back(n);
        }
        if (!arrived.empty()) {
          const std::vector<Bytes> values =
              keys.descriptions.multi_get(NodeKeys::of(arrived), options_.heartbeat_timeout);
          for (std::size_t i = 0; i < arrived.size(); ++i) {
            compare(arrived[i], values[i]);
            pending.erase(arrived[i]);
          }
        }
        if (pending.empty()) break;
        if (keys.claims.add(NodeKeys::of(me), 0) > 1) throw duplicate();
        const auto now = Clock::now();
        if (now >= deadline) throw missing_at_deadline({pending.begin(), pending.end()});
        // Woken early by the next node's arrival.
        store_->wait_for({described.next_key()},
                         std::min(kControlPollInterval,
                                  std::chrono::duration_cast<milliseconds>(deadline - now)));
      }
    }

    Agreement agreement;
    agreement.job_id = me == 0
                           ? proposed_job_id
                           : decode_job_id(text(store_->get(kJobIdKey, options_.heartbeat_timeout)),
                                           "key '" + std::string(kJobIdKey) +
                                               "' of the control store at " + where());
    if (me == 0) {
      agreement.job_secret = proposed_job_secret;
    } else if (store_->check({kJobSecretKey})) {
      agreement.job_secret = decode_job_secret(
          text(store_->get(kJobSecretKey, milliseconds(0))),
          "key '" + std::string(kJobSecretKey) + "' of the control store at " + where());
    }
    return agreement;
  } catch (const StoreError& e) {
    const ControlError error("node " + std::to_string(me) + ": control store at " + where() + ": " +
                             e.what());
    fail_rendezvous(error);
    throw error;
  } catch (const ControlError& e) {
    fail_rendezvous(e);
    throw;
  }
}

void ControlChannel::fail_rendezvous(const ControlError& error) {
  // The nodes that agreed with node 0 wait for it in join_generation: the failure tells them
  // at once why the job is not formed, instead of at their own deadline.
  if (options_.node_rank != 0) return;
  try {
    publish_failure(*store_, FailureRecord{0, std::nullopt, kExitUsage, error.what()});
  } catch (const StoreError& e) {
    spdlog::debug("could not tell the other nodes that the rendezvous failed: {}", e.what());
  }
}

void ControlChannel::check_not_over(Store& store, const std::string& while_doing) {
  if (auto failure = read_failure(store)) {
    throw ControlError("the job failed " + while_doing + ": " + failure->str());
  }
  if (options_.node_rank != 0 && store.check({kOverKey})) {
    throw ControlError("the job ended " + while_doing + " (node 0 finished it)");
  }
}

std::vector<int> ControlChannel::decide_members(int generation, Clock::time_point deadline) {
  NodeKeys keys(*store_);
  const std::string what = "generation " + std::to_string(generation);
  std::vector<int> previous;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previous = current_members_;
  }
  Roster arrivals(gen_key("join", generation));
  Roster waiting(kWaitingRoster);
  std::optional<Clock::time_point> last_call;
  while (true) {
    check_not_over(*store_, "while node 0 formed " + what);
    std::set<int> lost;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      lost = lost_nodes_;
    }
    // Elastic: a node is compared with node 0 when it first joins a generation (its
    // description was published before it joined).
    std::vector<int> unchecked;
    for (int n : arrivals.read_new(*store_, options_.heartbeat_timeout)) {
      if (n >= options_.nnodes) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      if (elastic() && n != 0 && !checked_.count(n)) unchecked.push_back(n);
    }
    if (!unchecked.empty()) {
      const std::vector<Bytes> values =
          keys.descriptions.multi_get(NodeKeys::of(unchecked), options_.heartbeat_timeout);
      for (std::size_t i = 0; i < unchecked.size(); ++i) {
        const JobDescription theirs = decode_description(
            text(values[i]), "key '" + keys.descriptions.full_key(NodeKeys::of(unchecked[i])) +
                                 "' of the control store");
        if (auto why = description_mismatch(description_, 0, theirs, unchecked[i])) {
          throw ControlError(*why);
        }
        std::lock_guard<std::mutex> lock(mutex_);
        checked_.insert(unchecked[i]);
      }
    }
    GenerationCandidates candidates;
    candidates.generation = generation;
    for (int n : arrivals.all()) {
      if (n < options_.nnodes && !lost.count(n)) candidates.joined.insert(n);
    }
    if (!elastic() || generation == 0) {
      for (int n = 0; n < options_.nnodes; ++n) candidates.expected.insert(n);
    } else {
      candidates.expected.insert(previous.begin(), previous.end());
      waiting.read_new(*store_, options_.heartbeat_timeout);
      for (int n : waiting.all()) {
        if (n < options_.nnodes) candidates.expected.insert(n);
      }
    }
    candidates.lost = lost;
    if (std::optional<std::vector<int>> members =
            ready_members(options_, candidates, Clock::now(), deadline, last_call,
                          "at the control store at " + where(), "")) {
      return *members;
    }
    // Woken early by the next node's arrival.
    store_->wait_for({arrivals.next_key()}, kControlPollInterval);
  }
}

Membership ControlChannel::join_generation(Generation requested) {
  const int me = options_.node_rank;
  NodeKeys keys(*store_);
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  int generation = requested.index();
  try {
    Roster::enter(*store_, gen_key("join", generation), me);
    Members members;
    if (me == 0) {
      members.generation = generation;
      members.nodes = decide_members(generation, deadline);
      // Node 0 gathers the members' endpoints (one request) into the members record, so each
      // other node reads its generation in one request instead of one per member.
      const std::vector<Bytes> values =
          keys.endpoints.multi_get(NodeKeys::of(members.nodes), options_.heartbeat_timeout);
      for (std::size_t i = 0; i < values.size(); ++i) {
        members.endpoints.push_back(decode_endpoints(
            text(values[i]), "key '" + keys.endpoints.full_key(NodeKeys::of(members.nodes[i])) +
                                 "' of the control store"));
      }
      store_->set(gen_key("members", generation), bytes(encode_members(members)));
      store_->set(kCurrentKey, bytes(std::to_string(generation)));
    } else {
      bool waiting = false;
      while (true) {
        const std::string key = gen_key("members", generation);
        const std::string what = "generation " + std::to_string(generation);
        if (store_->check({key})) {
          Members m = decode_members(text(store_->get(key, milliseconds(0))),
                                     "key '" + key + "' of the control store at " + where());
          if (std::find(m.nodes.begin(), m.nodes.end(), me) != m.nodes.end()) {
            members = std::move(m);
            break;
          }
          if (!elastic() || !requested.first()) {
            throw ControlError("node 0 formed " + what + " without this node (node " +
                               std::to_string(me) + "): it was taken for lost");
          }
          // Late: wait to be admitted into the next generation.
          if (!waiting) {
            spdlog::info(
                "node {}: the job is running without this node ({}); waiting to be "
                "admitted at its next restart",
                me, what);
            Roster::enter(*store_, kWaitingRoster, me);
            waiting = true;
          }
          ++generation;
          Roster::enter(*store_, gen_key("join", generation), me);
          continue;
        }
        check_not_over(*store_, "before node " + std::to_string(me) + " could join " + what);
        if (Clock::now() >= deadline) {
          throw ControlError("node 0 did not form " + what + " within the rendezvous deadline (" +
                             seconds_text(options_.rendezvous_timeout) +
                             " s, --rendezvous_timeout)");
        }
        store_->wait_for({key}, kControlPollInterval);
      }
    }
    Membership m = membership_of(members, me, options_.equal_node_sizes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_generation_ = generation;
      current_members_ = members.nodes;
    }
    return m;
  } catch (const StoreError& e) {
    throw ControlError("node " + std::to_string(me) + ": control store at " + where() + ": " +
                       e.what());
  }
}

void ControlChannel::report_generation_failure(Generation generation, const FailureNotice& notice) {
  const FailureRecord record{options_.node_rank, notice.rank, notice.exit_code, notice.what};
  try {
    const Bytes mine = bytes(encode_failure(record));
    const std::optional<Bytes> now =
        store_->compare_set(gen_key(kGenerationEnd, generation.index()), std::nullopt, mine);
    if (now && *now == mine) {
      spdlog::info("told the other nodes: generation {} failed: {}", generation.index(),
                   record.str());
    }
  } catch (const StoreError& e) {
    spdlog::error("could not tell the other nodes that generation {} failed ({}): {}",
                  generation.index(), record.str(), e.what());
  }
}

void ControlChannel::report_generation_success(Generation generation) {
  const int k = generation.index();
  std::size_t members = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_generation_ == k) members = current_members_.size();
  }
  try {
    // The last member to finish says so under "gend/K", which every watcher waits on: success
    // and failure reach the others through the one key they watch.
    if (store_->add(gen_key("done", k), 1) >= static_cast<std::int64_t>(members) && members > 0) {
      store_->compare_set(gen_key(kGenerationEnd, k), std::nullopt,
                          bytes(encode_generation_success(k)));
    }
  } catch (const StoreError& e) {
    spdlog::error(
        "could not tell the other nodes that this node's part of generation {} "
        "succeeded: {}",
        generation.index(), e.what());
  }
}

// What the watch thread remembers between polls.
struct ControlChannel::WatchState {
  struct Beat {
    std::int64_t value = -1;
    Clock::time_point changed;
  };
  explicit WatchState(Store& store) : keys(store) {}

  NodeKeys keys;  // on the watch connection
  Clock::time_point next_beat = Clock::now();
  Clock::time_point next_peer_check = Clock::now();  // node 0
  bool delivered = false;                            // the job's failure ("failed") was passed on
  std::map<int, Beat> beats;                         // node 0: the other nodes' heartbeat counters
  std::set<int> gone;                                // said goodbye or declared lost
  std::set<int> ended;                               // generations whose end was passed on
  std::set<int> admissions;        // node 0: generations failed to admit a waiting node
  Roster claimed{kClaimedRoster};  // node 0: whom to watch
  Roster goodbyes{kByeRoster};     // node 0: who is done
  Roster waiting{kWaitingRoster};  // node 0, elastic: who asks to be admitted
};

void ControlChannel::admit_waiting(Store& store, WatchState& state) {
  int generation;
  std::vector<int> members;
  std::set<int> lost;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = current_generation_;
    members = current_members_;
    lost = lost_nodes_;
  }
  if (generation < 0 || generation >= options_.max_restarts || state.admissions.count(generation)) {
    return;
  }
  state.waiting.read_new(store, options_.heartbeat_timeout);
  for (int n : state.waiting.all()) {
    if (n >= options_.nnodes || lost.count(n) ||
        std::find(members.begin(), members.end(), n) != members.end()) {
      continue;
    }
    state.admissions.insert(generation);
    const FailureRecord record{
        0, std::nullopt, 0,
        "node " + std::to_string(n) + " asks to join the job: re-forming it with the new node"};
    spdlog::info("{}", record.what);
    store.compare_set(gen_key(kGenerationEnd, generation), std::nullopt,
                      bytes(encode_failure(record)));
    return;
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
    return decode_failure(
        value, "key '" + std::string(kFailedKey) + "' of the control store at " + where());
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
  WatchState state(*watch_store_);
  while (!stopping_) {
    try {
      const auto now = Clock::now();
      if (now >= state.next_beat) {
        state.keys.heartbeats.add(NodeKeys::of(options_.node_rank), 1);
        state.next_beat = now + options_.heartbeat_interval;
      }
      const int generation = watch_generation(state, *stop);
      watch_job_failure(state, *stop);
      if (options_.node_rank != 0) continue;
      if (elastic()) admit_waiting(*watch_store_, state);
      if (Clock::now() >= state.next_peer_check) {
        watch_peers(state, generation);
        state.next_peer_check = Clock::now() + options_.heartbeat_interval;
      }
    } catch (const StoreError& e) {
      if (stopping_) return;
      const FailureRecord lost{
          0, std::nullopt, 1,
          "lost the job: lost the control connection to " + where() + ": " + e.what()};
      spdlog::error("{}", lost.what);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!seen_failure_) seen_failure_ = lost;
      }
      if (!state.delivered) stop->request(lost.exit_code, lost.what);
      return;
    }
  }
}

int ControlChannel::watch_generation(WatchState& state, ExternalStop& stop) {
  const int me = options_.node_rank;
  int generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = current_generation_;
  }
  // One request per period: waits until the period passed or the running generation ended
  // (failed somewhere, or succeeded everywhere).
  const std::string end = gen_key(kGenerationEnd, generation);
  if (generation < 0 || state.ended.count(generation)) {
    pause(options_.heartbeat_interval);
    return generation;
  }
  if (!watch_store_->wait_for({end}, options_.heartbeat_interval)) return generation;
  state.ended.insert(generation);
  const std::string value = text(watch_store_->get(end, milliseconds(0)));
  std::optional<FailureRecord> failure;
  try {
    failure = decode_generation_end(value, generation,
                                    "key '" + end + "' of the control store at " + where());
  } catch (const RecordError& e) {
    failure = FailureRecord{-1, std::nullopt, 1, e.what()};
  }
  if (!failure) {
    stop.generation_succeeded(Generation(generation));
    return generation;
  }
  const FailureRecord& record = *failure;
  if (record.node != me) {
    std::lock_guard<std::mutex> lock(mutex_);
    peer_generation_failure_ = record;
  }
  if (record.node != me || record.exit_code == 0) {
    stop.generation_failed(Generation(generation), record.exit_code,
                           "generation " + std::to_string(generation) + " failed on node " +
                               std::to_string(record.node) + ": " + record.what);
  }
  return generation;
}

void ControlChannel::watch_job_failure(WatchState& state, ExternalStop& stop) {
  if (state.delivered || !watch_store_->check({kFailedKey})) return;
  const auto record = read_failure(*watch_store_);
  state.delivered = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seen_failure_ = record;
  }
  if (record && record->node != options_.node_rank) {
    stop.request(record->exit_code,
                 "node " + std::to_string(record->node) + " failed first (" + record->str() + ")");
  }
}

void ControlChannel::watch_peers(WatchState& state, int generation) {
  // One look costs O(1) requests whatever the node count: the rosters' new entries and every
  // watched node's heartbeat counter in one multi_get.
  state.claimed.read_new(*watch_store_, options_.heartbeat_timeout);
  for (int n : state.goodbyes.read_new(*watch_store_, options_.heartbeat_timeout)) {
    state.gone.insert(n);
  }
  std::vector<int> watched;
  for (int n : state.claimed.all()) {
    if (n != 0 && !state.gone.count(n)) watched.push_back(n);
  }
  if (watched.empty()) return;
  const std::vector<Bytes> values =
      state.keys.heartbeats.multi_get(NodeKeys::of(watched), options_.heartbeat_timeout);
  const auto now = Clock::now();
  for (std::size_t i = 0; i < watched.size(); ++i) {
    const int n = watched[i];
    const std::string seen = text(values[i]);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(seen.data(), seen.data() + seen.size(), value);
    if (seen.empty() || ec != std::errc() || end != seen.data() + seen.size()) {
      throw StoreError("key '" + state.keys.heartbeats.full_key(NodeKeys::of(n)) +
                       "' of the control store holds '" + seen.substr(0, 32) +
                       "', not a heartbeat count");
    }
    if (value == 0) continue;  // not watching yet (still joining): nothing to miss
    WatchState::Beat& beat = state.beats[n];
    if (value != beat.value) {
      beat.value = value;
      beat.changed = now;
      continue;
    }
    if (now - beat.changed < options_.heartbeat_timeout) continue;
    state.gone.insert(n);
    declare_lost(n, generation);
  }
}

void ControlChannel::declare_lost(int node, int generation) {
  std::vector<int> current;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lost_nodes_.insert(node);
    current = current_members_;
  }
  const FailureRecord lost{node, std::nullopt, 1,
                           "node " + std::to_string(node) +
                               "'s launcher stopped answering (no heartbeat for " +
                               seconds_text(options_.heartbeat_timeout) + " s)"};
  spdlog::error("{}", lost.what);
  const bool member = std::find(current.begin(), current.end(), node) != current.end();
  if (elastic()) {
    // The job goes on without it: the running generation fails and the next one is formed from
    // the nodes still there.
    if (member) {
      watch_store_->compare_set(gen_key(kGenerationEnd, generation), std::nullopt,
                                bytes(encode_failure(lost)));
    }
  } else {
    publish_failure(*watch_store_, lost);  // seen by every watcher, this one included
  }
}

void ControlChannel::report_failure(const FailureNotice& notice) {
  FailureRecord record{options_.node_rank, notice.rank, notice.exit_code, notice.what};
  if (notice.from_peer) {
    // Ended by another node's failure: pass on that node's own record (whichever node's report
    // lands first, the job's failure names where it happened).
    std::lock_guard<std::mutex> lock(mutex_);
    if (peer_generation_failure_) record = *peer_generation_failure_;
  }
  try {
    if (publish_failure(*store_, record)) {
      spdlog::info("told the other nodes: {}", record.str());
    }
  } catch (const StoreError& e) {
    spdlog::error("could not tell the other nodes that {}: {}", record.str(), e.what());
  }
}

void ControlChannel::say_goodbye() {
  if (said_goodbye_) return;
  Roster::enter(*store_, kByeRoster, options_.node_rank);
  said_goodbye_ = true;
}

std::set<int> ControlChannel::lost_nodes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_nodes_;
}

std::optional<FailureRecord> ControlChannel::finish() {
  const int me = options_.node_rank;
  std::optional<FailureRecord> failure;
  if (me != 0) {
    // The job's failure is read before the goodbye: node 0 may end (and its store with it) as
    // soon as it has every node's goodbye.
    failure = known_failure();
    try {
      say_goodbye();
    } catch (const StoreError& e) {
      spdlog::debug("could not say goodbye to node 0: {}", e.what());
    }
  } else {
    try {
      store_->set(kOverKey, bytes("1"));  // nodes still waiting to be admitted give up
    } catch (const StoreError& e) {
      spdlog::debug("control store: {}", e.what());
    }
    std::optional<Clock::time_point> linger_deadline;
    Roster claimed(kClaimedRoster);
    Roster goodbyes(kByeRoster);
    while (true) {
      try {
        const std::vector<int> pending =
            pending_goodbyes(*store_, claimed, goodbyes, lost_nodes(), options_.heartbeat_timeout);
        if (pending.empty()) break;
        if (!linger_deadline && (store_->check({kFailedKey}) || !watcher_.joinable())) {
          linger_deadline = Clock::now() + options_.linger_timeout;
        }
        if (linger_deadline && Clock::now() >= *linger_deadline) {
          spdlog::warn("node(s) {} did not finish within {} s after the failure; leaving",
                       list_nodes(pending), seconds_text(options_.linger_timeout));
          break;
        }
        store_->wait_for({goodbyes.next_key()}, kControlPollInterval);
      } catch (const StoreError& e) {
        spdlog::error("control store: {}", e.what());
        break;
      }
    }
  }
  stop_watcher();
  return failure ? failure : known_failure();
}

std::optional<FailureRecord> ControlChannel::known_failure() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (seen_failure_) return seen_failure_;
  }
  try {
    return read_failure(*store_);
  } catch (const StoreError& e) {
    spdlog::debug("could not read the job's failure from {}: {}", where(), e.what());
    return std::nullopt;
  }
}

void ControlChannel::abandon() {
  const int me = options_.node_rank;
  stop_watcher();
  try {
    if (me != 0) {
      say_goodbye();
      return;
    }
    const auto deadline = Clock::now() + options_.linger_timeout;
    Roster claimed(kClaimedRoster);
    Roster goodbyes(kByeRoster);
    while (Clock::now() < deadline) {
      if (pending_goodbyes(*store_, claimed, goodbyes, lost_nodes(), options_.heartbeat_timeout)
              .empty()) {
        return;
      }
      store_->wait_for({goodbyes.next_key()}, kControlPollInterval);
    }
  } catch (const StoreError& e) {
    spdlog::debug("control store while giving up: {}", e.what());
  }
}

}  // namespace ddl::launcher
