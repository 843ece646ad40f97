// What this node's supervisor and the other nodes of a multi-node job tell each other: the
// supervisor reports a failure as a FailureNotice, and the control connection (launcher/coord/)
// passes the other nodes' news back through an ExternalStop. This header is all that coord/
// needs from supervise/.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "launcher/cluster/generation.h"

namespace ddl::launcher {

// What ended this node's part of the job for good (no restart follows), or one generation of it:
// reported to the other nodes of a multi-node job (launcher/coord/engine.h).
struct FailureNotice {
  std::optional<int> rank;  // the failed trainer's global rank; unset for a server, the hang
                            // guard or a signal
  int exit_code = 1;        // what this launcher exits with
  std::string what;         // "rank 3 exited with code 7", "server 1 ...", "stopped by SIGINT"
  // The job ends because its last generation failed on another node (which reports it itself).
  bool from_peer = false;
};

// What the other nodes of a multi-node job tell this node's supervisor, from another thread (the
// control connection's watcher, launcher/coord/engine.h). Thread-safe.
// - request(): the job is over (another node failed for good, or node 0 is gone): stop the
//   processes like after a local failure (SIGTERM, SIGKILL after kill_timeout), never restart,
//   end with `exit_code`. Only the first request counts; one made before supervise() starts is
//   acted on as soon as it does.
// - generation_failed(): generation G failed on another node: stop this node's processes of G and
//   restart like after a local failure of G (the restart policy decides). Only the first failure
//   of each generation counts.
// - generation_succeeded(): every node's processes of G exited 0: the job succeeded.
// News about a generation other than the current one is ignored.
class ExternalStop {
 public:
  // Stops the job with `exit_code` (0 counts as 1: a job stopped from outside did not succeed).
  void request(int exit_code, const std::string& reason);
  std::optional<std::pair<int, std::string>> requested() const;

  void generation_failed(Generation generation, int exit_code, const std::string& reason);
  std::optional<std::pair<int, std::string>> generation_failure(Generation generation) const;
  void generation_succeeded(Generation generation);
  bool succeeded(Generation generation) const;

  // For the supervisor: `wake` is called (under the lock) on any of the above, until cleared.
  void set_waker(std::function<void()> wake);

 private:
  mutable std::mutex mutex_;
  std::optional<std::pair<int, std::string>> request_;
  std::map<int, std::pair<int, std::string>> failed_;  // by generation index
  std::set<int> succeeded_;
  std::function<void()> wake_;
};

}  // namespace ddl::launcher
