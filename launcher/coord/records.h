// The records the launchers of a multi-node job exchange through the control store, each a small
// JSON object with a "record" field naming its kind:
//   {"record":"job description","fields":[["nnodes","2"],["nproc_per_node","4"],...]}
//   {"record":"endpoints","endpoints":["10.0.0.1:6170","10.0.0.1:6171"]}
//   {"record":"job id","job_id":"3f9a..."}
//   {"record":"job secret","job_secret":"9c1e..."}
//   {"record":"failure","node":1,"rank":3,"exit_code":137,"what":"rank 3 was killed by ..."}
//   {"record":"generation succeeded","generation":2}
//   {"record":"members","generation":2,"nodes":[0,2],
//    "endpoints":[["10.0.0.1:6170"],["10.0.0.3:6170"]]}
// ("rank" is absent when no trainer failed). Heartbeats, claims and goodbyes are store counters
// and flags, not records. Every decoder checks the kind, every field's presence and type and the
// values' ranges, and throws RecordError otherwise: a record from another version of `launch`, or
// anything else that is not a record, is refused with a message, never half-read.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "env/contract.h"
#include "env/error.h"

namespace ddl::launcher {

// The nodes could not form the job: a description differs, a node did not join in time, the
// control store could not be hosted or reached, a record is malformed. `launch` prints it as one
// line and exits 2.
class ControlError : public Error {
 public:
  explicit ControlError(const std::string& what)
      : Error(kExitUsage, "cannot form the multi-node job", what) {}
};

// A record that cannot be decoded. The message names `source` (where it was read), what was
// expected and the start of the text seen.
class RecordError : public ControlError {
 public:
  using ControlError::ControlError;
};

// What every node must agree on, as (name, value) pairs in a fixed order.
using JobDescription = std::vector<std::pair<std::string, std::string>>;

std::string encode_description(const JobDescription& d);
JobDescription decode_description(const std::string& text, std::string_view source);

// nullopt when `mine` and `theirs` agree; else "the job description differs between nodes:
// nproc_per_node is '2' on node 0 (this node) but '3' on node 1".
std::optional<std::string> description_mismatch(const JobDescription& mine, int my_node,
                                                const JobDescription& theirs, int their_node);

// One node's worker endpoints, in local rank order (not empty).
std::string encode_endpoints(const std::vector<env::Endpoint>& endpoints);
std::vector<env::Endpoint> decode_endpoints(const std::string& text, std::string_view source);

// Node 0's job id (not empty).
std::string encode_job_id(const std::string& job_id);
std::string decode_job_id(const std::string& text, std::string_view source);

// Node 0's workers' secret, for launchers admitted without one (not empty).
std::string encode_job_secret(const std::string& secret);
std::string decode_job_secret(const std::string& text, std::string_view source);

// The first failure of a job, as stored under "failed".
struct FailureRecord {
  int node = 0;             // >= 0; -1 only for an unreadable record (a stand-in)
  std::optional<int> rank;  // >= 0 when set
  int exit_code = 1;        // 0..255
  std::string what;

  std::string str() const;  // "node 1 rank 3 exit 137: rank 3 was killed by SIGKILL (...)"
  bool operator==(const FailureRecord& o) const {
    return node == o.node && rank == o.rank && exit_code == o.exit_code && what == o.what;
  }
};

std::string encode_failure(const FailureRecord& record);
FailureRecord decode_failure(const std::string& text, std::string_view source);

// How one generation ended, as stored under "gend/<K>": the first failure record, or
// {"record":"generation succeeded","generation":K} once every member's processes exited 0.
std::string encode_generation_success(int generation);
// nullopt for a success record of `generation`; else the failure record (RecordError for
// anything else, or a success record of another generation).
std::optional<FailureRecord> decode_generation_end(const std::string& text, int generation,
                                                   std::string_view source);

// Which nodes take part in one generation of the job and their workers' endpoints (node 0
// decides and gathers them, launcher/coord/engine.h), so that every other node reads its
// generation in one request.
struct Members {
  int generation = 0;
  std::vector<int> nodes;                             // ascending, not empty
  std::vector<std::vector<env::Endpoint>> endpoints;  // nodes[i]'s, not empty; one per node
  // nodes[i]'s launcher (the engine's id of it), so that a launcher that took the rank of a lost
  // one is not taken for it; empty in a record that names none.
  std::vector<std::string> launchers;
};

std::string encode_members(const Members& members);
Members decode_members(const std::string& text, std::string_view source);

// What one node brings to the job when it joins: its description, its workers' endpoints and its
// proposals of a job id and (when not empty) of the workers' secret; node 0's proposals hold.
//   {"record":"node","description":{...},"endpoints":{...},"job_id":"...","job_secret":"..."}
struct Presentation {
  JobDescription description;
  std::vector<env::Endpoint> endpoints;  // not empty
  std::string job_id;                    // node 0's is not empty
  std::string job_secret;                // may be empty
  std::string launcher;  // not encoded: the presenting launcher, as its record's reader knows it
};

std::string encode_presentation(const Presentation& p);
Presentation decode_presentation(const std::string& text, std::string_view source);

}  // namespace ddl::launcher
