// The control connection of a multi-node job: node 0's launcher hosts a TcpStoreServer (the
// worker store's code, with the job's secret) and every node's launcher, node 0's included,
// connects to it. Through it the launchers
// - agree on the job: each publishes its job description (JobDescription) and its workers'
//   endpoints; a node whose description differs from another's fails with a ControlError naming
//   the field and both values, on both sides; a node that does not join within the rendezvous
//   deadline is named in a ControlError. Node 0's job id is adopted by every node;
// - fail fast together: the first node whose job fails for good sets the key "failed"
//   (atomically, compare-and-set on an absent key) to a failure record (FailureRecord,
//   launcher/coord/records.h); every launcher watches that key on a thread of its own
//   (ControlChannel::watch) and stops its workers through an ExternalStop;
// - notice a vanished launcher: every node adds to "hb/<node>" every heartbeat_interval; node 0
//   declares a node that stops (and has not said goodbye) failed after heartbeat_timeout. The
//   other nodes notice node 0's loss as a broken connection or a reply that does not come within
//   heartbeat_timeout.
// - run every generation as one: a generation (a start of the job, launcher/cluster/generation.h)
//   begins with every node joining it (the roster "join/<K>"); node 0 decides who takes part
//   and gathers their endpoints ("members/<K>", a Members record) and every node plans its ranks
//   over those members. How generation K ended is published once under "gend/<K>"
//   (compare-and-set): its first failure anywhere, or its success, set by the member whose
//   report brings "done/<K>" (a counter of the members whose processes all exited 0) to the
//   members' count. Every watcher waits on that one key and tells its supervisor
//   (ExternalStop::generation_failed, which stops its processes of K and, while restarts are
//   left, joins K+1 with the others; or ExternalStop::generation_succeeded).
// - elastic node counts (min_nnodes < nnodes): node 0 starts a generation once min_nnodes have
//   joined and no more are expected (the previous members, less those lost, plus nodes waiting
//   to be admitted) or last_call_timeout after min_nnodes were there; a node lost while a
//   generation runs fails that generation (restartable) instead of the job; a node that arrives
//   while a generation runs enters the roster "waiting" and node 0 fails the running generation
//   so that the next one takes it in (while restarts are left). With a fixed count every node
//   must join every generation and a lost node ends the job.
// What it costs (docs/multi-node.md): each node compares its description with node 0's only
// (node 0 with each node's); who claimed, described, joined, waits or said goodbye is a roster
// (a ticket counter and one key per entry, control.cpp) that node 0 reads incrementally; node 0
// reads every heartbeat in one multi_get. So a rendezvous, a generation's decision and a
// finish cost O(nodes) requests in all, and while the job runs each node makes about three
// requests per heartbeat_interval (its heartbeat, a wait on "gend/<K>", a look at "failed"),
// node 0 a few more: O(nodes) per period, never O(nodes^2).
// Records are JSON (launcher/coord/records.h); per-node keys live in one PrefixStore view per
// family ("claim/<node>", "desc/<node>", "endpoints/<node>", "hb/<node>").
// Node 0 must live as long as the job: it hosts the store (as torchrun's c10d rendezvous).
// Single-node jobs use none of this.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "env/contract.h"
#include "launcher/cluster/generation.h"
#include "launcher/coord/records.h"
#include "launcher/coord/control_plane.h"
#include "launcher/supervise/peers.h"

namespace ddl {
class Store;
class TcpStore;
class TcpStoreServer;
struct TcpStoreOptions;
}  // namespace ddl

namespace ddl::launcher {

// The TCP control plane. Move-less, copy-less: owns a server (node 0), two connections and the watch thread.
class ControlChannel final : public Control {
 public:
  // Node 0 starts the server; every node connects (retrying until rendezvous_timeout). Throws
  // ControlError; for a node that finds no store at node 0's address by then, one that says node
  // 0's rendezvous deadline may have passed or the job started or ended without this node. With
  // node_rank kAutoNodeRank the launcher that can host the store at the endpoint (its address is
  // this machine's and the port is free: the first launcher there) becomes node 0, and each other
  // one takes the next node rank from node 0's counter (1, 2, ... in the order they connect), as
  // Paddle's master and torchrun's c10d rendezvous hand ranks out.
  explicit ControlChannel(const ControlOptions& options);

  // This node's rank (assigned by the constructor under kAutoNodeRank).
  int node_rank() const override { return options_.node_rank; }
  ~ControlChannel() override;
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Publishes this node's description and endpoints (and, on node 0, `proposed_job_id` and, when
  // not empty, `proposed_job_secret`: the workers' secret of a job whose launchers were admitted
  // without one, see ControlOptions::munge) and
  // compares descriptions: with a fixed node count it waits for every node's; elastic, a node
  // compares with node 0's (node 0 compares each node as it joins a generation). Throws
  // ControlError for a mismatch, a second launcher claiming this node rank, a node missing at the
  // deadline, or a lost connection, and RecordError (a ControlError) for a record that cannot be
  // decoded.
  Agreement rendezvous(const JobDescription& mine, const std::vector<env::Endpoint>& local,
                       const std::string& proposed_job_id,
                       const std::string& proposed_job_secret = {}) override;

  // Joins generation `generation` (see the header comment) and returns its membership, once node
  // 0 decided it. A node that arrives late (elastic) waits to be admitted to a later generation,
  // which is then the one returned. Throws ControlError: the job failed or ended meanwhile, too
  // few nodes by the rendezvous deadline, a lost node of a fixed-size job, this node left out of
  // a generation it was restarting into, a description that differs, a lost connection.
  Membership join_generation(Generation generation) override;

  // This node's processes of `generation` failed / all exited 0 (see the header comment).
  // Thread-safe; never throw (a failure to publish is logged).
  void report_generation_failure(Generation generation, const FailureNotice& notice) override;
  void report_generation_success(Generation generation) override;

  // Starts the watch thread: heartbeats, the "failed" key (a failure of another node, or a lost
  // connection to node 0, becomes stop->request(code, reason)), and on node 0 the other nodes'
  // heartbeats. Throws ControlError if the watch connection cannot be made.
  void watch(std::shared_ptr<ExternalStop> stop) override;

  // Publishes a failure of this node unless another was first. Thread-safe; never throws (a
  // failure to publish is logged).
  void report_failure(const FailureNotice& notice) override;

  // Ends this node's part: the other nodes say goodbye; node 0 waits until every other node has
  // said goodbye or been declared lost, bounded by linger_timeout once a failure is known. Returns
  // the job's first failure, if any. Never throws.
  std::optional<FailureRecord> finish() override;

  // After a failed rendezvous: the other nodes say goodbye; node 0 waits (at most linger_timeout)
  // for the nodes that joined to do so, so they can read what differed. Never throws.
  void abandon() override;

 private:
  // Options for a store client of this channel: job, secret and node as configured.
  TcpStoreOptions store_options(std::chrono::milliseconds connect_timeout) const;
  // The watch thread (see watch()), one poll at a time: this node's heartbeat, the running
  // generation's failure or success, the job's failure, and on node 0 the other nodes' heartbeats.
  struct WatchState;
  void watch_loop(std::shared_ptr<ExternalStop> stop);
  // Returns the generation it watched (-1 before the first join).
  int watch_generation(WatchState& state, ExternalStop& stop);
  void watch_job_failure(WatchState& state, ExternalStop& stop);
  void watch_peers(WatchState& state, int generation);
  // Node 0: `node` stopped answering while `generation` ran: it fails that generation (elastic)
  // or the job.
  void declare_lost(int node, int generation);
  // The record under "failed", if set. A malformed one is reported as a failure of unknown origin
  // (node -1) quoting the decoder's error: the job still fails fast.
  std::optional<FailureRecord> read_failure(Store& store);
  // The failure the watcher saw, else the one under "failed" (none when the store cannot be
  // reached any more).
  std::optional<FailureRecord> known_failure();
  // Sets "failed" to `record` unless another failure was first; true when this one won.
  bool publish_failure(Store& store, const FailureRecord& record);
  std::string where() const;
  // kAutoNodeRank: hosts the store (node 0) or asks node 0 for the next node rank.
  void assign_node_rank();

  bool elastic() const { return options_.elastic(); }
  // Node 0: waits until generation K can start and publishes its members.
  std::vector<int> decide_members(int generation, std::chrono::steady_clock::time_point deadline);
  // Node 0: the rendezvous failed (a mismatch, a node missing): publishes it as the job's
  // failure, so the nodes already waiting for the first generation stop at once. Never throws.
  void fail_rendezvous(const ControlError& error);
  // Sets stopping_, wakes the watcher and joins it.
  void stop_watcher();
  // The watcher's sleep: `period`, or until stop_watcher().
  void pause(std::chrono::milliseconds period);
  // A node other than 0 is done (finish, abandon): once.
  void say_goodbye();
  std::set<int> lost_nodes();
  // Throws ControlError when the job failed for good or (not on node 0) ended.
  void check_not_over(Store& store, const std::string& while_doing);
  // Elastic, node 0's watcher: fails the running generation for a node waiting to be admitted.
  void admit_waiting(Store& store, WatchState& state);

  ControlOptions options_;
  JobDescription description_;  // this node's, for node 0's checks of late joiners
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;  // rendezvous, reports, finish (the supervisor's thread)
  std::unique_ptr<TcpStore> watch_store_;
  std::thread watcher_;
  bool said_goodbye_ = false;  // the supervisor's thread (finish, abandon)
  std::atomic<bool> stopping_{false};
  std::mutex stop_mutex_;  // with stop_cv_: wakes the watcher's pauses when stopping_ is set
  std::condition_variable stop_cv_;
  std::mutex mutex_;
  std::set<int> lost_nodes_;                   // node 0: nodes declared lost by the watcher
  std::optional<FailureRecord> seen_failure_;  // what the watcher read under "failed"
  // The last generation failure another node reported (the watcher): when this node's job ends
  // because of it, that node's record is what this node passes on as the job's failure.
  std::optional<FailureRecord> peer_generation_failure_;
  std::set<int> joined_;         // nodes whose description was read
  std::set<int> checked_;        // nodes whose description was compared with this node's
  int current_generation_ = -1;  // the generation last joined (watcher: what to watch)
  std::vector<int> current_members_;
};

}  // namespace ddl::launcher
