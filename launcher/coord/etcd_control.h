// The etcd control plane (--rdzv_backend=etcd|etcd-v2, --master=etcd://...): the Control
// contract (launcher/coord/control_plane.h) kept in an etcd cluster instead of a store on node 0,
// so that no launcher is special and the job outlives any node, node 0 included.
//
// Every key lives under "/ddl/<job id>/<run>/", where <run> is a token the first launcher of a
// run draws; "/ddl/<job id>/run" names the current run. A run whose launchers are all gone (no
// live key left: their leases expired) is stale, and the next launcher replaces it, so a crashed
// job never poisons the next one with its id. Under the run:
//   live/<node>          the node is alive: a key on the node's lease (TTL = heartbeat_timeout),
//                        kept alive every heartbeat_interval. A node whose lease expires is gone.
//   claim/<node>         who holds the node rank (on the lease: a dead node's rank is free again)
//   desc/<node>          its job description, endpoints/<node> its workers' endpoints (on the lease)
//   job_id, job_secret   the first launcher's proposals (create-if-absent transactions)
//   join/<K>/<node>      the node joined generation K (on the lease)
//   members/<K>          generation K's members and endpoints: a create-if-absent transaction, by
//                        whichever launcher first sees that K can start (the same rule node 0
//                        applies on the TCP control plane), so the decision needs no leader
//   waiting/<node>       (elastic) a late node asks to be admitted (on the lease)
//   done/<K>/<node>      the node's processes of K all exited 0
//   gend/<K>             how generation K ended (create-if-absent: the first failure, a lost
//                        member, an admission, or success once every member is done)
//   failed               the job's first failure (create-if-absent)
//   over                 a launcher finished the job: nobody is admitted any more
//   bye/<node>           the node finished (so its lease ending is not a loss)
// Every launcher watches the run's keys (one watch, from the revision it last read) instead of
// polling: a lost member of the running generation (its live key deleted without a bye) fails the
// generation (elastic) or the job; a waiting node fails the running generation so the next one
// takes it in (while restarts are left). The last launcher to leave (no live key left after it
// revoked its lease) deletes the run's keys and the run pointer.
// With DDL_JOB_SECRET every value is stored with its HMAC-SHA-256 under the secret (over the key
// and the value): a value that does not verify is refused naming its key, so whoever can write
// to etcd without the secret cannot steer the job (they can still delete keys: secure the etcd
// cluster itself for that, see docs/multi-node.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "launcher/coord/control_plane.h"

namespace ddl::etcd {
class Client;
struct KeyValue;
}  // namespace ddl::etcd

namespace ddl::launcher {

class EtcdControl final : public Control {
 public:
  // Reaches the cluster (retrying until rendezvous_timeout: a ControlError naming every endpoint
  // tried when none answers), joins or starts the job's run, claims the node rank (given, or the
  // lowest free one under kAutoNodeRank) and starts the node's lease.
  explicit EtcdControl(const ControlOptions& options);
  ~EtcdControl() override;
  EtcdControl(const EtcdControl&) = delete;
  EtcdControl& operator=(const EtcdControl&) = delete;

  int node_rank() const override { return options_.node_rank; }
  Agreement rendezvous(const JobDescription& mine, const std::vector<env::Endpoint>& local,
                       const std::string& proposed_job_id,
                       const std::string& proposed_job_secret = {}) override;
  Membership join_generation(Generation generation) override;
  void report_generation_failure(Generation generation, const FailureNotice& notice) override;
  void report_generation_success(Generation generation) override;
  void watch(std::shared_ptr<ExternalStop> stop) override;
  void report_failure(const FailureNotice& notice) override;
  std::optional<FailureRecord> finish() override;
  void abandon() override;

  // The run's key prefix ("/ddl/<job id>/<run>/"), for tests and messages.
  const std::string& run_prefix() const { return run_; }

 private:
  struct View;  // one read of the run's keys (etcd_control.cpp)

  // Key names.
  std::string key(const std::string& name) const { return run_ + name; }
  // Signing and checking values under the job's secret (identity when there is none).
  std::string seal(const std::string& key, const std::string& value) const;
  std::string open(const etcd::KeyValue& kv) const;
  std::string where() const;

  void join_run(etcd::Client& client);
  void claim_rank(etcd::Client& client);
  // Reads the keys of the run that decisions need (one transaction); `generation` < 0: none.
  View read_view(etcd::Client& client, int generation);
  // Waits for a change under the run's prefix after `revision`, at most `timeout`.
  std::int64_t wait_change(etcd::Client& client, std::int64_t revision,
                           std::chrono::milliseconds timeout);
  // What `view` says of `generation` for ready_members() (control_plane.h), the rule both
  // control planes decide a generation's members by.
  GenerationCandidates candidates(const View& view, int generation) const;
  void publish_failure(etcd::Client& client, const FailureRecord& record);
  void end_generation(etcd::Client& client, int generation, const std::string& record);
  void check_description(etcd::Client& client);

  void watch_loop(std::shared_ptr<ExternalStop> stop);
  // The keeper thread: renews the lease every heartbeat_interval from the constructor on (a node
  // waiting long in the rendezvous must not be taken for lost), and records how it went.
  void keep_loop();
  void stop_watcher();
  void stop_keeper();
  // Why this node lost the job (its lease expired, etcd silent for heartbeat_timeout), if it did.
  std::optional<std::string> lease_trouble() const;
  void leave();  // bye, revoke the lease, and the last one out deletes the run

  ControlOptions options_;
  std::string job_prefix_;  // "/ddl/<job id>/"
  std::string run_;         // job_prefix_ + "<run>/"
  JobDescription description_;
  std::int64_t lease_ = 0;
  std::unique_ptr<etcd::Client> client_;  // the supervising thread and the reports (mutex_)
  std::mutex client_mutex_;
  std::unique_ptr<etcd::Client> watch_client_;
  std::thread watcher_;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mutex_;  // with stop_cv_: wakes the watcher and the keeper when they stop
  std::condition_variable stop_cv_;
  std::unique_ptr<etcd::Client> keep_client_;
  std::thread keeper_;
  std::atomic<bool> keeper_stopping_{false};
  std::atomic<bool> lease_expired_{false};
  std::atomic<std::int64_t> last_kept_ms_{0};  // steady clock, when etcd last renewed the lease
  std::string last_keep_error_;                // under mutex_
  mutable std::mutex mutex_;
  std::set<int> checked_;        // nodes whose description was compared with this node's
  int current_generation_ = -1;  // the generation last joined
  std::vector<int> current_members_;
  std::optional<FailureRecord> seen_failure_;
  std::optional<FailureRecord> peer_generation_failure_;
  std::atomic<bool> lost_{false};
  std::atomic<bool> succeeded_{false};  // the watcher saw this node's generation succeed  // this node's lease expired or etcd stopped answering
  bool left_ = false;
};

}  // namespace ddl::launcher
