#include "launcher/coord/control.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>

#include "store/tcp_store.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kFailedKey = "failed";
constexpr const char* kFailedCountKey = "failed_count";
constexpr const char* kJobIdKey = "job_id";

std::string key(const char* prefix, int node) { return std::string(prefix) + std::to_string(node); }

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

}  // namespace

// --- Descriptions and records -------------------------------------------------------------------

std::string encode_description(const JobDescription& d) {
  std::string out;
  for (const auto& [name, value] : d) {
    std::string v = value;
    std::replace(v.begin(), v.end(), '\n', ' ');
    out += name + "=" + v + "\n";
  }
  return out;
}

JobDescription decode_description(const std::string& text) {
  JobDescription d;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    d.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return d;
}

std::optional<std::string> description_mismatch(const JobDescription& mine, int my_node,
                                                const JobDescription& theirs, int their_node) {
  std::map<std::string, std::string> other(theirs.begin(), theirs.end());
  auto differs = [&](const std::string& name, const std::string& here, const std::string& there) {
    return "the job description differs between nodes: " + name + " is '" + here + "' on node " +
           std::to_string(my_node) + " (this node) but '" + there + "' on node " +
           std::to_string(their_node);
  };
  for (const auto& [name, value] : mine) {
    auto it = other.find(name);
    const std::string there = it == other.end() ? std::string("<not given>") : it->second;
    if (there != value) return differs(name, value, there);
    other.erase(name);
  }
  if (!other.empty()) return differs(other.begin()->first, "<not given>", other.begin()->second);
  return std::nullopt;
}

std::string FailureRecord::str() const {
  std::string out = "node " + std::to_string(node);
  if (rank) out += " rank " + std::to_string(*rank);
  return out + " exit " + std::to_string(exit_code) + ": " + what;
}

FailureRecord FailureRecord::parse(const std::string& text) {
  static const std::regex form(R"(node (\d+)(?: rank (\d+))? exit (\d+): ([\s\S]*))");
  std::smatch m;
  FailureRecord r;
  if (!std::regex_match(text, m, form)) {
    r.node = -1;
    r.what = text;
    return r;
  }
  try {
    r.node = std::stoi(m[1]);
    if (m[2].matched) r.rank = std::stoi(m[2]);
    r.exit_code = std::stoi(m[3]);
  } catch (const std::exception&) {
    r = FailureRecord{-1, std::nullopt, 1, text};
    return r;
  }
  r.what = m[4];
  return r;
}

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
  const std::string claim = key("claim/", me);
  auto duplicate = [&] {
    return ControlError("another launcher has already joined the job as node " +
                        std::to_string(me) + " (check --node_rank / --node_ip / SLURM_NODEID)");
  };
  try {
    if (store_->add(claim, 1) > 1) throw duplicate();
    if (me == 0) store_->set(kJobIdKey, bytes(proposed_job_id));
    store_->set(key("endpoints/", me), bytes(env::join_endpoints(local)));
    store_->set(key("desc/", me), bytes(encode_description(mine)));

    std::vector<int> pending;
    for (int n = 0; n < options_.nnodes; ++n) {
      if (n != me) pending.push_back(n);
    }
    while (true) {
      for (auto it = pending.begin(); it != pending.end();) {
        const std::string desc_key = key("desc/", *it);
        if (!store_->check({desc_key})) {
          ++it;
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          joined_.insert(*it);
        }
        const JobDescription theirs = decode_description(text(store_->get(desc_key, milliseconds(0))));
        if (auto why = description_mismatch(mine, me, theirs, *it)) throw ControlError(*why);
        it = pending.erase(it);
      }
      if (pending.empty()) break;
      if (store_->add(claim, 0) > 1) throw duplicate();
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
      try {
        store_->wait({key("desc/", pending.front())}, std::min(kControlPollInterval, left));
      } catch (const StoreTimeout&) {
      }
    }

    Agreement agreement;
    for (int n = 0; n < options_.nnodes; ++n) {
      const std::string value =
          n == me ? env::join_endpoints(local)
                  : text(store_->get(key("endpoints/", n), options_.heartbeat_timeout));
      const auto theirs = env::parse_endpoint_list(value, "endpoints of node " + std::to_string(n));
      if (theirs.size() != local.size()) {
        throw ControlError("node " + std::to_string(n) + " published " +
                           std::to_string(theirs.size()) + " endpoint(s), this node " +
                           std::to_string(local.size()));
      }
      agreement.endpoints.insert(agreement.endpoints.end(), theirs.begin(), theirs.end());
    }
    agreement.job_id =
        me == 0 ? proposed_job_id : text(store_->get(kJobIdKey, options_.heartbeat_timeout));
    return agreement;
  } catch (const StoreError& e) {
    throw ControlError("node " + std::to_string(me) + ": control store at " + where() + ": " +
                       e.what());
  } catch (const env::EnvError& e) {
    throw ControlError("node " + std::to_string(me) + ": bad endpoints from the control store: " +
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

std::optional<FailureRecord> ControlChannel::read_failure(TcpStore& store) {
  if (!store.check({kFailedKey})) return std::nullopt;
  return FailureRecord::parse(text(store.get(kFailedKey, milliseconds(0))));
}

bool ControlChannel::publish_failure(TcpStore& store, const FailureRecord& record) {
  if (store.add(kFailedCountKey, 1) != 1) return false;  // another failure was first
  store.set(kFailedKey, bytes(record.str()));
  return true;
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
  while (!stopping_) {
    try {
      auto now = Clock::now();
      if (now >= next_beat) {
        watch_store_->add(key("hb/", me), 1);
        next_beat = now + options_.heartbeat_interval;
      }
      if (!delivered) {
        bool set = true;
        try {
          watch_store_->wait({kFailedKey}, kControlPollInterval);
        } catch (const StoreTimeout&) {
          set = false;
        }
        if (set) {
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
        if (watch_store_->check({key("bye/", n)})) {
          gone.insert(n);
          continue;
        }
        const std::int64_t value = watch_store_->add(key("hb/", n), 0);
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
  if (me != 0) {
    try {
      store_->set(key("bye/", me), bytes("1"));
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
          if (!lost.count(n) && !store_->check({key("bye/", n)})) pending.push_back(n);
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
        store_->wait({key("bye/", pending.front())}, kControlPollInterval);
      } catch (const StoreTimeout&) {
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
  try {
    if (me != 0) {
      store_->set(key("bye/", me), bytes("1"));
      return;
    }
    const auto deadline = Clock::now() + options_.linger_timeout;
    while (Clock::now() < deadline) {
      std::vector<std::string> pending;
      for (int n = 1; n < options_.nnodes; ++n) {
        if (store_->add(key("claim/", n), 0) > 0 && !store_->check({key("bye/", n)})) {
          pending.push_back(key("bye/", n));
        }
      }
      if (pending.empty()) return;
      try {
        store_->wait({pending.front()}, kControlPollInterval);
      } catch (const StoreTimeout&) {
      }
    }
  } catch (const StoreError& e) {
    spdlog::debug("control store while giving up: {}", e.what());
  }
}

}  // namespace ddl::launcher
