// The control plane of a multi-node job: what the launchers of its nodes agree on through it
// (join, generations, failures, heartbeats, elastic admission). One engine
// (launcher/coord/engine.h) decides everything, over one of two stores (control_store.h):
// - node 0's TCP store: node 0's launcher hosts it; the job lives as long
//   as node 0 does (as torchrun's c10d rendezvous);
// - an etcd cluster: no node is special, so the job survives the loss of
//   any node (as torchrun's etcd rendezvous and Paddle's etcd master).
// make_control() picks the store from ControlOptions::etcd_endpoints; nothing above this
// interface (launcher/job/) knows which.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "env/contract.h"
#include "env/text.h"
#include "launcher/cluster/generation.h"
#include "launcher/coord/records.h"
#include "launcher/health/node_pace.h"
#include "launcher/options/options.h"
#include "launcher/supervise/peers.h"

namespace ddl::launcher {

class MungeAdmission;

// ControlOptions::node_rank for a node that has none of its own (torchrun's c10d and etcd
// backends, Paddle's --master without --rank): the control plane hands node ranks out.
inline constexpr int kAutoNodeRank = -1;

// A launcher's heartbeat in a job of up to kHeartbeatNodes nodes (heartbeat_for, below).
inline constexpr std::chrono::milliseconds kHeartbeatInterval{250};
inline constexpr std::chrono::milliseconds kHeartbeatTimeout{4'000};

struct ControlOptions {
  env::Endpoint endpoint;  // node 0's control store (TCP control plane)
  // Not empty: the etcd cluster that holds the job's state (its members' client endpoints, tried
  // in order), and `endpoint` is not used.
  std::vector<env::Endpoint> etcd_endpoints;
  EtcdSecurity etcd_security;  // TLS and authentication towards etcd
  std::string job_id;  // of the control store (the same on every node); etcd: the key prefix's
  std::string secret;  // DDL_JOB_SECRET
  // Set: the launchers admit each other with munge credentials (launcher/coord/munge_auth.h)
  // instead of `secret`: every connection presents a fresh one, node 0's store decodes it.
  std::shared_ptr<const MungeAdmission> munge;
  int node_rank = 0;     // or kAutoNodeRank
  int nnodes = 2;        // the most nodes (elastic: MAX)
  int min_nnodes = 0;    // the fewest (elastic when below nnodes); 0: nnodes, a fixed count
  int max_restarts = 0;  // job-wide; node 0 admits waiting nodes only while restarts are left
  std::chrono::milliseconds last_call_timeout{30'000};
  std::chrono::milliseconds rendezvous_timeout{300'000};  // to join and agree
  std::chrono::milliseconds heartbeat_interval = kHeartbeatInterval;
  std::chrono::milliseconds heartbeat_timeout = kHeartbeatTimeout;
  // How long node 0 keeps the store up, after its job failed, for the other nodes to say goodbye.
  std::chrono::milliseconds linger_timeout{15'000};
  // Every node publishes as many endpoints as node 0 (a join with another count is an error);
  // false for a rank mapping, whose nodes run different numbers of ranks.
  bool equal_node_sizes = true;
  // --sort_ip (Paddle 2.x): a generation's members, and so the ranks, in the order of their
  // addresses (membership_of) instead of their node ranks.
  bool order_by_address = false;
  // --straggler, --straggler_ratio: the decider names (and, evict, sends away) a slow node.
  PaceOptions pace;
  // A fixed count (not elastic) whose lost node is waited for, until --rendezvous_timeout, for
  // a launcher that takes its place (Paddle's fault-tolerance level: its platform starts the
  // pod again) instead of failing the job.
  bool wait_for_replacement = false;
  // Paddle's fleet elastic mode: while the nodes gather, every 2 s (its pace), the line its
  // elastic manager prints, "not ready for np N with hosts ['HOST:PORT', ...]".
  bool paddle_elastic = false;

  bool etcd() const { return !etcd_endpoints.empty(); }
  // Elastic: fewer than nnodes nodes may form a generation.
  bool elastic() const { return min_nnodes > 0 && min_nnodes < nnodes; }
  // A lost node ends only its generation: the job goes on without it (elastic) or with a
  // launcher that takes its place.
  bool survives_lost_nodes() const { return elastic() || wait_for_replacement; }
  // The fewest nodes a generation starts with.
  int min_nodes() const { return elastic() ? min_nnodes : nnodes; }
};

inline constexpr std::chrono::milliseconds kControlPollInterval{100};

// The heartbeat of a job of `nnodes` nodes: a beat every 0.25 s, lost after 4 s, up to
// kHeartbeatNodes nodes; beyond, both stretch by nnodes / kHeartbeatNodes (rounded up), so that
// the store (and the machine, for simulated nodes) serves about as many beats and looks per
// second as for 64 nodes. A 512-node job beats every 2 s and is lost after 32 s (torchrun's c10d
// rendezvous: every 5 s, lost after 30 s).
inline constexpr int kHeartbeatNodes = 64;
struct Heartbeat {
  std::chrono::milliseconds interval;
  std::chrono::milliseconds timeout;
};
Heartbeat heartbeat_for(int nnodes);

// One generation's part of the job, as the control plane decided it.
struct Membership {
  Generation generation;
  std::vector<int> nodes;                // taking part, ascending node ranks (or by address)
  std::vector<env::Endpoint> endpoints;  // every rank's, member-major
  std::vector<std::string> hosts;        // each member's address (its first endpoint's host)
  int position = 0;                      // this node's index in `nodes` (its node rank in plans)
};

// Generation `members.generation` as node `me` sees it: the members' endpoints member-major and
// its position among them. With `equal_node_sizes`, a member that published another number of
// endpoints than the first is a ControlError. With `by_address` the members are ordered by their
// addresses (their first endpoint's host: IPv4 addresses in numeric order, then host names in
// text order; node rank among equals), as Paddle 2.x's master sorts its peers for --sort_ip.
Membership membership_of(const Members& members, int me, bool equal_node_sizes,
                         bool by_address = false);

// What a control plane knows of generation `generation` at one moment; each plane fills it from
// its own records (node 0's store, or etcd's keys and leases).
struct GenerationCandidates {
  int generation = 0;
  std::set<int> joined;    // joined the generation and alive, node ranks below nnodes
  std::set<int> expected;  // waited for: with a fixed count or in generation 0 every node;
                           // elastic later, the nodes still in the job (previous members and
                           // nodes waiting to be admitted)
  std::set<int> lost;      // known lost: a fixed-size job cannot start without one of the
                           // expected nodes among them; an elastic one stops waiting for them
};

// The rule both control planes decide a generation's members by: every expected node joined, or
// at least options.min_nodes() joined and the last call (options.last_call_timeout from the first
// moment they were there; kept in `last_call`) or the rendezvous `deadline` has passed. Returns
// the members (ascending) once the generation can start, nullopt while it waits. Throws
// ControlError when a fixed-size job lost an expected node (`lost_how` says how, e.g.
// " (their etcd leases expired)") or fewer than the minimum joined by `deadline` (`where` names
// the place joined, e.g. "at the control store at 10.0.0.1:29501").
std::optional<std::vector<int>> ready_members(
    const ControlOptions& options, const GenerationCandidates& candidates,
    std::chrono::steady_clock::time_point now, std::chrono::steady_clock::time_point deadline,
    std::optional<std::chrono::steady_clock::time_point>& last_call, const std::string& where,
    const std::string& lost_how);

// "0, 2, 3": node ranks as messages list them.
std::string node_list(const std::set<int>& nodes);
using env::seconds_text;

// One node's view of the job's control plane. Its methods are called from the launcher's
// supervising thread, except the report_* ones (any thread). Errors are ControlError.
class Control {
 public:
  virtual ~Control() = default;

  // This node's rank (assigned by the control plane under kAutoNodeRank).
  virtual int node_rank() const = 0;

  struct Agreement {
    std::string job_id;      // the first node's proposal (node 0's on the TCP control plane)
    std::string job_secret;  // its proposal; empty when it made none
  };

  // Publishes this node's description and endpoints (and its proposals of a job id and, when not
  // empty, of the workers' secret) and compares descriptions. Throws ControlError for a
  // mismatch, a second launcher claiming this node rank, a node missing at the deadline, or a
  // lost connection.
  virtual Agreement rendezvous(const JobDescription& mine, const std::vector<env::Endpoint>& local,
                               const std::string& proposed_job_id,
                               const std::string& proposed_job_secret = {}) = 0;

  // Joins generation `generation` and returns its membership once it is decided. A node that
  // arrives late (elastic) waits to be admitted to a later generation, which is then the one
  // returned. Throws ControlError: the job failed or ended meanwhile, too few nodes by the
  // rendezvous deadline, a lost node of a fixed-size job, this node left out of a generation it
  // was restarting into, a description that differs, a lost connection.
  virtual Membership join_generation(Generation generation) = 0;

  // Every member of `generation` (the one join_generation returned last) publishes `payload`
  // under `topic`; returns each member's, by node rank, once every member's is there. Throws
  // ControlError naming the members missing at `timeout`, or when the job failed or the
  // generation ended meanwhile. The pre-flight check's exchange (launcher/preflight/check.h).
  virtual std::map<int, std::string> gather(Generation generation, const std::string& topic,
                                            const std::string& payload,
                                            std::chrono::milliseconds timeout) = 0;

  // This node's pace in `generation` after `step` (the median of its ranks' own step times),
  // for the node that judges stragglers across nodes. Thread-safe; never throws.
  virtual void report_pace(Generation generation, std::int64_t step, double own_seconds) = 0;

  // The straggler verdicts across nodes this node reached (as the decider) since the last call,
  // each with the line it logged, for the run report. Thread-safe; never throws.
  virtual std::vector<NodePaceJudge::Verdict> take_node_verdicts() = 0;

  // This node's processes of `generation` failed / all exited 0. Thread-safe; never throw.
  virtual void report_generation_failure(Generation generation, const FailureNotice& notice) = 0;
  virtual void report_generation_success(Generation generation) = 0;

  // Starts watching the job: heartbeats (or lease keep-alives), the job's failure, the running
  // generation's end, lost nodes; what concerns this node becomes a call on `stop`. Throws
  // ControlError if it cannot start.
  virtual void watch(std::shared_ptr<ExternalStop> stop) = 0;

  // Publishes a failure of this node unless another was first. Thread-safe; never throws.
  virtual void report_failure(const FailureNotice& notice) = 0;

  // Ends this node's part; returns the job's first failure, if any. Never throws.
  virtual std::optional<FailureRecord> finish() = 0;

  // After a failed rendezvous: leaves so that the others can read what differed. Never throws.
  virtual void abandon() = 0;
};

// The TCP control plane, or the etcd one when options.etcd(). Throws ControlError (see each
// implementation's constructor).
std::unique_ptr<Control> make_control(const ControlOptions& options);

}  // namespace ddl::launcher
