#include "launcher/coord/etcd_control.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "launcher/coord/etcd_client.h"
#include "net/auth.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using etcd::Compare;
using etcd::KeyValue;
using etcd::Op;

constexpr std::size_t kSealHex = 2 * net::kDigestBytes;

std::string gen(const std::string& family, int generation) {
  return family + "/" + std::to_string(generation);
}

// The node number at the end of `key` (after `prefix`); nullopt for anything else.
std::optional<int> node_of(const std::string& key, const std::string& prefix) {
  if (key.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const char* begin = key.data() + prefix.size();
  const char* end = key.data() + key.size();
  int node = -1;
  const auto [ptr, ec] = std::from_chars(begin, end, node);
  if (begin == end || ec != std::errc() || ptr != end || node < 0) return std::nullopt;
  return node;
}

std::set<int> nodes_in(const std::vector<KeyValue>& kvs, const std::string& prefix) {
  std::set<int> nodes;
  for (const KeyValue& kv : kvs) {
    if (auto n = node_of(kv.key, prefix)) nodes.insert(*n);
  }
  return nodes;
}

std::chrono::seconds lease_ttl(milliseconds heartbeat_timeout) {
  // etcd's leases count whole seconds (and it raises a TTL below its minimum, about 2 s).
  return std::chrono::seconds(std::max<std::int64_t>(2, (heartbeat_timeout.count() + 999) / 1000));
}

milliseconds request_timeout(milliseconds heartbeat_timeout) {
  return std::clamp(heartbeat_timeout / 3, milliseconds(300), milliseconds(2'000));
}

}  // namespace

// One read of the run's keys, at one revision.
struct EtcdControl::View {
  std::int64_t revision = 0;
  std::optional<KeyValue> failed;
  bool over = false;
  std::set<int> claimed;  // alive: holding a node rank on a lease that has not expired
  std::set<int> goodbyes;
  std::set<int> waiting;
  // For the generation asked about:
  std::set<int> joined;
  std::optional<KeyValue> members;
  std::optional<KeyValue> end;
  std::set<int> done;
};

EtcdControl::EtcdControl(const ControlOptions& options) : options_(options) {
  if (options_.munge) {
    throw ControlError(
        "the etcd control plane cannot admit launchers with munge credentials: set the same " +
        std::string(env::kJobSecret) + " on every node");
  }
  job_prefix_ = "/ddl/" + options_.job_id + "/";
  etcd::ClientOptions client_options;
  client_options.endpoints = options_.etcd_endpoints;
  client_options.request_timeout = request_timeout(options_.heartbeat_timeout);
  client_ = std::make_unique<etcd::Client>(client_options);

  // etcd may still be starting: try until the rendezvous deadline, then say which endpoints.
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  while (true) {
    try {
      lease_ = client_->grant_lease(lease_ttl(options_.heartbeat_timeout));
      break;
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
  last_kept_ms_ = std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
  try {
    join_run(*client_);
    claim_rank(*client_);
    keep_client_ = client_->clone();
  } catch (const etcd::EtcdError& e) {
    try {
      client_->revoke_lease(lease_);
    } catch (const etcd::EtcdError&) {
    }
    throw ControlError("node " + std::to_string(options_.node_rank) + ": etcd at " +
                       client_->endpoints_text() + ": " + e.what());
  }
  keeper_ = std::thread([this] { keep_loop(); });
}

void EtcdControl::keep_loop() {
  while (!keeper_stopping_) {
    try {
      if (keep_client_->keep_alive(lease_) <= 0) {
        lease_expired_ = true;
        return;
      }
      last_kept_ms_ =
          std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
    } catch (const etcd::EtcdError& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      last_keep_error_ = e.what();
    }
    std::unique_lock<std::mutex> lock(stop_mutex_);
    stop_cv_.wait_for(lock, options_.heartbeat_interval,
                      [this] { return keeper_stopping_.load(); });
  }
}

void EtcdControl::stop_keeper() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    keeper_stopping_ = true;
  }
  stop_cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
}

std::optional<std::string> EtcdControl::lease_trouble() const {
  if (lease_expired_) {
    return "this node's etcd lease expired (no keep-alive reached " + client_->endpoints_text() +
           " within " + seconds_text(options_.heartbeat_timeout) +
           " s): the other nodes take it for lost and go on without it";
  }
  const milliseconds silent =
      std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()) -
      milliseconds(last_kept_ms_.load());
  if (silent < options_.heartbeat_timeout) return std::nullopt;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reason = last_keep_error_;
  }
  return "etcd stopped answering at " + client_->endpoints_text() + " for " +
         seconds_text(silent) + " s (the heartbeat timeout is " +
         seconds_text(options_.heartbeat_timeout) +
         " s), so the other nodes take this node for lost" +
         (reason.empty() ? std::string() : ": " + reason);
}

EtcdControl::~EtcdControl() {
  stop_watcher();
  stop_keeper();
  if (!left_ && !lost_) {
    try {
      leave();
    } catch (const std::exception& e) {
      spdlog::debug("leaving the etcd control plane: {}", e.what());
    }
  }
}

std::string EtcdControl::where() const {
  return "etcd at " + client_->endpoints_text() + " (keys " + (run_.empty() ? job_prefix_ : run_) +
         ")";
}

std::string EtcdControl::seal(const std::string& key, const std::string& value) const {
  if (options_.secret.empty()) return value;
  return net::to_hex(net::hmac_sha256(options_.secret, key + '\0' + value)) + ":" + value;
}

std::string EtcdControl::open(const KeyValue& kv) const {
  if (options_.secret.empty()) return kv.value;
  if (kv.value.size() > kSealHex && kv.value[kSealHex] == ':') {
    const std::string value = kv.value.substr(kSealHex + 1);
    if (kv.value.compare(0, kSealHex, net::to_hex(net::hmac_sha256(
                                          options_.secret, kv.key + '\0' + value))) == 0) {
      return value;
    }
  }
  throw ControlError("key '" + kv.key + "' in " + where() + " is not signed with this job's " +
                     env::kJobSecret + " (another job's launcher, or a stranger, wrote '" +
                     kv.value.substr(0, 24) + "'); is " + env::kJobSecret +
                     " the same on every node?");
}

void EtcdControl::join_run(etcd::Client& client) {
  const std::string pointer = job_prefix_ + "run";
  const std::string present = "present/" + std::to_string(lease_);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::optional<KeyValue> current = client.get(pointer);
    if (!current) {
      const std::string token = net::to_hex(net::sha256(net::random_bytes(16))).substr(0, 16);
      const std::string run = job_prefix_ + token + "/";
      const etcd::TxnResult r = client.txn(
          {Compare::absent(pointer)},
          {Op::put(pointer, seal(pointer, token)), Op::put(run + present, "", lease_)});
      if (r.succeeded) {
        run_ = run;
        spdlog::debug("etcd control plane: started run {}", run_);
        return;
      }
      continue;  // another launcher was first: join its run
    }
    std::string token;
    try {
      token = open(*current);
    } catch (const ControlError& e) {
      // Not this job's (written without its secret): whoever could write it could as well have
      // deleted it, so it is replaced rather than trusted.
      spdlog::warn("{}; replacing it", e.what());
      client.txn({Compare::mod_revision_is(pointer, current->mod_revision)}, {Op::erase(pointer)});
      continue;
    }
    const std::string run = job_prefix_ + token + "/";
    // Join the run it names, and see who else is in it, in one step.
    const etcd::TxnResult r =
        client.txn({Compare::mod_revision_is(pointer, current->mod_revision)},
                   {Op::put(run + present, "", lease_), Op::get_prefix(run + "present/")});
    if (!r.succeeded) continue;
    if (r.ranges.empty() || r.ranges[0].size() > 1) {
      run_ = run;
      return;
    }
    // Nobody else is in it: every launcher of that run is gone (their leases expired). Replace it
    // so that its failure or its end does not become this job's.
    spdlog::info("etcd control plane: the keys under {} are left from an earlier run of job '{}' "
                 "whose launchers are all gone; starting a new run",
                 run, options_.job_id);
    client.txn({Compare::mod_revision_is(pointer, current->mod_revision)},
               {Op::erase_prefix(run), Op::erase(pointer)});
  }
  throw ControlError("could not join or start the run of job '" + options_.job_id + "' in " +
                     where() + ": it kept changing (100 attempts)");
}

void EtcdControl::claim_rank(etcd::Client& client) {
  const std::string lease = std::to_string(lease_);
  if (options_.node_rank != kAutoNodeRank) {
    const std::string claim = key("claim/" + std::to_string(options_.node_rank));
    const etcd::TxnResult r =
        client.txn({Compare::absent(claim)}, {Op::put(claim, seal(claim, lease), lease_)});
    if (!r.succeeded) {
      throw ControlError("another launcher has already joined the job as node " +
                         std::to_string(options_.node_rank) + " (" + where() +
                         "); check --node_rank");
    }
    return;
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::set<int> taken = nodes_in(client.get_prefix(key("claim/")).kvs, key("claim/"));
    int free = 0;
    while (taken.count(free)) ++free;
    if (free >= options_.nnodes) {
      throw ControlError("no node rank given, and all " + std::to_string(options_.nnodes) +
                         " node ranks of the job are taken in " + where() +
                         ": more launchers than --nnodes=" + std::to_string(options_.nnodes) +
                         " joined");
    }
    const std::string claim = key("claim/" + std::to_string(free));
    if (client.txn({Compare::absent(claim)}, {Op::put(claim, seal(claim, lease), lease_)})
            .succeeded) {
      options_.node_rank = free;
      spdlog::info("node rank {} assigned through {}", free, where());
      return;
    }
  }
  throw ControlError("could not claim a node rank in " + where() + " (100 attempts)");
}

EtcdControl::View EtcdControl::read_view(etcd::Client& client, int generation) {
  std::vector<Op> ops = {Op::get(key("failed")),        Op::get(key("over")),
                         Op::get_prefix(key("claim/")), Op::get_prefix(key("bye/")),
                         Op::get_prefix(key("waiting/"))};
  if (generation >= 0) {
    ops.push_back(Op::get_prefix(key(gen("join", generation) + "/")));
    ops.push_back(Op::get(key(gen("members", generation))));
    ops.push_back(Op::get(key(gen("gend", generation))));
    ops.push_back(Op::get_prefix(key(gen("done", generation) + "/")));
  }
  const etcd::TxnResult r = client.txn({}, ops);
  if (r.ranges.size() != ops.size()) {
    throw etcd::EtcdError("a read of " + std::to_string(ops.size()) + " ranges under " + run_ +
                          " returned " + std::to_string(r.ranges.size()));
  }
  auto one = [](const std::vector<KeyValue>& kvs) {
    return kvs.empty() ? std::nullopt : std::optional<KeyValue>(kvs.front());
  };
  View v;
  v.revision = r.revision;
  v.failed = one(r.ranges[0]);
  v.over = !r.ranges[1].empty();
  v.claimed = nodes_in(r.ranges[2], key("claim/"));
  v.goodbyes = nodes_in(r.ranges[3], key("bye/"));
  v.waiting = nodes_in(r.ranges[4], key("waiting/"));
  if (generation >= 0) {
    v.joined = nodes_in(r.ranges[5], key(gen("join", generation) + "/"));
    v.members = one(r.ranges[6]);
    v.end = one(r.ranges[7]);
    v.done = nodes_in(r.ranges[8], key(gen("done", generation) + "/"));
  }
  return v;
}

std::int64_t EtcdControl::wait_change(etcd::Client& client, std::int64_t revision,
                                      milliseconds timeout) {
  if (timeout <= milliseconds(0)) return revision;
  const etcd::WatchResult r = client.watch(run_, true, revision + 1, timeout);
  return r.events.empty() ? revision : r.next_revision - 1;
}

void EtcdControl::publish_failure(etcd::Client& client, const FailureRecord& record) {
  const std::string k = key("failed");
  if (client.txn({Compare::absent(k)}, {Op::put(k, seal(k, encode_failure(record)))}).succeeded) {
    spdlog::info("told the other nodes: {}", record.str());
  }
}

void EtcdControl::end_generation(etcd::Client& client, int generation, const std::string& record) {
  const std::string k = key(gen("gend", generation));
  client.txn({Compare::absent(k)}, {Op::put(k, seal(k, record))});
}

void EtcdControl::check_description(etcd::Client& client) {
  const std::string prefix = key("desc/");
  for (const KeyValue& kv : client.get_prefix(prefix).kvs) {
    const std::optional<int> node = node_of(kv.key, prefix);
    if (!node || *node == options_.node_rank) continue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (checked_.count(*node)) continue;
    }
    const JobDescription theirs = decode_description(open(kv), "key '" + kv.key + "' in " + where());
    if (auto why = description_mismatch(description_, options_.node_rank, theirs, *node)) {
      const ControlError error(*why);
      publish_failure(client, FailureRecord{options_.node_rank, std::nullopt, kExitUsage, *why});
      throw error;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    checked_.insert(*node);
  }
}

Control::Agreement EtcdControl::rendezvous(const JobDescription& mine,
                                           const std::vector<env::Endpoint>& local,
                                           const std::string& proposed_job_id,
                                           const std::string& proposed_job_secret) {
  const int me = options_.node_rank;
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  description_ = mine;
  std::lock_guard<std::mutex> client_lock(client_mutex_);
  etcd::Client& client = *client_;
  try {
    const std::string desc = key("desc/" + std::to_string(me));
    const std::string endpoints = key("endpoints/" + std::to_string(me));
    client.txn({}, {Op::put(endpoints, seal(endpoints, encode_endpoints(local)), lease_),
                    Op::put(desc, seal(desc, encode_description(mine)), lease_)});
    // The first launcher's proposals hold for the job (node 0's on the TCP control plane).
    const std::string job_id = key("job_id");
    const std::string job_secret = key("job_secret");
    std::vector<Op> proposals = {Op::put(job_id, seal(job_id, encode_job_id(proposed_job_id)))};
    if (!proposed_job_secret.empty()) {
      proposals.push_back(
          Op::put(job_secret, seal(job_secret, encode_job_secret(proposed_job_secret))));
    }
    client.txn({Compare::absent(job_id)}, proposals);

    // Every node compares its description with every other one it sees: whichever of two nodes
    // arrives second finds a mismatch between them, and publishes it as the job's failure.
    const bool elastic = options_.elastic();
    while (true) {
      const View view = read_view(client, -1);
      if (view.failed) {
        throw ControlError("the job failed while the nodes met: " +
                           decode_failure(open(*view.failed), "key '" + view.failed->key + "'").str());
      }
      check_description(client);
      if (elastic) break;
      std::set<int> missing;
      for (int n = 0; n < options_.nnodes; ++n) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (n != me && !checked_.count(n)) missing.insert(n);
      }
      if (missing.empty()) break;
      const auto now = Clock::now();
      if (now >= deadline) {
        throw ControlError("node(s) " + node_list(missing) + " of " +
                           std::to_string(options_.nnodes) + " did not join the job in " + where() +
                           " within the rendezvous deadline (" +
                           seconds_text(options_.rendezvous_timeout) +
                           " s, --rendezvous_timeout); is launch running there with the same "
                           "--rdzv_endpoint, --rdzv_id and DDL_JOB_SECRET?");
      }
      wait_change(client, view.revision,
                  std::min(milliseconds(1'000),
                           std::chrono::duration_cast<milliseconds>(deadline - now)));
    }
    Agreement agreement;
    const std::optional<KeyValue> id = client.get(job_id);
    if (!id) throw ControlError("key '" + job_id + "' vanished from " + where());
    agreement.job_id = decode_job_id(open(*id), "key '" + job_id + "' in " + where());
    if (const std::optional<KeyValue> secret = client.get(job_secret)) {
      agreement.job_secret =
          decode_job_secret(open(*secret), "key '" + job_secret + "' in " + where());
    }
    return agreement;
  } catch (const etcd::EtcdError& e) {
    throw ControlError("node " + std::to_string(me) + ": " + where() + ": " + e.what());
  }
}

GenerationCandidates EtcdControl::candidates(const View& view, int generation) const {
  GenerationCandidates c;
  c.generation = generation;
  for (int n : view.joined) {
    if (n < options_.nnodes && view.claimed.count(n)) c.joined.insert(n);
  }
  // Fixed count or generation 0: every node; elastic later, every launcher of the job still
  // alive (the previous members restarting and the nodes waiting to be admitted).
  if (!options_.elastic() || generation == 0) {
    for (int n = 0; n < options_.nnodes; ++n) c.expected.insert(n);
  } else {
    for (int n : view.claimed) {
      if (n < options_.nnodes) c.expected.insert(n);
    }
  }
  // After generation 0, a node without a claim (its lease expired) is lost; before, it may be
  // still to come.
  if (generation > 0) {
    for (int n : c.expected) {
      if (!view.claimed.count(n)) c.lost.insert(n);
    }
  }
  return c;
}

Membership EtcdControl::join_generation(Generation requested) {
  const int me = options_.node_rank;
  const bool elastic = options_.elastic();
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  int generation = requested.index();
  std::lock_guard<std::mutex> client_lock(client_mutex_);
  etcd::Client& client = *client_;
  try {
    auto enter = [&](int k) {
      const std::string join = key(gen("join", k) + "/" + std::to_string(me));
      client.put(join, seal(join, "1"), lease_);
    };
    enter(generation);
    bool waiting = false;
    std::optional<Clock::time_point> last_call;
    Members members;
    while (true) {
      const std::string what = "generation " + std::to_string(generation);
      const View view = read_view(client, generation);
      if (view.failed) {
        throw ControlError(
            "the job failed before node " + std::to_string(me) + " could join " + what + ": " +
            decode_failure(open(*view.failed), "key '" + view.failed->key + "' in " + where())
                .str());
      }
      if (view.members) {
        Members m = decode_members(open(*view.members),
                                   "key '" + view.members->key + "' in " + where());
        if (std::find(m.nodes.begin(), m.nodes.end(), me) != m.nodes.end()) {
          members = std::move(m);
          break;
        }
        if (!elastic || !requested.first()) {
          throw ControlError("the other nodes formed " + what + " without this node (node " +
                             std::to_string(me) + "): it was taken for lost");
        }
        if (!waiting) {
          spdlog::info("node {}: the job is running without this node ({}); waiting to be "
                       "admitted at its next restart",
                       me, what);
          const std::string wait_key = key("waiting/" + std::to_string(me));
          client.put(wait_key, seal(wait_key, "1"), lease_);
          waiting = true;
        }
        ++generation;
        last_call.reset();
        enter(generation);
        continue;
      }
      if (view.over) {
        throw ControlError("the job ended before node " + std::to_string(me) + " could join " +
                           what);
      }
      if (elastic) check_description(client);
      if (std::optional<std::vector<int>> nodes =
              ready_members(options_, candidates(view, generation), Clock::now(), deadline,
                            last_call, "in " + where(), " (their etcd leases expired)")) {
        // Whoever sees first that the generation can start decides it; the others read it.
        Members decided;
        decided.generation = generation;
        decided.nodes = *nodes;
        const std::string prefix = key("endpoints/");
        std::map<int, KeyValue> published;
        for (const KeyValue& kv : client.get_prefix(prefix).kvs) {
          if (auto n = node_of(kv.key, prefix)) published[*n] = kv;
        }
        bool complete = true;
        for (int n : decided.nodes) {
          auto it = published.find(n);
          if (it == published.end()) {
            complete = false;  // its lease just expired: decide again
            break;
          }
          decided.endpoints.push_back(
              decode_endpoints(open(it->second), "key '" + it->second.key + "' in " + where()));
        }
        if (complete) {
          const std::string k = key(gen("members", generation));
          client.txn({Compare::absent(k)}, {Op::put(k, seal(k, encode_members(decided)))});
        }
        continue;
      }
      const auto now = Clock::now();
      milliseconds wait = std::chrono::duration_cast<milliseconds>(deadline - now);
      if (last_call) {
        wait = std::min(wait, std::chrono::duration_cast<milliseconds>(*last_call - now));
      }
      wait_change(client, view.revision, std::clamp(wait, milliseconds(1), milliseconds(1'000)));
    }
    Membership m = membership_of(members, me, options_.equal_node_sizes);
    std::lock_guard<std::mutex> lock(mutex_);
    current_generation_ = generation;
    current_members_ = members.nodes;
    return m;
  } catch (const etcd::EtcdError& e) {
    throw ControlError("node " + std::to_string(me) + ": " + where() + ": " + e.what());
  }
}

void EtcdControl::report_generation_failure(Generation generation, const FailureNotice& notice) {
  const FailureRecord record{options_.node_rank, notice.rank, notice.exit_code, notice.what};
  try {
    std::lock_guard<std::mutex> client_lock(client_mutex_);
    end_generation(*client_, generation.index(), encode_failure(record));
  } catch (const etcd::EtcdError& e) {
    spdlog::error("could not tell the other nodes that generation {} failed ({}): {}",
                  generation.index(), record.str(), e.what());
  }
}

void EtcdControl::report_generation_success(Generation generation) {
  const int k = generation.index();
  std::size_t members = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_generation_ == k) members = current_members_.size();
  }
  try {
    std::lock_guard<std::mutex> client_lock(client_mutex_);
    const std::string done = key(gen("done", k) + "/" + std::to_string(options_.node_rank));
    // The put and the count in one step: of two members finishing at once, the later one's
    // count sees both.
    const etcd::TxnResult r = client_->txn(
        {}, {Op::put(done, seal(done, "1")), Op::get_prefix(key(gen("done", k) + "/"))});
    if (members > 0 && !r.ranges.empty() && r.ranges[0].size() >= members) {
      end_generation(*client_, k, encode_generation_success(k));
    }
  } catch (const etcd::EtcdError& e) {
    spdlog::error("could not tell the other nodes that this node's part of generation {} "
                  "succeeded: {}",
                  k, e.what());
  }
}

void EtcdControl::watch(std::shared_ptr<ExternalStop> stop) {
  watch_client_ = client_->clone();
  watcher_ = std::thread([this, stop = std::move(stop)] { watch_loop(stop); });
}

void EtcdControl::stop_watcher() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void EtcdControl::watch_loop(std::shared_ptr<ExternalStop> stop) {
  etcd::Client& client = *watch_client_;
  const int me = options_.node_rank;
  const bool elastic = options_.elastic();
  bool delivered = false;            // the job's failure was passed on
  std::set<int> ended;               // generations whose end was passed on
  std::set<std::pair<int, int>> declared;  // (generation, node) losses and admissions published
  std::int64_t revision = 0;
  auto lose = [&](const std::string& why) {
    lost_ = true;
    const FailureRecord record{me, std::nullopt, 1, "lost the job: " + why};
    spdlog::error("{}", record.what);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!seen_failure_) seen_failure_ = record;
    }
    stop->request(record.exit_code, record.what);
  };
  while (!stopping_) {
    try {
      if (const std::optional<std::string> trouble = lease_trouble()) {
        lose(*trouble);
        return;
      }
      int generation;
      std::vector<int> members;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        generation = current_generation_;
        members = current_members_;
      }
      const View view = read_view(client, generation);
      revision = view.revision;
      if (view.failed && !delivered) {
        delivered = true;
        FailureRecord record;
        try {
          record = decode_failure(open(*view.failed), "key '" + view.failed->key + "' in " + where());
        } catch (const ControlError& e) {
          record = FailureRecord{-1, std::nullopt, 1, e.what()};
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          seen_failure_ = record;
        }
        if (record.node != me) {
          stop->request(record.exit_code,
                        "node " + std::to_string(record.node) + " failed first (" + record.str() + ")");
        }
      }
      if (generation >= 0 && view.end && !ended.count(generation)) {
        ended.insert(generation);
        std::optional<FailureRecord> failure;
        try {
          failure = decode_generation_end(open(*view.end), generation,
                                          "key '" + view.end->key + "' in " + where());
        } catch (const ControlError& e) {
          failure = FailureRecord{-1, std::nullopt, 1, e.what()};
        }
        if (!failure) {
          succeeded_ = true;
          stop->generation_succeeded(Generation(generation));
        } else {
          if (failure->node != me) {
            std::lock_guard<std::mutex> lock(mutex_);
            peer_generation_failure_ = *failure;
          }
          if (failure->node != me || failure->exit_code == 0) {
            stop->generation_failed(Generation(generation), failure->exit_code,
                                    "generation " + std::to_string(generation) + " failed on node " +
                                        std::to_string(failure->node) + ": " + failure->what);
          }
        }
      }
      if (generation >= 0 && !view.end) {
        // A member whose lease expired without a goodbye is lost: the generation fails (elastic:
        // the next one forms without it) or, with a fixed count, the job.
        for (int n : members) {
          if (n == me || view.claimed.count(n) || view.goodbyes.count(n) ||
              declared.count({generation, n})) {
            continue;
          }
          declared.insert({generation, n});
          const FailureRecord lost{n, std::nullopt, 1,
                                   "node " + std::to_string(n) +
                                       "'s launcher stopped answering (its etcd lease of " +
                                       std::to_string(lease_ttl(options_.heartbeat_timeout).count()) +
                                       " s expired)"};
          spdlog::error("{}", lost.what);
          end_generation(client, generation, encode_failure(lost));
          if (!elastic) publish_failure(client, lost);
        }
        if (elastic && generation < options_.max_restarts) {
          for (int n : view.waiting) {
            if (n >= options_.nnodes ||
                std::find(members.begin(), members.end(), n) != members.end() ||
                declared.count({generation, -1 - n})) {
              continue;
            }
            declared.insert({generation, -1 - n});
            const FailureRecord record{
                me, std::nullopt, 0,
                "node " + std::to_string(n) + " asks to join the job: re-forming it with the new node"};
            spdlog::info("{}", record.what);
            end_generation(client, generation, encode_failure(record));
            break;
          }
        }
      }
      wait_change(client, revision, options_.heartbeat_interval);
    } catch (const etcd::EtcdError& e) {
      if (stopping_) return;
      // The keeper decides when silence means this node is lost; until then, try again.
      spdlog::debug("{}: {}", where(), e.what());
      if (const std::optional<std::string> trouble = lease_trouble()) {
        lose(*trouble);
        return;
      }
      std::unique_lock<std::mutex> lock(stop_mutex_);
      stop_cv_.wait_for(lock, kControlPollInterval, [this] { return stopping_.load(); });
    } catch (const ControlError& e) {
      if (stopping_) return;
      lose(e.what());
      return;
    }
  }
}

void EtcdControl::report_failure(const FailureNotice& notice) {
  FailureRecord record{options_.node_rank, notice.rank, notice.exit_code, notice.what};
  if (notice.from_peer) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (peer_generation_failure_) record = *peer_generation_failure_;
  }
  if (lost_) return;  // etcd is out of reach, or the job went on without this node
  try {
    std::lock_guard<std::mutex> client_lock(client_mutex_);
    publish_failure(*client_, record);
  } catch (const etcd::EtcdError& e) {
    spdlog::error("could not tell the other nodes that {}: {}", record.str(), e.what());
  }
}

void EtcdControl::leave() {
  left_ = true;
  std::lock_guard<std::mutex> client_lock(client_mutex_);
  etcd::Client& client = *client_;
  const std::string bye = key("bye/" + std::to_string(options_.node_rank));
  client.put(bye, seal(bye, "1"));
  client.revoke_lease(lease_);  // its keys go: claim, description, joins, presence
  if (!client.get_prefix(key("present/")).kvs.empty()) return;
  // The last launcher out removes the run and the pointer to it.
  const std::string pointer = job_prefix_ + "run";
  if (const std::optional<KeyValue> current = client.get(pointer)) {
    if (current->value == seal(pointer, run_.substr(job_prefix_.size(), run_.size() -
                                                                          job_prefix_.size() - 1))) {
      client.txn({Compare::mod_revision_is(pointer, current->mod_revision)},
                 {Op::erase(pointer), Op::erase_prefix(run_)});
      spdlog::debug("etcd control plane: removed the keys of run {}", run_);
      return;
    }
  }
  client.erase_prefix(run_);
}

std::optional<FailureRecord> EtcdControl::finish() {
  stop_watcher();
  stop_keeper();
  std::optional<FailureRecord> failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure = seen_failure_;
  }
  if (lost_) return failure;
  try {
    {
      std::lock_guard<std::mutex> client_lock(client_mutex_);
      if (!failure) {
        if (const std::optional<KeyValue> failed = client_->get(key("failed"))) {
          try {
            failure = decode_failure(open(*failed), "key '" + failed->key + "' in " + where());
          } catch (const ControlError& e) {
            failure = FailureRecord{-1, std::nullopt, 1, e.what()};
          }
        }
      }
      // The job is over for everyone (it failed, or its generation succeeded): nodes still
      // waiting to be admitted give up. A node that ends alone (left out of a generation) says
      // nothing of the kind: the others go on.
      if (failure || succeeded_) {
        const std::string over = key("over");
        client_->put(over, seal(over, "1"));
      }
    }
    leave();
  } catch (const etcd::EtcdError& e) {
    spdlog::error("{}: {}", where(), e.what());
  }
  return failure;
}

void EtcdControl::abandon() {
  stop_watcher();
  stop_keeper();
  if (left_ || lost_) return;
  try {
    leave();
  } catch (const std::exception& e) {
    spdlog::debug("{} while giving up: {}", where(), e.what());
  }
}

}  // namespace ddl::launcher
