// The control plane of a multi-node job, written once over a ControlStore (control_store.h):
// node 0's TCP store, etcd, or memory. What the launchers agree on and how:
//
// - The run. A pointer cell "run" names the current run's token; every other name starts with
//   it ("<token>/..."). The first launcher draws the token. In a store that outlives its
//   launchers (etcd), a run none of whose launchers beat any more (a crashed job) is stale and
//   the next launcher replaces it, so an earlier run's records never become this one's.
// - Trust. Every record the engine uses is an envelope "<mac>:<node>:<launcher>:<payload>",
//   where the mac is the HMAC-SHA-256 under DDL_JOB_SECRET of the name it is stored under (the
//   run's token and, where there is one, the generation, included) and the rest: a record from
//   another run, another generation or another name does not verify. Records are read through one
//   function (open_entry); what does not verify is refused, named in the log, and never counted.
//   Without a secret nothing is signed (the documented open mode, as torchrun's).
// - Node ranks: roster "claim/<n>"; the first verified entry holds rank n. A launcher without a
//   rank takes the lowest n (from ControlStore::first_free_rank) whose roster is empty or whose
//   first entry is its own.
// - Agreement: each node presents itself once, in roster "described" (description, endpoints,
//   proposals), which every node reads from the front with a cursor.
//   Node 0's presentation is the reference: every node compares its description with node 0's,
//   node 0 compares every node's (with a fixed count, in the rendezvous; elastic, as they join a
//   generation), so a mismatch fails on both sides. Node 0's job id and secret hold.
// - Liveness: each launcher beats a cell "hb/<n>" (count and wall-clock time, signed) every
//   heartbeat_interval with a compare-and-set on its last value, so a beat finds its cell
//   deleted or overwritten from under it, and stops the node saying so. The decider (the lowest
//   live node: node 0 on the TCP store) watches every other node's beat; every other node watches
//   the decider's. A node whose beat stands still for heartbeat_timeout is declared lost
//   ("lost"), which fails the running generation (elastic) or the job.
// - Generations: each node enters "join/<K>"; the decider applies ready_members()
//   (control_plane.h) and appends "members/<K>"; the first verified entry is the generation for
//   every node. How K ended is the first verified entry of "gend/<K>": a failure, a lost member,
//   an admission (elastic: a node waiting in "waiting" fails the running generation while
//   restarts are left), or success once every member appended to "done/<K>".
// - Exchanges (gather): each member of generation K appends to "<topic>/<K>"; an entry counts
//   when its writer is the member's launcher.
// - The job's failure: the first verified entry of "failed" (exit code 1..255). A node named by
//   it that did not publish it stops too. "over": the job ended, nobody is admitted any more.
//   "bye": a node is done; in a store that outlives the launchers, the last one out erases the run.
// - Paces: each heartbeat carries the node's pace (its ranks' own step time) in the running
//   generation; the decider judges them (launcher/health/node_pace.h) and, to evict a slow node
//   (--straggler=evict), appends "<launcher> <why>" to "evict/<K>" and ends K: that node's
//   watcher reads it and stops, and the next generation is decided without it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "launcher/coord/control_plane.h"
#include "launcher/coord/control_store.h"
#include "launcher/health/node_pace.h"

namespace ddl::launcher {

struct Roll;  // who is in the job, as the engine read it (engine.cpp)

class ControlEngine final : public Control {
 public:
  // Joins or starts the job's run in `store` and claims the node rank (given, or the lowest free
  // one under kAutoNodeRank), then starts beating. Throws ControlError.
  ControlEngine(const ControlOptions& options, std::unique_ptr<ControlStore> store);
  ~ControlEngine() override;
  ControlEngine(const ControlEngine&) = delete;
  ControlEngine& operator=(const ControlEngine&) = delete;

  int node_rank() const override { return options_.node_rank; }
  Agreement rendezvous(const JobDescription& mine, const std::vector<env::Endpoint>& local,
                       const std::string& proposed_job_id,
                       const std::string& proposed_job_secret = {}) override;
  Membership join_generation(Generation generation) override;
  std::map<int, std::string> gather(Generation generation, const std::string& topic,
                                    const std::string& payload,
                                    std::chrono::milliseconds timeout) override;
  void report_generation_failure(Generation generation, const FailureNotice& notice) override;
  void report_pace(Generation generation, std::int64_t step, double own_seconds) override;
  std::vector<NodePaceJudge::Verdict> take_node_verdicts() override;
  void report_generation_success(Generation generation) override;
  void watch(std::shared_ptr<ExternalStop> stop) override;
  void report_failure(const FailureNotice& notice) override;
  std::optional<FailureRecord> finish() override;
  void abandon() override;

  // The run's token ("<token>/" starts every name of the run), for tests.
  const std::string& run_token() const { return token_; }

  // One verified record of a roster: who wrote it and what.
  struct Entry {
    int node = -1;
    std::string launcher;
    std::string payload;
  };

 private:
  struct Watch;     // what the watching thread remembers (engine.cpp)
  struct Decision;  // what the supervising thread remembers of the rosters it decides by

  std::string name(const std::string& relative) const { return token_ + "/" + relative; }
  std::string seal(const std::string& name, const std::string& payload) const;
  // The record `raw` stored under `name`, when it verifies; else logs why (once per name) and
  // returns nullopt.
  std::optional<Entry> open_entry(const std::string& name, const std::string& raw) const;
  // Verified entries of `roster` past `cursor`.
  std::vector<Entry> read_entries(ControlStore& store, const std::string& roster,
                                  RosterCursor& cursor, std::size_t limit = SIZE_MAX);
  // The same for a roster by its full name (another run's, for one).
  std::vector<Entry> read_named(ControlStore& store, const std::string& full, RosterCursor& cursor,
                                std::size_t limit);
  // Reads what is new in the rosters of who is in the job (present, bye, lost).
  void refresh(ControlStore& store, Roll& roll);
  std::optional<Entry> first_entry(ControlStore& store, const std::string& roster);
  std::optional<RosterCursor> append(ControlStore& store, const std::string& roster,
                                     const std::string& payload);

  void join_run();
  bool run_is_live(const std::string& token);
  void claim_rank();
  // Claims node rank `node` unless another launcher holds it; true when this launcher does.
  bool claim(int node);
  void beat(ControlStore& store);
  // The job's failure: the first entry of "failed" that verifies and decodes.
  std::optional<FailureRecord> job_failure(ControlStore& store);
  std::optional<FailureRecord> failure_in(const Entry& entry, ControlStore& store);
  void check_not_over(const std::string& while_doing);
  // Node `node`'s presentation (by `launcher`, when not empty), nullopt while there is none.
  std::optional<Presentation> presentation_of(int node, const std::string& launcher);
  void compare_with(int node, const Presentation& theirs);
  // This launcher (not only its node rank) takes part in `m`.
  bool is_member(const Members& m) const;
  // The lowest live node of `roll` (this node when it knows of none): who watches the others.
  int lead(const Roll& roll) const;
  // Reads what is new in "described" (at most `limit` entries), every node's presentation, into
  // the cache presentation_of() looks in; returns how many it read.
  std::size_t read_presentations(std::size_t limit = SIZE_MAX);
  // Paddle's elastic manager's line while the nodes gather (ControlOptions::paddle_elastic):
  // "not ready for np N with hosts ['HOST:PORT', ...]", each node's first endpoint, of the nodes
  // that presented themselves (`joined`: that joined the generation being decided).
  void say_not_ready(bool joined);
  std::optional<std::vector<int>> decide(
      int generation, std::chrono::steady_clock::time_point deadline,
      std::optional<std::chrono::steady_clock::time_point>& last_call);
  void publish_failure(ControlStore& store, const FailureRecord& record);
  void end_generation(ControlStore& store, int generation, const FailureRecord& record);
  void fail_rendezvous(const ControlError& error);

  void watch_loop();
  void watch_round(Watch& w);
  void watch_peers(Watch& w, int generation, const std::vector<int>& members);
  void declare_lost(Watch& w, int node, int generation, const std::vector<int>& members);
  // The decider's look across nodes (launcher/health/node_pace.h): names a slow node and, with
  // --straggler=evict in an elastic job, ends the generation without it.
  void judge_nodes(Watch& w, int generation, const std::vector<int>& members,
                   std::vector<NodePace> paces);
  // Why node `node` cannot be evicted from `generation` (empty: it can).
  std::string eviction_veto(int generation, const std::vector<int>& members, int node) const;
  void lose(const std::string& why);
  void stop_watcher();
  void leave();
  // The store's host (node 0 on the TCP store): waits until every other node said goodbye or was
  // declared lost, at most linger_timeout from the first time `lingering` says so.
  void await_goodbyes(const std::function<bool()>& lingering);

  ControlOptions options_;
  std::string launcher_;  // this launcher's id, fresh for each run
  std::string token_;
  std::unique_ptr<ControlStore> store_;  // the supervising thread and the reports (store_mutex_)
  std::mutex store_mutex_;
  std::unique_ptr<ControlStore> watch_store_;  // the watching thread's
  JobDescription description_;
  std::optional<Presentation> reference_;  // node 0's presentation
  std::unique_ptr<Decision> decision_;     // under store_mutex_

  std::thread watcher_;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  std::shared_ptr<ExternalStop> stop_;  // set by watch() (under mutex_)

  mutable std::mutex mutex_;
  mutable std::set<std::string> refused_;  // names whose refusal was logged
  std::set<std::string> checked_;  // launchers whose description was compared with this one's
  int current_generation_ = -1;
  std::vector<int> current_members_;
  std::vector<std::string> current_launchers_;  // theirs, as current_members_
  struct PaceReport {
    int generation = 0;
    std::int64_t step = 0;
    double own_seconds = 0;
  };
  std::optional<PaceReport> pace_;  // this node's latest (report_pace), sent with the heartbeat
  std::vector<NodePaceJudge::Verdict> node_verdicts_;  // not yet taken (take_node_verdicts)
  std::optional<FailureRecord> seen_failure_;
  std::optional<FailureRecord> peer_generation_failure_;
  std::optional<std::string> lost_;  // why this node lost the job, when it did
  std::atomic<bool> published_failure_{false};
  std::atomic<bool> succeeded_{false};
  std::int64_t beats_ = 0;  // the watching thread's
  std::optional<std::string> last_beat_;
  bool left_ = false;
};

}  // namespace ddl::launcher
