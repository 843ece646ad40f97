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
// Records are JSON (launcher/coord/records.h); per-node keys live in one PrefixStore view per
// family ("claim/<node>", "desc/<node>", "endpoints/<node>", "hb/<node>", "bye/<node>").
// Single-node jobs use none of this.
#pragma once

#include <atomic>
#include <chrono>
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
#include "launcher/coord/records.h"
#include "launcher/supervise/supervisor.h"

namespace ddl {
class Store;
class TcpStore;
class TcpStoreServer;
struct TcpStoreOptions;
}  // namespace ddl

namespace ddl::launcher {

struct ControlOptions {
  env::Endpoint endpoint;  // node 0's control store
  std::string job_id;      // of the control store (the same on every node)
  std::string secret;      // DDL_JOB_SECRET
  int node_rank = 0;
  int nnodes = 2;
  std::chrono::milliseconds rendezvous_timeout{300'000};  // to join and agree
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds heartbeat_timeout{5'000};
  // How long node 0 keeps the store up, after its job failed, for the other nodes to say goodbye.
  std::chrono::milliseconds linger_timeout{15'000};
};

inline constexpr std::chrono::milliseconds kControlPollInterval{200};

// Move-less, copy-less: owns a server (node 0), two connections and the watch thread.
class ControlChannel {
 public:
  // Node 0 starts the server; every node connects (retrying until rendezvous_timeout). Throws
  // ControlError.
  explicit ControlChannel(const ControlOptions& options);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  struct Agreement {
    std::vector<env::Endpoint> endpoints;  // every rank's, node-major
    std::string job_id;                    // node 0's proposal
  };

  // Publishes this node's description and endpoints (and, on node 0, `proposed_job_id`), waits
  // for every node's, compares them and returns the job's endpoints. Throws ControlError for a
  // mismatch, a second launcher claiming this node rank, a node missing at the deadline, or a
  // lost connection, and RecordError (a ControlError) for a record that cannot be decoded.
  Agreement rendezvous(const JobDescription& mine, const std::vector<env::Endpoint>& local,
                       const std::string& proposed_job_id);

  // Starts the watch thread: heartbeats, the "failed" key (a failure of another node, or a lost
  // connection to node 0, becomes stop->request(code, reason)), and on node 0 the other nodes'
  // heartbeats. Throws ControlError if the watch connection cannot be made.
  void watch(std::shared_ptr<ExternalStop> stop);

  // Publishes a failure of this node unless another was first. Thread-safe; never throws (a
  // failure to publish is logged).
  void report_failure(const FailureNotice& notice);

  // Ends this node's part: the other nodes say goodbye; node 0 waits until every other node has
  // said goodbye or been declared lost, bounded by linger_timeout once a failure is known. Returns
  // the job's first failure, if any. Never throws.
  std::optional<FailureRecord> finish();

  // After a failed rendezvous: the other nodes say goodbye; node 0 waits (at most linger_timeout)
  // for the nodes that joined to do so, so they can read what differed. Never throws.
  void abandon();

 private:
  // Options for a store client of this channel: job, secret and node as configured.
  TcpStoreOptions store_options(std::chrono::milliseconds connect_timeout) const;
  void watch_loop(std::shared_ptr<ExternalStop> stop);
  // The record under "failed", if set. A malformed one is reported as a failure of unknown origin
  // (node -1) quoting the decoder's error: the job still fails fast.
  std::optional<FailureRecord> read_failure(Store& store);
  // Sets "failed" to `record` unless another failure was first; true when this one won.
  bool publish_failure(Store& store, const FailureRecord& record);
  std::string where() const;

  ControlOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;  // rendezvous, reports, finish (the supervisor's thread)
  std::unique_ptr<TcpStore> watch_store_;
  std::thread watcher_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::set<int> lost_nodes_;        // node 0: nodes declared lost by the watcher
  std::optional<FailureRecord> seen_failure_;  // what the watcher read under "failed"
  std::set<int> joined_;            // nodes whose description was read
};

}  // namespace ddl::launcher
