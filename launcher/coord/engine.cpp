#include "launcher/coord/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <utility>

#include "env/exit_codes.h"
#include "env/text.h"
#include "launcher/health/preflight.h"
#include "net/auth.h"

namespace ddl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kMacHex = 2 * net::kDigestBytes;
constexpr const char* kUnsigned = "-";
constexpr int kAttempts = 100;
// How often Paddle's elastic manager says that it waits for hosts.
constexpr std::chrono::seconds kPaddleLine{2};

// Hosts as Paddle's elastic manager prints its list: "['10.0.0.1:6170', '10.0.0.2:6170']".
std::string paddle_host_list(const std::vector<env::Endpoint>& hosts) {
  std::vector<std::string> quoted;
  for (const env::Endpoint& h : hosts) quoted.push_back("'" + h.str() + "'");
  return "[" + env::join(quoted, ", ") + "]";
}

std::string gen(const std::string& family, int generation) {
  return family + "/" + std::to_string(generation);
}

std::string fresh_token() { return net::to_hex(net::sha256(net::random_bytes(16))).substr(0, 16); }

std::int64_t wall_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A non-negative decimal number, the whole of `s`.
std::optional<std::int64_t> number(std::string_view s) {
  std::int64_t n = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || n < 0) return std::nullopt;
  return n;
}

// The time a "<token> <wall ms>" or "<count> <wall ms>[ <pace>]" payload carries; nullopt for
// another one.
std::optional<std::int64_t> stamp_of(const std::string& payload) {
  const std::size_t space = payload.find(' ');
  if (space == std::string::npos) return std::nullopt;
  const std::size_t end = payload.find(' ', space + 1);
  return number(std::string_view(payload).substr(
      space + 1, end == std::string::npos ? std::string::npos : end - space - 1));
}

// The pace a heartbeat "<count> <wall ms> <generation> <step> <own us>" carries (the node's,
// launcher/health/node_pace.h) for generation `generation`; nullopt without one, or for another.
std::optional<NodePace> pace_of(const std::string& payload, int node, int generation) {
  std::vector<std::string_view> fields;
  std::string_view rest(payload);
  while (!rest.empty()) {
    const std::size_t space = rest.find(' ');
    fields.push_back(rest.substr(0, space));
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  }
  if (fields.size() != 5) return std::nullopt;
  const auto g = number(fields[2]), step = number(fields[3]), own = number(fields[4]);
  if (!g || !step || !own || *g != generation) return std::nullopt;
  return NodePace{node, *step, static_cast<double>(*own) / 1e6};
}

bool contains(const std::vector<int>& nodes, int n) {
  return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
}

}  // namespace

// Who is in the job, as the "present", "bye" and "lost" rosters say, read incrementally. A node
// rank whose launcher was lost may be taken by a new launcher (elastic), so goodbyes and losses
// count per launcher.
struct Roll {
  RosterCursor present_at = 0, bye_at = 0, lost_at = 0;
  std::map<int, std::string> present;  // node -> its launcher (the latest to present itself)
  std::set<std::string> gone;          // launchers that said goodbye
  std::set<std::string> lost;          // launchers declared lost

  const std::string* launcher(int node) const {
    const auto it = present.find(node);
    return it == present.end() ? nullptr : &it->second;
  }
  // Present, and its launcher neither said goodbye nor was lost.
  bool live(int node) const {
    const std::string* l = launcher(node);
    return l && !gone.count(*l) && !lost.count(*l);
  }
  std::set<int> lost_nodes() const {
    std::set<int> out;
    for (const auto& [node, l] : present) {
      if (lost.count(l)) out.insert(node);
    }
    return out;
  }
  std::set<int> live_nodes() const {
    std::set<int> out;
    for (const auto& [node, l] : present) {
      if (live(node)) out.insert(node);
    }
    return out;
  }
};

struct ControlEngine::Decision {
  Roll roll;
  RosterCursor described_at = 0;
  std::map<int, Presentation> presented;
  int generation = -1;  // of the join roster below
  RosterCursor join_at = 0;
  std::set<int> joined;
  RosterCursor waiting_at = 0;
  std::set<int> waiting;
  bool deciding = false;      // this node decides the generation asked about last
  int looks = 0;              // decide() calls
  std::vector<int> previous;  // the members of the generation before it
  std::set<std::string> evicted;  // launchers evicted from it
};

struct ControlEngine::Watch {
  explicit Watch(double ratio) : paces(ratio) {}
  Roll roll;
  NodePaceJudge paces;  // the decider's, across nodes
  RosterCursor failed_at = 0;
  bool delivered = false;  // the job's failure was passed on
  std::set<int> ended;     // generations whose end was passed on
  std::set<int> admissions;
  std::set<std::pair<int, std::string>> declared;  // (generation, launcher) losses published
  struct Beat {
    std::string value;
    Clock::time_point changed;
  };
  std::map<std::string, Beat> beats;  // by launcher
  Clock::time_point last_ok = Clock::now();
  int rounds = 0;
};

// --- records ------------------------------------------------------------------------------------

std::string ControlEngine::seal(const std::string& name, const std::string& payload) const {
  // A launcher that has no node rank yet writes as node 0 (the run pointer, its claims).
  const std::string body =
      std::to_string(std::max(options_.node_rank, 0)) + ":" + launcher_ + ":" + payload;
  if (options_.secret.empty()) return std::string(kUnsigned) + ":" + body;
  return net::to_hex(net::hmac_sha256(options_.secret, name + '\0' + body)) + ":" + body;
}

std::optional<ControlEngine::Entry> ControlEngine::open_entry(const std::string& name,
                                                              const std::string& raw) const {
  std::string why;
  const std::size_t mac_end = raw.find(':');
  if (mac_end == std::string::npos) {
    why = "not a record of launch";
  } else {
    const std::string body = raw.substr(mac_end + 1);
    const std::string mac = raw.substr(0, mac_end);
    const std::size_t node_end = body.find(':');
    const std::size_t launcher_end =
        node_end == std::string::npos ? std::string::npos : body.find(':', node_end + 1);
    const std::optional<std::int64_t> node =
        node_end == std::string::npos ? std::nullopt
                                      : number(std::string_view(body).substr(0, node_end));
    if (launcher_end == std::string::npos || !node || *node >= options_.nnodes) {
      why = "not a record of launch";
    } else if (!options_.secret.empty() &&
               (mac.size() != kMacHex ||
                mac != net::to_hex(net::hmac_sha256(options_.secret, name + '\0' + body)))) {
      why = std::string("not signed with this job's ") + env::kJobSecret + " for this run";
    } else {
      return Entry{static_cast<int>(*node), body.substr(node_end + 1, launcher_end - node_end - 1),
                   body.substr(launcher_end + 1)};
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (refused_.insert(name).second) {
    spdlog::warn("refusing a record under '{}' in {}: {} ('{}'); it is not counted", name,
                 store_->where(), why, raw.substr(0, 40));
  }
  return std::nullopt;
}

std::vector<ControlEngine::Entry> ControlEngine::read_entries(ControlStore& store,
                                                              const std::string& roster,
                                                              RosterCursor& cursor,
                                                              std::size_t limit) {
  return read_named(store, name(roster), cursor, limit);
}

std::vector<ControlEngine::Entry> ControlEngine::read_named(ControlStore& store,
                                                            const std::string& full,
                                                            RosterCursor& cursor,
                                                            std::size_t limit) {
  std::vector<Entry> out;
  while (out.size() < limit) {
    const std::vector<std::string> raw = store.read(full, cursor, limit - out.size());
    if (raw.empty()) break;
    for (const std::string& r : raw) {
      if (auto e = open_entry(full, r)) out.push_back(std::move(*e));
    }
  }
  return out;
}

std::optional<ControlEngine::Entry> ControlEngine::first_entry(ControlStore& store,
                                                               const std::string& roster) {
  RosterCursor cursor = 0;
  std::vector<Entry> e = read_entries(store, roster, cursor, 1);
  if (e.empty()) return std::nullopt;
  return std::move(e.front());
}

std::optional<RosterCursor> ControlEngine::append(ControlStore& store, const std::string& roster,
                                                  const std::string& payload) {
  return store.append(name(roster), seal(name(roster), payload));
}

void ControlEngine::refresh(ControlStore& store, Roll& roll) {
  for (const Entry& e : read_entries(store, "present", roll.present_at)) {
    roll.present[e.node] = e.launcher;
  }
  for (const Entry& e : read_entries(store, "bye", roll.bye_at)) roll.gone.insert(e.launcher);
  for (const Entry& e : read_entries(store, "lost", roll.lost_at)) roll.lost.insert(e.payload);
}

// --- joining ------------------------------------------------------------------------------------

ControlEngine::ControlEngine(const ControlOptions& options, std::unique_ptr<ControlStore> store)
    : options_(options),
      launcher_(fresh_token()),
      store_(std::move(store)),
      decision_(std::make_unique<Decision>()) {
  try {
    join_run();
    claim_rank();
    watch_store_ = store_->connect();
  } catch (const ControlStoreError& e) {
    throw ControlError("node " + std::to_string(options_.node_rank) + ": " + e.what());
  }
  watcher_ = std::thread([this] { watch_loop(); });
}

// Without finish() or abandon() a launcher says no goodbye: the others take it for lost, as one
// that was killed.
ControlEngine::~ControlEngine() { stop_watcher(); }

void ControlEngine::join_run() {
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const std::optional<std::string> current = store_->get({"run"}).front();
    if (!current) {
      const std::string token = fresh_token();
      token_ = token;  // seal() binds the pointer to the token it names
      // The pointer names the run and when it started: a run younger than the heartbeat timeout
      // is live even before its first launcher presented itself.
      if (store_->swap("run", std::nullopt, seal("run", token + " " + std::to_string(wall_ms())))) {
        spdlog::debug("control plane: started run {} in {}", token, store_->where());
        return;
      }
      continue;  // another launcher was first: join its run
    }
    const std::optional<Entry> pointer = open_entry("run", *current);
    const std::optional<std::int64_t> started = pointer ? stamp_of(pointer->payload) : std::nullopt;
    if (!started) {
      // Not this job's: whoever could write it could as well have deleted it.
      store_->swap("run", current, std::nullopt);
      continue;
    }
    const std::string token = pointer->payload.substr(0, pointer->payload.find(' '));
    if (!store_->outlives_launchers() ||
        wall_ms() - *started < options_.heartbeat_timeout.count() || run_is_live(token)) {
      token_ = token;
      return;
    }
    spdlog::info(
        "control plane: the records of run {} in {} are left from an earlier run of "
        "job '{}' whose launchers are all gone; starting a new run",
        token, store_->where(), options_.job_id);
    if (store_->swap("run", current, std::nullopt)) store_->erase(token + "/");
  }
  throw ControlError("could not join or start the run of job '" + options_.job_id + "' in " +
                     store_->where() + ": it kept changing (" + std::to_string(kAttempts) +
                     " attempts)");
}

bool ControlEngine::run_is_live(const std::string& token) {
  // A run is live when one of its launchers beat within the heartbeat timeout: at once by the
  // time its beat carries (clocks agree), else by seeing a beat change within the timeout. Its
  // launchers are those present; one that just started the run presents itself right after.
  RosterCursor cursor = 0;
  std::vector<std::string> keys;
  auto more = [&] {
    for (const Entry& e : read_named(*store_, token + "/present", cursor, SIZE_MAX)) {
      keys.push_back(token + "/hb/" + e.launcher);
    }
  };
  const auto deadline = Clock::now() + options_.heartbeat_timeout;
  std::vector<std::optional<std::string>> first;
  bool live = false;
  while (!live && Clock::now() < deadline) {
    more();
    const std::vector<std::optional<std::string>> now = store_->get(keys);
    for (std::size_t i = 0; i < now.size() && !live; ++i) {
      const std::optional<Entry> beat = now[i] ? open_entry(keys[i], *now[i]) : std::nullopt;
      if (!beat) continue;
      const std::optional<std::int64_t> at = stamp_of(beat->payload);
      live = (at && wall_ms() - *at < options_.heartbeat_timeout.count()) ||
             (i < first.size() && first[i] != now[i]);
    }
    if (first.size() < now.size()) first = now;
    if (!live) std::this_thread::sleep_for(options_.heartbeat_interval);
  }
  return live;
}

bool ControlEngine::claim(int node) {
  // The holder of a rank is the first launcher to claim it that was not declared lost since.
  // Who was lost is read only when another launcher's claim comes first.
  std::optional<std::set<std::string>> lost;
  const std::string roster = gen("claim", node);
  auto holder = [&]() -> std::optional<Entry> {
    RosterCursor cursor = 0;
    for (Entry& e : read_entries(*store_, roster, cursor)) {
      if (e.launcher == launcher_) return std::move(e);
      if (!lost) {
        lost.emplace();
        RosterCursor lost_at = 0;
        for (const Entry& l : read_entries(*store_, "lost", lost_at)) lost->insert(l.payload);
      }
      if (!lost->count(e.launcher)) return std::move(e);
    }
    return std::nullopt;
  };
  // Claimed only while nobody holds it: a refused claim left in the roster would stand next in
  // line for the rank once its holder is lost.
  std::optional<Entry> h = holder();
  if (!h) {
    // The roster's first entry needs no reading back: no claim precedes it.
    if (append(*store_, roster, "") == std::optional<RosterCursor>(1)) return true;
    h = holder();
  }
  return h && h->launcher == launcher_;
}

void ControlEngine::claim_rank() {
  // The envelope names the writer's node: while it has none, it writes as the node it claims.
  if (options_.node_rank != kAutoNodeRank) {
    if (!claim(options_.node_rank)) {
      throw ControlError("another launcher has already joined the job as node " +
                         std::to_string(options_.node_rank) + " (" + store_->where() +
                         "); check --node_rank / --node_ip / SLURM_NODEID");
    }
  } else {
    bool claimed = false;
    for (int n = store_->first_free_rank(); n < options_.nnodes && !claimed; ++n) {
      options_.node_rank = n;
      claimed = claim(n);
    }
    if (!claimed) {
      options_.node_rank = kAutoNodeRank;
      throw ControlError("no node rank given, and all " + std::to_string(options_.nnodes) +
                         " node ranks of the job are taken in " + store_->where() +
                         ": more launchers than --nnodes=" + std::to_string(options_.nnodes) +
                         " joined");
    }
    spdlog::info("node rank {} assigned by {}", options_.node_rank, store_->where());
  }
  beat(*store_);
  append(*store_, "present", "");
}

void ControlEngine::beat(ControlStore& store) {
  const std::string key = name("hb/" + launcher_);
  std::string payload = std::to_string(++beats_) + " " + std::to_string(wall_ms());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pace_ && pace_->generation == current_generation_) {
      payload += " " + std::to_string(pace_->generation) + " " + std::to_string(pace_->step) + " " +
                 std::to_string(static_cast<std::int64_t>(pace_->own_seconds * 1e6));
    }
  }
  const std::string value = seal(key, payload);
  if (!store.swap(key, last_beat_, value)) {
    const std::optional<std::string> now = store.get({key}).front();
    throw ControlError("the job's records in " + store.where() + " were " +
                       (now ? "overwritten" : "deleted") +
                       " from under it (this node's heartbeat '" + key + "' " +
                       (now ? "holds a value this node did not write" : "is gone") +
                       "): the job cannot be trusted any more");
  }
  last_beat_ = value;
}

Control::Agreement ControlEngine::rendezvous(const JobDescription& mine,
                                             const std::vector<env::Endpoint>& local,
                                             const std::string& proposed_job_id,
                                             const std::string& proposed_job_secret) {
  const int me = options_.node_rank;
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  description_ = mine;
  std::unique_lock<std::mutex> lock(store_mutex_);
  try {
    const std::string presentation =
        encode_presentation({mine, local, proposed_job_id, proposed_job_secret, launcher_});
    // Once, in "described": the decider reads every node's in one request per batch of
    // arrivals; a node that looks for node 0's reads from the front (node 0's comes first as a
    // rule: it hosts the TCP store), caching what it passes.
    append(*store_, "described", presentation);
    auto missing = [&](const std::set<int>& pending) {
      return ControlError("node(s) " + node_list(pending) + " of " +
                          std::to_string(options_.nnodes) + " did not join the job through " +
                          store_->where() + " within the rendezvous deadline (" +
                          seconds_text(options_.rendezvous_timeout) +
                          " s, --rendezvous_timeout); is launch running there with the same "
                          "node list, ports, --rdzv_id and DDL_JOB_SECRET?");
    };
    // Node 0's presentation is the reference: every node compares with it, node 0 with every
    // node (here with a fixed count; elastic as they join a generation).
    std::set<int> pending;
    std::optional<Clock::time_point> said_not_ready;
    if (me == 0 && !options_.elastic()) {
      for (int n = 1; n < options_.nnodes; ++n) pending.insert(n);
    }
    while (true) {
      if (me == 0) {
        read_presentations();
        for (const auto& [node, theirs] : decision_->presented) {
          if (!pending.count(node)) continue;
          compare_with(node, theirs);
          pending.erase(node);
        }
      }
      if (!reference_) reference_ = presentation_of(0, "");
      if (reference_ && me != 0) compare_with(0, *reference_);
      if (auto failure = job_failure(*store_)) {
        throw ControlError("the job failed while the nodes met: " + failure->str());
      }
      if (reference_ && pending.empty()) break;
      const auto now = Clock::now();
      if (now >= deadline) throw missing(reference_ ? pending : std::set<int>{0});
      if (options_.paddle_elastic && (!said_not_ready || now - *said_not_ready >= kPaddleLine)) {
        said_not_ready = now;
        say_not_ready(false);
      }
      store_->wait(
          name("described"), decision_->described_at,
          std::min(kControlPollInterval, std::chrono::duration_cast<milliseconds>(deadline - now)));
    }
    return Agreement{reference_->job_id, reference_->job_secret};
  } catch (const ControlError& e) {
    lock.unlock();
    fail_rendezvous(e);
    throw;
  }
}

std::size_t ControlEngine::read_presentations(std::size_t limit) {
  Decision& d = *decision_;
  const std::vector<Entry> entries = read_entries(*store_, "described", d.described_at, limit);
  for (const Entry& e : entries) {
    // A later presentation of a node is a new launcher's that took the rank of a lost one.
    Presentation p =
        decode_presentation(e.payload, "'" + name("described") + "' in " + store_->where());
    p.launcher = e.launcher;
    d.presented[e.node] = std::move(p);
  }
  return entries.size();
}

std::optional<Presentation> ControlEngine::presentation_of(int node, const std::string& launcher) {
  auto cached = [&]() -> std::optional<Presentation> {
    const auto it = decision_->presented.find(node);
    if (it == decision_->presented.end()) return std::nullopt;
    if (!launcher.empty() && it->second.launcher != launcher) return std::nullopt;
    return it->second;
  };
  if (auto p = cached()) return p;
  // Further into "described" until it is there, a few entries per request.
  constexpr std::size_t kBatch = 8;
  while (read_presentations(kBatch) > 0) {
    if (auto p = cached()) return p;
  }
  return std::nullopt;
}

void ControlEngine::compare_with(int node, const Presentation& theirs) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!checked_.insert(theirs.launcher).second) return;
  }
  if (auto why = description_mismatch(description_, options_.node_rank, theirs.description, node)) {
    throw ControlError(*why);
  }
}

void ControlEngine::fail_rendezvous(const ControlError& error) {
  // The nodes already waiting learn at once why the job is not formed.
  try {
    std::lock_guard<std::mutex> lock(store_mutex_);
    publish_failure(*store_,
                    FailureRecord{options_.node_rank, std::nullopt, kExitUsage, error.what()});
  } catch (const ControlError& e) {
    spdlog::debug("could not tell the other nodes that the rendezvous failed: {}", e.what());
  }
}

std::optional<FailureRecord> ControlEngine::failure_in(const Entry& e, ControlStore& store) {
  try {
    FailureRecord record =
        decode_failure(e.payload, "'" + name("failed") + "' in " + store.where());
    if (record.exit_code == 0) {
      throw RecordError("a job failure with exit code 0 in '" + name("failed") + "' of " +
                        store.where() + " (" + record.str() + ")");
    }
    return record;
  } catch (const RecordError& err) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (refused_.insert(name("failed") + err.what()).second) {
      spdlog::warn("refusing a record in {}: {}; it is not counted", store.where(), err.what());
    }
    return std::nullopt;
  }
}

std::optional<FailureRecord> ControlEngine::job_failure(ControlStore& store) {
  RosterCursor cursor = 0;
  for (const Entry& e : read_entries(store, "failed", cursor)) {
    if (auto record = failure_in(e, store)) return record;
  }
  return std::nullopt;
}

void ControlEngine::check_not_over(const std::string& while_doing) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lost_) throw ControlError(*lost_);
  }
  if (auto failure = job_failure(*store_)) {
    throw ControlError("the job failed " + while_doing + ": " + failure->str());
  }
  if (first_entry(*store_, "over")) {
    throw ControlError("the job ended " + while_doing);
  }
}

// --- generations --------------------------------------------------------------------------------

int ControlEngine::lead(const Roll& roll) const {
  const std::set<int> live = roll.live_nodes();
  return live.empty() ? options_.node_rank : *live.begin();
}

std::optional<std::vector<int>> ControlEngine::decide(int generation, Clock::time_point deadline,
                                                      std::optional<Clock::time_point>& last_call) {
  Decision& d = *decision_;
  if (d.generation != generation) {
    d.generation = generation;
    d.join_at = 0;
    d.joined.clear();
    d.previous.clear();
    d.evicted.clear();
    if (generation > 0) {
      const std::string roster = gen("members", generation - 1);
      if (std::optional<Entry> e = first_entry(*store_, roster)) {
        d.previous =
            decode_members(e->payload, "'" + name(roster) + "' in " + store_->where()).nodes;
      }
      // Launchers evicted from the generation before (--straggler=evict) are not waited for.
      RosterCursor at = 0;
      for (const Entry& e : read_entries(*store_, gen("evict", generation - 1), at)) {
        d.evicted.insert(e.payload.substr(0, e.payload.find(' ')));
      }
    }
  }
  for (const Entry& e : read_entries(*store_, gen("join", generation), d.join_at)) {
    d.joined.insert(e.node);
  }
  // The decider is the lowest live node that joined the generation among the previous
  // generation's members (node 0 on the TCP store), or among all when none of those is alive: a
  // member that died before it could join (its heartbeat not overdue yet) holds nobody up, and a
  // node waiting to be admitted never decides while a member lives.
  auto decider = [&]() -> int {
    std::set<int> members_alive;
    for (int n : d.previous) {
      if (d.roll.live(n)) members_alive.insert(n);
    }
    for (int n : d.joined) {
      if (d.roll.live(n) && (members_alive.empty() || members_alive.count(n))) return n;
    }
    return -1;
  };
  // Who is present, gone or lost is read again every tenth look, or when this node (or nobody
  // it knows of) seems to decide: the others wait for the decision without loading the store.
  d.deciding = false;
  bool fresh = ++d.looks % 10 == 0;
  if (fresh) refresh(*store_, d.roll);
  int who = decider();
  if (!fresh && (who == options_.node_rank || who < 0)) {
    refresh(*store_, d.roll);  // this node, or nobody it knows of: read who is there now
    who = decider();
  }
  if (who != options_.node_rank) return std::nullopt;
  d.deciding = true;
  GenerationCandidates c;
  c.generation = generation;
  for (int n : d.joined) {
    // Not read as present yet (it presented itself after the roll was read): next time.
    if (!d.roll.live(n) || d.evicted.count(*d.roll.launcher(n))) continue;
    // Elastic: a node is compared when it first joins a generation.
    if (options_.elastic() && n != options_.node_rank) {
      const std::optional<Presentation> theirs = presentation_of(n, *d.roll.launcher(n));
      if (!theirs) continue;
      compare_with(n, *theirs);
    }
    c.joined.insert(n);
  }
  if (!options_.elastic() || generation == 0) {
    for (int n = 0; n < options_.nnodes; ++n) c.expected.insert(n);
  } else {
    // A member that said goodbye (a node the pre-flight check sent away) is not waited for.
    for (int n : d.previous) {
      const std::string* l = d.roll.launcher(n);
      if (l == nullptr || (!d.roll.gone.count(*l) && !d.evicted.count(*l))) c.expected.insert(n);
    }
    for (const Entry& e : read_entries(*store_, "waiting", d.waiting_at)) d.waiting.insert(e.node);
    for (int n : d.waiting) {
      if (d.roll.present.count(n)) c.expected.insert(n);
    }
  }
  c.lost = d.roll.lost_nodes();
  return ready_members(options_, c, Clock::now(), deadline, last_call, "through " + store_->where(),
                       "");
}

void ControlEngine::say_not_ready(bool joined) {
  read_presentations();
  std::vector<env::Endpoint> hosts;
  for (const auto& [n, p] : decision_->presented) {
    if (joined) {
      const std::string* launcher = decision_->roll.launcher(n);
      if (!decision_->joined.count(n) || launcher == nullptr || p.launcher != *launcher) continue;
    }
    hosts.push_back(p.endpoints.front());
  }
  spdlog::info("not ready for np {} with hosts {}", options_.nnodes, paddle_host_list(hosts));
}

bool ControlEngine::is_member(const Members& m) const {
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    if (m.nodes[i] != options_.node_rank) continue;
    return m.launchers.empty() || m.launchers[i] == launcher_;
  }
  return false;
}

Membership ControlEngine::join_generation(Generation requested) {
  const int me = options_.node_rank;
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  int generation = requested.index();
  std::lock_guard<std::mutex> lock(store_mutex_);
  try {
    append(*store_, gen("join", generation), "");
    bool waiting = false;
    std::optional<Clock::time_point> last_call;
    std::optional<Clock::time_point> said_not_ready;
    Members members;
    while (true) {
      const std::string what = "generation " + std::to_string(generation);
      const std::string roster = gen("members", generation);
      if (std::optional<Entry> decided = first_entry(*store_, roster)) {
        Members m =
            decode_members(decided->payload, "'" + name(roster) + "' in " + store_->where());
        if (is_member(m)) {
          members = std::move(m);
          break;
        }
        if (!options_.survives_lost_nodes() || !requested.first()) {
          throw ControlError("the other nodes formed " + what + " without this node (node " +
                             std::to_string(me) + "): it was taken for lost");
        }
        if (!waiting) {
          spdlog::info(
              "node {}: the job is running without this node ({}); waiting to be "
              "admitted at its next restart",
              me, what);
          append(*store_, "waiting", "");
          waiting = true;
        }
        ++generation;
        last_call.reset();
        append(*store_, gen("join", generation), "");
        continue;
      }
      check_not_over("before node " + std::to_string(me) + " could join " + what);
      if (std::optional<std::vector<int>> nodes = decide(generation, deadline, last_call)) {
        Members decided;
        decided.generation = generation;
        decided.nodes = *nodes;
        for (int n : decided.nodes) decided.launchers.push_back(*decision_->roll.launcher(n));
        bool complete = true;
        read_presentations();
        for (int n : decided.nodes) {
          const std::optional<Presentation> p = presentation_of(n, *decision_->roll.launcher(n));
          if (!p) {
            complete = false;
            break;
          }
          decided.endpoints.push_back(p->endpoints);
        }
        if (complete) append(*store_, roster, encode_members(decided));
        continue;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        throw ControlError("the nodes did not form " + what + " within the rendezvous deadline (" +
                           seconds_text(options_.rendezvous_timeout) + " s, --rendezvous_timeout)");
      }
      if (options_.paddle_elastic && (!said_not_ready || now - *said_not_ready >= kPaddleLine)) {
        said_not_ready = now;
        say_not_ready(true);
      }
      // The decider is woken by the next node's arrival, the others by the decision (they look
      // again each heartbeat interval: a failure, the job's end, a decider lost).
      const bool deciding = decision_->deciding;
      store_->wait(name(deciding ? gen("join", generation) : roster),
                   deciding ? decision_->join_at : 0,
                   std::min(deciding ? kControlPollInterval : options_.heartbeat_interval,
                            std::chrono::duration_cast<milliseconds>(deadline - now)));
    }
    Membership m = membership_of(members, me, options_.equal_node_sizes, options_.order_by_address);
    if (options_.paddle_elastic) {
      std::vector<env::Endpoint> hosts;
      for (const auto& eps : members.endpoints) hosts.push_back(eps.front());
      spdlog::info("ready with hosts {}", paddle_host_list(hosts));
    }
    std::lock_guard<std::mutex> state(mutex_);
    current_generation_ = generation;
    current_members_ = members.nodes;
    current_launchers_ = members.launchers;
    return m;
  } catch (const ControlStoreError& e) {
    throw ControlError("node " + std::to_string(me) + ": " + e.what());
  }
}

std::map<int, std::string> ControlEngine::gather(Generation generation, const std::string& topic,
                                                 const std::string& payload, milliseconds timeout) {
  const int k = generation.index();
  std::vector<int> members;
  std::vector<std::string> launchers;
  {
    std::lock_guard<std::mutex> state(mutex_);
    if (current_generation_ != k) {
      throw ControlError("node " + std::to_string(options_.node_rank) + " is not in generation " +
                         std::to_string(k));
    }
    members = current_members_;
    launchers = current_launchers_;
  }
  const std::string roster = gen(topic, k);
  const std::string what = "'" + topic + "' of generation " + std::to_string(k);
  const auto deadline = Clock::now() + timeout;
  std::map<int, std::string> out;
  RosterCursor cursor = 0;
  std::lock_guard<std::mutex> lock(store_mutex_);
  try {
    append(*store_, roster, payload);
    while (true) {
      for (Entry& e : read_entries(*store_, roster, cursor)) {
        const auto at = std::find(members.begin(), members.end(), e.node);
        if (at == members.end()) continue;
        const std::size_t i = static_cast<std::size_t>(at - members.begin());
        if (i < launchers.size() && launchers[i] != e.launcher) continue;
        out.emplace(e.node, std::move(e.payload));
      }
      if (out.size() == members.size()) return out;
      check_not_over("during the " + what);
      if (std::optional<Entry> ended = first_entry(*store_, gen("gend", k))) {
        throw ControlError("generation " + std::to_string(k) + " ended during the " + what);
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        std::set<int> missing(members.begin(), members.end());
        for (const auto& [node, ignored] : out) missing.erase(node);
        throw ControlError("node(s) " + node_list(missing) + " did not publish the " + what +
                           " within " + seconds_text(timeout) + " s");
      }
      store_->wait(name(roster), cursor,
                   std::min(options_.heartbeat_interval,
                            std::chrono::duration_cast<milliseconds>(deadline - now)));
    }
  } catch (const ControlStoreError& e) {
    throw ControlError("node " + std::to_string(options_.node_rank) + ": " + e.what());
  }
}

void ControlEngine::end_generation(ControlStore& store, int generation,
                                   const FailureRecord& record) {
  append(store, gen("gend", generation), encode_failure(record));
}

void ControlEngine::publish_failure(ControlStore& store, const FailureRecord& record) {
  if (record.node == options_.node_rank) published_failure_ = true;
  if (job_failure(store)) return;  // another failure was first
  append(store, "failed", encode_failure(record));
  if (auto first = job_failure(store); first && *first == record) {
    spdlog::info("told the other nodes: {}", record.str());
  }
}

void ControlEngine::report_generation_failure(Generation generation, const FailureNotice& notice) {
  const FailureRecord record{options_.node_rank, notice.rank, notice.exit_code, notice.what};
  try {
    std::lock_guard<std::mutex> lock(store_mutex_);
    end_generation(*store_, generation.index(), record);
    spdlog::info("told the other nodes: generation {} failed: {}", generation.index(),
                 record.str());
  } catch (const ControlError& e) {
    spdlog::error("could not tell the other nodes that generation {} failed ({}): {}",
                  generation.index(), record.str(), e.what());
  }
}

void ControlEngine::report_generation_success(Generation generation) {
  const int k = generation.index();
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_generation_ == k) members = current_members_;
  }
  try {
    std::lock_guard<std::mutex> lock(store_mutex_);
    append(*store_, gen("done", k), "");
    RosterCursor cursor = 0;
    std::set<int> done;
    for (const Entry& e : read_entries(*store_, gen("done", k), cursor)) {
      if (contains(members, e.node)) done.insert(e.node);
    }
    // The last member to finish says so under "gend/K", which every watcher waits on.
    if (!members.empty() && done.size() == members.size()) {
      append(*store_, gen("gend", k), encode_generation_success(k));
    }
  } catch (const ControlError& e) {
    spdlog::error(
        "could not tell the other nodes that this node's part of generation {} "
        "succeeded: {}",
        k, e.what());
  }
}

void ControlEngine::report_failure(const FailureNotice& notice) {
  FailureRecord record{options_.node_rank, notice.rank, notice.exit_code, notice.what};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Ended by another node's failure: pass on that node's own record.
    if (notice.from_peer && peer_generation_failure_) record = *peer_generation_failure_;
    if (lost_) return;  // the store is out of reach, or the job went on without this node
  }
  if (record.exit_code == 0) record.exit_code = 1;
  try {
    std::lock_guard<std::mutex> lock(store_mutex_);
    publish_failure(*store_, record);
  } catch (const ControlError& e) {
    spdlog::error("could not tell the other nodes that {}: {}", record.str(), e.what());
  }
}

// --- watching -----------------------------------------------------------------------------------

void ControlEngine::watch(std::shared_ptr<ExternalStop> stop) {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = std::move(stop);
}

void ControlEngine::stop_watcher() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void ControlEngine::lose(const std::string& why) {
  const FailureRecord record{options_.node_rank, std::nullopt, 1, "lost the job: " + why};
  spdlog::error("{}", record.what);
  std::shared_ptr<ExternalStop> stop;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lost_ = record.what;
    if (!seen_failure_) seen_failure_ = record;
    stop = stop_;
  }
  if (stop) stop->request(record.exit_code, record.what);
}

void ControlEngine::watch_loop() {
  Watch w(options_.pace.straggler_ratio);
  while (!stopping_) {
    try {
      watch_round(w);
      w.last_ok = Clock::now();
    } catch (const ControlStoreError& e) {
      if (stopping_) return;
      // A store that does not answer for the heartbeat timeout has lost this node.
      spdlog::debug("{}", e.what());
      if (e.store_gone()) {
        lose("lost the control connection to " + store_->where() + ": " + e.what());
        return;
      }
      if (Clock::now() - w.last_ok >= options_.heartbeat_timeout) {
        lose("lost the control connection to " + store_->where() + " for " +
             seconds_text(options_.heartbeat_timeout) + " s: " + e.what());
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

void ControlEngine::watch_round(Watch& w) {
  const int me = options_.node_rank;
  ControlStore& store = *watch_store_;
  beat(store);
  std::shared_ptr<ExternalStop> stop;
  int generation;
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop = stop_;
    generation = current_generation_;
    members = current_members_;
  }
  if (!stop) {
    // Not watching yet (joining): beats only.
    std::unique_lock<std::mutex> lock(stop_mutex_);
    stop_cv_.wait_for(lock, options_.heartbeat_interval, [this] { return stopping_.load(); });
    return;
  }
  if (!w.delivered) {
    for (const Entry& e : read_entries(store, "failed", w.failed_at)) {
      std::optional<FailureRecord> record = failure_in(e, store);
      if (!record) continue;
      w.delivered = true;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        seen_failure_ = record;
      }
      if (record->node != me) {
        stop->request(record->exit_code, "node " + std::to_string(record->node) +
                                             " failed first (" + record->str() + ")");
      } else if (!published_failure_) {
        stop->request(record->exit_code,
                      "the other nodes took this node for failed (" + record->str() + ")");
      }
      break;
    }
  }
  watch_peers(w, generation, members);
  ++w.rounds;
  if (generation < 0 || w.ended.count(generation)) {
    std::unique_lock<std::mutex> lock(stop_mutex_);
    stop_cv_.wait_for(lock, options_.heartbeat_interval, [this] { return stopping_.load(); });
    return;
  }
  // One request per period: waits until the period passed or the running generation ended.
  const std::string roster = gen("gend", generation);
  if (!store.wait(name(roster), 0, options_.heartbeat_interval)) return;
  const std::optional<Entry> end = first_entry(store, roster);
  if (!end) return;
  w.ended.insert(generation);
  std::optional<FailureRecord> failure;
  try {
    failure = decode_generation_end(end->payload, generation,
                                    "'" + name(roster) + "' in " + store.where());
  } catch (const RecordError& e) {
    failure = FailureRecord{end->node, std::nullopt, 1, e.what()};
  }
  if (!failure) {
    succeeded_ = true;
    stop->generation_succeeded(Generation(generation));
    return;
  }
  if (failure->node != me) {
    std::lock_guard<std::mutex> lock(mutex_);
    peer_generation_failure_ = *failure;
  }
  // Evicted (--straggler=evict): this node leaves; the others go on without it.
  RosterCursor at = 0;
  for (const Entry& e : read_entries(store, gen("evict", generation), at)) {
    if (e.node != end->node || e.payload.rfind(launcher_ + " ", 0) != 0) continue;
    stop->request(kExitError,
                  "this node (node " + std::to_string(me) +
                      ") was evicted from the job: " + e.payload.substr(launcher_.size() + 1));
    return;
  }
  // A node is not told of its own failure, unless another node wrote it (it was taken for lost)
  // or it is an admission (exit code 0).
  if (failure->node != me || failure->exit_code == 0 || end->node != me) {
    stop->generation_failed(Generation(generation), failure->exit_code,
                            "generation " + std::to_string(generation) + " failed on node " +
                                std::to_string(failure->node) + ": " + failure->what);
  }
}

void ControlEngine::watch_peers(Watch& w, int generation, const std::vector<int>& members) {
  const int me = options_.node_rank;
  ControlStore& store = *watch_store_;
  // The decider reads who is in the job every period, the others every fourth (it changes only
  // when a node arrives, leaves or is lost, and they watch only the decider meanwhile).
  if (w.rounds % 4 == 0 || lead(w.roll) == me) refresh(store, w.roll);
  // The decider watches every other live node; every other node watches the decider.
  const int decider = lead(w.roll);
  std::vector<int> watched;
  if (decider == me) {
    for (int n : w.roll.live_nodes()) {
      if (n != me) watched.push_back(n);
    }
  } else {
    watched.push_back(decider);
  }
  std::vector<std::string> keys;
  for (int n : watched) keys.push_back(name("hb/" + *w.roll.launcher(n)));
  const std::vector<std::optional<std::string>> values = store.get(keys);
  const auto now = Clock::now();
  std::vector<NodePace> paces;  // the members' (the decider's look across nodes)
  for (std::size_t i = 0; i < watched.size(); ++i) {
    const int n = watched[i];
    Watch::Beat& beat = w.beats[*w.roll.launcher(n)];
    // A beat counts when it verifies: a stranger's value (or a deleted cell) is no sign of life.
    const std::optional<Entry> entry =
        values[i] ? open_entry(keys[i], *values[i]) : std::optional<Entry>();
    if (entry && contains(members, n)) {
      if (auto pace = pace_of(entry->payload, n, generation)) paces.push_back(*pace);
    }
    const bool fresh = entry && *values[i] != beat.value;
    if (beat.value.empty() || fresh) {
      if (values[i]) beat.value = *values[i];
      beat.changed = now;
      continue;
    }
    if (now - beat.changed < options_.heartbeat_timeout) continue;
    declare_lost(w, n, generation, members);
  }
  if (decider == me && generation >= 0 && options_.pace.stragglers) {
    judge_nodes(w, generation, members, std::move(paces));
  }
  // Elastic, the decider: a node waiting to be admitted fails the running generation (while
  // restarts are left), so that the next one takes it in.
  if (decider != me || !options_.elastic() || generation < 0 ||
      generation >= options_.max_restarts || w.admissions.count(generation) ||
      w.ended.count(generation)) {
    return;
  }
  RosterCursor cursor = 0;
  for (const Entry& e : read_entries(store, "waiting", cursor)) {
    const int n = e.node;
    if (contains(members, n) || !w.roll.live(n)) {
      continue;
    }
    w.admissions.insert(generation);
    const FailureRecord record{
        me, std::nullopt, 0,
        "node " + std::to_string(n) + " asks to join the job: re-forming it with the new node"};
    spdlog::info("{}", record.what);
    end_generation(store, generation, record);
    return;
  }
}

void ControlEngine::judge_nodes(Watch& w, int generation, const std::vector<int>& members,
                                std::vector<NodePace> paces) {
  if (w.paces.generation() != generation) w.paces.begin_generation(generation);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pace_ && pace_->generation == generation && contains(members, options_.node_rank)) {
      paces.push_back(NodePace{options_.node_rank, pace_->step, pace_->own_seconds});
    }
  }
  // Each verdict is logged, and kept with the line for the run report.
  const auto tell = [this](NodePaceJudge::Verdict v, const std::string& line) {
    if (v.straggler) {
      spdlog::warn("{}", line);
    } else {
      spdlog::info("{}", line);
    }
    v.message = line;
    std::lock_guard<std::mutex> lock(mutex_);
    node_verdicts_.push_back(std::move(v));
  };
  for (const NodePaceJudge::Verdict& v : w.paces.look(paces)) {
    if (!v.straggler) {
      tell(v, v.message);
      continue;
    }
    const std::string why_not = eviction_veto(generation, members, v.node);
    if (!options_.pace.evict || !why_not.empty()) {
      tell(v,
           v.message +
               (options_.pace.evict ? " (--straggler=evict: not evicted, " + why_not + ")" : ""));
      continue;
    }
    // The node leaves (its watcher reads this record when the generation ends, below), and the
    // others form the next generation without it.
    const std::string* launcher = w.roll.launcher(v.node);
    if (launcher == nullptr || w.ended.count(generation)) continue;
    tell(v, v.message + ": evicting node " + std::to_string(v.node) + " (--straggler=evict)");
    append(*watch_store_, gen("evict", generation), *launcher + " " + v.message);
    // Named after the evicted node, so that every other node (this one included) restarts.
    end_generation(*watch_store_, generation,
                   FailureRecord{v.node, std::nullopt, 1,
                                 "node " + std::to_string(v.node) +
                                     " is a straggler: re-forming the job without it"});
    return;
  }
}

std::string ControlEngine::eviction_veto(int generation, const std::vector<int>& members,
                                         int node) const {
  preflight::JobShape job;
  job.elastic = options_.elastic();
  job.min_nodes = options_.min_nodes();
  job.restart_left = generation < options_.max_restarts;
  if (!store_->outlives_launchers()) job.store_host = 0;  // node 0 hosts the TCP store
  return preflight::cannot_go_on_without(job, {node}, static_cast<int>(members.size()));
}

void ControlEngine::report_pace(Generation generation, std::int64_t step, double own_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  pace_ = PaceReport{generation.index(), step, own_seconds};
}

std::vector<NodePaceJudge::Verdict> ControlEngine::take_node_verdicts() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(node_verdicts_, {});
}

void ControlEngine::declare_lost(Watch& w, int node, int generation,
                                 const std::vector<int>& members) {
  const std::string launcher = *w.roll.launcher(node);
  if (!w.declared.insert({generation, launcher}).second) return;
  w.roll.lost.insert(launcher);
  const FailureRecord lost{node, std::nullopt, 1,
                           "node " + std::to_string(node) +
                               "'s launcher stopped answering (no heartbeat for " +
                               seconds_text(options_.heartbeat_timeout) + " s)"};
  spdlog::error("{}", lost.what);
  ControlStore& store = *watch_store_;
  append(store, "lost", launcher);
  if (generation >= 0 && contains(members, node)) end_generation(store, generation, lost);
  // A fixed-size job cannot go on without it; an elastic one forms the next generation, and one
  // that waits for a replacement waits for it there.
  if (!options_.survives_lost_nodes()) publish_failure(store, lost);
}

// --- leaving ------------------------------------------------------------------------------------

void ControlEngine::leave() {
  if (left_) return;
  left_ = true;
  std::lock_guard<std::mutex> lock(store_mutex_);
  append(*store_, "bye", "");
  if (!store_->outlives_launchers()) return;
  // The last launcher out removes the run and the pointer to it.
  Roll roll;
  refresh(*store_, roll);
  if (!roll.live_nodes().empty()) return;
  const std::optional<std::string> pointer = store_->get({"run"}).front();
  if (pointer) {
    if (auto p = open_entry("run", *pointer); p && p->payload.rfind(token_ + " ", 0) == 0) {
      store_->swap("run", pointer, std::nullopt);
    }
  }
  store_->erase(token_ + "/");
  spdlog::debug("control plane: removed the records of run {}", token_);
}

std::optional<FailureRecord> ControlEngine::finish() {
  auto known = [this] {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::make_pair(seen_failure_, lost_.has_value());
  };
  auto [failure, lost] = known();
  if (lost) {
    stop_watcher();
    return failure;
  }
  try {
    std::lock_guard<std::mutex> lock(store_mutex_);
    // Read before the goodbye: node 0 may end, its store with it, once it has every goodbye.
    if (!failure) failure = job_failure(*store_);
    // The job is over for everyone (it failed, a generation succeeded, or node 0 ends and its
    // store with it): nodes still waiting to be admitted give up. A node that ends alone (left
    // out of a generation) says nothing of the kind: the others go on.
    if (failure || succeeded_ || store_->hosted_here()) append(*store_, "over", "");
  } catch (const ControlError& e) {
    spdlog::error("{}", e.what());
  }
  if (!store_->hosted_here()) {
    stop_watcher();
    try {
      leave();
    } catch (const ControlError& e) {
      spdlog::debug("could not say goodbye through {}: {}", store_->where(), e.what());
    }
    return failure ? failure : known().first;
  }
  // Node 0 hosts the store: it stays until every other node said goodbye or was declared lost
  // (its watcher goes on meanwhile), at most linger_timeout once a failure is known.
  try {
    leave();
    await_goodbyes([&] {
      std::lock_guard<std::mutex> lock(store_mutex_);
      return job_failure(*store_) || known().second;
    });
  } catch (const ControlError& e) {
    spdlog::error("{}", e.what());
  }
  stop_watcher();
  if (!failure) {
    try {
      std::lock_guard<std::mutex> lock(store_mutex_);
      failure = job_failure(*store_);
    } catch (const ControlError&) {
    }
  }
  return failure ? failure : known().first;
}

void ControlEngine::abandon() {
  stop_watcher();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lost_) return;
  }
  try {
    leave();
    // Node 0 hosts the store: it stays (at most linger_timeout) until the nodes that joined said
    // goodbye, so they can read what differed.
    if (store_->hosted_here()) await_goodbyes([] { return true; });
  } catch (const std::exception& e) {
    spdlog::debug("{} while giving up: {}", store_->where(), e.what());
  }
}

void ControlEngine::await_goodbyes(const std::function<bool()>& lingering) {
  std::optional<Clock::time_point> linger;
  Roll roll;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(store_mutex_);
      refresh(*store_, roll);
    }
    const std::set<int> pending = roll.live_nodes();
    if (pending.empty()) return;
    if (!linger && lingering()) linger = Clock::now() + options_.linger_timeout;
    if (linger && Clock::now() >= *linger) {
      spdlog::warn("node(s) {} did not say goodbye within {} s; leaving", node_list(pending),
                   seconds_text(options_.linger_timeout));
      return;
    }
    std::lock_guard<std::mutex> lock(store_mutex_);
    store_->wait(name("bye"), roll.bye_at, kControlPollInterval);
  }
}

}  // namespace ddl::launcher
